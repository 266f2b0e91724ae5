//! A relay's watch on the host's routing. A direct relay's programs keep each client's
//! route verdict (into the Teredo interface, with that route's MTU, for packets that
//! arrive on a given interface), each native destination's (its way out, next hop
//! and MTU), and every relay's the IPv4 route's to each client's mapping, until told that the
//! routing changed: this watch tells them, on every change the kernel announces, of
//! the family it touched. A kept IPv6 verdict depends on the destination and the
//! interface alone, so those are kept only while the host's IPv6 routing cannot depend
//! on more: no policy rule but the kernel's own, no route chosen by source, no route
//! whose next hops split flows between the Teredo interface and others; a
//! destination's, only while no route splits flows among next hops at all. The IPv4
//! look-up's inputs but the address are the same for every packet, so its answer is
//! the routing's for the address whatever the rules; it is kept while no IPv4 route
//! splits flows among next hops (which one a flow takes also follows the neighbours'
//! state, which nobody announces).
//!
//! The socket is opened before confinement and read by a thread of its own. Only the
//! kernel may send to it (it is connected to the kernel): a local process that could
//! feed it would keep its reader busy, or void the verdicts at will.

use rtnetlink::packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use rtnetlink::packet_route::route::{RouteAttribute, RouteMessage};
use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};
use rtnetlink::sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use shipworm_kernel_path::RouteVerdicts;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What decides the host's routes, as rtnetlink groups (linux/rtnetlink.h, `enum
/// rtnetlink_groups`): links (their state and MTU), IPv6 addresses, routes, per-link
/// settings, policy rules and forwarding settings, the same of IPv4 (addresses,
/// routes, rules, forwarding settings: the route to a client's mapping and its
/// preferred source), and nexthop objects.
const GROUPS: [u32; 11] = [1, 9, 11, 12, 19, 25, 5, 7, 8, 24, 32];

/// Datagrams read in one go at most: more is taken as a change (and read on the next
/// call), so that a storm of notifications cannot hold the reader.
const DRAIN_CAP: usize = 1024;

/// Datagrams of a listing given up on read in one go at most (a full IPv4 table lists
/// in a few thousand).
const ANSWER_DRAIN_CAP: usize = 65_536;

/// How long a listing of the rules or the routes may take (a full routing table of a
/// few hundred thousand routes lists in well under it).
const LISTING_TIME: Duration = Duration::from_secs(5);

/// The subscription.
pub struct RouteWatch {
    socket: Socket,
    buf: Vec<u8>,
    /// Our port id: the kernel's answers to our listings carry it, its notifications
    /// do not.
    port: u32,
    seq: u32,
    /// Notifications that came while a listing did.
    noticed: Changed,
    /// Readable when the watch's owner stops it (see [`RouteWatch::stopped_by`]).
    stop: Option<std::os::unix::net::UnixStream>,
}

/// Which family's routing a change touched (both when it cannot be told: a link, a
/// nexthop object, lost notifications).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changed {
    pub ipv6: bool,
    pub ipv4: bool,
}

impl Changed {
    const BOTH: Changed = Changed { ipv6: true, ipv4: true };

    /// Whether it touched either.
    pub fn any(self) -> bool {
        self.ipv6 || self.ipv4
    }

    fn add(&mut self, other: Changed) {
        self.ipv6 |= other.ipv6;
        self.ipv4 |= other.ipv4;
    }

    /// What the notification `message` (one netlink message, header included) touched:
    /// told by its type and, for addresses, routes, rules and forwarding settings, the
    /// family its body starts with.
    fn of(message: &[u8]) -> Changed {
        const AF_INET: u8 = 2;
        const AF_INET6: u8 = 10;
        let kind = u16::from_ne_bytes([message[4], message[5]]);
        let family = message.get(16).copied();
        let by_family = match family {
            Some(AF_INET) => Changed { ipv6: false, ipv4: true },
            Some(AF_INET6) => Changed { ipv6: true, ipv4: false },
            _ => Changed::BOTH,
        };
        match kind {
            // Links: a link's own settings of one family (AF_INET6: IPv6's per-link
            // settings), else its state and MTU, which both follow.
            16 | 17 if family == Some(AF_INET6) => by_family,
            // Addresses, routes, rules, forwarding settings.
            20 | 21 | 24 | 25 | 32 | 33 | 80 | 81 => by_family,
            // Router advertisements' prefixes.
            52 => Changed { ipv6: true, ipv4: false },
            _ => Changed::BOTH,
        }
    }
}

