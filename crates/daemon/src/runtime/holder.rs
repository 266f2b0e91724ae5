//! What a holder process does first: a small process forked during set-up to keep one
//! descriptor a daemon must not hold once confined (BIRD's control connection, the
//! server's raw socket) and to carry out a few requests on it. It ignores stop signals
//! (the daemon it serves must still finish its work after a signal sent to the whole
//! service; it ends when the daemon's end of their socket pair closes), takes its name,
//! closes every other descriptor it inherited, drops root and every capability, and
//! confines itself.

use crate::runtime::confinement::{self, FilterMode};
use crate::runtime::syscalls::Role;
use std::ffi::CStr;

/// Become the holder `name`, keeping only the descriptors `keep` (and the log's).
pub fn enter(name: &CStr, keep: &[i32], user: Option<&str>, filter: FilterMode) -> Result<(), String> {
    enter_as(Role::Helper, name, keep, (user, &[]), filter)
}

/// [`enter`], confined as `role`, the user a member of the groups `extra` too.
pub fn enter_as(
    role: Role,
    name: &CStr,
    keep: &[i32],
    (user, extra): (Option<&str>, &[nix::unistd::Gid]),
    filter: FilterMode,
) -> Result<(), String> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
        // SAFETY: setting a disposition to SIG_IGN.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    let _ = nix::sys::prctl::set_name(name);
    crate::runtime::inherited::close_all_but(keep);
    crate::runtime::privileges::drop_root_into_groups(user, extra)?;
    confinement::confine(role, false, filter, &[], &[])
}
