#!/usr/bin/env bash
# The Debian package under a real systemd: a minimal Debian (debootstrap, kept in
# /var/tmp between runs) booted in a container (systemd-nspawn, its own network), the
# package installed, a server and a client started by their units. Checks: both report
# READY with their status line (the client's says it qualified), a SIGKILLed client is
# restarted and qualifies again, a stalled client is restarted by the watchdog, a reload
# keeps an unchanged file's client, refuses a broken file and restarts on a changed one,
# the records reach the journal with their fields, systemd-analyze security rates each
# unit; then the package's lifecycle as apt drives it: an upgrade restarts the running
# units (and only those), a removal stops them, a new installation on the running
# system makes its units known without a manual daemon-reload and starts nothing.
# Usage: scripts/systemd-check.sh PACKAGE.deb   (root)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
deb=$(realpath "${1:?usage: scripts/systemd-check.sh PACKAGE.deb}")
base=/var/tmp/shipworm-debian-root
root=$(mktemp -d /var/tmp/shipworm-systemd-XXXXXX)
boot_pid=""
cleanup() {
    if [ -n "$boot_pid" ] && kill -0 "$boot_pid" 2>/dev/null; then
        kill "$boot_pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$boot_pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$boot_pid" 2>/dev/null || true
    fi
    rm -rf "$root"
}
trap cleanup EXIT

if [ ! -x "$base/lib/systemd/systemd" ]; then
    say "debootstrap: a minimal Debian with systemd (once, into $base)"
    rm -rf "$base"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,iproute2,adduser,procps \
        bookworm "$base" http://deb.debian.org/debian >/dev/null || die "debootstrap failed"
fi
cp -a "$base/." "$root/"
nspawn=(systemd-nspawn -q -D "$root" --register=no --keep-unit)
cp "$deb" "$root/root/shipworm.deb"
"${nspawn[@]}" --pipe dpkg -i /root/shipworm.deb >/dev/null 2>&1 || die "dpkg -i in the container failed"
# What the package installed: its units verify, its user exists, an example checks.
"${nspawn[@]}" --pipe systemd-analyze verify --man=no /usr/lib/systemd/system/shipworm-{client,relay,server}.service \
    || die "the installed units do not verify"
"${nspawn[@]}" --pipe getent passwd shipworm >/dev/null || die "the package did not create the user shipworm"
"${nspawn[@]}" --pipe /usr/bin/shipworm check-config /usr/share/doc/shipworm/examples/miredo-server.conf | tail -n 1

# The lab inside: the server's two addresses and the client's on one veth pair.
mkdir -p "$root/etc/miredo"
printf 'ServerBindAddress 192.0.2.1\n' >"$root/etc/miredo/miredo-server.conf"
printf 'InterfaceName teredo\nServerAddress 192.0.2.1\n' >"$root/etc/miredo/miredo.conf"
cat >"$root/etc/systemd/system/lab-net.service" <<'EOF'
[Unit]
Description=The Teredo server's addresses
Before=shipworm-server.service shipworm-client.service
DefaultDependencies=no
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/ip link set lo up
ExecStart=/sbin/ip link add d0 type veth peer name d1
ExecStart=/sbin/ip addr add 192.0.2.1/24 dev d0
ExecStart=/sbin/ip addr add 192.0.2.2/24 dev d0
ExecStart=/sbin/ip link set d0 up
ExecStart=/sbin/ip link set d1 up
[Install]
WantedBy=multi-user.target
EOF
# A stalled daemon is found within 3 s rather than the units' 30.
mkdir -p "$root/etc/systemd/system/shipworm-client.service.d"
printf '[Service]\nWatchdogSec=3s\n' >"$root/etc/systemd/system/shipworm-client.service.d/watchdog.conf"
"${nspawn[@]}" --pipe systemctl enable lab-net shipworm-server shipworm-client >/dev/null 2>&1

say "booting it (systemd-nspawn, a private network)"
"${nspawn[@]}" --private-network -b --console=passive >/dev/null 2>&1 &
boot_pid=$!
init=""
for _ in $(seq 1 100); do
    init=$(pgrep -P "$boot_pid" -x systemd || true)
    [ -n "$init" ] && break
    sleep 0.1
