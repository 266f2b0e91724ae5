#!/usr/bin/env bash
# Run every fuzz target of fuzz/ for a bounded time, starting from the seeds.
#   FUZZ_SECONDS  time per target (default 8)
#   FUZZ_JOBS     targets run at once (default 1)
#   FUZZ_PROFILE  release (default: optimised, as cargo-fuzz builds, for long runs) or dev
#                 (unoptimised, debug assertions on: half the build time, a fraction of
#                 the inputs a second; the test command's smoke run)
#   FUZZ_CORPUS   keep each target's corpus in FUZZ_CORPUS/<target> (default: a temporary dir)
#   FUZZ_REPORT   also write a markdown table of the runs (inputs, coverage) to this file
#   FUZZ_IDLE=1   run the fuzzers at idle priority, so that a long run leaves the machine usable
#   FUZZ_TARGETS  the targets to run (default: all)
# Found crashes fail the run and are left in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
seconds=${FUZZ_SECONDS:-8}
jobs=${FUZZ_JOBS:-1}
profile=${FUZZ_PROFILE:-release}
triple=$(rustc -vV | sed -n 's/^host: //p')
# Built as cargo-fuzz 0.13 builds (`cargo fuzz build`: the same coverage and sanitizer
# flags, for the host's triple so that build scripts get none of them), with cargo
# itself: no tool to install first. The machine's toolchain is stable; RUSTC_BOOTSTRAP
# lets it take the sanitizer flag.
flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth"
flags+=" --cfg fuzzing -Cdebug-assertions -Zsanitizer=address"
case $profile in
release) build=(--release --config 'profile.release.debug="line-tables-only"'); flags+=" -Ccodegen-units=1"; out=release ;;
dev) build=(); out=debug ;;
*) die "FUZZ_PROFILE is release or dev, not $profile" ;;
esac
say "building fuzz targets ($profile)"
RUSTC_BOOTSTRAP=1 RUSTFLAGS="$flags" cargo build -q --manifest-path fuzz/Cargo.toml --target "$triple" --locked "${build[@]}"
bin=fuzz/target/$triple/$out
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus=${FUZZ_CORPUS:-$work/corpus}
prio=()
[ "${FUZZ_IDLE:-0}" = 1 ] && prio=(chrt -i 0 nice -n 19)
targets=${FUZZ_TARGETS:-$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -vx shipworm-fuzz)}

# One target: its summary line goes to $work/<target>.row, its log stays for failures.
fuzz_one() {
    local t=$1 seeds=()
    mkdir -p "$corpus/$t"
    [ -d "fuzz/seeds/$t" ] && seeds=("fuzz/seeds/$t")
    local TIMEFORMAT='%U %S' rc=0
    # The CPU time the fuzzer had (user + system): on a shared machine, less than its wall time.
    mkdir -p "fuzz/artifacts/$t"
    { time "${prio[@]}" "$bin/$t" "$corpus/$t" "${seeds[@]}" -max_total_time="$seconds" \
        -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 >"$work/$t.log" 2>&1 || rc=$?; } 2>"$work/$t.cpu"
    if [ "$rc" != 0 ]; then
        echo failed >"$work/$t.row"
        return 1
    fi
    local runs cov ft units cpu
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log")
    # The last status line libFuzzer printed carries the final edge coverage and features.
    cov=$(grep -o 'cov: [0-9]*' "$work/$t.log" | tail -n 1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$work/$t.log" | tail -n 1 | cut -d' ' -f2)
    units=$(find "$corpus/$t" -type f | wc -l)
    cpu=$(awk '{ printf "%.0f", $1 + $2 }' "$work/$t.cpu")
    echo "$t ${runs:-?} ${cov:-?} ${ft:-?} $units ${cpu:-?}" >"$work/$t.row"
}

running=0
for t in $targets; do
    fuzz_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

failed=0
[ -n "${FUZZ_REPORT:-}" ] && {
    echo "| target | seconds | CPU seconds | inputs executed | edges covered | features | corpus |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
} >"$FUZZ_REPORT"
for t in $targets; do
    runs=""
    read -r _ runs cov ft units cpu <"$work/$t.row" || true
    if [ "$runs" = "" ] || grep -q '^failed' "$work/$t.row"; then
        tail -n 40 "$work/$t.log"
        echo "fuzz target $t failed: reproduce with '$bin/$t fuzz/artifacts/$t/<file>'" >&2
        failed=1
        continue
    fi
    printf '  %-16s %12s inputs in %ss (%s s of CPU), %s edges, no crash\n' "$t" "$runs" "$seconds" "$cpu" "$cov"
    [ -n "${FUZZ_REPORT:-}" ] && echo "| $t | $seconds | $cpu | $runs | $cov | $ft | $units |" >>"$FUZZ_REPORT"
done
[ "$failed" = 0 ] || die "a fuzz target found a crash (see above)"
