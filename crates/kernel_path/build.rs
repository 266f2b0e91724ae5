//! Builds the eBPF programs with clang. A machine without clang builds shipworm
//! without a kernel data path: `DataPath auto` then says so, and `DataPath kernel`
//! refuses to start.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kernel_path_missing)");
    if !shipworm_bpf_build::compile("bpf/teredo.bpf.c", "teredo.bpf.o") {
        println!(
            "cargo:warning=clang not found: shipworm is built without its kernel data path (apt-get install clang libbpf-dev)"
        );
        println!("cargo:rustc-cfg=kernel_path_missing");
    }
}
