//! A daemon's UDP socket: non-blocking, with the large buffers bursts need, bound to
//! one address (and, for a relay with several workers, sharing its port).

use crate::io::socket_buffers;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddrV4;
use std::os::fd::AsFd;

/// A UDP socket bound to `addr`; with `shared_port`, other sockets of this process may
/// bind the same port (SO_REUSEPORT: the kernel spreads flows over them).
pub fn bind(addr: SocketAddrV4, shared_port: bool) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    socket_buffers::enlarge(s.as_fd(), socket_buffers::DAEMON_BYTES);
    s.set_nonblocking(true)?;
    if shared_port {
        s.set_reuse_port(true)?;
    }
    s.bind(&addr.into())?;
    Ok(s)
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
}
