#!/usr/bin/env bash
# Every test of the project, as the README's test command and CI run it. Installs what
# it needs when missing (needs root for apt-get on a fresh machine).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

say "checking tools"
# The build's own needs (build-essential, which libFuzzer's C++ needs too, clang and
# libbpf-dev for the kernel data path's eBPF programs) are the package's declared list,
# packaging/debian/build-depends. The rest: the namespace lab, its Miredo peers and the
# SIP user agent (sip-tester: SIPp) that calls a client first, miniupnpd (the UPnP/PCP
# gateway of the lab's symmetric-upnp and symmetric-pcp NAT boxes), bird2 (the routing
# daemon announcing a relay's prefix), bpftool (shows a test what is attached), systemd
# (systemd-analyze checks the units; systemd-nspawn boots the package in a Debian root
# debootstrap makes), lintian (Debian's checker of the package).
ensure_apt $(grep -v '^#' packaging/debian/build-depends) lintian iproute2 nftables iputils-ping miredo miredo-server librsvg2-bin ethtool sip-tester miniupnpd-nftables bird2 bpftool systemd \
    systemd-container debootstrap
ensure_shipworm_user
ensure_rust

# Every build here is a clean one: incremental compilation's bookkeeping would only
# cost time.
export CARGO_INCREMENTAL=0

say "cargo fmt --check"
cargo fmt --all -- --check

say "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

say "a build without clang is refused, unless asked to go without the kernel data path"
# A build has the eBPF programs or was asked not to: never a relay that silently moves
# every packet itself. (The check profile's dependencies are clippy's, already built.)
if out=$(SHIPWORM_BPF_CLANG=/nonexistent/clang cargo check -q -p shipworm --locked 2>&1); then
    die "a build without clang passed: it would have no kernel data path"
fi
grep -q 'apt-get install clang' <<<"$out" || die "a build without clang failed without saying what to install: $out"
SHIPWORM_BPF_CLANG=/nonexistent/clang cargo check -q -p shipworm --no-default-features --locked \
    || die "a build asked to go without the kernel data path failed"

say "fuzz smoke run (every target, bounded)"
# Every target at once, 1 s each, unoptimised (half the build's time): a smoke run that
# every target builds and runs its seeds (all of them, before its time counts) under
# the address sanitizer (every seed also runs in cargo test); long runs, optimised,
# are by hand (fuzz/README.md).
FUZZ_SECONDS=${FUZZ_SECONDS:-1} FUZZ_JOBS=${FUZZ_JOBS:-16} FUZZ_PROFILE=${FUZZ_PROFILE:-dev} scripts/fuzz-smoke.sh

say "build (ci profile), then the Debian package beside the quick benchmark"
# The `ci` profile: release's, but for link-time optimisation and one codegen unit a
# crate (most of a release build's time; no behaviour changes with them): the bench's,
# the package's and the end-to-end suite's binaries.
cargo build --profile ci --locked -q
# The package's checks wait on a container's boot and its services far more than they
# compute: they run beside the benchmark (whose quick numbers are not judged), their
# output shown when both are done. Never on this host: installing and purging the
# package here would remove a user's own installation of shipworm
# (scripts/systemd-check.sh installs it in a Debian root, booted with its own network).
ensure_cargo_deb
package_log=$(mktemp)
(
    set -e
    cargo deb -p shipworm --profile ci --locked | tail -n 1
    deb=$(ls target/debian/shipworm_*.deb | tail -n 1)
    # Debian's own checker: no error, no warning (each override in the package says why).
    lintian --fail-on error,warning --display-level '>=warning' "$deb" || die "lintian found errors or warnings in $deb"
    scripts/systemd-check.sh "$deb"
) >"$package_log" 2>&1 &
package_pid=$!
# Should the benchmark fail, the package's checks still end (their container stopped,
# their root removed) before this script does: nothing of them is left behind.
trap 'wait "$package_pid" 2>/dev/null; rm -f "$package_log"' EXIT

say "benchmark, quick mode (keeps it working; numbers are not judged)"
bench_out=$(mktemp -d)
target/ci/shipworm-bench --quick --out "$bench_out" | tail -n 3
test -s "$bench_out/report.md" || die "the benchmark wrote no report"
# The soak too, in rows of seconds (its hour is run by hand: see docs/benchmark.md).
target/ci/shipworm-bench --quick --out "$bench_out/soak" soak --minutes 2 --warmup 1 | tail -n 2
grep -q 'relay still running at the end: yes' "$bench_out/soak/report.md" || die "the soak wrote no report"
rm -rf "$bench_out"

say "systemd units: systemd-analyze verify, and each one's exposure (at most 3.0)"
units=$(mktemp -d)
for f in packaging/systemd/*.service; do
    sed "s#/usr/bin/shipworm#$PWD/target/ci/shipworm#g" "$f" >"$units/$(basename "$f")"
done
systemd-analyze verify --man=no "$units"/*.service
for f in "$units"/*.service; do
    systemd-analyze security --offline=true --threshold=30 "$f" | tail -n 1
done
rm -rf "$units"

say "Debian package: cargo deb, lintian, installed, checked and booted under systemd in a container (its wait)"
package_ok=0
wait "$package_pid" || package_ok=$?
cat "$package_log"
rm -f "$package_log"
[ "$package_ok" = 0 ] || die "the Debian package's checks failed (above)"

say "cargo test (unit, vectors, property runs, CLI, end-to-end lab suite)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The end-to-end suite runs the build the package holds (the ci profile's).
SHIPWORM_E2E=required SHIPWORM_E2E_BIN="$PWD/target/ci/shipworm" \
    cargo test --workspace --all-targets --locked 2>&1 | tee "$log"
phase_done
# One closing line over every test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, i; exit (p == 0 || f > 0) }' "$log"
