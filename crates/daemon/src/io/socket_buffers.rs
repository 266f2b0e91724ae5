//! Socket buffers that hold a burst on any machine. The kernel caps SO_RCVBUF and
//! SO_SNDBUF at net.core.rmem_max / wmem_max (208 KiB on a stock system): a relay's UDP
//! socket with that much holds about 90 full-size packets, and overflows after a stall
//! of a millisecond or two at 60 000 packets/s. With CAP_NET_ADMIN (the daemons have it
//! while they set up) SO_*BUFFORCE passes the cap; without, the capped request stands.

use crate::io::sockopt;
use std::os::fd::BorrowedFd;

/// What the daemons ask for, each way (the kernel doubles it for its bookkeeping).
pub const DAEMON_BYTES: usize = 4 << 20;

/// Receive and send buffers of `bytes` each on `fd`, past the system's cap where this
/// process may; failures only cost performance, so they are not errors.
pub fn enlarge(fd: BorrowedFd<'_>, bytes: usize) {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for (forced, capped) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        if !set(fd, forced, v) {
            set(fd, capped, v);
        }
    }
}

fn set(fd: BorrowedFd<'_>, opt: libc::c_int, v: libc::c_int) -> bool {
    sockopt::set_int(fd, libc::SOL_SOCKET, opt, v).is_ok()
}

/// The receive buffer the kernel gave `fd`, in bytes (doubled, as the kernel reports it).
pub fn receive_size(fd: BorrowedFd<'_>) -> usize {
    sockopt::get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).map_or(0, |v| usize::try_from(v).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn root_passes_the_system_cap_and_others_get_what_it_allows() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = receive_size(s.as_fd());
        enlarge(s.as_fd(), DAEMON_BYTES);
        let cap =
            std::fs::read_to_string("/proc/sys/net/core/rmem_max").ok().and_then(|t| t.trim().parse::<usize>().ok());
        let after = receive_size(s.as_fd());
        // As root (the test command runs as root), the cap is passed: twice the request.
        // Otherwise the kernel's own: twice the smaller of the request and the cap.
        let root = unsafe { libc::geteuid() } == 0;
        let want = if root { 2 * DAEMON_BYTES } else { 2 * DAEMON_BYTES.min(cap.unwrap_or(DAEMON_BYTES)) };
        assert_eq!(after, want, "before {before}");
    }
}
