#!/usr/bin/env bash
# Run every cargo-fuzz target of fuzz/ for a bounded time, starting from the seeds.
# FUZZ_SECONDS sets the time per target (default 8). Found crashes fail the run and are
# left in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_cargo_fuzz
seconds=${FUZZ_SECONDS:-8}
# The machine's toolchain is stable; RUSTC_BOOTSTRAP lets it take the sanitizer flags.
export RUSTC_BOOTSTRAP=1
say "building fuzz targets"
cargo fuzz build -O 2>&1 | tail -n 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in $(cargo fuzz list); do
    mkdir -p "$work/$t"
    seeds=()
    [ -d "fuzz/seeds/$t" ] && seeds=("fuzz/seeds/$t")
    if ! cargo fuzz run -O "$t" "$work/$t" "${seeds[@]}" -- -max_total_time="$seconds" \
        -print_final_stats=1 >"$work/$t.log" 2>&1; then
        tail -n 40 "$work/$t.log"
        die "fuzz target $t failed: reproduce with 'RUSTC_BOOTSTRAP=1 cargo fuzz run $t fuzz/artifacts/$t/<file>'"
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log")
    printf '  %-16s %10s inputs in %ss, no crash\n' "$t" "${runs:-?}" "$seconds"
done
