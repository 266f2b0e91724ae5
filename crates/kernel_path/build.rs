//! Builds the eBPF programs with clang. A build has the programs or was asked not to:
//! without clang the build fails and says which package to install or which flag opts
//! out (`--no-default-features`: no `programs` feature, every packet moved by the
//! daemon, which `shipworm --version` says). A build that failed for want of clang runs
//! this script again, so installing clang brings the programs back.

/// The C names of the counters, from the one list (`src/counter_list.rs`).
macro_rules! counters {
    ($($(#[$doc:meta])* $variant:ident = ($c:literal, $direction:literal, $outcome:literal),)*) => {
        const COUNTER_NAMES: &[&str] = &[$($c),*];
    };
}
include!("src/counter_list.rs");

/// `OUT_DIR/counters.h`: the C `enum counter`, in the list's order.
fn write_counters() {
    let mut h =
        String::from("// Written by build.rs from src/counter_list.rs: edit that list, not this.\nenum counter {\n");
    for name in COUNTER_NAMES {
        h.push_str(&format!("\t{name},\n"));
    }
    h.push_str("\tCOUNTERS,\n};\n");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("counters.h");
    std::fs::write(out, h).expect("write counters.h");
    println!("cargo:rerun-if-changed=src/counter_list.rs");
}

fn main() {
    if std::env::var_os("CARGO_FEATURE_PROGRAMS").is_none() {
        shipworm_bpf_build::without("teredo.bpf.o");
        return;
    }
    write_counters();
    if !shipworm_bpf_build::compile("bpf/teredo.bpf.c", "teredo.bpf.o") {
        eprintln!(
            "error: clang not found: shipworm's kernel data path (eBPF programs) needs it.\n\
             Install it (Debian: apt-get install clang libbpf-dev), or build without the kernel data\n\
             path: cargo build --no-default-features (every packet then goes through the daemon)."
        );
        std::process::exit(1);
    }
}
