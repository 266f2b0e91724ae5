//! What a forked helper process keeps of its parent's descriptors.

/// Keep only stdio, the journal's socket and `keep`: the child of a fork holds every
/// descriptor of its parent (the client's TUN among them, which must close when the
/// client does; the relay's sockets). The journal's is owned by the logging layer, which
/// goes on writing to its number: closed, the number would go to the next socket
/// opened, and the records with it.
///
/// Every other number is closed, open or not, by ranges between the kept ones
/// (close_range(2)): nothing is listed first, so nothing can fail to be listed (reading
/// /proc/self/fd, as before, left every descriptor open where /proc could not be read).
pub fn close_all_but(keep: &[i32]) {
    let mut kept: Vec<u32> = keep
        .iter()
        .chain(crate::runtime::logging::descriptors())
        .filter_map(|&fd| u32::try_from(fd).ok())
        .filter(|&fd| fd > 2)
        .collect();
    kept.sort_unstable();
    kept.dedup();
    let mut from = 3u32;
    for fd in kept.into_iter().chain([u32::MAX]) {
        if fd > from {
            close_range(from, fd - 1);
        }
        from = fd.saturating_add(1);
    }
}

/// Close descriptors `first` to `last`, both included.
fn close_range(first: u32, last: u32) {
    // SAFETY: close_range only closes descriptors of this process; none in the range is
    // used by anything here (the caller keeps what it uses).
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if r != 0 {
        // A kernel before 5.9: each number up to the descriptor limit, one by one.
        let mut lim = libc::rlimit { rlim_cur: 1024, rlim_max: 1024 };
        // SAFETY: getrlimit writes the limit into `lim`.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        let limit = lim.rlim_cur.min(1 << 20);
        for fd in u64::from(first)..=u64::from(last).min(limit.saturating_sub(1)) {
            // SAFETY: as above.
            unsafe { libc::close(fd as i32) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn open(fd: i32) -> bool {
        // SAFETY: F_GETFD only reads a descriptor's flags.
        unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
    }

    /// In a child of a fork (the way helpers are made), with /proc hidden under an
    /// empty tmpfs: the kept descriptors stay, every other one closes. Listing
    /// /proc/self/fd, as before, closed nothing there (#60, 8: seen).
    #[test]
    fn a_helper_closes_what_it_inherited_even_without_proc() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var("SHIPWORM_E2E").map_or(true, |v| v != "required"), "needs root (a mount namespace)");
            eprintln!("skipped: needs root (a mount namespace)");
            return;
        }
        let kept = std::fs::File::open("/dev/null").unwrap();
        let dropped = std::fs::File::open("/dev/null").unwrap();
        let far = nix::fcntl::fcntl(dropped.as_raw_fd(), nix::fcntl::FcntlArg::F_DUPFD(900)).unwrap();
        // SAFETY: the child only makes system calls (no allocation) before it exits.
        match unsafe { libc::fork() } {
            0 => {
                // SAFETY: the child's own namespace and mounts; it exits right after.
                let hidden = unsafe {
                    libc::unshare(libc::CLONE_NEWNS) == 0
                        && libc::mount(
                            c"none".as_ptr(),
                            c"/".as_ptr(),
                            std::ptr::null(),
                            libc::MS_REC | libc::MS_PRIVATE,
                            std::ptr::null(),
                        ) == 0
                        && libc::mount(c"tmpfs".as_ptr(), c"/proc".as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null())
                            == 0
                };
                close_all_but(&[kept.as_raw_fd()]);
                let code = if !hidden {
                    3
                } else if !open(kept.as_raw_fd()) {
                    4
                } else if open(dropped.as_raw_fd()) || open(far) {
                    5
                } else {
                    0
                };
                // SAFETY: ending the child without running the parent's destructors.
                unsafe { libc::_exit(code) };
            }
            -1 => panic!("fork failed"),
            child => {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                unsafe { libc::waitpid(child, &mut status, 0) };
                let code = libc::WEXITSTATUS(status);
                assert_eq!(code, 0, "3: /proc not hidden, 4: a kept descriptor closed, 5: an inherited one left open");
            }
        }
        nix::unistd::close(far).unwrap();
    }
}
