//! A daemon's UDP socket: non-blocking, with the large buffers bursts need, bound to
//! one address (and, for a relay with several workers, sharing its port), its datagrams
//! sent without Don't Fragment.

use crate::io::{socket_buffers, sockopt};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddrV4;
use std::os::fd::{AsFd, BorrowedFd};

/// A UDP socket bound to `addr`; with `shared_port`, other sockets of this process may
/// bind the same port (SO_REUSEPORT: the kernel spreads flows over them).
pub fn bind(addr: SocketAddrV4, shared_port: bool) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    socket_buffers::enlarge(s.as_fd(), socket_buffers::DAEMON_BYTES);
    s.set_nonblocking(true)?;
    allow_fragmentation(s.as_fd())?;
    if shared_port {
        s.set_reuse_port(true)?;
    }
    s.bind(&addr.into())?;
    Ok(s)
}

/// Send without Don't Fragment (IP_PMTUDISC_DONT), as RFC 4380 §5.1.1 asks ("SHOULD NOT
/// set the DF bit") and Miredo does. Linux sets DF on UDP by default: on an IPv4 path
/// narrower than a full-size Teredo datagram whose routers' "fragmentation needed"
/// messages are filtered, those datagrams would vanish; without DF a router fragments
/// them and the far end reassembles.
pub fn allow_fragmentation(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    sockopt::set_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DONT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_port_takes_a_second_socket_and_a_private_one_does_not() {
        let a = bind(SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0), true).unwrap();
        let port = a.local_addr().unwrap().as_socket_ipv4().unwrap().port();
        let at = SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port);
        assert!(bind(at, true).is_ok());
        let err = bind(at, false).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EADDRINUSE));
        assert!(a.nonblocking().unwrap());
    }

    #[test]
    fn datagrams_leave_without_dont_fragment() {
        let s = bind(SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0), false).unwrap();
        let v = sockopt::get_int(s.as_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER).unwrap();
        assert_eq!(v, libc::IP_PMTUDISC_DONT, "Linux's default is IP_PMTUDISC_WANT: DF set");
    }
}
