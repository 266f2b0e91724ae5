//! Builds the lab's traffic generator (an eBPF program) with clang. Without clang the
//! lab builds without it, and a live-frame sender says so when asked for.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("generator.bpf.o");
    let source = "bpf/generator.bpf.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=SHIPWORM_BPF_CLANG");
    // Debian's kernel headers keep asm/ under the multiarch directory.
    let multiarch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86_64-linux-gnu",
        Ok("aarch64") => "aarch64-linux-gnu",
        _ => "",
    };
    let candidates = env::var("SHIPWORM_BPF_CLANG").map(|c| vec![c]).unwrap_or_else(|_| {
        ["clang", "clang-19", "clang-18", "clang-16", "clang-15", "clang-14"].map(String::from).to_vec()
    });
    for clang in candidates {
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
            .arg(format!("-idirafter/usr/include/{multiarch}"))
            .args(["-c", source, "-o"])
            .arg(&out)
            .status();
        match status {
            Ok(s) if s.success() => return,
            Ok(s) => panic!("{clang} failed to build {source} ({s}): fix the program or set SHIPWORM_BPF_CLANG"),
            Err(_) => continue,
        }
    }
    println!(
        "cargo:warning=clang not found: the lab's live-frame generator is not built (apt-get install clang libbpf-dev)"
    );
    std::fs::write(&out, b"").expect("write the empty object");
}
