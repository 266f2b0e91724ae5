# Shared set-up for the project's scripts: install what is missing, say what is done.
# Sourced, not run.

# Each phase prints the time the one before it took, and the run's time so far (a
# script called by another counts from the caller's start: RUN_T0 is exported).
export RUN_T0=${RUN_T0:-$(date +%s)}
PHASE_T0=
PHASE_NAME=
say() {
    local now
    now=$(date +%s)
    [ -n "$PHASE_NAME" ] && printf '    (%s: %d s; %d s since the start)\n' "$PHASE_NAME" $((now - PHASE_T0)) $((now - RUN_T0))
    PHASE_T0=$now
    PHASE_NAME=$*
    printf '\033[1m==> %s\033[0m\n' "$*"
}
# Closes the last phase, for a script's end.
phase_done() {
    local now
    now=$(date +%s)
    [ -n "$PHASE_NAME" ] && printf '    (%s: %d s; %d s since the start)\n' "$PHASE_NAME" $((now - PHASE_T0)) $((now - RUN_T0))
    PHASE_NAME=
}
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Install Debian packages that are missing. Needs root (apt-get).
APT_UPDATED=
ensure_apt() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || die "missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}"
    say "installing Debian packages: ${missing[*]}"
    if [ -z "$APT_UPDATED" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq || die "apt-get update failed"
        APT_UPDATED=1
    fi
    # Never let a package start its service while installing: Debian's miredo would
    # contact its default public Teredo server. policy-rc.d exit 101 forbids starts.
    local guard=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && guard=1
    fi
    local rc=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
    [ -n "$guard" ] && rm -f /usr/sbin/policy-rc.d
    [ $rc -eq 0 ] || die "apt-get install ${missing[*]} failed"
    # The lab runs these daemons itself, in its namespaces: the services the packages
    # just installed are not enabled for the host's next boot (Debian's miredo would
    # contact a public Teredo server). Packages that were here before are left alone.
    local units
    units=$(dpkg -L "${missing[@]}" 2>/dev/null | grep -E '^/(usr/)?lib/systemd/system/[^/]+\.service$' | xargs -r -n1 basename | sort -u)
    for u in $units; do
        systemctl disable "$u" >/dev/null 2>&1 || true
    done
    for s in $(dpkg -L "${missing[@]}" 2>/dev/null | grep -E '^/etc/init\.d/[^/]+$' | xargs -r -n1 basename); do
        update-rc.d "$s" disable >/dev/null 2>&1 || true
    done
    return 0
}

# The system user shipworm's daemons run as (as the Debian package makes it), so the lab
# runs them the way users do. Needs root.
ensure_shipworm_user() {
    id -u shipworm >/dev/null 2>&1 && return 0
    [ "$(id -u)" -eq 0 ] || die "no user shipworm; run as root or: sudo useradd --system --no-create-home --shell /usr/sbin/nologin shipworm"
    say "creating the system user shipworm"
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin shipworm \
        || die "useradd shipworm failed"
}

# The Rust toolchain with the components the checks use.
ensure_rust() {
    command -v cargo >/dev/null || die "cargo not found: install Rust with rustup (https://rustup.rs) and retry"
    if command -v rustup >/dev/null; then
        for c in rustfmt clippy; do
            rustup component list --installed 2>/dev/null | grep -q "^$c" || {
                say "installing rust component $c"
                rustup component add "$c" || die "rustup component add $c failed"
            }
        done
    fi
}

# cargo-deb, for the Debian package.
ensure_cargo_deb() {
    command -v cargo-deb >/dev/null && return 0
    say "installing cargo-deb (once)"
    cargo install --locked cargo-deb >/dev/null 2>&1 || die "cargo install cargo-deb failed"
}
