//! The Teredo client (RFC 4380 §5.2, RFC 5991), with NAT kind detection, server
//! failover and immediate re-qualification on network changes.
//!
//! Qualification, in one round trip more than the RFC's minimum:
//! 1. A restricted RS (C = 0, fresh random nonce) goes to the server's primary address
//!    from the service port; at the same time a cone RS (C = 1) goes to the same address
//!    from a second, probe-only port. The cone RS is answered from the *secondary*
//!    address: it arrives only through a full-cone NAT. (Probing from another port keeps
//!    that unsolicited answer from disturbing the service port's mapping.)
//! 2. The primary's RA gives mapping M1. A restricted RS to the secondary address gives
//!    M2. M1 = M2: cone (if the probe's RA came) or restricted; M1 ≠ M2: symmetric.
//! 3. The address is prefix + flags (C = 0, 12 random bits, RFC 5991) + ~port + ~IPv4
//!    of the primary's mapping, announced to the daemon. Behind a symmetric NAT too
//!    (RFC 6081 §5.2, Symmetric NAT Support: keep the RFC 4380 address from the primary
//!    server's RA); RFC 4380 alone would claim none, which `symmetric_nat_support`
//!    off restores. A relay or peer learns the port the NAT gave it from our direct
//!    bubble, which answers its indirect one (docs/nat-traversal.md says what works with whom).
//!
//! Decisions: RSs are repeated every 4 s, 3 per phase (Miredo's count), then the next
//! configured server is tried, then back-off (10 s doubling to 120 s). The cone bit is
//! ignored on send (always bubble, as RFC 5991 advises). Local discovery (§5.2.8) is
//! in [`crate::local_discovery`].
//!
//! Peers behind NATs (RFC 6081 §5.2, Symmetric NAT Support): every indirect bubble
//! carries a fresh Nonce trailer, every direct bubble echoes the nonce of the peer's
//! last indirect one, and a direct bubble from a port the peer's address does not embed
//! is accepted when it echoes ours. A peer whose indirect bubble carries a nonce and
//! that we do not trust yet gets an indirect bubble back: behind a symmetric NAT, our
//! direct bubble cannot reach it, but its answer to our indirect one reaches us (RFC
//! 6081 §6.1). A peer without nonces (Miredo) answering our bubbles from another port
//! of its address is still accepted while we wait for it, or a symmetric-NAT Miredo
//! client could not be reached at all.
//!
//! Linux NATs (most home routers) map a port-restricted client's packet to another port
//! when an unanswered packet from that same peer already reached the NAT: conntrack
//! holds the inbound packet's entry, whose reply direction clashes with the mapping
//! the client's own packet would get. RFC 4380's first direct bubble does exactly that
//! to the peer's NAT, so two clients behind such NATs never met. The first direct bubble
//! to a peer therefore goes with a small TTL (`opening_bubble_ttl`): it opens our NAT
//! for the peer and dies on the way; the peer's answer to our indirect bubble then
//! passes our NAT, and its NAT has seen nothing from us yet. Later tries go with the
//! full TTL, as RFC 4380 has them (the small TTL may stop short of an outer NAT).
//!
//! A native host may speak first (RFC 4380 §5.2.3 case 6): its packet arrives through
//! a relay the client has never heard of. It is held (see [`crate::first_contact`])
//! while the direct IPv6 connectivity test (§5.2.9) runs through the server; the echo
//! reply comes back through the relay that serves that host, which then becomes the
//! peer's mapping, and the held packets are delivered if they came from it. That costs
//! the first packet one round trip through the server and the relay.

use crate::bubble_budget::{self, BubbleBudget};
use crate::drop_reason::{DropCounters, DropReason};
use crate::first_contact::{FirstContactLimits, FirstContacts};
use crate::icmp_error::{self, RateLimit};
use crate::local_discovery::{LocalPeers, ALL_NODES, GROUP};
use crate::outcome::{Action, Outcome};
use crate::peer_table::{KeyedHash, Peer, PeerTable};
use crate::port_prediction::{EchoTest, PortTable};
use crate::secure;
use crate::transmit::{Ports, Random, Source, Transmit};
use shipworm_wire::icmpv6::{message, unreachable, Icmpv6Packet, Icmpv6Repr};
use shipworm_wire::ip_protocol;
use shipworm_wire::ipv4_scope::is_global_unicast;
use shipworm_wire::ipv6::{Ipv6AddrExt, Ipv6Packet, Ipv6Repr};
use shipworm_wire::teredo_addr::{self, Flags, TeredoAddr, RS_SOURCE_CONE, RS_SOURCE_RESTRICTED, TEREDO_PORT};
use shipworm_wire::teredo_auth::AuthRepr;
use shipworm_wire::teredo_packet::{emit_bubble, TeredoHeaderRepr, TeredoPacket};
use shipworm_wire::teredo_trailer::{emit_alternate_addresses, trailer_type, DiscoveryType, TrailerRepr};
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::num::{NonZeroU16, NonZeroU32};
use std::time::Duration;

