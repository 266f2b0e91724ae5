//! For build scripts: an eBPF program in C built with clang into `OUT_DIR`. A machine
//! without clang builds without the program: an empty object stands in for it, and the
//! crate says what that leaves out.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// `OUT_DIR/object`.
fn out_path(object: &str) -> PathBuf {
    PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join(object)
}

/// An empty `OUT_DIR/object`: a build asked to go without the program.
pub fn without(object: &str) {
    std::fs::write(out_path(object), b"").expect("write the empty object");
}

/// Builds `source` (relative to the crate) into `OUT_DIR/object`; false when no clang
/// was found (the object is then empty). A program clang refuses fails the build. The
/// headers it includes are looked for beside it, then in `OUT_DIR` (what the build
/// script wrote), and any change in its directory builds it again.
pub fn compile(source: &str, object: &str) -> bool {
    let out = out_path(object);
    println!("cargo:rerun-if-changed={source}");
    if let Some(dir) = std::path::Path::new(source).parent().filter(|d| !d.as_os_str().is_empty()) {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
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
            .arg(format!("-I{}", out_path("").display()))
            .args(["-c", source, "-o"])
            .arg(&out)
            .status();
        match status {
            Ok(s) if s.success() => return true,
            Ok(s) => panic!("{clang} failed to build {source} ({s}): fix the program or set SHIPWORM_BPF_CLANG"),
            Err(_) => continue,
        }
    }
    without(object);
    false
}
