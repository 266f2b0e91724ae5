//! Builds the lab's traffic generator (an eBPF program) with clang. Without clang the
//! lab builds without it, and a live-frame sender says so when asked for.

fn main() {
    if !shipworm_bpf_build::compile("bpf/generator.bpf.c", "generator.bpf.o") {
        println!(
            "cargo:warning=clang not found: the lab's live-frame generator is not built (apt-get install clang libbpf-dev)"
        );
    }
}
