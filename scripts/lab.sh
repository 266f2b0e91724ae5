#!/usr/bin/env bash
# The newcomer's first command: install what the lab needs, build shipworm, and run
# the lab binary `shipworm-lab` (arguments are passed on: --nat KIND, --keep, --peer miredo, …).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_apt $(grep -v '^#' packaging/debian/build-depends) iproute2 nftables iputils-ping miredo miredo-server librsvg2-bin ethtool sip-tester miniupnpd-nftables bird2 bpftool
ensure_shipworm_user
ensure_rust
say "building shipworm and the lab (release)"
cargo build --release --locked -q -p shipworm -p shipworm-lab
[ "$(id -u)" -eq 0 ] || die "the lab needs root (network namespaces): sudo $0 $*"
exec target/release/shipworm-lab "$@"
