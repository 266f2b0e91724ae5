//! Builds the eBPF programs with clang. A build has the programs or was asked not to:
//! without clang the build fails and says which package to install or which flag opts
//! out (`--no-default-features`: no `programs` feature, every packet moved by the
//! daemon, which `shipworm --version` says). A build that failed for want of clang runs
//! this script again, so installing clang brings the programs back.

fn main() {
    if std::env::var_os("CARGO_FEATURE_PROGRAMS").is_none() {
        shipworm_bpf_build::without("teredo.bpf.o");
        return;
    }
    if !shipworm_bpf_build::compile("bpf/teredo.bpf.c", "teredo.bpf.o") {
        eprintln!(
            "error: clang not found: shipworm's kernel data path (eBPF programs) needs it.\n\
             Install it (Debian: apt-get install clang libbpf-dev), or build without the kernel data\n\
             path: cargo build --no-default-features (every packet then goes through the daemon)."
        );
        std::process::exit(1);
    }
}
