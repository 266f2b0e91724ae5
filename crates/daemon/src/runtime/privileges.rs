//! Giving up root once the sockets are open: to a dedicated user, with no capability
//! left but the one a role needs and an empty bounding set, whether the daemon started as root or as another user
//! holding file capabilities.

use caps::{CapSet, Capability, CapsHashSet};
use nix::unistd::{setgid, setgroups, setuid, Gid, Uid, User};

/// The user daemons run as unless told otherwise: one of their own (the Debian package
/// and the lab create it), so a compromised daemon shares no files or processes with
/// other services.
pub const DEFAULT_USER: &str = "shipworm";
/// Taken, with a warning, when no [`DEFAULT_USER`] exists (as Miredo does).
pub const FALLBACK_USER: &str = "nobody";

/// The user to become: the configured one, or [`DEFAULT_USER`], or [`FALLBACK_USER`].
pub fn user_name(configured: Option<&str>) -> &str {
    match configured {
        Some(u) => u,
        None if User::from_name(DEFAULT_USER).ok().flatten().is_some() => DEFAULT_USER,
        None => FALLBACK_USER,
    }
}

/// Become the configured user (see [`user_name`]) for good, if running as root, and in
/// any case keep no capability at all.
pub fn drop_root(configured: Option<&str>) -> Result<(), String> {
    drop_root_into_groups(configured, &[])
}

/// [`drop_root`], member of the groups `extra` too (besides the user's own): the BIRD
/// link keeps the group of BIRD's control socket, to connect again when BIRD restarts.
pub fn drop_root_into_groups(configured: Option<&str>, extra: &[Gid]) -> Result<(), String> {
    let user = user_name(configured);
    super::confinement::shrink_bounding_set(&[])?;
    if let Some(u) = become_user(user, configured.is_none(), false, extra)? {
        tracing::info!("running as {user} (uid {}, gid {})", u.uid, u.gid);
    }
    keep_only(&CapsHashSet::new())
}

/// Become the configured user but keep CAP_NET_ADMIN (and nothing else), so the
/// interface can be reconfigured when the address changes.
pub fn drop_root_keep_net_admin(configured: Option<&str>) -> Result<(), String> {
    let user = user_name(configured);
    // The bounding set limits only what a program executed later could gain: none
    // needs anything (the hook runs without capabilities).
    super::confinement::shrink_bounding_set(&[])?;
    let become_ = become_user(user, configured.is_none(), true, &[])?;
    let keep: CapsHashSet = [Capability::CAP_NET_ADMIN].into_iter().collect();
    keep_only(&keep)?;
    if let Some(u) = become_ {
        refuse_regained_root(&u)?;
        tracing::info!("running as {user} (uid {}) with CAP_NET_ADMIN only", u.uid);
    }
    Ok(())
}

/// Trim every capability set of this thread to `keep` (those of it we hold): a daemon
/// started without root but with file capabilities gives up the ones it has no use for
/// just as one started as root does.
fn keep_only(keep: &CapsHashSet) -> Result<(), String> {
    let held = caps::read(None, CapSet::Permitted).map_err(|e| format!("reading capabilities: {e}"))?;
    let keep: CapsHashSet = keep.intersection(&held).copied().collect();
    caps::clear(None, CapSet::Ambient).map_err(|e| format!("clearing ambient capabilities: {e}"))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| format!("capset: {e}"))?;
    caps::set(None, CapSet::Effective, &keep).map_err(|e| format!("capset: {e}"))?;
    caps::set(None, CapSet::Permitted, &keep).map_err(|e| format!("capset: {e}"))?;
    Ok(())
}

/// As root: take `user`'s groups, group and uid (keeping the capabilities across the
/// switch if asked, for the caller to trim). Not root: `None`, nothing changed. A
/// missing default user falls back to [`FALLBACK_USER`] with a warning; running as root
/// is allowed when asked for, with a warning.
fn become_user(user: &str, defaulted: bool, keep_caps: bool, extra: &[Gid]) -> Result<Option<User>, String> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    let u = User::from_name(user)
        .map_err(|e| format!("cannot look up user {user}: {e}"))?
        .ok_or_else(|| format!("no user named {user} (create it, or choose another with -u / User)"))?;
    if defaulted && user == FALLBACK_USER {
        tracing::warn!(
            "no user {DEFAULT_USER}: running as {FALLBACK_USER}, which other services share; create it \
             (useradd --system --no-create-home --shell /usr/sbin/nologin {DEFAULT_USER}) or set User"
        );
    }
    if u.uid.is_root() {
        tracing::warn!(
            "running as root (User {user}): every datagram from the network is handled with root's \
             privileges; choose an unprivileged user"
        );
        return Ok(Some(u));
    }
    if keep_caps {
        nix::sys::prctl::set_keepcaps(true).map_err(|e| format!("PR_SET_KEEPCAPS: {e}"))?;
    }
    let groups: Vec<Gid> = std::iter::once(u.gid).chain(extra.iter().copied().filter(|g| *g != u.gid)).collect();
    setgroups(&groups).map_err(|e| format!("setgroups: {e}"))?;
    setgid(u.gid).map_err(|e| format!("setgid({}): {e}", u.gid))?;
    setuid(u.uid).map_err(|e| format!("setuid({}): {e}", u.uid))?;
    if !keep_caps {
        refuse_regained_root(&u)?;
    }
    Ok(Some(u))
}

/// Root must be gone for good.
fn refuse_regained_root(u: &User) -> Result<(), String> {
    if !u.uid.is_root() && setuid(Uid::from_raw(0)).is_ok() {
        return Err("root privileges could be regained after setuid; refusing to run".into());
    }
    Ok(())
}
