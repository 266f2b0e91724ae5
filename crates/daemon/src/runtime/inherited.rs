//! What a forked helper process keeps of its parent's descriptors.

/// Keep only stdio, the journal's socket and `keep`: the child of a fork holds every
/// descriptor of its parent (the client's TUN among them, which must close when the
/// client does; the relay's sockets). The journal's is owned by the logging layer, which goes on writing to its
/// number: closed, the number would go to the next socket opened, and the records with
/// it.
pub fn close_all_but(keep: &[i32]) {
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    let logging = crate::runtime::logging::descriptors();
    for fd in fds.into_iter().filter(|fd| *fd > 2 && !keep.contains(fd) && !logging.contains(fd)) {
        // SAFETY: closing a descriptor this process owns and no object here uses.
        unsafe { libc::close(fd) };
    }
}
