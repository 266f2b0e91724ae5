//! A Teredo client's random ports (RFC 6081 §5.4, §5.5): one UDP socket per peer being
//! reached from behind a port-preserving or sequential symmetric NAT, opened and
//! closed as the state machine asks, capped.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};

/// The open random ports.
pub struct RandomPorts {
    bind: Ipv4Addr,
    cap: usize,
    sockets: HashMap<u16, UdpSocket>,
    /// Sends refused, and sockets that could not be opened.
    pub failures: u64,
}

impl RandomPorts {
    /// Ports bound to `bind` (the service socket's address), at most `cap` at once.
    pub fn new(bind: Ipv4Addr, cap: usize) -> RandomPorts {
        RandomPorts { bind, cap, sockets: HashMap::new(), failures: 0 }
    }

    /// Open a socket on a port the kernel picks; its number.
    pub fn open(&mut self) -> Option<u16> {
        if self.sockets.len() >= self.cap {
            return None;
        }
        let opened = UdpSocket::bind((self.bind, 0)).and_then(|s| {
            s.set_nonblocking(true)?;
            crate::io::udp_socket::allow_fragmentation(std::os::fd::AsFd::as_fd(&s))?;
            Ok(s)
        });
        match opened.and_then(|s| Ok((s.local_addr()?.port(), s))) {
            Ok((port, s)) => {
                self.sockets.insert(port, s);
                Some(port)
            }
            Err(e) => {
                self.failures += 1;
                tracing::warn!("cannot open a random port for a peer: {e}");
                None
            }
        }
    }

    /// Close every port.
    pub fn close_all(&mut self) {
        self.sockets.clear();
    }

    /// Close `port`.
    pub fn close(&mut self, port: u16) {
        self.sockets.remove(&port);
    }

    /// Send `payload` from `port` to `to`, with the TTL limited to `ttl` for this
    /// datagram if given.
    pub fn send(&mut self, port: u16, to: SocketAddrV4, payload: &[u8], ttl: Option<u8>) {
        let Some(s) = self.sockets.get(&port) else {
            self.failures += 1;
            return;
        };
        let sent = match ttl {
            None => s.send_to(payload, to),
            Some(ttl) => s.ttl().and_then(|usual| {
                s.set_ttl(u32::from(ttl))?;
                let r = s.send_to(payload, to);
                s.set_ttl(usual)?;
                r
            }),
        };
        if sent.is_err() {
            self.failures += 1;
        }
    }

    /// One datagram waiting on `port`, into `buf`: its length and sender.
    pub fn recv(&self, port: u16, buf: &mut [u8]) -> Option<(usize, SocketAddrV4)> {
        match self.sockets.get(&port)?.recv_from(buf) {
            Ok((n, SocketAddr::V4(from))) => Some((n, from)),
            Ok(_) => None,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(_) => None,
        }
    }

    /// Every open port with its socket, to poll.
    pub fn fds(&self) -> impl Iterator<Item = (u16, BorrowedFd<'_>)> {
        self.sockets.iter().map(|(&p, s)| (p, s.as_fd()))
    }

    /// Ports open.
    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    /// None open.
    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_send_receive_close_and_the_cap() {
        let mut ports = RandomPorts::new(Ipv4Addr::LOCALHOST, 2);
        let a = ports.open().expect("a port");
        let b = ports.open().expect("another");
        assert_ne!(a, b);
        assert_eq!(ports.open(), None, "the cap holds");
        ports.send(a, SocketAddrV4::new(Ipv4Addr::LOCALHOST, b), b"hello", Some(2));
        let mut buf = [0u8; 16];
        let mut got = None;
        for _ in 0..100 {
            got = ports.recv(b, &mut buf);
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (n, from) = got.expect("the datagram arrives");
        assert_eq!((&buf[..n], from.port()), (&b"hello"[..], a));
        ports.close(a);
        assert_eq!(ports.len(), 1);
        assert!(ports.open().is_some(), "a closed port frees its place");
        ports.send(a, SocketAddrV4::new(Ipv4Addr::LOCALHOST, b), b"x", None);
        assert_eq!(ports.failures, 1, "sending from a closed port is a counted failure");
    }
}
