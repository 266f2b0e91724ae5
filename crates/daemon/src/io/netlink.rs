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

    /// Turn IPv4 forwarding on for interface `index` alone (its `forwarding` devconf
    /// value, as `net.ipv4.conf.IFACE.forwarding` shows it), through netlink: a unit
    /// whose /proc/sys is read-only can still. Only that value is sent.
    pub fn enable_ipv4_forwarding(&self, index: u32) -> Result<(), String> {
        use rtnetlink::packet_route::link::LinkAttribute;
        // IFLA_AF_SPEC { AF_INET { IFLA_INET_CONF { IPV4_DEVCONF_FORWARDING: 1 } } }
        let nla = |kind: u16, payload: &[u8]| {
            let mut v = Vec::with_capacity(4 + payload.len());
            v.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
            v.extend_from_slice(&kind.to_ne_bytes());
            v.extend_from_slice(payload);
            v
        };
        const AF_INET: u16 = libc::AF_INET as u16;
        const IFLA_INET_CONF: u16 = 1;
        const IPV4_DEVCONF_FORWARDING: u16 = 1;
        const IFLA_AF_SPEC: u16 = 26;
        let inet = nla(AF_INET, &nla(IFLA_INET_CONF, &nla(IPV4_DEVCONF_FORWARDING, &1u32.to_ne_bytes())));
        self.rt.block_on(async {
            let mut msg = LinkUnspec::new_with_index(index).build();
            msg.attributes.push(LinkAttribute::Other(rtnetlink::packet_core::DefaultNla::new(IFLA_AF_SPEC, inet)));
            self.handle
                .link()
                .set(msg)
                .execute()
                .await
                .map_err(|e| why(&format!("turning IPv4 forwarding on for interface {index}"), e))
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

    /// The Ethernet interfaces, as (index, name): where IPv4 arrives; those that are
    /// down too if `down` (they may come up later).
    pub fn ethernet_links(&self, down: bool) -> Result<Vec<(u32, String)>, String> {
        use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkLayerType};
        self.rt.block_on(async {
            let mut out = Vec::new();
            let mut links = self.handle.link().get().execute();
            while let Some(m) = links.try_next().await.map_err(|e| why("listing interfaces", e))? {
                if m.header.link_layer_type != LinkLayerType::Ether || !(down || m.header.flags.contains(LinkFlags::Up))
                {
                    continue;
                }
                if let Some(name) = m.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n.clone()),
                    _ => None,
                }) {
                    out.push((m.header.index, name));
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

impl std::os::fd::AsFd for AddressWatch {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsRawFd;
        // SAFETY: the socket outlives the borrow, which is tied to `self`.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.socket.as_raw_fd()) }
    }
}

/// rtnetlink multicast group RTMGRP_IPV6_IFADDR (linux/rtnetlink.h).
const IPV6_ADDRESS_CHANGES: u32 = 0x100;

/// A subscription to the host's IPv6 address changes, read without an event loop (a
/// confined relay has none and may not start one): each RTM_NEWADDR and RTM_DELADDR
/// is parsed where it lies in the datagram. Opened before confinement. When the kernel
/// dropped notifications (ENOBUFS: a storm of changes outran the socket's buffer), the
/// watch asks the kernel for the whole list on the same socket and hands it over once
/// complete, so what was missed is not missed for good.
pub struct AddressWatch {
    socket: rtnetlink::sys::Socket,
    buf: Vec<u8>,
    /// The listing asked for after a loss: its sequence number, what came so far, and
    /// whether more was lost while it came (then it is asked for again once it ends:
    /// the kernel runs one listing at a time on a socket).
    listing: Option<(u32, Vec<Ipv6Addr>, bool)>,
    /// The last listing's sequence number.
    seq: u32,
    /// Notifications that came while a listing did: handed over after it, in order.
    deferred: Vec<AddressChange>,
}

/// One change of a global IPv6 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressChange {
    /// The host has this address now.
    Added(Ipv6Addr),
    /// It no longer has it.
    Removed(Ipv6Addr),
    /// Notifications were lost: forget what is known; an `Added` for each address the
    /// host has now follows at once.
    Relisted,
}

impl AddressWatch {
    /// Subscribe.
    pub fn new() -> Result<AddressWatch, String> {
        use rtnetlink::sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| format!("cannot open a netlink socket: {e}"))?;
        socket
            .bind(&SocketAddr::new(0, IPV6_ADDRESS_CHANGES))
            .map_err(|e| format!("cannot subscribe to IPv6 address changes: {e}"))?;
        socket.set_non_blocking(true).map_err(|e| e.to_string())?;
        Ok(AddressWatch { socket, buf: Vec::with_capacity(16384), listing: None, seq: 0, deferred: Vec::new() })
    }

    /// The changes of global-scope addresses since the last call, in order. Only the
    /// kernel's word counts: any local process may send a netlink datagram to this
    /// socket's port, and one that claimed an address for the host would have the relay
    /// serve it.
    pub fn changes(&mut self) -> Vec<AddressChange> {
        let mut out = Vec::new();
        loop {
            self.buf.clear();
            match self.socket.recv_from(&mut self.buf, 0) {
                Ok((n, from)) if n > 0 => {
                    if from.port_number() != 0 {
                        continue;
                    }
                    let seq = self.listing.as_ref().map(|(seq, ..)| *seq);
                    let (mut listed, mut interrupted) = (Vec::new(), false);
                    // While a listing comes, what happens meanwhile waits for it.
                    let to = if self.listing.is_some() { &mut self.deferred } else { &mut out };
                    let end = parse_datagram(&self.buf, seq, to, &mut listed, &mut interrupted);
                    if let Some((_, so_far, spoiled)) = &mut self.listing {
                        so_far.extend(listed);
                        *spoiled |= interrupted;
                    }
                    match (end, self.listing.take()) {
                        (Some(true), Some((_, all, false))) => {
                            out.push(AddressChange::Relisted);
                            out.extend(all.into_iter().map(AddressChange::Added));
                            out.append(&mut self.deferred);
                        }
                        // Spoiled by a loss while it came, or the kernel's "interrupted
                        // by changes": once more.
                        (Some(true), Some((.., true))) => self.ask_listing(),
                        (Some(false), Some(_)) => {
                            tracing::warn!("the kernel refused to list the addresses: the next loss asks again");
                            out.append(&mut self.deferred);
                        }
                        (_, listing) => self.listing = listing,
                    }
                }
                // Notifications were dropped: ask for the whole list (or, while one
                // comes, again once it has come).
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => match &mut self.listing {
                    Some((.., spoiled)) => *spoiled = true,
                    None => self.ask_listing(),
                },
                _ => return out,
            }
        }
    }

    /// Ask the kernel for every IPv6 address (a dump on this very socket: a confined
    /// relay opens no other).
    fn ask_listing(&mut self) {
        use rtnetlink::packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST};
        use rtnetlink::packet_route::address::AddressMessage;
        use rtnetlink::packet_route::RouteNetlinkMessage;
        use rtnetlink::sys::SocketAddr;
        self.seq = self.seq.wrapping_add(1).max(1);
        let mut a = AddressMessage::default();
        a.header.family = AddressFamily::Inet6;
        let mut m = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::GetAddress(a)),
        );
        m.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        m.header.sequence_number = self.seq;
        m.finalize();
        let mut b = vec![0u8; m.buffer_len()];
        m.serialize(&mut b);
        match self.socket.send_to(&b, &SocketAddr::new(0, 0), 0) {
            Ok(_) => self.listing = Some((self.seq, Vec::new(), false)),
            Err(e) => tracing::warn!("address notifications were lost and the list could not be asked for: {e}"),
        }
    }
}