mod acceptance;
mod bubbles;
mod config;
mod indirect;
mod kernel;
mod link;
mod qualifier;
mod random_ports;
mod reaching;
mod status;
mod timer;
mod waiting;

use bubbles::{Path, Trailers};
pub use config::{ClientConfig, ServerAddrs};
use qualifier::{Phase, Qualification};
use random_ports::Bubbling;
pub use status::{ClientEvent, ClientState, ClientStats, ClientStatus, NatKind};

/// RS retransmission timer (RFC 4380 §5.2.1).
pub const RS_TIMEOUT: Duration = Duration::from_secs(4);
/// RSs per phase.
pub const RS_TRIES: u8 = 3;
/// Refresh solicitations before the server counts as gone: the first, then retries
/// 1, 2, 2, 4, 4, 4 and 4 s apart. A lossy link (a phone's radio) loses one or two (all
/// eight exchanges lost at 30 % loss one way: once in 15 000 refreshes; 30 % each way,
/// 51 % of exchanges: once in 220); a server that is gone loses them all, and failover
/// still comes 25 s after the first.
pub const REFRESH_TRIES: u8 = 8;
/// Bubble and connectivity-test spacing.
pub const RETRY: Duration = Duration::from_secs(2);
/// Times our announcement on the link is repeated, [`RETRY`] apart, after the one we
/// send on coming up with a new address (RFC 4380 §5.2.8 asks only for one every 200
/// to 300 s): a lost multicast datagram, or a neighbour that came up a moment after
/// us, would otherwise keep two clients behind one NAT apart until the next one.
pub const ANNOUNCE_REPEATS: u8 = 2;
/// The least time between two announcements on the link, however many peers new to
/// us announce themselves.
pub const ANSWER_SPACING: Duration = Duration::from_millis(200);
/// Bubbles or echoes per peer before giving up.
pub const PEER_TRIES: u8 = 4;
/// A native peer we have sent to for this long without a word back is tested again: its
/// relay may be gone. TCP's first retransmission comes within it, so a stalled upload
/// moves to the new relay at its second.
pub const RELAY_SILENCE: Duration = Duration::from_secs(1);

/// Server Load Reduction solicitations before falling back to indirect bubbles (RFC
/// 6081 §5.7.2).
pub const SOLICITATIONS: u8 = 3;
/// Why the address went when the daemon gave another list of servers
/// ([`Client::set_servers`]): the daemon, which looked their names up, need not look again.
pub const SERVERS_CHANGED: &str = "the Teredo servers' addresses changed";
/// The client's link-local address on the Teredo interface.
pub const LINK_LOCAL: Ipv6Addr = RS_SOURCE_RESTRICTED;

/// Which of the client's sockets a datagram arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The service port: everything.
    Service,
    /// The probe-only port (NAT detection).
    Probe,
    /// A random port opened for one peer (`transmit::Ports::open_port`).
    Port(NonZeroU16),
    /// The local discovery socket (224.0.0.253:3544).
    Discovery,
}

/// A port mapping on our NAT (PCP) for the service port.
#[derive(Debug, Default, Clone, Copy)]
struct PortMapping {
    /// The public endpoint it gives the service port.
    mapping: Option<SocketAddrV4>,
    /// Our address embeds that mapping: anyone can send to it (RFC 6081 §5.3's
    /// UPnP-enabled symmetric NAT, reached with PCP).
    inbound: bool,
}