done
[ -n "$init" ] || die "the container's systemd did not start"
inside() { nsenter -t "$init" -a "$@"; }
show() { inside systemctl show -p "$2" --value "$1" 2>/dev/null || true; }
# The host's pid of the container's process $1.
host_pid() {
    for f in /proc/[0-9]*/status; do
        if grep -q "^NSpid:.*[[:space:]]$1\$" "$f" 2>/dev/null && [ "$(cat "${f%status}comm")" = shipworm ]; then
            basename "$(dirname "$f")"
            return
        fi
    done
}
# Wait until unit $1's status line starts with $2 and its main pid differs from $3.
wait_status() {
    for _ in $(seq 1 150); do
        local st pid
        st=$(show "$1" StatusText)
        pid=$(show "$1" MainPID)
        if [[ "$st" == "$2"* ]] && [ "$pid" != "${3:-}" ] && [ "$pid" != 0 ]; then
            echo "$st"
            return 0
        fi
        sleep 0.1
    done
    inside journalctl -u "$1" --no-pager | tail -n 15 >&2
    die "$1: no status \"$2…\" (now: $(show "$1" StatusText))"
}

printf '  server: %s\n' "$(wait_status shipworm-server.service serving)"
printf '  client: %s\n' "$(wait_status shipworm-client.service qualified:)"
# The client and its interface helper each confine themselves and say so; the helper
# closes what it inherited but the journal's socket, so its record arrives too.
confined=$(inside journalctl -u shipworm-client -o cat --no-pager | grep -c '^confined:' || true)
if [ "$confined" -lt 2 ]; then
    inside journalctl -u shipworm-client -o cat --no-pager | head -n 30 >&2
    die "only $confined \"confined:\" record(s) in the journal: the interface helper's is missing"
fi
printf '  journal: the client and its helper each said how they are confined\n'

old=$(show shipworm-client.service MainPID)
start=$(date +%s%N)
kill -9 "$(host_pid "$old")"
st=$(wait_status shipworm-client.service qualified: "$old")
printf '  client SIGKILLed: restarted and qualified again in %s ms: %s\n' "$((($(date +%s%N) - start) / 1000000))" "$st"

old=$(show shipworm-client.service MainPID)
kill -STOP "$(host_pid "$old")"
start=$(date +%s%N)
st=$(wait_status shipworm-client.service qualified: "$old")
# systemd's own line about it reaches the journal asynchronously: give it a moment.
seen=""
for _ in $(seq 1 50); do
    inside journalctl -u shipworm-client --no-pager | grep -q 'Watchdog timeout' && { seen=1; break; }
    sleep 0.1
done
if [ -z "$seen" ]; then
    inside journalctl -u shipworm-client --no-pager | tail -n 20 >&2
    die "the stalled client was not stopped by the watchdog"
fi
printf '  client stalled (SIGSTOP): watchdog restart, qualified again in %s ms\n' "$((($(date +%s%N) - start) / 1000000))"

