//! Interface configuration through rtnetlink (never by running `ip`): link state and
//! MTU, addresses, routes, and the host's own addresses. A small blocking facade over
//! the async `rtnetlink` crate, with a current-thread runtime of its own: this is the
//! control plane, called at set-up and on changes, never per packet.

use futures::TryStreamExt;
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags, AddressScope};
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::{Handle, LinkUnspec, RouteMessageBuilder};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A netlink connection.
pub struct Netlink {
    rt: tokio::runtime::Runtime,
    handle: Handle,
}

fn why(what: &str, e: rtnetlink::Error) -> String {
    let text = e.to_string();
    let hint = if text.contains("Operation not permitted") || text.contains("EPERM") || text.contains("-1") {
        " (needs CAP_NET_ADMIN: run as root)"
    } else {
        ""
    };
    format!("{what}: {text}{hint}")
}

impl Netlink {
    /// Open a connection.
    pub fn new() -> Result<Netlink, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(|e| format!("cannot start the netlink runtime: {e}"))?;
        let handle = rt.block_on(async {
            let (conn, handle, _) = rtnetlink::new_connection().map_err(|e| format!("cannot open netlink: {e}"))?;
            tokio::spawn(conn);
            Ok::<_, String>(handle)
        })?;
        Ok(Netlink { rt, handle })
    }

    /// The index of interface `name`.
    pub fn link_index(&self, name: &str) -> Result<u32, String> {
        self.rt.block_on(async {
            let mut links = self.handle.link().get().match_name(name.to_string()).execute();
            match links.try_next().await {
                Ok(Some(l)) => Ok(l.header.index),
                Ok(None) => Err(format!("no interface named {name}")),
                Err(e) => Err(why(&format!("looking up interface {name}"), e)),
            }
        })
    }

    /// Set a link up or down, with an MTU.
    pub fn set_link(&self, index: u32, up: bool, mtu: u32) -> Result<(), String> {
        self.rt.block_on(async {
            let b = LinkUnspec::new_with_index(index).mtu(mtu);
            let msg = if up { b.up() } else { b.down() }.build();
            self.handle
                .link()
                .set(msg)
                .execute()
                .await
                .map_err(|e| why(&format!("setting interface {index} up, MTU {mtu}"), e))
        })
    }

    /// Add an IPv6 address (no duplicate address detection: the address is ours by
    /// construction, and DAD would delay it by a second or more).
    pub fn add_address(&self, index: u32, addr: Ipv6Addr, prefix_len: u8) -> Result<(), String> {
        self.rt.block_on(async {
            let mut req = self.handle.address().add(index, IpAddr::V6(addr), prefix_len).replace();
            req.message_mut().attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
            req.execute().await.map_err(|e| why(&format!("adding {addr}/{prefix_len}"), e))
        })
    }

    /// Remove an IPv6 address.
    #[allow(dead_code)]
    pub fn del_address(&self, index: u32, addr: Ipv6Addr, prefix_len: u8) -> Result<(), String> {
        self.rt.block_on(async {
            let mut addrs = self.handle.address().get().set_link_index_filter(index).execute();
            while let Some(m) = addrs.try_next().await.map_err(|e| why("listing addresses", e))? {
                let found =
                    m.attributes.iter().any(|a| matches!(a, AddressAttribute::Address(IpAddr::V6(x)) if *x == addr));
                if found && m.header.prefix_len == prefix_len {
                    return self
                        .handle
                        .address()
                        .del(m)
                        .execute()
                        .await
                        .map_err(|e| why(&format!("removing {addr}"), e));
                }
            }
            Ok(())
        })
    }

    fn route(
        index: u32,
        dst: Ipv6Addr,
        prefix_len: u8,
        metric: Option<u32>,
    ) -> rtnetlink::packet_route::route::RouteMessage {
        let mut b = RouteMessageBuilder::<Ipv6Addr>::new().destination_prefix(dst, prefix_len).output_interface(index);
        if let Some(m) = metric {
            b = b.priority(m);
        }
        b.build()
    }

    /// Route `dst/prefix_len` to interface `index` (replacing an equal route).
    pub fn add_route(&self, index: u32, dst: Ipv6Addr, prefix_len: u8, metric: Option<u32>) -> Result<(), String> {
        self.rt.block_on(async {
            self.handle
                .route()
                .add(Self::route(index, dst, prefix_len, metric))
                .replace()
                .execute()
                .await
                .map_err(|e| why(&format!("adding route {dst}/{prefix_len}"), e))
        })
    }

    /// Remove that route.
    #[allow(dead_code)]
    pub fn del_route(&self, index: u32, dst: Ipv6Addr, prefix_len: u8, metric: Option<u32>) -> Result<(), String> {
        self.rt.block_on(async {
            self.handle
                .route()
                .del(Self::route(index, dst, prefix_len, metric))
                .execute()
                .await
                .map_err(|e| why(&format!("removing route {dst}/{prefix_len}"), e))
        })
    }

    /// The IPv4 subnets the host is attached to: each address's network, as (address,
    /// prefix length).
    pub fn ipv4_subnets(&self) -> Result<Vec<(Ipv4Addr, u8)>, String> {
        self.rt.block_on(async {
            let mut out = Vec::new();
            let mut addrs = self.handle.address().get().execute();
            while let Some(m) = addrs.try_next().await.map_err(|e| why("listing addresses", e))? {
                if m.header.family != AddressFamily::Inet {
                    continue;
                }
                for a in &m.attributes {
                    if let AddressAttribute::Address(IpAddr::V4(v4)) = a {
                        out.push((*v4, m.header.prefix_len));
                    }
                }
            }
            Ok(out)
        })
    }

    /// The host's global-scope IPv6 addresses.
    pub fn global_ipv6_addresses(&self) -> Result<Vec<Ipv6Addr>, String> {
        self.rt.block_on(async {
            let mut out = Vec::new();
            let mut addrs = self.handle.address().get().execute();
            while let Some(m) = addrs.try_next().await.map_err(|e| why("listing addresses", e))? {
                if m.header.family != AddressFamily::Inet6 || m.header.scope != AddressScope::Universe {
                    continue;
                }
                for a in &m.attributes {
                    if let AddressAttribute::Address(IpAddr::V6(v6)) = a {
                        out.push(*v6);
                    }
                }
            }
            Ok(out)
        })
    }
}

