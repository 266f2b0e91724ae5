#!/usr/bin/env bash
# Every test of the project, as the README's test command and CI run it. Installs what
# it needs when missing (needs root for apt-get on a fresh machine).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

say "checking tools"
# build-essential: libFuzzer's C++; the rest: the namespace lab, its Miredo peers and
# the SIP user agent (sip-tester: SIPp) that calls a client first, miniupnpd (the
# UPnP/PCP gateway of the lab's symmetric-upnp and symmetric-pcp NAT boxes), bird2 (the
# routing daemon announcing a relay's prefix), clang and libbpf-dev (they build the
# kernel data path's eBPF programs; bpftool shows a test what is attached), systemd
# (systemd-analyze checks the units; systemd-nspawn boots the package in a Debian root
# debootstrap makes).
ensure_apt build-essential iproute2 nftables iputils-ping miredo miredo-server librsvg2-bin ethtool sip-tester miniupnpd-nftables bird2 clang libbpf-dev bpftool systemd \
    systemd-container debootstrap
ensure_shipworm_user
ensure_rust

say "cargo fmt --check"
cargo fmt --all -- --check

say "builds: release and tests in the background; clippy, the clang check and the fuzz targets here"
# A build leaves a core idle much of its time (a crate's last codegen unit, linking,
# LTO): side by side, two fill both. The release build is the bench's, the package's
# and the end-to-end suite's; the tests' is what cargo test runs at the end. Each has a
# build directory of its own (clippy and cargo check theirs: their artifacts serve no
# other build), so none waits for another's lock. Their output goes to a file, shown
# if one fails.
builds=$(mktemp -d)
# On any exit, no build left running behind.
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$builds"' EXIT
declare -A build_pid=()
background() {
    local name=$1
    shift
    ("$@" >"$builds/$name.log" 2>&1) &
    build_pid[$name]=$!
}
await() {
    local t0=$SECONDS
    if ! wait "${build_pid[$1]}"; then
        tail -n 60 "$builds/$1.log" >&2
        die "the $1 build failed (above)"
    fi
    printf '    (%s build ready; waited %d s for it)\n' "$1" $((SECONDS - t0))
}
background release cargo build --release --locked
background tests cargo test --workspace --all-targets --locked --no-run
CARGO_TARGET_DIR_CHECK="$PWD/target/check"
CARGO_TARGET_DIR=$CARGO_TARGET_DIR_CHECK cargo clippy --workspace --all-targets --locked -- -D warnings

say "a build without clang is refused, unless asked to go without the kernel data path"
# A build has the eBPF programs or was asked not to: never a relay that silently moves
# every packet itself. (The check profile's dependencies are clippy's, already built.)
if out=$(CARGO_TARGET_DIR=$CARGO_TARGET_DIR_CHECK SHIPWORM_BPF_CLANG=/nonexistent/clang \
    cargo check -q -p shipworm --locked 2>&1); then
    die "a build without clang passed: it would have no kernel data path"
fi
grep -q 'apt-get install clang' <<<"$out" || die "a build without clang failed without saying what to install: $out"
CARGO_TARGET_DIR=$CARGO_TARGET_DIR_CHECK SHIPWORM_BPF_CLANG=/nonexistent/clang \
    cargo check -q -p shipworm --no-default-features --locked \
    || die "a build asked to go without the kernel data path failed"

say "fuzz smoke run (every target, bounded)"
# Two targets at a time, 1 s each: a smoke run that every target builds and runs
# (every seed also runs in cargo test); long runs are by hand (fuzz/README.md).
FUZZ_SECONDS=${FUZZ_SECONDS:-1} FUZZ_JOBS=${FUZZ_JOBS:-2} scripts/fuzz-smoke.sh

say "waiting for the release and test builds"
# Both before the benchmark: its trials share the machine's two cores with nothing.
await release
await tests

say "benchmark, quick mode (keeps it working; numbers are not judged)"
bench_out=$(mktemp -d)
target/release/shipworm-bench --quick --out "$bench_out" | tail -n 3
test -s "$bench_out/report.md" || die "the benchmark wrote no report"
# The soak too, in rows of seconds (its hour is run by hand: see docs/benchmark.md).
target/release/shipworm-bench --quick --out "$bench_out/soak" soak --minutes 2 --warmup 1 | tail -n 2
grep -q 'relay still running at the end: yes' "$bench_out/soak/report.md" || die "the soak wrote no report"
rm -rf "$bench_out"

say "systemd units: systemd-analyze verify, and each one's exposure (at most 3.0)"
units=$(mktemp -d)
for f in packaging/systemd/*.service; do
    sed "s#/usr/bin/shipworm#$PWD/target/release/shipworm#g" "$f" >"$units/$(basename "$f")"
done
systemd-analyze verify --man=no "$units"/*.service
for f in "$units"/*.service; do
    systemd-analyze security --offline=true --threshold=30 "$f" | tail -n 1
done
rm -rf "$units"

say "Debian package: cargo deb, then installed, checked and booted under systemd in a container"
# Never on this host: installing and purging the package here would remove a user's own
# installation of shipworm (scripts/systemd-check.sh installs it in a Debian root).
ensure_cargo_deb
cargo deb -p shipworm --locked | tail -n 1
deb=$(ls target/debian/shipworm_*.deb | tail -n 1)
scripts/systemd-check.sh "$deb"

say "cargo test (unit, vectors, property runs, CLI, end-to-end lab suite)"
log="$builds/test.log"
# The end-to-end suite runs the release build the package ships, as users run it.
SHIPWORM_E2E=required SHIPWORM_E2E_BIN="$PWD/target/release/shipworm" \
    cargo test --workspace --all-targets --locked 2>&1 | tee "$log"
phase_done
# One closing line over every test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i; exit (p == 0 || f > 0) }' "$log"