/// The global-scope IPv6 address changes in one netlink datagram (it may hold several
/// messages); anything else, or anything that does not parse, is skipped.
pub fn parse_address_changes(datagram: &[u8], out: &mut Vec<AddressChange>) {
    parse_datagram(datagram, None, out, &mut Vec::new(), &mut false);
}

/// One datagram: notifications go to `out` as changes; the answers to our listing
/// `listing` (its sequence number) put their addresses in `listed`, and `interrupted`
/// is set if the kernel marks one as cut by changes (NLM_F_DUMP_INTR). Whether the
/// listing ended in it: `Some(true)` at its end (NLMSG_DONE), `Some(false)` refused
/// (NLMSG_ERROR).
fn parse_datagram(
    mut datagram: &[u8],
    listing: Option<u32>,
    out: &mut Vec<AddressChange>,
    listed: &mut Vec<Ipv6Addr>,
    interrupted: &mut bool,
) -> Option<bool> {
    use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
    use rtnetlink::packet_route::RouteNetlinkMessage;
    let mut end = None;
    while datagram.len() >= 16 {
        let len = u32::from_ne_bytes([datagram[0], datagram[1], datagram[2], datagram[3]]) as usize;
        if len < 16 || len > datagram.len() {
            break;
        }
        if let Ok(m) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&datagram[..len]) {
            let ours = listing.is_some_and(|seq| seq == m.header.sequence_number);
            if ours && m.header.flags & rtnetlink::packet_core::NLM_F_DUMP_INTR != 0 {
                *interrupted = true;
            }
            let change = match m.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a)) => Some((a, true)),
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(a)) => Some((a, false)),
                NetlinkPayload::Done(_) if ours => {
                    end = Some(true);
                    None
                }
                NetlinkPayload::Error(_) if ours => {
                    end = Some(false);
                    None
                }
                _ => None,
            };
            if let Some((a, added)) = change
                .filter(|(a, _)| a.header.family == AddressFamily::Inet6 && a.header.scope == AddressScope::Universe)
            {
                for attr in &a.attributes {
                    if let AddressAttribute::Address(IpAddr::V6(v6)) = attr {
                        match (ours, added) {
                            (true, true) => listed.push(*v6),
                            (true, false) => {}
                            (false, true) => out.push(AddressChange::Added(*v6)),
                            (false, false) => out.push(AddressChange::Removed(*v6)),
                        }
                    }
                }
            }
        }
        // Messages are 4-byte aligned.
        let step = (len + 3) & !3;
        datagram = datagram.get(step..).unwrap_or_default();
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtnetlink::packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
    use rtnetlink::packet_route::address::AddressMessage;
    use rtnetlink::packet_route::RouteNetlinkMessage;

    fn message(added: bool, scope: AddressScope, addr: IpAddr) -> Vec<u8> {
        let mut a = AddressMessage::default();
        a.header.family = if addr.is_ipv6() { AddressFamily::Inet6 } else { AddressFamily::Inet };
        a.header.scope = scope;
        a.attributes.push(AddressAttribute::Address(addr));
        let inner = if added { RouteNetlinkMessage::NewAddress(a) } else { RouteNetlinkMessage::DelAddress(a) };
        let mut m = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::InnerMessage(inner));
        m.finalize();
        let mut b = vec![0u8; m.buffer_len()];
        m.serialize(&mut b);
        b
    }

    /// A local process with CAP_NET_ADMIN may send a netlink datagram to the watch's
    /// port (the kernel refuses it to others: then the forgery cannot happen, and the
    /// case says skipped): one claiming a new address for the host (which a
    /// host-specific relay would then serve) is not taken; only the kernel's (port 0)
    /// are.
    #[test]
    fn a_notification_from_anyone_but_the_kernel_is_ignored() {
        use rtnetlink::sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
        let Ok(mut watch) = AddressWatch::new() else { return };
        let mut at = SocketAddr::new(0, 0);
        watch.socket.get_address(&mut at).unwrap();
        let mut forger = Socket::new(NETLINK_ROUTE).unwrap();
        forger.bind_auto().unwrap();
        let forged = message(true, AddressScope::Universe, IpAddr::V6("2001:db8::66".parse().unwrap()));
        let sent = forger.send_to(&forged, &SocketAddr::new(at.port_number(), 0), 0);
        if sent.as_ref().is_err_and(|e| e.raw_os_error() == Some(libc::EPERM)) {
            eprintln!("skipped: the kernel refuses a forged notification without CAP_NET_ADMIN");
            return;
        }
        assert!(sent.is_ok(), "the forged notification could not even be sent: {sent:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(watch.changes(), Vec::new());
        // What it would have been taken as, from the kernel.
        let mut out = Vec::new();
        parse_address_changes(&forged, &mut out);
        assert_eq!(out, vec![AddressChange::Added("2001:db8::66".parse().unwrap())]);
    }

    /// A storm of changes overruns the watch's buffer (the kernel drops notifications
    /// and says ENOBUFS): the watch lists the addresses again, and the listing holds
    /// every address the host has, the ones whose notifications were lost included.
    #[test]
    fn lost_notifications_are_made_up_by_listing_the_addresses_again() {
        use std::io::Write;
        const N: usize = 300;
        let t = std::thread::spawn(|| {
            // A network namespace of this thread's own: the addresses are nobody else's.
            // SAFETY: unshare affects this thread only, which ends with the test.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return None; // not root: nothing to test with
            }
            let mut watch = AddressWatch::new().unwrap();
            // The kernel's smallest buffer: a few notifications fill it.
            watch.socket.set_rx_buf_sz(256usize).unwrap();
            let batch: String = std::iter::once("link set lo up\n".to_string())
                .chain((1..=N).map(|i| format!("address add 2001:db8:77::{i:x}/128 dev lo nodad\n")))
                .collect();
            let mut ip = std::process::Command::new("ip")
                .args(["-batch", "-"])
                .stdin(std::process::Stdio::piped())
                .spawn()
                .expect("ip (iproute2)");
            ip.stdin.take().unwrap().write_all(batch.as_bytes()).unwrap();
            assert!(ip.wait().unwrap().success());
            let mut seen = Vec::new();
            for _ in 0..100 {
                seen.extend(watch.changes());
                if seen.contains(&AddressChange::Relisted) && watch.listing.is_none() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Some(seen)
        });
        let Some(seen) = t.join().unwrap() else { return };
        let at = seen.iter().rposition(|c| *c == AddressChange::Relisted).unwrap_or_else(|| {
            panic!("the loss noticed and the list asked for: {} changes seen, {seen:?}", seen.len())
        });
        let listed: Vec<Ipv6Addr> = seen[at + 1..]
            .iter()
            .filter_map(|c| if let AddressChange::Added(a) = c { Some(*a) } else { None })
            .collect();
        for i in 1..=N {
            let a = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 0, 0, 0, 0, i as u16);
            assert!(listed.contains(&a), "{a} missing from the listing ({} listed)", listed.len());
        }
    }

    #[test]
    fn global_ipv6_changes_are_read_from_a_datagram_of_several_messages() {
        let v6: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let mut d = message(true, AddressScope::Universe, IpAddr::V6(v6));
        d.extend(message(true, AddressScope::Link, IpAddr::V6("fe80::1".parse().unwrap())));
        d.extend(message(true, AddressScope::Universe, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9))));
        d.extend(message(false, AddressScope::Universe, IpAddr::V6(v6)));
        let mut out = Vec::new();
        parse_address_changes(&d, &mut out);
        assert_eq!(out, vec![AddressChange::Added(v6), AddressChange::Removed(v6)]);
        // Cut anywhere, or with a length past the end: what parses is kept, no panic.
        for cut in 0..d.len() {
            let mut out = Vec::new();
            parse_address_changes(&d[..cut], &mut out);
            assert!(out.len() <= 2);
        }
        let mut bad = d.clone();
        bad[0] = 0xff;
        parse_address_changes(&bad, &mut Vec::new());
        // Random bytes flipped in it, 20 000 times: never a panic, never more changes
        // than messages.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            let mut m = d.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x as usize) % m.len();
                m[at] = (x >> 32) as u8;
            }
            let mut out = Vec::new();
            parse_address_changes(&m, &mut out);
            assert!(out.len() <= 4);
        }
    }
}
