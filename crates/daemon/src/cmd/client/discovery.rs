//! The client's place on its own network: the local discovery socket (RFC 4380 §5.2.8)
//! and the group it joins, and the service socket's local address (hairpinning).

use socket2::{SockRef, Socket};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};

/// The local discovery socket and the link its group is joined on.
pub struct Discovery {
    socket: UdpSocket,
    /// The address the group is joined on.
    joined: Option<Ipv4Addr>,
}

impl Discovery {
    /// The socket, bound to the group address 224.0.0.253:3544 itself so that only group
    /// traffic reaches it (a unicast "announcement" is not one, RFC 4380 §5.2.8), shared
    /// with other Teredo clients on the host (SO_REUSEADDR). The group is joined on
    /// qualification, on the link the local address is on: the network need not be up at
    /// start. `None`, with a warning, if it cannot be had.
    pub fn open() -> Option<Discovery> {
        use socket2::{Domain, Protocol, Type};
        let group = shipworm_proto::local_discovery::GROUP;
        let made = (|| -> std::io::Result<UdpSocket> {
            let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
            s.set_reuse_address(true)?;
            s.set_reuse_port(true)?;
            s.bind(&group.into())?;
            s.set_nonblocking(true)?;
            // Joined on the default route's link now if there is one (so we hear the
            // others from the first announcement on), on the local address's link when
            // qualified.
            let _ = s.join_multicast_v4(group.ip(), &Ipv4Addr::UNSPECIFIED);
            Ok(s.into())
        })();
        made.map(|socket| Discovery { socket, joined: None })
            .map_err(|e| tracing::warn!("no local discovery (224.0.0.253:3544): {e}"))
            .ok()
    }

    /// The group, on the link `here` is on: joined again only when that address changed
    /// (refreshes come here too); our announcements leave `service` from that interface.
    pub fn join_on(&mut self, here: Option<Ipv4Addr>, service: SockRef<'_>) {
        if here == self.joined {
            return;
        }
        let group = *shipworm_proto::local_discovery::GROUP.ip();
        if let Some(old) = self.joined.take() {
            let _ = self.socket.leave_multicast_v4(&group, &old);
        }
        let Some(ip) = here else { return };
        match self.socket.join_multicast_v4(&group, &ip) {
            Ok(()) => self.joined = Some(ip),
            // Already a member there (the join at start).
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => self.joined = Some(ip),
            Err(e) => tracing::warn!("local discovery: cannot join {group} on {ip}: {e}"),
        }
        let _ = service.set_multicast_if_v4(&ip);
    }

    /// The next bubble heard on the group, into `buf`.
    pub fn recv(&self, buf: &mut [u8]) -> Option<(usize, SocketAddrV4)> {
        match self.socket.recv_from(buf) {
            Ok((n, std::net::SocketAddr::V4(from))) => Some((n, from)),
            _ => None,
        }
    }
}

impl AsFd for Discovery {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

/// The service socket's address on its own network: the bound address, or else the
/// one the kernel would send from towards `server` (a connected socket that sends
/// nothing).
pub fn local_address(bound: Ipv4Addr, port: u16, server: Ipv4Addr) -> Option<SocketAddrV4> {
    if !bound.is_unspecified() {
        return Some(SocketAddrV4::new(bound, port));
    }
    let probe = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    probe.connect((server, shipworm_wire::teredo_addr::TEREDO_PORT)).ok()?;
    match probe.local_addr().ok()? {
        std::net::SocketAddr::V4(a) => Some(SocketAddrV4::new(*a.ip(), port)),
        std::net::SocketAddr::V6(_) => None,
    }
}
