//! Giving up root once the sockets are open.

use nix::unistd::{setgid, setgroups, setuid, Uid, User};

/// The user daemons run as unless told otherwise (as Miredo does).
pub const DEFAULT_USER: &str = "nobody";

/// If running as root, become `user` for good (supplementary groups, group, user) and
/// check that root cannot be regained. Not root: nothing to drop.
pub fn drop_root(user: &str) -> Result<(), String> {
    let Some(u) = become_user(user, false)? else { return Ok(()) };
    tracing::info!("running as {user} (uid {}, gid {})", u.uid, u.gid);
    Ok(())
}

/// Become `user` but keep CAP_NET_ADMIN (and nothing else), so the interface can be
/// reconfigured when the address changes. Not root: nothing to do.
pub fn drop_root_keep_net_admin(user: &str) -> Result<(), String> {
    use caps::{CapSet, Capability, CapsHashSet};
    let Some(u) = become_user(user, true)? else { return Ok(()) };
    let keep: CapsHashSet = [Capability::CAP_NET_ADMIN].into_iter().collect();
    caps::set(None, CapSet::Permitted, &keep).map_err(|e| format!("capset: {e}"))?;
    caps::set(None, CapSet::Effective, &keep).map_err(|e| format!("capset: {e}"))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| format!("capset: {e}"))?;
    refuse_regained_root(&u)?;
    tracing::info!("running as {user} (uid {}) with CAP_NET_ADMIN only", u.uid);
    Ok(())
}

/// As root: take `user`'s groups, group and uid (keeping the capabilities across the
/// switch if asked, for the caller to trim). Not root: `None`, nothing changed.
fn become_user(user: &str, keep_caps: bool) -> Result<Option<User>, String> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    let u = User::from_name(user)
        .map_err(|e| format!("cannot look up user {user}: {e}"))?
        .ok_or_else(|| format!("no user named {user} (create it, or choose another with -u / User)"))?;
    if keep_caps {
        nix::sys::prctl::set_keepcaps(true).map_err(|e| format!("PR_SET_KEEPCAPS: {e}"))?;
    }
    setgroups(&[u.gid]).map_err(|e| format!("setgroups: {e}"))?;
    setgid(u.gid).map_err(|e| format!("setgid({}): {e}", u.gid))?;
    setuid(u.uid).map_err(|e| format!("setuid({}): {e}", u.uid))?;
    if !keep_caps {
        refuse_regained_root(&u)?;
    }
    Ok(Some(u))
}

/// Asked to stay root is allowed, if unwise; otherwise root must be gone for good.
fn refuse_regained_root(u: &User) -> Result<(), String> {
    if !u.uid.is_root() && setuid(Uid::from_raw(0)).is_ok() {
        return Err("root privileges could be regained after setuid; refusing to run".into());
    }
    Ok(())
}
