#!/usr/bin/env bash
# The newcomer's first command, until `shipworm lab` (the namespace lab) lands: build
# shipworm and show what it does today on the reference addresses.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_apt build-essential
ensure_rust
say "building shipworm (release)"
cargo build --release --locked -q
bin=target/release/shipworm
run() { printf '\n$ shipworm %s\n' "$*"; "$bin" "$@"; }
say "decoding and encoding Teredo addresses"
run address 2001:0:303:303:8000:e148:fefe:fefe
run address --server 3.3.3.3 --mapped 1.1.1.1:2048 --cone --prefix 3ffe:831f::/32
run address --server 65.54.227.120 --mapped 192.0.2.45:40000 --random-bits random
run address --json 2001:0:4136:e378:28bc:63bf:3fff:fdd2
printf '\n$ shipworm address 2001:db8::1   # not Teredo: one line on stderr, exit 2\n'
"$bin" address 2001:db8::1 || echo "(exit status $?)"
echo
say "the client, server and relay roles and 'shipworm lab' are not built yet: see the issues"