/// A subscription to IPv4 address and route changes: the client re-qualifies when the
/// host moves (a new address, a new default route), without polling.
pub struct NetworkWatch {
    socket: rtnetlink::sys::Socket,
    buf: Vec<u8>,
}

/// rtnetlink multicast groups (linux/rtnetlink.h): RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE.
const IPV4_CHANGES: u32 = 0x10 | 0x40;

impl NetworkWatch {
    /// Subscribe.
    pub fn new() -> Result<NetworkWatch, String> {
        use rtnetlink::sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| format!("cannot open a netlink socket: {e}"))?;
        socket.bind(&SocketAddr::new(0, IPV4_CHANGES)).map_err(|e| format!("cannot subscribe to IPv4 changes: {e}"))?;
        socket.set_non_blocking(true).map_err(|e| e.to_string())?;
        Ok(NetworkWatch { socket, buf: Vec::with_capacity(16384) })
    }

    /// Drain pending notifications; true if there was any.
    pub fn changed(&mut self) -> bool {
        let mut any = false;
        loop {
            self.buf.clear();
            match self.socket.recv(&mut self.buf, 0) {
                Ok(n) if n > 0 => any = true,
                _ => return any,
            }
        }
    }
}

impl std::os::fd::AsFd for NetworkWatch {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsRawFd;
        // SAFETY: the socket outlives the borrow, which is tied to `self`.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.socket.as_raw_fd()) }
    }
}