impl PortMapping {
    /// The mapping counts while it is `ours`, the one our address embeds: true when
    /// that changed.
    fn follow(&mut self, ours: Option<SocketAddrV4>) -> bool {
        let was = self.inbound;
        self.inbound = self.mapping.is_some() && self.mapping == ours;
        was != self.inbound
    }
}

/// The client state machine.
pub struct Client<R: Random> {
    cfg: ClientConfig,
    rng: R,
    /// Qualification: the phase, the NAT, the server in use (`qualifier`).
    q: Qualification,
    peers: PeerTable,
    /// The bubbles each peer was sent lately, kept apart from its entry (RFC 4380
    /// §5.2.6: 4 of a kind per 300 s without a direct answer).
    bubbles_spent: BubbleBudget,
    /// The peers being reached, and when their next try is due.
    waiting: waiting::WaitingList,
    /// When the table is next swept of idle peers (and listed peers' times read back).
    next_sweep: Duration,
    first_contacts: FirstContacts,
    /// The service socket's own address and port, where peers behind the same NAT
    /// reach us (RFC 6081 §5.6).
    local: Option<SocketAddrV4>,
    /// Random ports, ours and peers' (RFC 6081 §5.4, §5.5).
    ports: PortTable,
    /// A port mapping on our NAT (PCP) for the service port, and whether our address
    /// embeds it.
    port_mapping: PortMapping,
    /// Peers heard by local discovery.
    local_peers: LocalPeers,
    /// Our announcements on the link.
    announcer: link::Announcer,
    events: VecDeque<ClientEvent>,
    icmp: RateLimit,
    /// The IPv4 subnets this host is attached to (network, mask): peers whose address
    /// embeds a host of one, or its broadcast, are never sent to (CVE-2006-6264).
    attached: Vec<(u32, u32)>,
    stats: ClientStats,
    scratch: Vec<u8>,
    /// The kernel data path's peer list as the client keeps it (`kernel_path`).
    kernel: kernel::KernelList,
}

fn keys(cfg: &ClientConfig) -> KeyedHash {
    KeyedHash::new(cfg.hash_keys.0, cfg.hash_keys.1)
}

/// A peer table for these settings: one whose removals of trusted peers are listed
/// when the kernel keeps a copy of them.
fn peer_table(cfg: &ClientConfig) -> PeerTable {
    let table = PeerTable::new(cfg.peer_capacity, Duration::from_secs(300), keys(cfg));
    if cfg.kernel_path {
        table.mirrored()
    } else {
        table
    }
}

impl<R: Random> Client<R> {
    /// A client that starts qualifying at the first `on_timer` call, or, without a
    /// server yet (their names are being looked up), once [`Client::set_servers`] gives
    /// it one.
    pub fn new(cfg: ClientConfig, rng: R) -> Self {
        Client {
            q: Qualification::new(&cfg.servers),
            peers: peer_table(&cfg),
            bubbles_spent: BubbleBudget::new(cfg.peer_capacity, keys(&cfg)),
            first_contacts: FirstContacts::new(cfg.first_contact, keys(&cfg)),
            ports: PortTable::new(cfg.random_ports, keys(&cfg)),
            local_peers: LocalPeers::new(256, keys(&cfg)),
            cfg,
            rng,
            waiting: waiting::WaitingList::default(),
            next_sweep: Duration::ZERO,
            local: None,
            port_mapping: PortMapping::default(),
            announcer: link::Announcer::default(),
            events: VecDeque::new(),
            icmp: RateLimit::new(10),
            attached: Vec::new(),
            stats: ClientStats::default(),
            scratch: vec![0u8; 2048],
            kernel: kernel::KernelList::default(),
        }
    }

    /// The service socket's address on its own network (the daemon finds it, and
    /// tells again after a network change); listed to peers for hairpinning.
    pub fn set_local_address(&mut self, local: Option<SocketAddrV4>) {
        self.local = local.filter(|l| !l.ip().is_unspecified() && l.port() != 0);
    }

    /// The IPv4 subnets the host is attached to, as (address, prefix length) (the
    /// daemon lists them, and again after a network change). A Teredo address that
    /// embeds a host of one of them, or its directed broadcast, names a machine on our
    /// side of any firewall: whoever wrote to it could use us to reach into the site
    /// (CVE-2006-6264). Peers there are met by local discovery, never this way.
    pub fn set_attached_subnets(&mut self, subnets: &[(Ipv4Addr, u8)]) {
        self.attached = subnets
            .iter()
            .filter(|(_, len)| *len <= 32)
            .map(|&(a, len)| {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                (u32::from(a) & mask, mask)
            })
            .collect();
    }