impl RouteWatch {
    /// Subscribe.
    pub fn new() -> Result<RouteWatch, String> {
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| format!("cannot open a netlink socket: {e}"))?;
        socket.bind_auto().map_err(|e| format!("cannot bind a netlink socket: {e}"))?;
        // Connected to the kernel: the kernel refuses other senders' datagrams.
        socket.connect(&SocketAddr::new(0, 0)).map_err(|e| format!("cannot connect a netlink socket: {e}"))?;
        for group in GROUPS {
            socket
                .add_membership(group)
                .map_err(|e| format!("cannot subscribe to the host's routing changes (group {group}): {e}"))?;
        }
        socket.set_non_blocking(true).map_err(|e| e.to_string())?;
        let mut us = SocketAddr::new(0, 0);
        socket.get_address(&mut us).map_err(|e| format!("netlink socket: {e}"))?;
        Ok(RouteWatch {
            socket,
            buf: Vec::with_capacity(65536),
            port: us.port_number(),
            seq: 0,
            noticed: Changed::default(),
            stop: None,
        })
    }

    /// Wait up to `timeout` for the kernel to tell of a change; which family's it told
    /// of (both if it dropped notifications: what was lost may have been any).
    pub fn changed_within(&mut self, timeout: Duration) -> Changed {
        let mut seen = std::mem::take(&mut self.noticed);
        if !seen.any() && !self.readable(timeout) {
            return seen;
        }
        let (mut notifications, mut answers) = (0, 0);
        while notifications < DRAIN_CAP && answers < ANSWER_DRAIN_CAP {
            self.buf.clear();
            match self.socket.recv_from(&mut self.buf, 0) {
                // The rest of a listing given up on is no change (drained here, within
                // its own bound: the next listing needs the socket's dump done).
                Ok((n, from)) if n > 0 => {
                    if from.port_number() == 0 && self.answer_to_us() {
                        answers += 1;
                    } else {
                        if from.port_number() == 0 {
                            seen.add(self.touched());
                        }
                        notifications += 1;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => seen = Changed::BOTH,
                _ => return seen,
            }
        }
        Changed::BOTH
    }

    /// What the notifications in the datagram just read touched (both when one is cut).
    fn touched(&self) -> Changed {
        let mut seen = Changed::default();
        let mut datagram = &self.buf[..];
        while !datagram.is_empty() {
            let len = datagram.get(..4).map_or(0, |w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as usize);
            if len < 16 || len > datagram.len() {
                return Changed::BOTH;
            }
            seen.add(Changed::of(&datagram[..len]));
            datagram = &datagram[((len + 3) & !3).min(datagram.len())..];
        }
        seen
    }

    /// Whether the datagram just read answers one of our own requests (its first
    /// message carries our port id).
    fn answer_to_us(&self) -> bool {
        self.buf.len() >= 16
            && u32::from_ne_bytes([self.buf[12], self.buf[13], self.buf[14], self.buf[15]]) == self.port
    }

    fn readable(&self, timeout: Duration) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = vec![PollFd::new(std::os::fd::AsFd::as_fd(self), PollFlags::POLLIN)];
        if let Some(s) = &self.stop {
            fds.push(PollFd::new(std::os::fd::AsFd::as_fd(s), PollFlags::POLLIN));
        }
        let ms = PollTimeout::try_from(timeout.as_millis().saturating_add(1)).unwrap_or(PollTimeout::MAX);
        // An interrupted wait reads the socket, which costs nothing; so does a wake-up
        // (the socket, non-blocking, has nothing), whose bytes are taken.
        let ready = !poll(&mut fds, ms).is_ok_and(|n| n == 0);
        if let Some(s) = fds.get(1).filter(|f| f.revents().is_some_and(|r| !r.is_empty())).and(self.stop.as_ref()) {
            let mut buf = [0u8; 64];
            while matches!(std::io::Read::read(&mut &*s, &mut buf), Ok(n) if n > 0) {}
        }
        ready
    }

    /// A wait for changes ends when `stop` becomes readable (the owner's signal to
    /// look at its stop flag), not only at its time-out.
    pub fn stopped_by(&mut self, stop: std::os::unix::net::UnixStream) {
        self.stop = Some(stop);
    }

    /// Which route verdicts the host's IPv6 routing lets the programs keep: a client's
    /// (its route into the Teredo interface, index `tun`) while the routing depends on
    /// a packet's destination and arriving interface alone — the kernel's own two
    /// policy rules and no other, no route chosen by source, no route through nexthop
    /// objects listed without their next hops, and no route whose next hops include
    /// the Teredo interface among others;
    /// a native destination's too while, besides, no route splits flows among next hops
    /// at all. A change the kernel told of while the listings came makes them stale
    /// ([`Listing::Changed`]). A stop (`stop`) ends it early.
    /// `meanwhile` is told of each change the kernel tells of during the listings (and
    /// called at each datagram read or wait, with none): the other family's verdicts
    /// are its to void or renew while this one's are listed; false from it ends the
    /// listing (its voiding failed).
    pub fn verdicts_allowed(
        &mut self,
        tun: u32,
        stop: &AtomicBool,
        meanwhile: &mut dyn FnMut(Changed) -> bool,
    ) -> Result<RouteVerdicts, Listing> {
        let mut rule = RuleMessage::default();
        rule.header.family = AddressFamily::Inet6;
        let (mut by_destination, mut single_path) = (true, true);
        self.list(RouteNetlinkMessage::GetRule(rule), stop, meanwhile, &mut |m| {
            if let RouteNetlinkMessage::NewRule(r) = m {
                by_destination &= kernels_own_rule(&r);
            }
        })?;
        let mut route = RouteMessage::default();
        route.header.address_family = AddressFamily::Inet6;
        self.list(RouteNetlinkMessage::GetRoute(route), stop, meanwhile, &mut |m| {
            if let RouteNetlinkMessage::NewRoute(r) = m {
                by_destination &= by_destination_alone(&r, tun);
                single_path &= !splits_flows(&r);
            }
        })?;
        if self.noticed.ipv6 {
            return Err(Listing::Changed);
        }
        Ok(match (by_destination, single_path) {
            (false, _) => RouteVerdicts::None,
            (true, false) => RouteVerdicts::Clients,
            (true, true) => RouteVerdicts::ClientsAndDestinations,
        })
    }

    /// Whether the host's IPv4 routing lets the programs keep the verdicts on the routes
    /// to clients' mappings: while no route shares flows among next hops (listed with
    /// its next hops: one through a nexthop object listed without them may be a
    /// group). A change the kernel told of while the listing came makes it stale;
    /// `meanwhile` as for [`RouteWatch::verdicts_allowed`].
    pub fn mapping_verdicts_allowed(
        &mut self,
        stop: &AtomicBool,
        meanwhile: &mut dyn FnMut(Changed) -> bool,
    ) -> Result<bool, Listing> {
        let mut route = RouteMessage::default();
        route.header.address_family = AddressFamily::Inet;
        let mut single_path = true;
        self.list(RouteNetlinkMessage::GetRoute(route), stop, meanwhile, &mut |m| {
            if let RouteNetlinkMessage::NewRoute(r) = m {
                single_path &= !splits_flows(&r) && listed_with_next_hops(&r);
            }
        })?;
        if self.noticed.ipv4 {
            return Err(Listing::Changed);
        }
        Ok(single_path)
    }

    /// Hands each message of the listing asked for with `request` to `each`, as they
    /// come. Only the kernel's answers to this very request are ours (its port, our
    /// port id and sequence number, the type answered); anything else is a notification
    /// that came meanwhile, kept for the next [`RouteWatch::changed_within`] unread.
    fn list(
        &mut self,
        request: RouteNetlinkMessage,
        stop: &AtomicBool,
        meanwhile: &mut dyn FnMut(Changed) -> bool,
        each: &mut dyn FnMut(RouteNetlinkMessage),
    ) -> Result<(), Listing> {
        let answer_type: u16 = match request {
            RouteNetlinkMessage::GetRule(_) => 32, // RTM_NEWRULE
            _ => 24,                               // RTM_NEWROUTE
        };
        let failed = |why: String| Listing::Failed(why);
        self.seq = self.seq.wrapping_add(1).max(1);
        let mut m = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::InnerMessage(request));
        m.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        m.header.sequence_number = self.seq;
        m.finalize();
        let mut b = vec![0u8; m.buffer_len()];
        m.serialize(&mut b);
        self.socket.send(&b, 0).map_err(|e| failed(format!("cannot list the host's routing: {e}")))?;
        let deadline = Instant::now() + LISTING_TIME;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(failed("listing the host's routing took too long".into()));
            }
            if stop.load(Ordering::Relaxed) {
                return Err(failed("stopping".into()));
            }
            if !self.readable(left.min(Duration::from_millis(100))) {
                if !meanwhile(Changed::default()) {
                    return Err(Listing::Changed); // the caller turns the programs off
                }
                continue;
            }
            self.buf.clear();
            let n = match self.socket.recv_from(&mut self.buf, libc::MSG_TRUNC) {
                Ok((n, from)) if n > 0 && from.port_number() == 0 => n,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.noticed = Changed::BOTH;
                    if !meanwhile(Changed::BOTH) {
                        return Err(Listing::Changed); // the caller turns the programs off
                    }
                    continue;
                }
                _ => continue,
            };
            if n > self.buf.len() {
                return Err(failed(format!("a netlink datagram of {n} bytes was cut to {}", self.buf.len())));
            }
            // Time for the other family's renewal, if due.
            if !meanwhile(Changed::default()) {
                return Err(Listing::Changed); // the caller turns the programs off
            }
            let buf = std::mem::take(&mut self.buf);
            let done = self.read_messages(&buf, answer_type, meanwhile, each);
            self.buf = buf;
            if done? {
                return Ok(());
            }
        }
    }

    /// The messages of one datagram of a listing, answers to `answer_type` handed to
    /// `each`, notifications meanwhile to `meanwhile`: true once the listing ended.
    fn read_messages(
        &mut self,
        mut datagram: &[u8],
        answer_type: u16,
        meanwhile: &mut dyn FnMut(Changed) -> bool,
        each: &mut dyn FnMut(RouteNetlinkMessage),
    ) -> Result<bool, Listing> {
        use rtnetlink::packet_core::{NLMSG_DONE, NLMSG_ERROR};
        let failed = |why: String| Listing::Failed(why);
        while !datagram.is_empty() {
            let word =
                |at: usize| u32::from_ne_bytes([datagram[at], datagram[at + 1], datagram[at + 2], datagram[at + 3]]);
            if datagram.len() < 16 || (word(0) as usize) < 16 || word(0) as usize > datagram.len() {
                return Err(failed("a listing of the host's routing came cut".into()));
            }
            let len = word(0) as usize;
            let kind = u16::from_ne_bytes([datagram[4], datagram[5]]);
            let flags = u16::from_ne_bytes([datagram[6], datagram[7]]);
            let (seq, port) = (word(8), word(12));
            let message = &datagram[..len];
            datagram = &datagram[((len + 3) & !3).min(datagram.len())..];
            if seq != self.seq
                || port != self.port
                || !(kind == answer_type || kind == NLMSG_DONE || kind == NLMSG_ERROR)
            {
                // A notification meanwhile: a change, seen after this listing (and
                // by `meanwhile` now).
                let c = Changed::of(message);
                self.noticed.add(c);
                if !meanwhile(c) {
                    return Err(Listing::Changed); // the caller turns the programs off
                }
                continue;
            }
            if flags & NLM_F_DUMP_INTR != 0 {
                return Err(Listing::Changed);
            }
            let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(message)
                .map_err(|e| failed(format!("a listing of the host's routing did not parse: {e}")))?;
            match m.payload {
                NetlinkPayload::InnerMessage(inner) => each(inner),
                NetlinkPayload::Done(d) if d.code == 0 => return Ok(true),
                NetlinkPayload::Done(d) => {
                    return Err(failed(format!("the kernel ended a listing with error {}", d.code)))
                }
                NetlinkPayload::Error(e) => {
                    return Err(failed(format!("the kernel refused to list its routing: {e:?}")))
                }
                _ => {}
            }
        }
        Ok(false)
    }
}