# Reload (SIGHUP, as Miredo's users send it): an unchanged file keeps the daemon and
# its address; a broken one is refused by `systemctl reload` (check-config) and, sent
# as a bare SIGHUP, by the daemon, which runs on; a changed one restarts it with it.
address() { inside ip -6 -o addr show dev teredo scope global | awk '{print $4}'; }
journal_has() {
    for _ in $(seq 1 50); do
        inside journalctl -u shipworm-client -o cat --no-pager | grep -q "$1" && return 0
        sleep 0.1
    done
    inside journalctl -u shipworm-client -o cat --no-pager | tail -n 10 >&2
    die "the client's journal never said: $1"
}
pid=$(show shipworm-client.service MainPID)
addr=$(address)
printf '# reloaded unchanged\n' >>"$root/etc/miredo/miredo.conf"
reload_failed() {
    inside journalctl -u shipworm-client -o cat --no-pager | tail -n 15 >&2
    die "$1"
}
inside systemctl reload shipworm-client || reload_failed "systemctl reload of an unchanged file failed"
journal_has 'settings unchanged'
[ "$(show shipworm-client.service MainPID)" = "$pid" ] || die "an unchanged file restarted the client"
[ "$(address)" = "$addr" ] || die "an unchanged file changed the client's address ($addr -> $(address))"
printf '  reload, unchanged file: same process (%s), same address %s\n' "$pid" "$addr"
cp "$root/etc/miredo/miredo.conf" "$root/etc/miredo/miredo.conf.good"
printf 'Bogus yes\n' >>"$root/etc/miredo/miredo.conf"
if inside systemctl reload shipworm-client 2>/dev/null; then die "systemctl reload took a broken file"; fi
kill -HUP "$(host_pid "$pid")"
journal_has 'reload refused, running on with the previous settings: .*miredo.conf:[0-9]*: unknown directive Bogus'
[ "$(show shipworm-client.service MainPID)" = "$pid" ] || die "a broken file stopped the client"
printf '  reload, broken file: refused by systemctl reload and by the daemon, which runs on\n'
cp "$root/etc/miredo/miredo.conf.good" "$root/etc/miredo/miredo.conf"
printf 'RefreshInterval 20\n' >>"$root/etc/miredo/miredo.conf"
start=$(date +%s%N)
inside systemctl reload shipworm-client || reload_failed "systemctl reload of a changed file failed"
st=$(wait_status shipworm-client.service qualified: "$pid")
journal_has 'RefreshInterval changed: stopping with status 75'
printf '  reload, changed file: started again with it, qualified in %s ms: %s\n' "$((($(date +%s%N) - start) / 1000000))" "$st"

fields=$(inside journalctl -u shipworm-client -o verbose --no-pager | grep -c 'CODE_FILE=crates/daemon' || true)
[ "$fields" -gt 0 ] || die "the client's records reached the journal without their fields"
printf '  journal: %s records with fields (CODE_FILE, PRIORITY, SYSLOG_IDENTIFIER)\n' "$fields"
for u in client relay server; do
    inside systemd-analyze security "shipworm-$u.service" --no-pager 2>/dev/null | tail -n 1 | sed 's/^/  /'
done

# The lifecycle, as apt drives it on a running system (the maintainer scripts are
# debhelper's, generated by cargo-deb from the units).
cp "$deb" "$root/root/shipworm.deb"
client=$(show shipworm-client.service MainPID)
server=$(show shipworm-server.service MainPID)
inside dpkg -i /root/shipworm.deb >/dev/null 2>&1 || die "upgrading the package (dpkg -i again) failed"
st=$(wait_status shipworm-client.service qualified: "$client")
wait_status shipworm-server.service serving "$server" >/dev/null
[ "$(show shipworm-relay.service ActiveState)" = inactive ] || die "the upgrade started the relay, which was not running"
printf '  upgrade: the running client and server restarted (client qualified again: %s), the relay left stopped\n' "$st"
inside dpkg -r shipworm >/dev/null 2>&1 || die "removing the package failed"
for u in client server; do
    state=$(show "shipworm-$u.service" ActiveState)
    [ "$state" = active ] && die "removing the package left shipworm-$u running"
done
inside pgrep -x shipworm >/dev/null && die "a shipworm process outlived the package's removal"
printf '  removal: every unit stopped, no shipworm process left\n'
inside dpkg -i /root/shipworm.deb >/dev/null 2>&1 || die "installing the package again failed"
for u in client relay server; do
    [ "$(show "shipworm-$u.service" LoadState)" = loaded ] || die "shipworm-$u.service not known after installation"
    [ "$(show "shipworm-$u.service" NeedDaemonReload)" = no ] \
        || die "shipworm-$u.service changed on disk without a daemon-reload by the package"
    inside dpkg -L shipworm | grep -qx "/usr/lib/systemd/system/shipworm-$u.service" \
        || die "the package does not put shipworm-$u.service under /usr/lib/systemd/system"
done
for u in client relay server; do
    [ "$(show "shipworm-$u.service" ActiveState)" = inactive ] || die "installing the package started shipworm-$u"
done
printf '  installation on a running system: units known at once (daemon-reload by the package), under /usr/lib/systemd/system, none started\n'
inside systemctl poweroff >/dev/null 2>&1 || true
wait "$boot_pid" 2>/dev/null || true
boot_pid=""