    /// Why the client will not send to IPv4 address `ip` that a Teredo address embeds
    /// (its mapping or its server), if it will not.
    fn unreachable_embedded(&self, ip: Ipv4Addr) -> Option<DropReason> {
        if !is_global_unicast(ip) {
            return Some(DropReason::DestinationMappingNotGlobal);
        }
        let a = u32::from(ip);
        self.attached.iter().any(|&(net, mask)| a & mask == net).then_some(DropReason::AttachedSubnet)
    }

    /// The public endpoint the NAT maps our service port to, open to anyone (a PCP MAP
    /// of the very port the server saw), or `None`. It counts only while it is the
    /// mapping our address embeds.
    pub fn set_port_mapping(&mut self, mapping: Option<SocketAddrV4>) {
        self.port_mapping.mapping = mapping;
        self.update_mapped_inbound();
    }

    fn update_mapped_inbound(&mut self) {
        let ours = match &self.q.phase {
            Phase::Up { ra, .. } => Some(ra.mapped),
            _ => None,
        };
        if self.port_mapping.follow(ours) {
            // Where some peers are sent to changes (`peer_target`).
            self.kernel.orphan_all();
        }
    }

    /// Where to send to `peer`, whose proven mapping is `to`. With our port mapped and
    /// the peer seen at a port its address does not embed (a symmetric NAT), its
    /// embedded mapping: the bet of RFC 6081 §5.3.4.3 that it holds a mapping too,
    /// since its other ports answer only the endpoint they wrote to.
    fn peer_target(&self, peer: &Ipv6Addr, to: SocketAddrV4) -> SocketAddrV4 {
        if !self.port_mapping.inbound {
            return to;
        }
        // Only another port of the address the peer was proven at: an address of its
        // choosing would make us send our host's traffic to a third party.
        match TeredoAddr::decode(peer) {
            Some(t) if t.mapped != to && t.mapped.ip() == to.ip() => t.mapped,
            _ => to,
        }
    }

    /// The servers in use, in order of preference (none while resolving).
    pub fn servers(&self) -> &[ServerAddrs] {
        &self.cfg.servers
    }

    /// Next thing the daemon must do to the interface.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Counters.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// Peers waiting for an answer (bubbles or a connectivity test).
    pub fn waiting_peers(&self) -> usize {
        self.waiting.iter().filter(|a| self.peers.get(a).is_some_and(|p| p.waiting)).count()
    }

    /// Bytes held in the peers' queues (a walk over the table).
    pub fn queued_bytes(&self) -> usize {
        self.peers.queued_bytes()
    }

    /// The configured address, if qualified.
    pub fn address(&self) -> Option<Ipv6Addr> {
        match self.q.phase {
            Phase::Up { address, .. } => Some(address),
            Phase::Primary { .. } | Phase::Secondary { .. } => self.q.held_address,
            Phase::Offline { .. } | Phase::Resolving => None,
        }
    }

    /// A snapshot for `shipworm status`.
    pub fn status(&self) -> ClientStatus {
        let (state, server, mapped, mtu) = match &self.q.phase {
            Phase::Resolving => (ClientState::Resolving, None, None, 1280),
            Phase::Offline { .. } => (ClientState::Offline, None, None, 1280),
            Phase::Primary { server, .. } => (ClientState::Qualifying, Some(*server), None, 1280),
            Phase::Secondary { server, first, .. } => {
                (ClientState::Probing, Some(*server), Some(first.mapped), first.mtu)
            }
            Phase::Up { server, ra, .. } => (ClientState::Qualified, Some(*server), Some(ra.mapped), ra.mtu),
        };
        ClientStatus {
            state,
            address: self.address(),
            server: server.map(|i| self.cfg.servers[i].primary),
            mapped,
            nat: self.q.nat,
            mtu,
            peers: self.peers.len(),
            first_contacts: self.first_contacts.len(),
            port_preserving: self.q.port_preserving,
            port_prediction: match (self.q.nat, self.cfg.symmetric_nat_support, self.q.port_preserving) {
                (NatKind::Symmetric, true, true) => "same port",
                (NatKind::Symmetric, true, false) => "echo test",
                _ => "none",
            },
            random_ports: self.ports.open_ports(),
            random_port_peers: self.ports.routed_peers(),
            extensions: self.extensions(),
            mapped_inbound: self.port_mapping.inbound,
            key_retired: self.q.key_retired,
        }
    }