/// Why a listing of the host's routing gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// The routing changed while it was listed: list again once it settles.
    Changed,
    /// It failed (the reason).
    Failed(String),
}

/// One of the kernel's own IPv6 rules (priority 0: look up local; 32766: look up main),
/// selecting nothing.
fn kernels_own_rule(r: &RuleMessage) -> bool {
    let (mut priority, mut table) = (0, u32::from(r.header.table));
    for a in &r.attributes {
        match a {
            RuleAttribute::Priority(p) => priority = *p,
            RuleAttribute::Table(t) => table = *t,
            // Suppressing nothing (the kernel's rules say so).
            RuleAttribute::Protocol(_) | RuleAttribute::SuppressPrefixLen(u32::MAX) => {}
            _ => return false,
        }
    }
    r.header.action == RuleAction::ToTable
        && r.header.src_len == 0
        && r.header.dst_len == 0
        && r.header.tos == 0
        && matches!((priority, table), (0, 255) | (32766, 254))
}

/// A route chosen by its destination alone, whose way out is one interface or none of
/// the Teredo interface `tun`'s. A route through a nexthop object is judged by the next
/// hops the kernel lists with it (`nexthop_compat_mode`, on by default: routing daemons
/// such as FRR use nexthop objects); listed without them, it cannot be.
fn by_destination_alone(r: &RouteMessage, tun: u32) -> bool {
    r.header.source_prefix_length == 0
        && listed_with_next_hops(r)
        && r.attributes.iter().all(|a| match a {
            RouteAttribute::Source(_) => false,
            RouteAttribute::MultiPath(hops) => hops.iter().all(|h| h.interface_index != tun),
            _ => true,
        })
}

