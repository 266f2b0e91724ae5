//! The relay under test gets the same buffers whichever program it is. Miredo keeps
//! the system's default UDP receive buffer (a millisecond or two of traffic at the
//! rates measured) and a TUN queue of 500; with them its losses are buffer overflows
//! (UdpRcvbufErrors, the TUN's TX drops), and its rate a draw on millisecond
//! scheduling stalls. Equal buffers make the rates compare the work per packet.

use shipworm::io::socket_buffers;
use shipworm_lab::netns;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

/// Packets each TUN queue of the relay under test holds.
pub const TUN_QUEUE: u32 = 4096;

/// Give every UDP socket bound to `port` (any port: `None`) in namespace `ns`,
/// whichever process holds it, send and receive buffers of `bytes` (what shipworm asks
/// for itself), and the interface `tun` queues of [`TUN_QUEUE`] packets. Returns the
/// receive buffer each socket now has, as the kernel reports it.
pub fn equalize(ns: &str, port: Option<u16>, bytes: usize, tun: &str) -> Result<Vec<usize>, String> {
    let table = netns::exec(ns, &["cat", "/proc/net/udp"]).map_err(|e| e.to_string())?;
    let inodes = bound_to(&table, port);
    if inodes.is_empty() {
        return Err(format!("no UDP socket on port {port:?} in {ns}"));
    }
    let mut sizes = Vec::new();
    for (pid, fd) in holders(&inodes) {
        let theirs = borrow_fd(pid, fd).map_err(|e| {
            format!("cannot reach process {pid}'s socket (pidfd_getfd: {e}; needs root and a kernel of 5.6 or later)")
        })?;
        socket_buffers::enlarge(theirs.as_fd(), bytes);
        sizes.push(socket_buffers::receive_size(theirs.as_fd()));
    }
    netns::exec(ns, &["ip", "link", "set", "dev", tun, "txqueuelen", &TUN_QUEUE.to_string()])
        .map_err(|e| e.to_string())?;
    Ok(sizes)
}

/// The socket inodes of /proc/net/udp's lines whose local port is `port` (any: `None`).
fn bound_to(table: &str, port: Option<u16>) -> Vec<u64> {
    let want = port.map_or(String::new(), |p| format!(":{p:04X}"));
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 9 && f[1].ends_with(&want)).then(|| f[9].parse().ok()).flatten()
        })
        .collect()
}

/// (pid, fd) of every descriptor on this host that is one of the sockets `inodes`.
fn holders(inodes: &[u64]) -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        for f in fds.flatten() {
            let Some(fd) = f.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            let Ok(link) = std::fs::read_link(f.path()) else { continue };
            let inode = link.to_str().and_then(|s| s.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok());
            if inode.is_some_and(|i| inodes.contains(&i)) {
                out.push((pid, fd));
            }
        }
    }
    out
}

/// A descriptor of ours for process `pid`'s descriptor `fd` (the same open socket).
fn borrow_fd(pid: i32, fd: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: plain system calls on integers; each descriptor returned is new and ours.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        if pidfd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let pidfd = OwnedFd::from_raw_fd(pidfd as i32);
        use std::os::fd::AsRawFd;
        let theirs = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0);
        if theirs < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(theirs as i32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sockets_on_a_port_are_found_in_the_udp_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
   7: 0300000A:0DD9 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 41234 2 0000000000000000 0\n\
   8: 0300000A:0DD9 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 41235 2 0000000000000000 0\n\
  12: 00000000:0DDA 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 41300 2 0000000000000000 0\n";
        assert_eq!(bound_to(table, Some(3545)), vec![41234, 41235]);
        assert_eq!(bound_to(table, Some(3546)), vec![41300]);
        assert!(bound_to(table, Some(53)).is_empty());
        assert_eq!(bound_to(table, None), vec![41234, 41235, 41300]);
    }

    #[test]
    fn another_descriptor_for_our_own_socket_changes_the_socket_itself() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsRawFd;
        let root = unsafe { libc::geteuid() } == 0;
        let ours = match borrow_fd(std::process::id() as i32, s.as_raw_fd()) {
            Ok(fd) => fd,
            // Only root may count on it (the test command runs as root).
            Err(_) if !root => return,
            Err(e) => panic!("pidfd_getfd on our own socket: {e}"),
        };
        socket_buffers::enlarge(ours.as_fd(), 1 << 20);
        assert_eq!(socket_buffers::receive_size(s.as_fd()), socket_buffers::receive_size(ours.as_fd()));
        assert!(socket_buffers::receive_size(s.as_fd()) >= 2 << 20 || !root);
    }
}