    /// The RFC 6081 extensions in use, by the RFC's section titles.
    fn extensions(&self) -> Vec<&'static str> {
        let c = &self.cfg;
        let mut v = Vec::new();
        if c.symmetric_nat_support {
            v.push("symmetric NAT support");
            if c.random_ports > 0 && c.service_port.is_some() {
                v.extend(["port-preserving symmetric NAT", "sequential port-symmetric NAT"]);
            }
            if c.hairpinning {
                v.push("hairpinning");
            }
        }
        if c.server_load_reduction {
            v.push("server load reduction");
        }
        if c.local_discovery {
            v.push("local discovery (RFC 4380)");
        }
        v
    }

    /// Count a drop; the outcome that says it.
    fn dropped(&mut self, r: DropReason) -> Outcome {
        self.stats.drops.count(r);
        Err(r)
    }

    /// A datagram arrived on socket `via` from `from`.
    pub fn on_udp(
        &mut self,
        now: Duration,
        via: Via,
        from: SocketAddrV4,
        datagram: &[u8],
        tx: &mut (impl Transmit + Ports),
    ) -> Outcome {
        let pkt = match TeredoPacket::parse(datagram) {
            Ok(p) => p,
            Err(e) => return self.dropped(e.into()),
        };
        if !self.cfg.kernel_path {
            return self.receive(now, via, from, datagram, &pkt, tx);
        }
        // A listed peer's packet the kernel passed up (a bubble, trailers, another
        // mapping): the peer is judged with what the kernel heard from it.
        let src = pkt.ipv6.src_addr();
        if self.kernel_ask(&src, tx) {
            return Ok(Action::AskedKernel);
        }
        let outcome = self.receive(now, via, from, datagram, &pkt, tx);
        self.kernel_settle(tx);
        self.kernel_sync(&src, tx);
        self.kernel_done();
        outcome
    }

    /// [`Client::on_udp`] for a datagram parsed as `pkt`.
    fn receive(
        &mut self,
        now: Duration,
        via: Via,
        from: SocketAddrV4,
        datagram: &[u8],
        pkt: &TeredoPacket<'_>,
        tx: &mut (impl Transmit + Ports),
    ) -> Outcome {
        // RFC 6081 §4.1, §5.1.2: an unknown trailer whose type says so voids the packet.
        if pkt.trailers.must_discard() {
            return self.dropped(DropReason::BadTrailers);
        }
        if via == Via::Probe {
            return self.on_probe(datagram, pkt, from);
        }
        if via == Via::Discovery {
            return self.on_discovery(now, from, pkt, tx);
        }
        let ra_like = pkt.ipv6.src_addr().is_link_local() && pkt.ipv6.next_header() == ip_protocol::ICMPV6;
        if let Via::Port(port) = via {
            // A random port hears its peer, and the servers' answers to its Echo Test.
            if ra_like && self.is_server(&from).is_some() {
                return self.on_echo_answer(now, pkt, tx);
            }
            return self.on_peer_packet(now, from, pkt, Some(port), tx);
        }
        if let Some(idx) = self.is_server(&from) {
            if ra_like {
                return self.on_ra(now, idx, from, datagram, pkt, tx);
            }
            if Some(idx) == self.current_server() {
                self.q.last_server_rx = now;
            }
            // A server that also relays (RFC 4380 §5.3, §5.4.3) passes native hosts'
            // packets on from its own endpoint: a pure server forwards nothing from a
            // native source but a relay's indirect bubble. So they are a relay's, and
            // meet the peer rules: a test's echo reply proves the server as that host's
            // relay; a host calling first is tested.
            if !pkt.is_bubble() && TeredoAddr::decode(&pkt.ipv6.src_addr()).is_none() {
                return self.on_peer_packet(now, from, pkt, None, tx);
            }
            return self.on_server_packet(now, pkt, tx);
        }
        self.on_peer_packet(now, from, pkt, None, tx)
    }

    fn our_address(&self, dst: &Ipv6Addr) -> bool {
        self.address() == Some(*dst)
    }

    fn deliver(&mut self, packet: &[u8], tx: &mut (impl Transmit + Ports)) {
        tx.deliver(packet);
        self.stats.delivered += 1;
        self.stats.delivered_bytes += packet.len() as u64;
    }

    /// A packet from the host stack.
    pub fn on_tun(&mut self, now: Duration, packet: &[u8], tx: &mut (impl Transmit + Ports)) -> Outcome {
        if !self.cfg.kernel_path {
            return self.send_from_host(now, packet, tx);
        }
        // The kernel passed it up (its peer fell silent, or is not in its list): what
        // the kernel heard and sent counts first.
        let dst = Ipv6Packet::new_checked(packet).ok().map(|ip| ip.dst_addr());
        if dst.is_some_and(|d| self.kernel_ask(&d, tx)) {
            return Ok(Action::AskedKernel);
        }
        let outcome = self.send_from_host(now, packet, tx);
        self.kernel_settle(tx);
        if let Some(dst) = dst {
            self.kernel_sync(&dst, tx);
        }
        self.kernel_done();
        outcome
    }

    fn send_from_host(&mut self, now: Duration, packet: &[u8], tx: &mut (impl Transmit + Ports)) -> Outcome {
        let Ok(ip) = Ipv6Packet::new_checked(packet) else {
            return self.dropped(DropReason::MalformedVersion);
        };
        let ip = Ipv6Packet::new_unchecked(ip.packet());
        let dst = ip.dst_addr();
        let Some(me) = self.address() else {
            self.error_to_host(now, &ip, unreachable::ADDRESS, tx);
            return self.dropped(DropReason::LocalDestination);
        };
        if dst.is_multicast() || dst.is_link_local() {
            return self.dropped(DropReason::DestinationNotGlobal);
        }
        if ip.src_addr() != me {
            self.error_to_host(now, &ip, unreachable::ADMIN_PROHIBITED, tx);
            return self.dropped(DropReason::SourceMismatch);
        }
        // A native peer's silence is watched (its relay may go); a Teredo peer's
        // transmissions are all recorded, as its bubbles' and solicitations' pacing
        // reads them.
        let key = self.peers.key(&dst);
        let teredo = TeredoAddr::decode(&dst);
        let native = teredo.is_none();
        let sent = if native {
            self.peers.send_to_watching(&key, now)
        } else {
            self.peers.send_to(&key, now).map(|to| (to, Duration::ZERO))
        };
        if let Some((to, unanswered)) = sent {
            let to = self.peer_target(&dst, to);
            let via = self.ports.via(&dst);
            tx.send(via, to, ip.packet(), None);
            if via != Source::Service {
                if let Some(e) = self.ports.get_mut(&dst) {
                    (e.last_data, e.refreshes) = (now, 0);
                }
            }
            self.stats.sent += 1;
            self.stats.sent_bytes += ip.packet().len() as u64;
            if native && unanswered >= RELAY_SILENCE {
                self.retest(now, dst, tx);
            }
            return Ok(Action::Forwarded);
        }
        if let Some(t) = &teredo {
            // Cases 4/5: never send to a non-global embedded address (§7.4.3), nor to
            // one on a subnet we are attached to (CVE-2006-6264).
            if let Some(why) = self.unreachable_embedded(*t.mapped.ip()).or(self.unreachable_embedded(t.server)) {
                return self.dropped(why);
            }
        }
        let mapped = teredo.map_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0), |t| t.mapped);
        if self.peers.get(&dst).is_none_or(|p| !p.waiting) {
            self.make_room_to_wait();
        }
        if self.peers.get(&dst).is_none() && self.peers.insert(Peer::new(dst, mapped, now), now).is_err() {
            return self.dropped(DropReason::TableFull);
        }
        let cap = self.cfg.queue_bytes;
        let mut p = self.peers.get_mut(&dst).expect("present");
        let queued = p.queue_mut().push(ip.packet(), cap);
        let newly = !p.waiting;
        p.waiting = true;
        drop(p);
        if newly {
            self.waiting.join(dst);
        }
        let outcome = if queued { Ok(Action::Queued) } else { self.dropped(DropReason::QueueFull) };
        self.try_to_reach(now, dst, tx);
        self.waits(&dst, now);
        outcome
    }
}
