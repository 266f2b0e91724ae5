//! Integer socket options, the few the daemon sets that its socket crate has no call
//! for (forced buffer sizes, Don't Fragment): one safe wrapper for `setsockopt` and
//! `getsockopt` on an `int`.

use std::os::fd::{AsRawFd, BorrowedFd};

/// Set option `opt` of `level` on `fd` to `value`.
pub fn set_int(fd: BorrowedFd<'_>, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setsockopt on a descriptor we borrow, with an int value and its size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Option `opt` of `level` on `fd`.
pub fn get_int(fd: BorrowedFd<'_>, level: libc::c_int, opt: libc::c_int) -> std::io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into an int of the size given.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), level, opt, (&mut v as *mut libc::c_int).cast(), &mut len) };
    if r == 0 {
        Ok(v)
    } else {
        Err(std::io::Error::last_os_error())
    }
}