/// A route through a nexthop object whose next hops the kernel lists with it, or one
/// through none.
fn listed_with_next_hops(r: &RouteMessage) -> bool {
    let expanded = r.attributes.iter().any(|a| matches!(a, RouteAttribute::Oif(_) | RouteAttribute::MultiPath(_)));
    expanded || !r.attributes.iter().any(|a| matches!(a, RouteAttribute::NhId(_)))
}

/// A route whose next hops share its flows (by a hash of their addresses, flow label
/// and next header, or ports): a verdict kept by destination would send all of them
/// one way.
fn splits_flows(r: &RouteMessage) -> bool {
    r.attributes.iter().any(|a| matches!(a, RouteAttribute::MultiPath(hops) if hops.len() > 1))
}

impl std::os::fd::AsFd for RouteWatch {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsRawFd;
        // SAFETY: the socket outlives the borrow, which is tied to `self`.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(self.socket.as_raw_fd()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(c: &str) {
        let st = std::process::Command::new("sh").args(["-ec", c]).status().unwrap();
        assert!(st.success(), "{c}");
    }

    /// The watch tells of the kernel's changes to the host's routing (routes, rules,
    /// links, forwarding), and of nobody else's: another socket cannot even send to it.
    /// And it tells when the routing may depend on more than a packet's destination.
    #[test]
    fn the_route_watch_hears_the_kernels_routing_changes_and_nobody_else() {
        let t = std::thread::spawn(|| {
            // SAFETY: unshare affects this thread only, which ends with the test.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return None; // not root: nothing to test with
            }
            let mut watch = RouteWatch::new().unwrap();
            let quiet = watch.changed_within(Duration::from_millis(50)).any();
            let mut at = SocketAddr::new(0, 0);
            watch.socket.get_address(&mut at).unwrap();
            let mut forger = Socket::new(NETLINK_ROUTE).unwrap();
            forger.bind_auto().unwrap();
            let sent = forger.send_to(&[0u8; 64], &SocketAddr::new(at.port_number(), 0), 0);
            let forged = watch.changed_within(Duration::from_millis(50)).any();
            let mut heard = Vec::new();
            // No duplicate address detection: its end (a second or two after a link
            // comes up) would be a late IPv6 change, in any row's window.
            sh("sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0; \
                ip link set lo up; ip link add t0 type veth peer name t1; ip link set t0 up; ip link set t1 up");
            let tun = unsafe { libc::if_nametoindex(c"t0".as_ptr()) };
            while watch.changed_within(Duration::from_millis(50)).any() {}
            // Asked again if a late notification of the last change came meanwhile.
            let never = AtomicBool::new(false);
            let ask = |watch: &mut RouteWatch| {
                let mut answer = (
                    watch.verdicts_allowed(tun, &never, &mut |_| true),
                    watch.mapping_verdicts_allowed(&never, &mut |_| true),
                );
                for _ in 0..5 {
                    if answer.0 != Err(Listing::Changed) && answer.1 != Err(Listing::Changed) {
                        break;
                    }
                    while watch.changed_within(Duration::from_millis(20)).any() {}
                    answer = (
                        watch.verdicts_allowed(tun, &never, &mut |_| true),
                        watch.mapping_verdicts_allowed(&never, &mut |_| true),
                    );
                }
                answer
            };
            use RouteVerdicts::{Clients, ClientsAndDestinations as Both};
            // What each change touched: IPv6's routing, IPv4's, or both (links and
            // nexthop objects).
            let (v6, v4, both) =
                (Changed { ipv6: true, ipv4: false }, Changed { ipv6: false, ipv4: true }, Changed::BOTH);
            let mut allowed = vec![("as the kernel made it", ask(&mut watch), (Ok(Both), Ok(true)))];
            for (change, touched, after6, after4) in [
                ("ip -6 route add blackhole 2001:db8:5::/48", v6, Both, true),
                ("ip -6 route add 2001::/32 dev t0", v6, Both, true),
                ("ip -6 rule add to 2001:db8:6::/48 table 7", v6, RouteVerdicts::None, true),
                ("ip -6 rule del to 2001:db8:6::/48 table 7", v6, Both, true),
                ("ip -6 rule add from 2001:db8:bad::/48 blackhole", v6, RouteVerdicts::None, true),
                ("ip -6 rule del from 2001:db8:bad::/48 blackhole", v6, Both, true),
                ("ip -6 route add 2001:db8:7::/48 from 2001:db8:8::/48 dev t1", v6, RouteVerdicts::None, true),
                ("ip -6 route del 2001:db8:7::/48 from 2001:db8:8::/48 dev t1", v6, Both, true),
                // Flows shared among next hops: a destination's verdict would pin them.
                ("ip -6 route add 2001:db8:a::/48 nexthop via fe80::1 dev t1 nexthop via fe80::2 dev t1", v6, Clients, true),
                (
                    "ip -6 route add 2001:db8:b::/48 nexthop via fe80::1 dev t1 nexthop via fe80::2 dev t0",
                    v6,
                    RouteVerdicts::None,
                    true,
                ),
                ("ip -6 route del 2001:db8:b::/48", v6, Clients, true),
                ("ip -6 route del 2001:db8:a::/48", v6, Both, true),
                // Through nexthop objects, judged by the next hops listed with them.
                ("ip -6 nexthop add id 71 dev t1; ip -6 route add 2001:db8:c::/48 nhid 71", both, Both, true),
                (
                    "ip nexthop add id 72 via fe80::1 dev t1; ip nexthop add id 73 via fe80::2 dev t1; \
                     ip nexthop add id 74 group 72/73; ip -6 route add 2001:db8:d::/48 nhid 74",
                    both,
                    Clients,
                    true,
                ),
                (
                    "ip -6 nexthop add id 75 dev t0; ip nexthop add id 76 group 72/75; ip -6 route add 2001:db8:e::/48 nhid 76",
                    both,
                    RouteVerdicts::None,
                    true,
                ),
                ("ip -6 route del 2001:db8:e::/48; ip -6 route del 2001:db8:d::/48", v6, Both, true),
                // Listed without them, a nexthop object's route cannot be judged.
                ("sysctl -qw net.ipv4.nexthop_compat_mode=0; ip -6 route add 2001:db8:f::/48 nhid 71", v6, RouteVerdicts::None, true),
                ("ip -6 route del 2001:db8:f::/48; ip -6 route del 2001:db8:c::/48; sysctl -qw net.ipv4.nexthop_compat_mode=1", v6, Both, true),
                ("ip link set t0 mtu 1400", both, Both, true),
                ("sysctl -qw net.ipv6.conf.t0.forwarding=1", v6, Both, true),
                // The IPv4 routing decides the routes to clients' mappings alone: their
                // verdicts are kept whatever the rules, and while no route shares flows
                // among next hops (which one a flow takes follows the neighbours' state
                // too, which nobody announces).
                ("ip addr add 192.0.2.1/24 dev t1", v4, Both, true),
                ("ip route add blackhole 198.51.100.0/24", v4, Both, true),
                ("ip rule add to 203.0.113.0/24 table 7", v4, Both, true),
                ("ip route add 203.0.113.0/24 nexthop via 192.0.2.2 dev t1 nexthop via 192.0.2.3 dev t1", v4, Both, false),
                ("ip route del 203.0.113.0/24", v4, Both, true),
                (
                    "ip nexthop add id 81 via 192.0.2.2 dev t1; ip nexthop add id 82 via 192.0.2.3 dev t1; \
                     ip nexthop add id 83 group 81/82; ip route add 198.51.100.0/25 nhid 83",
                    both,
                    Both,
                    false,
                ),
                ("ip route del 198.51.100.0/25", v4, Both, true),
                ("sysctl -qw net.ipv4.nexthop_compat_mode=0; ip route add 198.51.100.128/25 nhid 81", v4, Both, false),
                ("ip route del 198.51.100.128/25; sysctl -qw net.ipv4.nexthop_compat_mode=1", v4, Both, true),
                ("sysctl -qw net.ipv4.conf.t0.forwarding=1", v4, Both, true),
            ] {
                sh(change);
                // Everything the change brought.
                let mut told = watch.changed_within(Duration::from_millis(500));
                loop {
                    let more = watch.changed_within(Duration::from_millis(20));
                    if !more.any() {
                        break;
                    }
                    told.add(more);
                }
                heard.push((change, told, touched));
                allowed.push((change, ask(&mut watch), (Ok(after6), Ok(after4))));
            }
            // A change the kernel tells of while the listings come makes its family's
            // stale, not the other's.
            sh("ip -6 route add blackhole 2001:db8:9::/48");
            // And the listing tells its caller of it at once (the other family's to
            // void while this one is listed).
            let mut meanwhile = Changed::default();
            let stale = (
                watch.mapping_verdicts_allowed(&never, &mut |c| {
                    meanwhile.add(c);
                    true
                }),
                watch.verdicts_allowed(tun, &never, &mut |_| true),
            );
            while watch.changed_within(Duration::from_millis(20)).any() {}
            sh("ip route add blackhole 198.51.100.9/32");
            let mut meanwhile4 = Changed::default();
            let stale4 = (
                watch.verdicts_allowed(tun, &never, &mut |c| {
                    meanwhile4.add(c);
                    true
                }),
                watch.mapping_verdicts_allowed(&never, &mut |_| true),
            );
            while watch.changed_within(Duration::from_millis(20)).any() {}
            allowed.push(("listed again once read", ask(&mut watch), (Ok(Both), Ok(true))));
            Some((quiet, sent.is_err(), forged, heard, allowed, (stale, meanwhile), (stale4, meanwhile4)))
        });
        let Some((quiet, refused, forged, heard, allowed, stale, stale4)) = t.join().unwrap() else { return };
        let v6 = Changed { ipv6: true, ipv4: false };
        let v4 = Changed { ipv6: false, ipv4: true };
        assert_eq!(stale, ((Ok(true), Err(Listing::Changed)), v6), "a listing during which the IPv6 routing changed");
        assert_eq!(stale4, ((Ok(RouteVerdicts::ClientsAndDestinations), Err(Listing::Changed)), v4), "the same, IPv4");
        assert!(!quiet, "a change told with none made");
        assert!(refused && !forged, "another socket's datagram reached the watch");
        for (change, told, right) in heard {
            assert_eq!(told, right, "{change}: told of a change to the wrong routing");
        }
        for (change, answer, right) in allowed {
            assert_eq!(answer, right, "after {change}: wrong verdicts allowed");
        }
    }
}
