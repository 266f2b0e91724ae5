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
//!    bubble, which answers its indirect one (see the README for what works with whom).
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

use crate::drop_reason::{DropCounters, DropReason};
use crate::first_contact::{FirstContactLimits, FirstContacts, Release};
use crate::icmp_error::{self, RateLimit};
use crate::local_discovery::{LocalPeers, ALL_NODES, GROUP};
use crate::peer_table::{KeyedHash, Peer, PeerTable};
use crate::port_prediction::{EchoTest, PortTable};
use crate::secure;
use crate::transmit::{udp_via, Random, Transmit};
use shipworm_wire::icmpv6::{message, unreachable, Icmpv6Packet, Icmpv6Repr};
use shipworm_wire::ip_protocol;
use shipworm_wire::ipv4_scope::is_global_unicast;
use shipworm_wire::ipv6::{Ipv6AddrExt, Ipv6Packet, Ipv6Repr};
use shipworm_wire::teredo_addr::{self, Flags, TeredoAddr, RS_SOURCE_CONE, RS_SOURCE_RESTRICTED, TEREDO_PORT};
use shipworm_wire::teredo_auth::AuthRepr;
use shipworm_wire::teredo_packet::{emit_bubble, TeredoHeaderRepr, TeredoPacket};
use shipworm_wire::teredo_trailer::{emit_alternate_addresses, trailer_type, DiscoveryType, TrailerRepr};
use std::collections::{HashSet, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::Duration;

/// RS retransmission timer (RFC 4380 §5.2.1).
pub const RS_TIMEOUT: Duration = Duration::from_secs(4);
/// RSs per phase.
pub const RS_TRIES: u8 = 3;
/// Bubble and connectivity-test spacing.
pub const RETRY: Duration = Duration::from_secs(2);
/// Bubbles or echoes per peer before giving up.
pub const PEER_TRIES: u8 = 4;
/// A native peer we have sent to for this long without a word back is tested again: its
/// relay may be gone. TCP's first retransmission comes within it, so a stalled upload
/// moves to the new relay at its second.
pub const RELAY_SILENCE: Duration = Duration::from_secs(1);
/// Why port-prediction bubbles go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bubbling {
    /// Our own try (a host packet waits).
    Poke,
    /// The peer's indirect bubble arrived; `first` when it came before any of ours did
    /// (we are the first to hear of the other's port).
    Heard {
        /// We had sent the peer no indirect bubble yet.
        first: bool,
    },
}

/// The Peer Refresh Timer of random ports (RFC 6081 §5.4.2.1), and the refresh bubbles
/// sent without data in between at most.
const REFRESH: Duration = Duration::from_secs(30);
const MAX_REFRESHES: u8 = 20;
/// How long a random port waits for its peer to answer on it.
const STALE_PORT: Duration = Duration::from_secs(60);
/// Server Load Reduction solicitations before falling back to indirect bubbles (RFC
/// 6081 §5.7.2).
pub const SOLICITATIONS: u8 = 3;
/// The client's link-local address on the Teredo interface.
pub const LINK_LOCAL: Ipv6Addr = RS_SOURCE_RESTRICTED;

/// One Teredo server: its primary and secondary addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerAddrs {
    /// Primary address (embedded in the client's address).
    pub primary: Ipv4Addr,
    /// Secondary address (by convention primary + 1).
    pub secondary: Ipv4Addr,
}

impl ServerAddrs {
    /// A server at `primary` with the conventional secondary.
    pub fn new(primary: Ipv4Addr) -> Self {
        ServerAddrs { primary, secondary: Ipv4Addr::from_bits(primary.to_bits().wrapping_add(1)) }
    }
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Servers in order of preference: the first is used, the others on failure.
    pub servers: Vec<ServerAddrs>,
    /// Refresh interval (RFC 6081 §5.1.1: configurable, default 30 s).
    pub refresh: Duration,
    /// Most peers kept.
    pub peer_capacity: usize,
    /// Bytes queued per waiting peer.
    pub queue_bytes: usize,
    /// Most peers waiting at once (for bubbles or a connectivity test), whatever made
    /// them wait: with `queue_bytes`, the bound on memory held in queues.
    pub pending_capacity: usize,
    /// Secret keys for the peer table's hash.
    pub hash_keys: (u64, u64),
    /// How often to try going back to the first server while on another.
    pub home_check: Duration,
    /// Secure qualification: sign RSs and accept only RAs signed with this secret.
    pub credentials: Option<secure::Credentials>,
    /// What native hosts speaking first may hold while their test runs.
    pub first_contact: FirstContactLimits,
    /// Behind a symmetric NAT, keep the address from the primary server's mapping
    /// (RFC 6081 §5.2) rather than go offline (RFC 4380 §5.2.1), and speak the
    /// extension's nonces to peers. Off: plain RFC 4380, no trailers sent.
    pub symmetric_nat_support: bool,
    /// TTL of the opening bubble, the first direct bubble to a peer behind a restricted
    /// or symmetric NAT (0: no opening bubble, full TTL). It must pass our NAT and die
    /// before the peer's: see [`Client`]'s notes on Linux NATs.
    pub opening_bubble_ttl: u8,
    /// RFC 6081 §5.7, Server Load Reduction: a trusted peer silent for 30 s is asked
    /// with direct bubbles first (three, 2 s apart) before bubbles go through servers.
    /// Only peers that have sent an RFC 6081 trailer are asked: others never answer.
    pub server_load_reduction: bool,
    /// RFC 6081 §5.6, Hairpinning: indirect bubbles to peers not yet reached list our
    /// local address (Alternate Address trailer), and the addresses a peer lists get a
    /// direct bubble each, so two clients behind one NAT that does not hairpin meet on
    /// their own network. Needs `symmetric_nat_support` (the nonces prove the bubbles).
    pub hairpinning: bool,
    /// The service socket's local port, to tell a port-preserving NAT (0: not known,
    /// and then no port prediction).
    pub service_port: u16,
    /// Peers reached through a random port of their own at once (RFC 6081 §5.4, §5.5):
    /// each is a socket.
    pub random_ports: usize,
    /// RFC 4380 §5.2.8 local discovery: announce ourselves on the link and reach peers
    /// heard there at their local address.
    pub local_discovery: bool,
}

impl ClientConfig {
    /// Defaults for these servers.
    pub fn new(servers: Vec<ServerAddrs>) -> Self {
        ClientConfig {
            servers,
            refresh: Duration::from_secs(30),
            peer_capacity: 65536,
            queue_bytes: 4096,
            pending_capacity: 1024,
            hash_keys: (0, 0),
            home_check: Duration::from_secs(300),
            credentials: None,
            first_contact: FirstContactLimits::default(),
            symmetric_nat_support: true,
            opening_bubble_ttl: 2,
            server_load_reduction: true,
            hairpinning: true,
            service_port: 0,
            random_ports: 64,
            local_discovery: true,
        }
    }
}

/// What qualification learned about the NAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatKind {
    /// Not known (yet, or the secondary address did not answer).
    Unknown,
    /// Full cone: anyone may send in once the mapping exists.
    Cone,
    /// Address- or port-restricted cone: one mapping, filtered inbound.
    Restricted,
    /// Symmetric: a new mapping per destination.
    Symmetric,
}

impl NatKind {
    /// Lower-case name for logs, status and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            NatKind::Unknown => "unknown",
            NatKind::Cone => "cone",
            NatKind::Restricted => "restricted",
            NatKind::Symmetric => "symmetric",
        }
    }
}

/// What the daemon must do to the interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// Configure this address (replacing any other) and MTU; the tunnel is usable.
    Up {
        /// The Teredo address.
        address: Ipv6Addr,
        /// Link MTU from the RA.
        mtu: u32,
        /// The server qualified with.
        server: Ipv4Addr,
        /// The NAT kind detected.
        nat: NatKind,
    },
    /// Remove the address: no Teredo connectivity, for this reason.
    Down(&'static str),
    /// The NAT kind became known or changed (no address change).
    Nat(NatKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting before trying again.
    Offline { retry_at: Duration, backoff: Duration },
    /// RS to `server`'s primary address.
    Primary { server: usize, nonce: [u8; 8], sent_at: Duration, tries: u8 },
    /// RS to its secondary address, knowing the primary's answer.
    Secondary { server: usize, first: Ra, nonce: [u8; 8], sent_at: Duration, tries: u8 },
    /// Qualified.
    Up { server: usize, ra: Ra, address: Ipv6Addr },
}

/// What an RA must match: who sends it, our nonce, the RS source it answers, and the
/// primary address its prefix must name.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    from: Ipv4Addr,
    nonce: [u8; 8],
    rs_src: Ipv6Addr,
    primary: Ipv4Addr,
}

/// What a valid RA says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ra {
    mapped: SocketAddrV4,
    prefix: [u8; 8],
    mtu: u32,
}

/// Which of the client's sockets a datagram arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The service port: everything.
    Service,
    /// The probe-only port (NAT detection).
    Probe,
    /// A random port opened for one peer (`Transmit::open_port`).
    Port(u16),
    /// The local discovery socket (224.0.0.253:3544).
    Discovery,
}

/// What the client is doing, for `shipworm status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientStatus {
    /// offline, qualifying, probing or qualified.
    pub state: &'static str,
    /// The Teredo address, when qualified.
    pub address: Option<Ipv6Addr>,
    /// The server in use or being tried.
    pub server: Option<Ipv4Addr>,
    /// The mapping the server saw.
    pub mapped: Option<SocketAddrV4>,
    /// NAT kind.
    pub nat: NatKind,
    /// Link MTU.
    pub mtu: u32,
    /// Peers in the table.
    pub peers: usize,
    /// Native hosts that spoke first, waiting for their connectivity test.
    pub first_contacts: usize,
    /// Behind a symmetric NAT: whether it kept our port towards the primary server
    /// (RFC 6081 §5.4.3), which decides how random ports are predicted.
    pub port_preserving: bool,
    /// How our external port for a peer's random port is predicted: `same port`
    /// (port-preserving NAT), `echo test` (any other symmetric NAT), or `none`.
    pub port_prediction: &'static str,
    /// Random ports open for peers, and peers reached through one.
    pub random_ports: usize,
    /// Peers reached through one of our random ports.
    pub random_port_peers: usize,
    /// The RFC 6081 extensions switched on, by the RFC's names.
    pub extensions: Vec<&'static str>,
    /// Our address embeds the NAT's port mapping (anyone can reach it).
    pub mapped_inbound: bool,
}

/// Counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Router solicitations sent.
    pub solicitations: u64,
    /// Valid advertisements accepted.
    pub advertisements: u64,
    /// Times an address was configured or changed.
    pub addresses: u64,
    /// Packets sent to peers (bubbles excluded).
    pub sent: u64,
    /// Packets delivered to the host.
    pub delivered: u64,
    /// IPv6 bytes of the packets sent to peers.
    pub sent_bytes: u64,
    /// IPv6 bytes of the packets delivered to the host.
    pub delivered_bytes: u64,
    /// Bubbles sent.
    pub bubbles: u64,
    /// Server Load Reduction: direct bubbles soliciting a silent peer (RFC 6081 §5.7).
    pub peer_solicitations: u64,
    /// Server Load Reduction: peers' solicitations answered with an advertisement.
    pub peer_advertisements: u64,
    /// Echo Tests run to predict a sequential NAT's port (RFC 6081 §5.5).
    pub echo_tests: u64,
    /// Connectivity-test echoes sent.
    pub echoes: u64,
    /// Connectivity tests started because a native host spoke first.
    pub first_contacts: u64,
    /// Connectivity tests started again because a native host we sent to fell silent
    /// (its relay may have gone).
    pub silent_retests: u64,
    /// Packets delivered after their first contact's test.
    pub first_contact_delivered: u64,
    /// Drops by reason.
    pub drops: DropCounters,
}

/// The client state machine.
pub struct Client<R: Random> {
    cfg: ClientConfig,
    rng: R,
    phase: Phase,
    nat: NatKind,
    cone_nonce: Option<([u8; 8], usize)>,
    cone_seen: bool,
    last_server_rx: Duration,
    refresh_after: Duration,
    maint: Option<([u8; 8], Duration, u8)>,
    home: Option<([u8; 8], Duration)>,
    peers: PeerTable,
    pending: VecDeque<Ipv6Addr>,
    /// Native peers under a test of ours (they fell silent while we sent): each is on
    /// the waiting list too, and leaves this set when it leaves the list.
    retests: HashSet<Ipv6Addr>,
    held: FirstContacts,
    random_bits: Option<(SocketAddrV4, u16)>,
    /// The service socket's own address and port, where peers behind the same NAT
    /// reach us (RFC 6081 §5.6).
    local: Option<SocketAddrV4>,
    /// Behind a port-preserving symmetric NAT (RFC 6081 §5.4.3): the primary's mapping
    /// kept our port.
    port_preserving: bool,
    /// Random ports, ours and peers' (RFC 6081 §5.4, §5.5).
    ports: PortTable,
    /// Random ports to close at the next chance (their peers were forgotten).
    closing: Vec<u16>,
    /// The address the interface keeps while we qualify again (network change, going
    /// home): traffic keeps flowing on it, and peers stay if the new RA gives it back.
    held_address: Option<Ipv6Addr>,
    /// The public endpoint a port mapping on our NAT (PCP) gives the service port.
    port_mapping: Option<SocketAddrV4>,
    /// Our address embeds that mapping: anyone can send to it (RFC 6081 §5.3's
    /// UPnP-enabled symmetric NAT, reached with PCP).
    mapped_inbound: bool,
    /// Peers heard by local discovery, and when we last and next announce ourselves.
    local_peers: LocalPeers,
    last_announce: Option<Duration>,
    next_announce: Duration,
    events: VecDeque<ClientEvent>,
    icmp: RateLimit,
    /// The IPv4 subnets this host is attached to (network, mask): peers whose address
    /// embeds a host of one, or its broadcast, are never sent to (CVE-2006-6264).
    attached: Vec<(u32, u32)>,
    stats: ClientStats,
    scratch: Vec<u8>,
}

fn keys(cfg: &ClientConfig) -> KeyedHash {
    KeyedHash::new(cfg.hash_keys.0, cfg.hash_keys.1)
}

impl<R: Random> Client<R> {
    /// A client that starts qualifying at the first `on_timer` call.
    pub fn new(cfg: ClientConfig, rng: R) -> Self {
        assert!(!cfg.servers.is_empty(), "a client needs a server");
        Client {
            peers: PeerTable::new(cfg.peer_capacity, Duration::from_secs(300), keys(&cfg)),
            held: FirstContacts::new(cfg.first_contact, keys(&cfg)),
            ports: PortTable::new(cfg.random_ports, keys(&cfg)),
            local_peers: LocalPeers::new(256, keys(&cfg)),
            cfg,
            rng,
            phase: Phase::Offline { retry_at: Duration::ZERO, backoff: Duration::from_secs(10) },
            nat: NatKind::Unknown,
            cone_nonce: None,
            cone_seen: false,
            last_server_rx: Duration::ZERO,
            refresh_after: Duration::from_secs(30),
            maint: None,
            home: None,
            pending: VecDeque::new(),
            retests: HashSet::new(),
            random_bits: None,
            local: None,
            port_preserving: false,
            closing: Vec::new(),
            held_address: None,
            port_mapping: None,
            mapped_inbound: false,
            last_announce: None,
            next_announce: Duration::ZERO,
            events: VecDeque::new(),
            icmp: RateLimit::new(10),
            attached: Vec::new(),
            stats: ClientStats::default(),
            scratch: vec![0u8; 2048],
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
        self.port_mapping = mapping;
        self.update_mapped_inbound();
    }

    fn update_mapped_inbound(&mut self) {
        self.mapped_inbound = match (&self.phase, self.port_mapping) {
            (Phase::Up { ra, .. }, Some(m)) => ra.mapped == m,
            _ => false,
        };
    }

    /// Where to send to `peer`, whose proven mapping is `to`. With our port mapped and
    /// the peer seen at a port its address does not embed (a symmetric NAT), its
    /// embedded mapping: the bet of RFC 6081 §5.3.4.3 that it holds a mapping too,
    /// since its other ports answer only the endpoint they wrote to.
    fn peer_target(&self, peer: &Ipv6Addr, to: SocketAddrV4) -> SocketAddrV4 {
        if !self.mapped_inbound {
            return to;
        }
        // Only another port of the address the peer was proven at: an address of its
        // choosing would make us send our host's traffic to a third party.
        match TeredoAddr::decode(peer) {
            Some(t) if t.mapped != to && t.mapped.ip() == to.ip() => t.mapped,
            _ => to,
        }
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
        self.pending.iter().filter(|a| self.peers.get(a).is_some_and(|p| p.waiting)).count()
    }

    /// Bytes held in the peers' queues (a walk over the table).
    pub fn queued_bytes(&self) -> usize {
        self.peers.queued_bytes()
    }

    /// One more peer is about to wait: the list is capped (`pending_capacity`), and
    /// with it the bytes its queues hold. The oldest waiting peer gives way, its
    /// packets lost; a trusted one keeps its entry.
    fn make_room_to_wait(&mut self) {
        while self.pending.len() >= self.cfg.pending_capacity.max(1) {
            let Some(old) = self.pending.pop_front() else { break };
            self.retests.remove(&old);
            // A stale list entry (answered or gone since) is passed over: what it may hold
            // is the timer's to settle, or a packet just held for a new wait.
            let Some(lost) = self.peers.give_way(&old) else { continue };
            self.stats.drops.count_n(DropReason::QueueFull, lost);
            // What it held as a first contact goes too (counted as a failed test).
            self.discard_held(&old);
        }
    }

    /// The configured address, if qualified.
    pub fn address(&self) -> Option<Ipv6Addr> {
        match self.phase {
            Phase::Up { address, .. } => Some(address),
            Phase::Primary { .. } | Phase::Secondary { .. } => self.held_address,
            Phase::Offline { .. } => None,
        }
    }

    /// A snapshot for `shipworm status`.
    pub fn status(&self) -> ClientStatus {
        let (state, server, mapped, mtu) = match &self.phase {
            Phase::Offline { .. } => ("offline", None, None, 1280),
            Phase::Primary { server, .. } => ("qualifying", Some(*server), None, 1280),
            Phase::Secondary { server, first, .. } => ("probing", Some(*server), Some(first.mapped), first.mtu),
            Phase::Up { server, ra, .. } => ("qualified", Some(*server), Some(ra.mapped), ra.mtu),
        };
        ClientStatus {
            state,
            address: self.address(),
            server: server.map(|i| self.cfg.servers[i].primary),
            mapped,
            nat: self.nat,
            mtu,
            peers: self.peers.len(),
            first_contacts: self.held.len(),
            port_preserving: self.port_preserving,
            port_prediction: match (self.nat, self.cfg.symmetric_nat_support, self.port_preserving) {
                (NatKind::Symmetric, true, true) => "same port",
                (NatKind::Symmetric, true, false) => "echo test",
                _ => "none",
            },
            random_ports: self.ports.open_ports(),
            random_port_peers: self.ports.routed_peers(),
            extensions: self.extensions(),
            mapped_inbound: self.mapped_inbound,
        }
    }

    /// The RFC 6081 extensions in use, by the RFC's section titles.
    fn extensions(&self) -> Vec<&'static str> {
        let c = &self.cfg;
        let mut v = Vec::new();
        if c.symmetric_nat_support {
            v.push("symmetric NAT support");
            if c.random_ports > 0 && c.service_port != 0 {
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

    fn nonce(&mut self) -> [u8; 8] {
        let mut n = [0u8; 8];
        self.rng.fill(&mut n);
        n
    }

    /// A bubble nonce for a Nonce trailer (RFC 6081 §5.2.4.1): random, never 0, which
    /// means "none".
    fn bubble_nonce(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.rng.fill(&mut b);
        u32::from_be_bytes(b).max(1)
    }

    /// A bubble from `me` to `dst` in the scratch buffer, with a Nonce trailer unless
    /// `nonce` is 0; returns its length.
    fn bubble(&mut self, me: &Ipv6Addr, dst: &Ipv6Addr, nonce: u32) -> usize {
        let nonce = (nonce != 0).then(|| TrailerRepr::Nonce(nonce.to_be_bytes()));
        self.bubble_with(me, dst, nonce)
    }

    /// A bubble from `me` to `dst` in the scratch buffer, with `trailer` if any.
    fn bubble_with(&mut self, me: &Ipv6Addr, dst: &Ipv6Addr, trailer: Option<TrailerRepr<'_>>) -> usize {
        let n = emit_bubble(me, dst, 0, &mut self.scratch).expect("fits");
        match trailer {
            Some(t) => n + t.emit(&mut self.scratch[n..]).expect("fits"),
            None => n,
        }
    }

    /// The Nonce trailer of a bubble, if Symmetric NAT Support is on (0: none).
    fn nonce_in(&self, pkt: &TeredoPacket<'_>) -> u32 {
        if !self.cfg.symmetric_nat_support || !pkt.is_bubble() {
            return 0;
        }
        match pkt.trailers.get(trailer_type::NONCE) {
            Some(TrailerRepr::Nonce(n)) => u32::from_be_bytes(n),
            _ => 0,
        }
    }

    fn dropped(&mut self, r: DropReason) {
        self.stats.drops.count(r);
    }

    /// Build an RS from `src` with `nonce` into the scratch buffer.
    fn rs(&mut self, src: Ipv6Addr, nonce: [u8; 8]) -> usize {
        let dst = crate::server::ALL_ROUTERS;
        let zero = [0u8; secure::MAC_LEN];
        let auth = match &self.cfg.credentials {
            Some(c) => AuthRepr { client_id: &c.client_id, auth_value: &zero, nonce, confirmation: 0 },
            None => AuthRepr::with_nonce(nonce),
        };
        let at = TeredoHeaderRepr { auth: Some(auth), origin: None }.emit(&mut self.scratch).expect("fits");
        Ipv6Repr { src_addr: src, dst_addr: dst, next_header: ip_protocol::ICMPV6, payload_len: 8, hop_limit: 255 }
            .emit(&mut self.scratch[at..])
            .expect("fits");
        Icmpv6Repr::RouterSolicit.emit(&src, &dst, &mut self.scratch[at + 40..]).expect("fits");
        if let Some(c) = &self.cfg.credentials {
            secure::sign(&c.secret, &mut self.scratch[..at + 48]);
        }
        self.stats.solicitations += 1;
        at + 48
    }

    fn send_rs(&mut self, to: Ipv4Addr, nonce: [u8; 8], tx: &mut impl Transmit) {
        let n = self.rs(RS_SOURCE_RESTRICTED, nonce);
        tx.udp(SocketAddrV4::new(to, TEREDO_PORT), &self.scratch[..n]);
    }

    /// Start qualifying with server `server` now.
    fn qualify(&mut self, now: Duration, server: usize, tx: &mut impl Transmit) {
        let s = self.cfg.servers[server];
        let nonce = self.nonce();
        self.send_rs(s.primary, nonce, tx);
        // The cone test, from the probe port: answered from the secondary address.
        let cone = self.nonce();
        let n = self.rs(RS_SOURCE_CONE, cone);
        tx.udp_second(SocketAddrV4::new(s.primary, TEREDO_PORT), &self.scratch[..n]);
        self.cone_nonce = Some((cone, server));
        self.cone_seen = false;
        if let Phase::Up { address, .. } = self.phase {
            self.held_address = Some(address);
        }
        self.phase = Phase::Primary { server, nonce, sent_at: now, tries: 1 };
    }

    /// The network changed (new IPv4 address or default route): qualify again at once.
    /// The interface keeps the old address until the new RA says otherwise, so a
    /// change that keeps the mapping costs nothing.
    pub fn on_network_change(&mut self, now: Duration, tx: &mut impl Transmit) {
        let server = match self.phase {
            Phase::Up { server, .. } | Phase::Primary { server, .. } | Phase::Secondary { server, .. } => server,
            Phase::Offline { .. } => 0,
        };
        self.maint = None;
        self.qualify(now, server, tx);
    }

    /// Check an RA against what we asked: from `expect`:3544, our nonce, sent to
    /// `rs_src`, exactly one /64 prefix naming `primary`, an origin indication with a
    /// global mapping, an acceptable MTU. RFC 4861 checks too (link-local source, hop
    /// limit 255, checksum, code, options).
    fn check_ra(
        &self,
        datagram: &[u8],
        pkt: &TeredoPacket<'_>,
        from: SocketAddrV4,
        want: Wanted,
    ) -> Result<Ra, DropReason> {
        let Wanted { from: expect, nonce, rs_src, primary } = want;
        let (nonce, rs_src) = (&nonce, &rs_src);
        if from != SocketAddrV4::new(expect, TEREDO_PORT) {
            return Err(DropReason::SourceMismatch);
        }
        let auth = pkt.auth_repr().ok_or(DropReason::AuthenticationFailed)?;
        if auth.nonce != *nonce || auth.confirmation != 0 {
            return Err(DropReason::AuthenticationFailed);
        }
        if let Some(c) = &self.cfg.credentials {
            let h = pkt.auth.as_ref().expect("checked above");
            if auth.client_id != c.client_id.as_slice() || !secure::verify(&c.secret, h, datagram) {
                return Err(DropReason::AuthenticationFailed);
            }
        }
        let mapped = pkt.origin.ok_or(DropReason::BadValue)?;
        if !is_global_unicast(*mapped.ip()) {
            return Err(DropReason::DestinationMappingNotGlobal);
        }
        let ip = &pkt.ipv6;
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        if dst != *rs_src || !src.is_link_local() || ip.hop_limit() != 255 || ip.next_header() != ip_protocol::ICMPV6 {
            return Err(DropReason::InvalidSolicitation);
        }
        let icmp = Icmpv6Packet::new_checked(ip.payload())?;
        let Icmpv6Repr::RouterAdvert(ra) = Icmpv6Repr::parse(&src, &dst, &icmp)? else {
            return Err(DropReason::InvalidSolicitation);
        };
        let pio = match (ra.prefix_info_count, ra.prefix_info) {
            (1, Some(p)) if p.prefix_len == 64 => p,
            _ => return Err(DropReason::BadValue),
        };
        let o = pio.prefix.octets();
        if o[4..8] != primary.octets() || o[0] & 0xe0 != 0x20 {
            return Err(DropReason::BadValue);
        }
        let mtu = ra.mtu.unwrap_or(1280);
        if !(1280..=65535).contains(&mtu) {
            return Err(DropReason::BadValue);
        }
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&o[..8]);
        if prefix[..4] == teredo_addr::PREFIX_EXPERIMENTAL.to_be_bytes() {
            // Old Microsoft servers: Miredo rewrites to the RFC prefix, so do we.
            prefix[..4].copy_from_slice(&teredo_addr::PREFIX.to_be_bytes());
        }
        Ok(Ra { mapped, prefix, mtu })
    }

    /// The address for `ra`: RFC 5991 random bits, drawn again only when the mapping
    /// changes.
    fn address_for(&mut self, ra: &Ra) -> Ipv6Addr {
        let bits = match self.random_bits {
            Some((m, b)) if m == ra.mapped => b,
            _ => {
                let b = (self.rng.below(0x0fff) + 1) as u16; // never 0: 0 reads as RFC 4380-only
                self.random_bits = Some((ra.mapped, b));
                b
            }
        };
        let mut o = [0u8; 16];
        o[..8].copy_from_slice(&ra.prefix);
        let t = TeredoAddr {
            prefix: u32::from_be_bytes([o[0], o[1], o[2], o[3]]),
            server: Ipv4Addr::new(o[4], o[5], o[6], o[7]),
            flags: Flags::new(false, bits),
            mapped: ra.mapped,
        };
        t.to_ipv6()
    }

    fn schedule_refresh(&mut self) {
        // RFC 4380: uniform in 75–100 % of the refresh interval.
        let r = self.cfg.refresh.as_millis() as u64;
        let jitter = self.rng.below(r / 4 + 1);
        self.refresh_after = Duration::from_millis(r - jitter);
    }

    fn come_up(&mut self, now: Duration, server: usize, ra: Ra) {
        let address = self.address_for(&ra);
        let changed = match self.phase {
            Phase::Up { address: old, .. } => old != address,
            _ => self.held_address != Some(address),
        };
        self.held_address = None;
        if changed {
            // Peers were learned under the old mapping: start afresh.
            self.peers = PeerTable::new(self.cfg.peer_capacity, Duration::from_secs(300), keys(&self.cfg));
            self.pending.clear();
            self.retests.clear();
            // Another network: another link.
            self.local_peers.clear();
            // Their random ports were for the old mapping too.
            for peer in self.ports.peers() {
                if let Some(e) = self.ports.remove(&peer) {
                    self.closing.extend((e.local != 0).then_some(e.local));
                }
            }
            let lost = self.held.clear();
            self.stats.drops.count_n(DropReason::ConnectivityTestFailed, lost);
            self.stats.addresses += 1;
        }
        // §5.4.3: behind a symmetric NAT that kept our port towards the primary, a random
        // port of ours keeps its number outside too; otherwise it is counted out in
        // sequence, and an Echo Test predicts it (§3.4).
        self.port_preserving =
            self.nat == NatKind::Symmetric && self.cfg.service_port != 0 && ra.mapped.port() == self.cfg.service_port;
        self.phase = Phase::Up { server, ra, address };
        self.update_mapped_inbound();
        if changed {
            // Tell the link at once: a peer there may be calling us already.
            self.next_announce = now;
            self.last_announce = None;
        }
        self.last_server_rx = now;
        self.maint = None;
        self.schedule_refresh();
        if changed || self.events.is_empty() {
            self.events.push_back(ClientEvent::Up {
                address,
                mtu: ra.mtu,
                server: self.cfg.servers[server].primary,
                nat: self.nat,
            });
        }
    }

    fn go_down(&mut self, now: Duration, why: &'static str, next_server: Option<usize>, tx: &mut impl Transmit) {
        if matches!(self.phase, Phase::Up { .. }) {
            self.events.push_back(ClientEvent::Down(why));
        }
        self.maint = None;
        self.home = None;
        self.mapped_inbound = false;
        match next_server {
            Some(s) => {
                self.qualify(now, s, tx);
                // The interface lost the address with the Down event.
                self.held_address = None;
            }
            None => {
                let backoff = match self.phase {
                    Phase::Offline { backoff, .. } => (backoff * 2).min(Duration::from_secs(120)),
                    _ => Duration::from_secs(10),
                };
                self.phase = Phase::Offline { retry_at: now + backoff, backoff };
            }
        }
    }

    fn is_server(&self, from: &SocketAddrV4) -> Option<usize> {
        if from.port() != TEREDO_PORT {
            return None;
        }
        self.cfg.servers.iter().position(|s| s.primary == *from.ip() || s.secondary == *from.ip())
    }

    fn current_server(&self) -> Option<usize> {
        match self.phase {
            Phase::Up { server, .. } | Phase::Primary { server, .. } | Phase::Secondary { server, .. } => Some(server),
            Phase::Offline { .. } => None,
        }
    }

    /// A datagram arrived on socket `via` from `from`.
    pub fn on_udp(&mut self, now: Duration, via: Via, from: SocketAddrV4, datagram: &[u8], tx: &mut impl Transmit) {
        let pkt = match TeredoPacket::parse(datagram) {
            Ok(p) => p,
            Err(e) => return self.dropped(e.into()),
        };
        if via == Via::Probe {
            return self.on_probe(datagram, &pkt, from);
        }
        if via == Via::Discovery {
            return self.on_discovery(now, from, &pkt, tx);
        }
        let ra_like = pkt.ipv6.src_addr().is_link_local() && pkt.ipv6.next_header() == ip_protocol::ICMPV6;
        if let Via::Port(port) = via {
            // A random port hears its peer, and the servers' answers to its Echo Test.
            if ra_like && self.is_server(&from).is_some() {
                return self.on_echo_answer(now, &pkt, tx);
            }
            return self.on_peer_packet(now, from, &pkt, port, tx);
        }
        if let Some(idx) = self.is_server(&from) {
            if ra_like {
                return self.on_ra(now, idx, from, datagram, &pkt, tx);
            }
            if Some(idx) == self.current_server() {
                self.last_server_rx = now;
            }
            return self.on_server_packet(now, &pkt, tx);
        }
        self.on_peer_packet(now, from, &pkt, 0, tx);
    }

    fn on_probe(&mut self, datagram: &[u8], pkt: &TeredoPacket<'_>, from: SocketAddrV4) {
        let Some((nonce, server)) = self.cone_nonce else {
            return self.dropped(DropReason::AuthenticationFailed);
        };
        let s = self.cfg.servers[server];
        match self.check_ra(
            datagram,
            pkt,
            from,
            Wanted { from: s.secondary, nonce, rs_src: RS_SOURCE_CONE, primary: s.primary },
        ) {
            Ok(_) => {
                self.cone_seen = true;
                self.cone_nonce = None;
                if self.nat == NatKind::Restricted {
                    self.nat = NatKind::Cone;
                    self.events.push_back(ClientEvent::Nat(NatKind::Cone));
                }
            }
            Err(r) => self.dropped(r),
        }
    }

    fn on_ra(
        &mut self,
        now: Duration,
        idx: usize,
        from: SocketAddrV4,
        datagram: &[u8],
        pkt: &TeredoPacket<'_>,
        tx: &mut impl Transmit,
    ) {
        let s = self.cfg.servers[idx];
        match self.phase {
            Phase::Primary { server, nonce, .. } if server == idx => {
                match self.check_ra(
                    datagram,
                    pkt,
                    from,
                    Wanted { from: s.primary, nonce, rs_src: RS_SOURCE_RESTRICTED, primary: s.primary },
                ) {
                    Ok(first) => {
                        self.stats.advertisements += 1;
                        let nonce = self.nonce();
                        self.send_rs(s.secondary, nonce, tx);
                        self.phase = Phase::Secondary { server, first, nonce, sent_at: now, tries: 1 };
                    }
                    Err(r) => self.dropped(r),
                }
            }
            Phase::Secondary { server, first, nonce, .. } if server == idx => {
                match self.check_ra(
                    datagram,
                    pkt,
                    from,
                    Wanted { from: s.secondary, nonce, rs_src: RS_SOURCE_RESTRICTED, primary: s.primary },
                ) {
                    Ok(second) => {
                        self.stats.advertisements += 1;
                        let nat = if second.mapped != first.mapped {
                            NatKind::Symmetric
                        } else if self.cone_seen {
                            NatKind::Cone
                        } else {
                            NatKind::Restricted
                        };
                        self.nat = nat;
                        if nat == NatKind::Symmetric && !self.cfg.symmetric_nat_support {
                            self.events.push_back(ClientEvent::Nat(nat));
                            self.go_down(now, "symmetric NAT: no Teredo address (RFC 4380)", None, tx);
                        } else {
                            self.come_up(now, server, first);
                        }
                    }
                    Err(r) => self.dropped(r),
                }
            }
            Phase::Up { server, ra: old, .. } if server == idx => {
                let Some((nonce, _, _)) = self.maint else {
                    return self.on_home_ra(now, idx, from, datagram, pkt, tx);
                };
                match self.check_ra(
                    datagram,
                    pkt,
                    from,
                    Wanted { from: s.primary, nonce, rs_src: RS_SOURCE_RESTRICTED, primary: s.primary },
                ) {
                    Ok(ra) => {
                        self.stats.advertisements += 1;
                        self.last_server_rx = now;
                        if ra.mapped != old.mapped || ra.prefix != old.prefix {
                            // A new mapping: a new address; check the NAT again too.
                            self.qualify(now, server, tx);
                        } else {
                            self.come_up(now, server, ra);
                        }
                    }
                    Err(r) => self.dropped(r),
                }
            }
            _ => self.on_home_ra(now, idx, from, datagram, pkt, tx),
        }
    }

    /// An answer from the first server while we use another: go back to it.
    fn on_home_ra(
        &mut self,
        now: Duration,
        idx: usize,
        from: SocketAddrV4,
        datagram: &[u8],
        pkt: &TeredoPacket<'_>,
        tx: &mut impl Transmit,
    ) {
        let Some((nonce, _)) = self.home else {
            return self.dropped(DropReason::AuthenticationFailed);
        };
        let s = self.cfg.servers[idx];
        if idx != 0
            || self
                .check_ra(
                    datagram,
                    pkt,
                    from,
                    Wanted { from: s.primary, nonce, rs_src: RS_SOURCE_RESTRICTED, primary: s.primary },
                )
                .is_err()
        {
            return self.dropped(DropReason::AuthenticationFailed);
        }
        self.home = None;
        self.qualify(now, 0, tx);
    }

    fn our_address(&self, dst: &Ipv6Addr) -> bool {
        self.address() == Some(*dst)
    }

    fn deliver(&mut self, packet: &[u8], tx: &mut impl Transmit) {
        tx.tun(packet);
        self.stats.delivered += 1;
        self.stats.delivered_bytes += packet.len() as u64;
    }

    /// From the server, not an RA: indirect bubbles (answer the origin with a direct
    /// bubble) and relayed ICMPv6.
    fn on_server_packet(&mut self, now: Duration, pkt: &TeredoPacket<'_>, tx: &mut impl Transmit) {
        let Some(me) = self.address() else {
            return self.dropped(DropReason::LocalDestination);
        };
        let ip = &pkt.ipv6;
        let src = ip.src_addr();
        if !self.our_address(&ip.dst_addr()) {
            return self.dropped(DropReason::LocalDestination);
        }
        // Miredo's relay sends its indirect bubbles from a link-local address: fine for
        // a bubble, which is answered and consumed; nothing link-local reaches the host.
        if !pkt.is_bubble() && !src.is_forwardable() {
            return self.dropped(DropReason::SourceMismatch);
        }
        let nonce = self.nonce_in(pkt);
        let teredo = TeredoAddr::decode(&src).filter(|_| pkt.is_bubble() && !src.is_link_local());
        // Hairpinning (§5.6.4.2): a malformed Alternate Address trailer spoils the bubble.
        // At most two (local and UPnP, all a client can know; RFC 6081 §4.3 SHOULD).
        let mut alternates = [None; 2];
        if nonce != 0 && self.cfg.hairpinning {
            if let Some(t) = pkt.trailers.find(trailer_type::ALTERNATE_ADDRESS) {
                match TrailerRepr::parse(&t) {
                    Ok(TrailerRepr::AlternateAddress(list)) => {
                        for (slot, a) in alternates.iter_mut().zip(list.iter()) {
                            *slot = Some(a);
                        }
                    }
                    _ => return self.dropped(DropReason::BadValue),
                }
            }
        }
        // Whether this is the peer's answer to an indirect bubble of ours.
        let first = self.peers.get(&src).is_none_or(|p| p.nonce_sent == 0);
        let answer_indirect = match teredo {
            Some(t) => self.remember_nonce(now, src, t, nonce),
            None => false,
        };
        let new_peer_port = teredo.is_some() && nonce != 0 && self.remember_peer_port(now, src, pkt);
        let mut echo_running = false;
        if let (Some(t), true) = (teredo, answer_indirect) {
            echo_running = self.open_random_port(now, &me, src, t, tx);
        }
        // Whoever is behind an indirect bubble waits for our direct one (RFC 4380
        // §5.2.3; practice answers with a bubble rather than a ping): to the mapping a
        // trusted peer proved (RFC 6081 §6.1 step 10), else to the origin indication,
        // else to the mapping its Teredo address embeds. It echoes the peer's nonce.
        // A native host's bubble comes from the relay that holds its packets for us now,
        // which the origin names: after a relay change (an anycast relay failed) that is
        // not the relay we trusted, and only a bubble to it lets its packets through.
        let src_teredo = TeredoAddr::decode(&src).is_some();
        let origin = pkt.origin.or_else(|| TeredoAddr::decode(&src).map(|t| t.mapped));
        let proven = self
            .peers
            .get(&src)
            .filter(|p| p.trusted && (src_teredo || pkt.origin.is_none_or(|o| o == p.mapped)))
            .map(|p| p.mapped);
        let to = proven.map(|m| self.peer_target(&src, m)).or(origin);
        let trusted = proven.is_some();
        if let Some(o) = to.filter(|o| trusted || self.unreachable_embedded(*o.ip()).is_none()) {
            let n = self.bubble(&me, &src, self.primary_echo(&src, nonce));
            udp_via(tx, if trusted { self.ports.via(&src) } else { 0 }, o, &self.scratch[..n]);
            // With our port mapped, a peer whose origin is not its embedded mapping (a
            // symmetric NAT) gets one at its embedded mapping too: if it holds a
            // mapping as well, that one passes (RFC 6081 §5.3.4.2).
            let extra = answer_indirect && self.mapped_inbound;
            if let (false, Some(t)) = (trusted, teredo.filter(|t| extra && t.mapped != o && t.mapped.ip() == o.ip())) {
                if self.unreachable_embedded(*t.mapped.ip()).is_none() {
                    tx.udp(t.mapped, &self.scratch[..n]);
                    self.stats.bubbles += 1;
                }
            }
            self.stats.bubbles += 1;
            // A native host's last transmission is our traffic's (its silence is timed
            // from it): bubbles that anyone can draw through the server do not move it.
            if let Some(mut p) = self.peers.get_mut(&src).filter(|_| src_teredo) {
                p.last_tx = now;
            }
            // Our echo of its nonce now proves us to a peer met through hairpinning:
            // what waited for it follows the bubble.
            if trusted && nonce != 0 {
                self.flush(&src, o, tx);
            }
        }
        if answer_indirect {
            // A direct bubble to each address the peer listed, with its nonce: one may
            // be on our side of a NAT that does not hairpin.
            let own = self.local;
            for to in alternates.into_iter().flatten().filter(|a| Some(*a) != own && !a.ip().is_loopback()) {
                let n = self.bubble(&me, &src, nonce);
                tx.udp(to, &self.scratch[..n]);
                self.stats.bubbles += 1;
            }
            if let Some(t) = teredo {
                if !echo_running && !self.random_port_bubbles(now, &me, src, t, nonce, Bubbling::Heard { first }, tx) {
                    self.send_indirect(now, &me, src, t.server, tx);
                }
            }
        } else if let (Some(t), true) = (teredo, nonce != 0 && (!first || (new_peer_port && self.held.allow_test(now))))
        {
            // The answer to our own indirect bubble, or a port to try that we did not
            // know: where to send from our random port is known now, not at our next
            // retry.
            self.random_port_bubbles(now, &me, src, t, nonce, Bubbling::Heard { first }, tx);
        }
        if pkt.is_bubble() {
            return;
        }
        if ip.next_header() == ip_protocol::ICMPV6 {
            self.deliver(ip.packet(), tx);
        } else {
            self.dropped(DropReason::NotBubbleOrIcmpv6);
        }
    }

    /// The random port an indirect bubble from `src` announces (§5.4.4.4): kept when
    /// none was known, or when the old one went quiet (no exchange for 30 s).
    /// True when the port is new.
    fn remember_peer_port(&mut self, now: Duration, src: Ipv6Addr, pkt: &TeredoPacket<'_>) -> bool {
        // RFC 6081 gives the trailer type 0x05 (§4.5) and IANA 0x02 (§9): take either.
        let announced = [trailer_type::RANDOM_PORT, trailer_type::RANDOM_PORT_IANA].into_iter().find_map(|k| {
            let t = pkt.trailers.find(k)?;
            (t.value.len() == 2).then(|| u16::from_be_bytes([t.value[0], t.value[1]])).filter(|&p| p != 0)
        });
        let Some(port) = announced else { return false };
        let quiet = self.peers.get(&src).is_none_or(|p| {
            now.saturating_sub(p.last_rx) >= Duration::from_secs(30)
                && now.saturating_sub(p.last_tx) >= Duration::from_secs(30)
        });
        match self.ports.entry(src, now) {
            Some(e) if e.peer == 0 || (e.peer != port && quiet) => {
                e.peer = port;
                true
            }
            _ => false,
        }
    }

    /// The bubbles of port prediction to a peer we do not trust yet (RFC 6081 §5.4.4.3,
    /// §5.5.4.1). Behind a symmetric NAT, a random port of ours for the peer is opened
    /// (and announced by our indirect bubbles), and an Echo Test started if the NAT
    /// does not keep ports. Bubbles go from it only once the peer's indirect bubble
    /// said where the peer will answer from: its own random port, or (none announced)
    /// the mapping its address embeds; a bubble from our random port to any other
    /// place would spend the port's one preserved mapping. Without a random port of
    /// ours, a bubble goes from the service port to the port the peer announced.
    ///
    /// Linux NATs make an unanswered packet poison the port it reached (see the notes
    /// on the opening bubble), so a bubble the peer's NAT will drop must die before it:
    /// the first side to hear of the other's port (`Bubbling::Heard { first: true }`)
    /// opens its own NAT with a short TTL; the side that hears back, whose peer has
    /// opened its NAT by then, sends with the full TTL. True while an Echo Test holds
    /// the indirect bubble back.
    #[allow(clippy::too_many_arguments)]
    fn random_port_bubbles(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        dst: Ipv6Addr,
        t: TeredoAddr,
        echo: u32,
        how: Bubbling,
        tx: &mut impl Transmit,
    ) -> bool {
        if self.open_random_port(now, me, dst, t, tx) {
            return true;
        }
        if !self.cfg.symmetric_nat_support || self.peers.get(&dst).is_none_or(|p| p.trusted) {
            return false;
        }
        let Some(e) = self.ports.get(&dst) else { return false };
        if e.echo.is_some() {
            return true;
        }
        let (local, predicted, peer) = (e.local, e.predicted, e.peer);
        let heard =
            matches!(how, Bubbling::Heard { .. }) || self.peers.get(&dst).is_some_and(|p| p.nonce_received != 0);
        let to = SocketAddrV4::new(*t.mapped.ip(), if peer != 0 { peer } else { t.mapped.port() });
        let ttl = match how {
            Bubbling::Heard { first: true } if self.cfg.opening_bubble_ttl > 0 => Some(self.cfg.opening_bubble_ttl),
            _ => None,
        };
        if local != 0 && (peer != 0 || heard) {
            let trailer_echo = (echo != 0).then(|| TrailerRepr::Nonce(echo.to_be_bytes()));
            let mut n = self.bubble_with(me, &dst, trailer_echo);
            if predicted != 0 {
                n += TrailerRepr::RandomPort(predicted).emit(&mut self.scratch[n..]).expect("fits");
            }
            tx.udp_from(local, to, &self.scratch[..n], ttl);
            self.stats.bubbles += 1;
        } else if local == 0 && peer != 0 {
            let n = self.bubble(me, &dst, echo);
            match ttl {
                Some(ttl) => tx.udp_hop_limited(to, &self.scratch[..n], ttl),
                None => tx.udp(to, &self.scratch[..n]),
            }
            self.stats.bubbles += 1;
        }
        false
    }

    /// Behind a symmetric NAT, a random port for `dst`, a peer we do not trust yet,
    /// unless it has one: its number is the prediction behind a port-preserving NAT,
    /// and an Echo Test starts behind any other (true then). Opened before anything
    /// carrying the peer's nonce goes to it, so that all of that leaves from the one
    /// port the peer will take us at.
    fn open_random_port(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        dst: Ipv6Addr,
        t: TeredoAddr,
        tx: &mut impl Transmit,
    ) -> bool {
        // A mapped port needs no prediction: anyone reaches it.
        let wanted = self.cfg.symmetric_nat_support
            && self.nat == NatKind::Symmetric
            && !self.mapped_inbound
            && self.peers.get(&dst).is_some_and(|p| !p.trusted)
            && self.ports.get(&dst).is_none_or(|e| e.local == 0);
        if !wanted {
            return false;
        }
        let Some(e) = self.ports.entry(dst, now) else { return false };
        let Some(port) = tx.open_port() else { return false };
        e.local = port;
        if self.port_preserving {
            e.predicted = port;
            return false;
        }
        self.start_echo_test(now, me, dst, t, 1, tx)
    }

    /// The nonce our bubbles from the service port may echo to `peer`: none while a
    /// random port of ours is open for it (the peer must take us there, not here).
    fn primary_echo(&self, peer: &Ipv6Addr, echo: u32) -> u32 {
        match self.ports.get(peer) {
            Some(e) if e.local != 0 && !e.via_local => 0,
            _ => echo,
        }
    }

    /// The Echo Test (§5.5.4.1.1), from `dst`'s random port: a solicitation to the
    /// primary server, a bubble to the peer, a solicitation to the secondary; the two
    /// answers bracket the port the bubble went out from. The failover timer waits
    /// `tries` seconds. Returns true: the indirect bubble waits for the answers.
    fn start_echo_test(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        dst: Ipv6Addr,
        t: TeredoAddr,
        tries: u8,
        tx: &mut impl Transmit,
    ) -> bool {
        let Some(server) = self.current_server().map(|i| self.cfg.servers[i]) else { return false };
        let Some(local) = self.ports.get(&dst).map(|e| e.local).filter(|&l| l != 0) else { return false };
        let nonces = [self.nonce(), self.nonce()];
        let to = self.ports.get(&dst).map_or(t.mapped, |e| {
            SocketAddrV4::new(*t.mapped.ip(), if e.peer != 0 { e.peer } else { t.mapped.port() })
        });
        let n = self.rs(RS_SOURCE_RESTRICTED, nonces[0]);
        tx.udp_from(local, SocketAddrV4::new(server.primary, TEREDO_PORT), &self.scratch[..n], None);
        let n = self.bubble(me, &dst, 0);
        let ttl = (self.cfg.opening_bubble_ttl > 0).then_some(self.cfg.opening_bubble_ttl);
        tx.udp_from(local, to, &self.scratch[..n], ttl);
        self.stats.bubbles += 1;
        let n = self.rs(RS_SOURCE_RESTRICTED, nonces[1]);
        tx.udp_from(local, SocketAddrV4::new(server.secondary, TEREDO_PORT), &self.scratch[..n], None);
        if let Some(e) = self.ports.get_mut(&dst) {
            e.echo = Some(EchoTest { nonces, ports: [0, 0], tries, due: now + Duration::from_secs(u64::from(tries)) });
        }
        self.stats.echo_tests += 1;
        true
    }

    /// A server's answer on a random port: one of an Echo Test's two (§5.5.4.4). Never
    /// taken for qualification: it reports the random port's mapping, not ours.
    fn on_echo_answer(&mut self, now: Duration, pkt: &TeredoPacket<'_>, tx: &mut impl Transmit) {
        let (Some(auth), Some(origin)) = (pkt.auth.as_ref(), pkt.origin) else {
            return self.dropped(DropReason::AuthenticationFailed);
        };
        let Some((peer, i)) = self.ports.echo_nonce(&auth.nonce()) else {
            return self.dropped(DropReason::AuthenticationFailed);
        };
        let Some(e) = self.ports.get_mut(&peer) else { return };
        let Some(test) = e.echo.as_mut() else { return };
        test.ports[i] = origin.port();
        let Some(predicted) = test.prediction() else { return };
        e.predicted = predicted;
        e.echo = None;
        self.echo_test_done(now, peer, tx);
    }

    /// An Echo Test ended, with a prediction or without: the indirect bubble it held
    /// back goes now.
    fn echo_test_done(&mut self, now: Duration, peer: Ipv6Addr, tx: &mut impl Transmit) {
        let (Some(me), Some(t)) = (self.address(), TeredoAddr::decode(&peer)) else { return };
        if self.peers.get(&peer).is_some_and(|p| !p.trusted) {
            self.send_indirect(now, &me, peer, t.server, tx);
        }
    }

    /// Time for the random ports: Echo Tests that got no answer (§5.5.2.2: one more
    /// after 1 s, then the indirect bubble without a prediction after 2 s), keep-alive
    /// bubbles to peers reached through a random port (§5.4.2.1: every 30 s without
    /// data, 20 at most), and ports whose peer is gone are closed.
    fn tend_ports(&mut self, now: Duration, tx: &mut impl Transmit) {
        for port in self.closing.drain(..) {
            tx.close_port(port);
        }
        if self.ports.is_empty() {
            return;
        }
        let me = self.address();
        for peer in self.ports.peers() {
            let Some(p) = self.peers.get(&peer).map(|p| (p.trusted, p.mapped)) else {
                if let Some(e) = self.ports.remove(&peer) {
                    if e.local != 0 {
                        tx.close_port(e.local);
                    }
                }
                continue;
            };
            let Some(e) = self.ports.get_mut(&peer) else { continue };
            // A port the peer never answered on, or an announcement nobody followed, is
            // let go after a while: forged indirect bubbles must not hold the table.
            let stale = !e.via_local && now.saturating_sub(e.touched) >= STALE_PORT;
            if stale && e.echo.is_none() {
                if e.local != 0 {
                    tx.close_port(e.local);
                }
                self.ports.remove(&peer);
                continue;
            }
            if let Some(test) = e.echo.filter(|t| now >= t.due) {
                let (Some(me), Some(t)) = (me, TeredoAddr::decode(&peer)) else {
                    // Not qualified: the test ends here, and the stale rule closes its port.
                    e.echo = None;
                    continue;
                };
                if test.tries < 2 {
                    self.start_echo_test(now, &me, peer, t, test.tries + 1, tx);
                } else {
                    e.echo = None;
                    self.echo_test_done(now, peer, tx);
                }
                continue;
            }
            if e.via_local && now.saturating_sub(e.refreshed_at) >= REFRESH {
                e.refreshed_at = now;
                if now.saturating_sub(e.last_data) < REFRESH {
                    e.refreshes = 0;
                } else if e.refreshes < MAX_REFRESHES {
                    e.refreshes += 1;
                    let (local, (trusted, mapped)) = (e.local, p);
                    if let (true, Some(me)) = (trusted, me) {
                        let n = self.bubble(&me, &peer, 0);
                        tx.udp_from(local, mapped, &self.scratch[..n], None);
                        self.stats.bubbles += 1;
                    }
                }
            }
        }
    }

    /// An indirect bubble from Teredo peer `src`, carrying `nonce` (0: none): keep the
    /// nonce to echo (RFC 6081 §5.2.4.3), and say whether to answer with an indirect
    /// bubble of ours: the peer speaks the extension, we do not trust it yet, and
    /// neither its bubble budget nor the shared echo budget is spent. A peer entry is
    /// made for that answer's nonce (untrusted entries give way when the table is full).
    fn remember_nonce(&mut self, now: Duration, src: Ipv6Addr, t: TeredoAddr, nonce: u32) -> bool {
        let reachable =
            self.unreachable_embedded(*t.mapped.ip()).is_none() && self.unreachable_embedded(t.server).is_none();
        // A new entry only within the shared budget: forged indirect bubbles must not
        // crowd out the peers the host is reaching.
        let mut budget_spent = false;
        if nonce != 0 && reachable && self.peers.get(&src).is_none() {
            if !self.held.allow_test(now) {
                return false;
            }
            budget_spent = true;
            let _ = self.peers.insert(Peer::new(src, t.mapped, now), now);
        }
        let Some(mut p) = self.peers.get_mut(&src) else {
            return false;
        };
        p.nonce_received = nonce;
        p.knows_trailers |= nonce != 0;
        let may = nonce != 0
            && reachable
            && !p.trusted
            && p.bubbles < PEER_TRIES
            && (p.bubbles == 0 || now.saturating_sub(p.last_tx) >= RETRY);
        may && (budget_spent || self.held.allow_test(now))
    }

    /// An indirect bubble to `dst` through its server `server`, with a fresh nonce that
    /// its direct answer must echo (RFC 6081 §5.2.4.1).
    fn send_indirect(&mut self, now: Duration, me: &Ipv6Addr, dst: Ipv6Addr, server: Ipv4Addr, tx: &mut impl Transmit) {
        let nonce = if self.cfg.symmetric_nat_support { self.bubble_nonce() } else { 0 };
        let Some(mut p) = self.peers.get_mut(&dst) else {
            return;
        };
        p.nonce_sent = nonce;
        p.last_tx = now;
        p.bubbles += 1;
        let reached = p.trusted;
        // Our local address goes only to a peer we are reaching ourselves (the host has
        // packets for it), never in answer to an indirect bubble anyone could forge.
        let ours = p.waiting;
        drop(p);
        let mut n = self.bubble(me, &dst, nonce);
        // Port prediction (§5.4.4.2 b, §5.5.4.2): the port the peer should try.
        let predicted = self.ports.get(&dst).map_or(0, |e| e.predicted);
        if predicted != 0 && !reached && nonce != 0 {
            n += TrailerRepr::RandomPort(predicted).emit(&mut self.scratch[n..]).expect("fits");
        }
        // Hairpinning (§5.6.4.1): our local address, while the peer is not reached, and
        // only with a nonce to prove the bubbles it brings; not when it is our mapping
        // (no NAT in between: nothing to add).
        let mapped = match &self.phase {
            Phase::Up { ra, .. } => Some(ra.mapped),
            _ => None,
        };
        let list = nonce != 0 && !reached && ours && self.cfg.hairpinning;
        if let Some(local) = self.local.filter(|l| list && Some(*l) != mapped) {
            n += emit_alternate_addresses(&[local], &mut self.scratch[n..]).expect("fits");
        }
        tx.udp(SocketAddrV4::new(server, TEREDO_PORT), &self.scratch[..n]);
        self.stats.bubbles += 1;
    }

    fn flush(&mut self, addr: &Ipv6Addr, to: SocketAddrV4, tx: &mut impl Transmit) {
        self.retests.remove(addr);
        let Some(mut p) = self.peers.get_mut(addr) else {
            return;
        };
        p.waiting = false;
        p.set_nonce(None);
        p.solicitations = 0;
        let empty = p.queue().is_empty();
        drop(p);
        if empty {
            return;
        }
        let via = self.ports.via(addr);
        let to = self.peer_target(addr, to);
        let Some(mut q) = self.peers.get_mut(addr).and_then(|mut p| p.take_queue()) else {
            return;
        };
        while let Some(packet) = q.next_packet() {
            udp_via(tx, via, to, packet);
            self.stats.sent += 1;
            self.stats.sent_bytes += packet.len() as u64;
        }
    }

    /// A packet from a peer, on the service port (`port` 0) or on a random port.
    fn on_peer_packet(
        &mut self,
        now: Duration,
        from: SocketAddrV4,
        pkt: &TeredoPacket<'_>,
        port: u16,
        tx: &mut impl Transmit,
    ) {
        let ip = &pkt.ipv6;
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        if !self.our_address(&dst) {
            return self.dropped(DropReason::LocalDestination);
        }
        if !src.is_forwardable() {
            // Forged RAs and the like never reach the host stack, nor does anything
            // posing as the host's own site (unique-local) or as loopback.
            return self.dropped(DropReason::SourceMismatch);
        }
        // A random port hears only the peer it was opened for.
        if port != 0 && self.ports.get(&src).map(|e| e.local) != Some(port) {
            return self.dropped(DropReason::SourceMismatch);
        }
        // 2. The echo reply of our connectivity test, from wherever it comes: the relay
        // it came through serves the peer from now on (also when the peer was trusted
        // through another relay: that is how a relay change is followed). The reply is
        // ours, not the host's.
        if self.peers.get(&src).and_then(|p| p.nonce()).is_some_and(|n| is_echo_reply_with(ip, &n)) {
            if let Some(mut p) = self.peers.get_mut(&src) {
                p.trusted = true;
                p.mapped = from;
                p.last_rx = now;
                p.bubbles = 0;
            }
            self.release_held(&src, from, tx);
            return self.flush(&src, from, tx);
        }
        let embedded = TeredoAddr::decode(&src);
        let nonce = self.nonce_in(pkt);
        // A peer proven at a port its address does not embed: behind a symmetric NAT.
        let mut learned_port = false;
        // Accepted on the strength of our nonce.
        let mut proven = false;
        // Trusted at this very endpoint before this packet (may be answered): rule 1.
        let mut known = false;
        // A peer heard by local discovery writing from where it announced itself takes
        // our packets from our own local address too (it heard ours): nothing to prove.
        let heard_here = !self.local_peers.is_empty() && self.local_peers.get(&src, now) == Some(from);
        let accepted = match self.peers.get_mut(&src) {
            // 1. A trusted peer from its mapping.
            Some(mut p) if p.trusted && p.mapped == from => {
                p.last_rx = now;
                p.bubbles = 0;
                known = true;
                true
            }
            // RFC 6081 §5.2.4.4: a direct bubble echoing our last indirect bubble's
            // nonce, from wherever the peer's NAT sent it; that is its mapping now.
            // A peer that never sent a nonce (Miredo) answering our bubbles from another
            // port of its address is taken too, while we wait for it: the extension
            // would drop it, and a symmetric-NAT Miredo client could not be reached.
            // A nonce proves one exchange, once, and only while we are still reaching the
            // peer: a trusted peer's mapping is never moved by a guessed or replayed one.
            Some(mut p)
                if ((!p.trusted || p.waiting) && nonce != 0 && p.nonce_sent == nonce && embedded.is_some())
                    || (p.waiting
                        && pkt.is_bubble()
                        && nonce == 0
                        && !p.knows_trailers
                        && embedded.is_some_and(|t| t.mapped.ip() == from.ip())) =>
            {
                learned_port =
                    (!p.trusted || p.mapped != from) && embedded.is_some_and(|t| t.mapped != from) && !heard_here;
                proven = nonce != 0;
                if proven {
                    p.nonce_sent = 0;
                }
                p.trusted = true;
                p.mapped = from;
                p.last_rx = now;
                p.bubbles = 0;
                true
            }
            _ => false,
        };
        let accepted = accepted || {
            // 3. A Teredo source whose embedded mapping is where it came from.
            // 5. Or a peer local discovery found, from where it was heard.
            let local = || embedded.is_some() && self.local_peers.get(&src, now) == Some(from);
            // Never for an embedded address on a subnet we are attached to: that host
            // is met by local discovery, not this way (CVE-2006-6264).
            let direct = embedded.is_some_and(|t| t.mapped == from && self.unreachable_embedded(*from.ip()).is_none());
            if direct || local() {
                // A peer proven elsewhere (behind a symmetric NAT) keeps that mapping while
                // it is valid: a packet claiming the embedded one is taken (RFC 4380 case
                // 3) but moves nothing.
                let elsewhere = self.peers.get(&src).is_some_and(|p| p.is_valid(now) && p.mapped != from);
                let mut p = Peer::new(src, from, now);
                p.trusted = true;
                p.last_rx = now;
                // Trusted afresh at this mapping; what it queued, its last transmission
                // and what it told us of itself stay.
                let renewed = !elsewhere
                    && self
                        .peers
                        .get_mut(&src)
                        .map(|mut old| {
                            p.last_tx = old.last_tx;
                            p.nonce_received = old.nonce_received;
                            p.knows_trailers = old.knows_trailers;
                            *old = p;
                            old.set_nonce(None);
                        })
                        .is_some();
                elsewhere || renewed || self.peers.insert(p, now).is_ok()
            } else {
                false
            }
        };
        // Which of our sockets carries this peer from now on (RFC 6081 §5.4.4.5).
        let mut new_route = false;
        if accepted && !self.ports.is_empty() {
            if let Some(e) = self.ports.get_mut(&src) {
                if port != 0 && e.local == port {
                    // It answered on our random port: everything to it leaves from there.
                    new_route = !e.via_local;
                    e.via_local = true;
                    e.touched = now;
                } else if port == 0 && proven && e.local != 0 && !e.via_local {
                    // It answered on the service port: the random one is not needed.
                    tx.close_port(e.local);
                    (e.local, e.predicted, e.echo) = (0, 0, None);
                }
            }
        }
        // The peer now sees us where our address does not say (its proven port
        // changed, or our packets leave from a random port): it takes them only once we
        // echoed a nonce of its own.
        let reprove = learned_port || new_route;
        let echo = if reprove { self.peers.get(&src).map_or(0, |p| p.nonce_received) } else { 0 };
        if reprove && echo != 0 {
            // Tell it at once, through the port its NAT opened towards us: its own
            // bubbles to our address's mapping may all have been dropped, and it
            // would otherwise wait for its next indirect bubble's answer (RFC 6081 §6.1
            // step 10) to trust us.
            let n = self.bubble(&dst, &src, echo);
            let to = self.peer_target(&src, from);
            udp_via(tx, port, to, &self.scratch[..n]);
            self.stats.bubbles += 1;
        }
        // Without its nonce yet (its indirect bubble is still on its way through the
        // servers), what the host queued waits for it: sent now, it would be dropped.
        let hold = reprove && echo == 0;
        if accepted {
            if pkt.is_bubble() && !pkt.trailers.is_empty() {
                self.on_peer_trailers(now, &dst, &src, from, port, known, pkt, tx);
            }
            if !hold {
                self.flush(&src, from, tx);
            }
            if !pkt.is_bubble() {
                self.deliver(ip.packet(), tx);
            }
            return;
        }
        // 6. A native source through an endpoint not (yet) its own: hold and test.
        if embedded.is_none() && !pkt.is_bubble() {
            return self.first_contact(now, from, src, ip.packet(), tx);
        }
        self.dropped(DropReason::SourceMismatch)
    }

    /// A discovery bubble heard on the link (RFC 4380 §5.2.8): from a Teredo address
    /// behind our own NAT (its address embeds our public one, Miredo's check) and from
    /// our own network (the same /24: the client does not know its netmask). The peer is
    /// noted, not trusted, and gets a bubble straight back; a peer new to us also gets
    /// our announcement (it may have missed our last one).
    fn on_discovery(&mut self, now: Duration, from: SocketAddrV4, pkt: &TeredoPacket<'_>, tx: &mut impl Transmit) {
        let (Some(me), Phase::Up { ra, .. }) = (self.address(), &self.phase) else {
            return self.dropped(DropReason::LocalDestination);
        };
        let ours = *ra.mapped.ip();
        let ip = &pkt.ipv6;
        let src = ip.src_addr();
        if !self.cfg.local_discovery || !pkt.is_bubble() || ip.dst_addr() != ALL_NODES || src == me {
            return self.dropped(DropReason::LocalDestination);
        }
        let on_link = self.local.is_some_and(|l| u32::from(*l.ip()) >> 8 == u32::from(*from.ip()) >> 8);
        match TeredoAddr::decode(&src) {
            Some(t) if *t.mapped.ip() == ours && on_link => {}
            _ => return self.dropped(DropReason::SourceMismatch),
        }
        // Only a peer new to us (or moved) is answered, and announced to: a flood of
        // announcements, or forged ones naming a victim on our link, draws nothing more.
        if self.local_peers.heard(src, from, now) {
            let n = self.bubble(&me, &src, 0);
            tx.udp(from, &self.scratch[..n]);
            self.stats.bubbles += 1;
            // It may have missed our last announcement (it was not there yet): ours
            // again now, unless one went out a moment ago.
            self.announce_within(now, Duration::from_millis(200), tx);
        }
    }

    /// A discovery bubble to the link (RFC 4380 §5.2.8), at most one per bubble
    /// spacing; the next one in 200 to 300 s.
    fn announce(&mut self, now: Duration, tx: &mut impl Transmit) {
        self.announce_within(now, RETRY, tx);
    }

    /// An announcement, unless the last one went out less than `spacing` ago.
    fn announce_within(&mut self, now: Duration, spacing: Duration, tx: &mut impl Transmit) {
        let Some(me) = self.address() else { return };
        if !self.cfg.local_discovery || self.last_announce.is_some_and(|t| now.saturating_sub(t) < spacing) {
            return;
        }
        let n = emit_bubble(&me, &ALL_NODES, 1, &mut self.scratch).expect("fits");
        tx.udp(GROUP, &self.scratch[..n]);
        self.stats.bubbles += 1;
        self.last_announce = Some(now);
        self.next_announce = now + Duration::from_secs(200 + self.rng.below(101));
    }

    /// Trailers of an accepted direct bubble from `src` at `from`: the peer knows RFC
    /// 6081, and a Server Load Reduction solicitation is answered with an advertisement
    /// (§5.7.4.2) — only now that the bubble passed the acceptance rules, so a forged
    /// solicitation cannot make us send to an address of its choosing.
    #[allow(clippy::too_many_arguments)]
    fn on_peer_trailers(
        &mut self,
        now: Duration,
        me: &Ipv6Addr,
        src: &Ipv6Addr,
        from: SocketAddrV4,
        port: u16,
        known: bool,
        pkt: &TeredoPacket<'_>,
        tx: &mut impl Transmit,
    ) {
        if !self.cfg.symmetric_nat_support && !self.cfg.server_load_reduction {
            return;
        }
        let solicited = matches!(
            pkt.trailers.get(trailer_type::NEIGHBOR_DISCOVERY),
            Some(TrailerRepr::NeighborDiscovery(DiscoveryType::Solicitation))
        );
        // Only a peer trusted at this endpoint before this packet is answered, once per
        // bubble spacing: a packet spoofed from an address its source embeds would
        // otherwise turn us into a reflector.
        let mut answer = false;
        if let Some(mut p) = self.peers.get_mut(src) {
            p.knows_trailers = true;
            answer = known && (p.last_tx + RETRY <= now || p.last_tx == Duration::ZERO);
            if answer && solicited {
                p.last_tx = now;
            }
        }
        if solicited && answer && self.cfg.server_load_reduction {
            let ad = TrailerRepr::NeighborDiscovery(DiscoveryType::Advertisement);
            let n = self.bubble_with(me, src, Some(ad));
            udp_via(tx, port, from, &self.scratch[..n]);
            self.stats.bubbles += 1;
            self.stats.peer_advertisements += 1;
        }
    }

    /// A native host spoke first, through `from`: hold its packet and run the direct
    /// IPv6 connectivity test to it (RFC 4380 §5.2.3 case 6, §5.2.9), within the shared
    /// first-contact budget.
    fn first_contact(
        &mut self,
        now: Duration,
        from: SocketAddrV4,
        src: Ipv6Addr,
        packet: &[u8],
        tx: &mut impl Transmit,
    ) {
        // Held first: over budget, nothing else is spent (not even a peer entry).
        if let Err(r) = self.held.hold(src, from, packet, now) {
            return self.dropped(r);
        }
        if self.peers.get(&src).is_none_or(|p| !p.waiting) {
            self.make_room_to_wait();
        }
        if self.peers.get(&src).is_none() {
            let unknown = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
            if self.peers.insert(Peer::new(src, unknown, now), now).is_err() {
                // This packet, and any held before the entry went away.
                let n = self.held.discard(&src);
                self.stats.drops.count_n(DropReason::TableFull, n);
                return;
            }
        }
        let mut p = self.peers.get_mut(&src).expect("present");
        let newly = !p.waiting;
        p.waiting = true;
        drop(p);
        if newly {
            self.pending.push_back(src);
            self.stats.first_contacts += 1;
        }
        self.poke(now, src, tx);
    }

    /// The test for `src` passed through `proven`: deliver what it held, if it came
    /// from there too.
    fn release_held(&mut self, src: &Ipv6Addr, proven: SocketAddrV4, tx: &mut impl Transmit) {
        match self.held.release(src, proven) {
            Some(Release::Deliver(mut d)) => {
                while let Some(packet) = d.next_packet() {
                    tx.tun(packet);
                    self.stats.delivered += 1;
                    self.stats.delivered_bytes += packet.len() as u64;
                    self.stats.first_contact_delivered += 1;
                }
            }
            Some(Release::Drop(n)) => self.stats.drops.count_n(DropReason::SourceMismatch, n),
            None => {}
        }
    }

    /// Drop what `src` held: its test failed or was overtaken.
    fn discard_held(&mut self, src: &Ipv6Addr) {
        let n = self.held.discard(src);
        self.stats.drops.count_n(DropReason::ConnectivityTestFailed, n);
    }

    /// A packet from the host stack.
    pub fn on_tun(&mut self, now: Duration, packet: &[u8], tx: &mut impl Transmit) {
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
            udp_via(tx, via, to, ip.packet());
            if via != 0 {
                if let Some(e) = self.ports.get_mut(&dst) {
                    (e.last_data, e.refreshes) = (now, 0);
                }
            }
            self.stats.sent += 1;
            self.stats.sent_bytes += ip.packet().len() as u64;
            if native && unanswered >= RELAY_SILENCE {
                self.retest(now, dst, tx);
            }
            return;
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
            self.pending.push_back(dst);
        }
        if !queued {
            self.dropped(DropReason::QueueFull);
        }
        self.poke(now, dst, tx);
    }

    /// A native peer we keep sending to has said nothing for [`RELAY_SILENCE`]: its
    /// relay may be gone (an anycast relay fails, and routing moves the peer's side to
    /// another one, which has nothing to send us until our traffic reaches the peer
    /// again). The direct IPv6 connectivity test runs again through the server, while
    /// our traffic still goes where it went: the reply comes back through whichever
    /// relay serves the peer now, and that relay takes our traffic from then on (as for
    /// any test's reply). A peer that is only quiet costs one echo
    /// per second of one-way traffic; one that answers within the second costs nothing.
    ///
    /// The host asked for it, so it never waits on the first contacts' echo budget
    /// (forged first contacts cannot hold it off); it takes no room from the waiting
    /// list either: with the list full, a later packet tries again.
    fn retest(&mut self, now: Duration, dst: Ipv6Addr, tx: &mut impl Transmit) {
        let room = self.cfg.pending_capacity.max(1);
        if self.pending.len() >= room || self.retests.len() >= room {
            return;
        }
        let Some(mut p) = self.peers.get_mut(&dst) else { return };
        if p.waiting {
            return;
        }
        p.waiting = true;
        p.bubbles = 0;
        drop(p);
        self.retests.insert(dst);
        self.pending.push_back(dst);
        self.stats.silent_retests += 1;
        self.poke(now, dst, tx);
    }

    /// One more try to reach a waiting peer, within the limits: bubbles for a Teredo
    /// peer, a connectivity-test echo (through our server) for a native one.
    fn poke(&mut self, now: Duration, dst: Ipv6Addr, tx: &mut impl Transmit) {
        let Some(me) = self.address() else { return };
        let Some(server) = self.current_server().map(|i| self.cfg.servers[i].primary) else {
            return;
        };
        // A nonce is drawn only for a native peer's first echo, not for every queued packet.
        let needs_nonce =
            TeredoAddr::decode(&dst).is_none() && self.peers.get(&dst).is_some_and(|p| p.nonce().is_none());
        let nonce = if needs_nonce { self.nonce() } else { [0; 8] };
        let Some(mut p) = self.peers.get_mut(&dst) else {
            return;
        };
        // The first try goes at once (a new entry's "30 s ago" may predate time zero).
        if (p.bubbles > 0 && now.saturating_sub(p.last_tx) < RETRY) || p.bubbles >= PEER_TRIES {
            return;
        }
        // Echo requests for first contacts share one budget: a flood of forged first
        // contacts must not turn the client into a source of echoes. A refused one is
        // tried next tick. Tests the host asked for (its packets queued) never wait on
        // that budget.
        if TeredoAddr::decode(&dst).is_none()
            && p.queue().is_empty()
            && !self.retests.contains(&dst)
            && !self.held.allow_test(now)
        {
            return;
        }
        match TeredoAddr::decode(&dst) {
            Some(t) => {
                // Server Load Reduction (RFC 6081 §5.7): a peer we trusted, silent for
                // 30 s, is asked directly first; after three unanswered solicitations
                // we start over as if we had never met (§5.7.2).
                if p.trusted && self.cfg.server_load_reduction && p.knows_trailers {
                    if p.solicitations < SOLICITATIONS {
                        p.solicitations += 1;
                        p.bubbles += 1;
                        p.last_tx = now;
                        let to = p.mapped;
                        drop(p);
                        let ask = TrailerRepr::NeighborDiscovery(DiscoveryType::Solicitation);
                        let n = self.bubble_with(&me, &dst, Some(ask));
                        udp_via(tx, self.ports.via(&dst), to, &self.scratch[..n]);
                        self.stats.bubbles += 1;
                        self.stats.peer_solicitations += 1;
                        return;
                    }
                    p.trusted = false;
                    p.solicitations = 0;
                    p.bubbles = 0;
                    p.mapped = t.mapped;
                    // Its random port, if any, went quiet too: port prediction starts over.
                    if let Some(e) = self.ports.remove(&dst) {
                        if e.local != 0 {
                            tx.close_port(e.local);
                        }
                    }
                }
                // The direct bubble (an opening one first, unless our NAT is a cone that
                // lets anyone in), then the indirect one. With our port mapped, none
                // until the peer has spoken: anyone reaches us at our address's
                // endpoint, and a packet of ours would open a session of our NAT on a
                // random port, which shadows the mapping — the peer's answer then
                // clashes with it and is dropped or comes in under another port.
                let (mapped, echo) = (p.mapped, p.nonce_received);
                let opening = p.bubbles == 0 && self.nat != NatKind::Cone && self.cfg.opening_bubble_ttl > 0;
                let direct = !self.mapped_inbound || p.trusted;
                drop(p);
                // A peer heard on our link (RFC 4380 §5.2.4 case 3): a bubble to its local
                // address, and our own announcement, which it needs to take our answer.
                if let Some(at) = self.local_peers.get(&dst, now) {
                    self.announce(now, tx);
                    let n = self.bubble(&me, &dst, 0);
                    tx.udp(at, &self.scratch[..n]);
                    self.stats.bubbles += 1;
                }
                let echo_running = self.open_random_port(now, &me, dst, t, tx);
                if direct {
                    let n = self.bubble(&me, &dst, self.primary_echo(&dst, echo));
                    if opening {
                        tx.udp_hop_limited(mapped, &self.scratch[..n], self.cfg.opening_bubble_ttl);
                    } else {
                        tx.udp(mapped, &self.scratch[..n]);
                    }
                    self.stats.bubbles += 1;
                }
                // Port prediction first: a running Echo Test sends the indirect bubble
                // when it has its answer.
                if !echo_running && !self.random_port_bubbles(now, &me, dst, t, echo, Bubbling::Poke, tx) {
                    self.send_indirect(now, &me, dst, t.server, tx);
                } else if let Some(mut p) = self.peers.get_mut(&dst) {
                    p.last_tx = now;
                    p.bubbles += 1;
                }
            }
            None => {
                p.last_tx = now;
                p.bubbles += 1;
                let nonce = match p.nonce() {
                    Some(running) => running,
                    None => {
                        p.set_nonce(Some(nonce));
                        nonce
                    }
                };
                drop(p);
                let mut id = [0u8; 4];
                self.rng.fill(&mut id);
                let echo = Icmpv6Repr::EchoRequest {
                    ident: u16::from_be_bytes([id[0], id[1]]),
                    seq_no: u16::from_be_bytes([id[2], id[3]]),
                    data: &nonce,
                };
                let len = echo.buffer_len();
                Ipv6Repr {
                    src_addr: me,
                    dst_addr: dst,
                    next_header: ip_protocol::ICMPV6,
                    payload_len: len,
                    hop_limit: 64,
                }
                .emit(&mut self.scratch)
                .expect("fits");
                echo.emit(&me, &dst, &mut self.scratch[40..]).expect("fits");
                tx.udp(SocketAddrV4::new(server, TEREDO_PORT), &self.scratch[..40 + len]);
                self.stats.echoes += 1;
            }
        }
    }

    fn error_to_host(&mut self, now: Duration, offending: &Ipv6Packet<&[u8]>, code: u8, tx: &mut impl Transmit) {
        if !icmp_error::may_answer(offending) || !self.icmp.allow(now) {
            return;
        }
        let mut out = [0u8; 1280];
        if let Some(n) =
            icmp_error::build(&LINK_LOCAL, offending, |q| Icmpv6Repr::DstUnreachable { code, invoking: q }, &mut out)
        {
            tx.tun(&out[..n]);
        }
    }

    /// Time passes: RS retries, failover, maintenance, peers' bubbles and echoes.
    pub fn on_timer(&mut self, now: Duration, tx: &mut impl Transmit) {
        match self.phase {
            Phase::Offline { retry_at, .. } if now >= retry_at => self.qualify(now, 0, tx),
            Phase::Primary { server, nonce, sent_at, tries } if now.saturating_sub(sent_at) >= RS_TIMEOUT => {
                if tries < RS_TRIES {
                    self.send_rs(self.cfg.servers[server].primary, nonce, tx);
                    self.phase = Phase::Primary { server, nonce, sent_at: now, tries: tries + 1 };
                } else {
                    // Failover: the next server, or back-off after the last.
                    let next = (server + 1 < self.cfg.servers.len()).then_some(server + 1);
                    self.go_down(now, "server does not answer", next, tx);
                }
            }
            Phase::Secondary { server, first, nonce, sent_at, tries } if now.saturating_sub(sent_at) >= RS_TIMEOUT => {
                if tries < RS_TRIES {
                    self.send_rs(self.cfg.servers[server].secondary, nonce, tx);
                    self.phase = Phase::Secondary { server, first, nonce, sent_at: now, tries: tries + 1 };
                } else {
                    // The secondary address is silent: usable, NAT kind unknown.
                    self.nat = NatKind::Unknown;
                    self.come_up(now, server, first);
                }
            }
            Phase::Up { server, .. } => {
                self.maintain(now, server, tx);
                if now >= self.next_announce {
                    self.announce(now, tx);
                }
            }
            _ => {}
        }
        for _ in 0..self.pending.len() {
            let Some(dst) = self.pending.pop_front() else {
                break;
            };
            let Some(p) = self.peers.get(&dst) else {
                self.discard_held(&dst);
                self.retests.remove(&dst);
                continue;
            };
            if !p.waiting {
                // Settled another way (its trusted relay spoke): what another relay
                // brought stays unproven.
                self.discard_held(&dst);
                self.retests.remove(&dst);
                continue;
            }
            if p.queue().is_empty()
                && TeredoAddr::decode(&dst).is_none()
                && !self.held.contains(&dst)
                && !self.retests.contains(&dst)
            {
                // A first contact whose held packets expired: nothing left to test for
                // (keeps forged sources from spending the echo budget). Our own test of
                // a silent peer runs its course of tries.
                self.give_up(now, dst, tx);
                continue;
            }
            if p.bubbles > 0 && now.saturating_sub(p.last_tx) < RETRY {
                self.pending.push_back(dst);
            } else if p.bubbles < PEER_TRIES {
                self.poke(now, dst, tx);
                self.pending.push_back(dst);
            } else {
                self.give_up(now, dst, tx);
            }
        }
        self.peers.sweep(now, 256);
        self.tend_ports(now, tx);
        // A test ends within PEER_TRIES retries; anything older lost its peer entry.
        let stale = self.held.expire(now, RETRY * (u32::from(PEER_TRIES) + 1));
        self.stats.drops.count_n(DropReason::ConnectivityTestFailed, stale);
    }

    fn maintain(&mut self, now: Duration, server: usize, tx: &mut impl Transmit) {
        let s = self.cfg.servers[server];
        match self.maint {
            // Nothing from the server for the randomized refresh interval: ask it.
            None if now.saturating_sub(self.last_server_rx) >= self.refresh_after => {
                let nonce = self.nonce();
                self.send_rs(s.primary, nonce, tx);
                self.maint = Some((nonce, now, 1));
            }
            Some((nonce, sent, tries)) if now.saturating_sub(sent) >= RS_TIMEOUT => {
                // With another server to go to, one unanswered refresh is enough: the
                // mapping is kept alive by the new server sooner than by insisting.
                let next = (server + 1 < self.cfg.servers.len()).then_some(server + 1);
                let tries_left = if next.is_some() { tries < 1 } else { tries < RS_TRIES };
                if tries_left {
                    self.send_rs(s.primary, nonce, tx);
                    self.maint = Some((nonce, now, tries + 1));
                } else {
                    // The server stopped answering: qualify again, with failover.
                    self.go_down(now, "server stopped answering", next.or(Some(0)), tx);
                    return;
                }
            }
            _ => {}
        }
        // On a fallback server: now and then, see whether the first one is back.
        if server != 0 {
            match self.home {
                Some((_, sent)) if now.saturating_sub(sent) < self.cfg.home_check => {}
                _ => {
                    let nonce = self.nonce();
                    self.send_rs(self.cfg.servers[0].primary, nonce, tx);
                    self.home = Some((nonce, now));
                }
            }
        }
    }

    fn give_up(&mut self, now: Duration, dst: Ipv6Addr, tx: &mut impl Transmit) {
        self.discard_held(&dst);
        self.retests.remove(&dst);
        // A peer still valid through its relay keeps it: a test that another relay's
        // (maybe forged) packets started and that failed says nothing against it.
        if let Some(mut p) = self.peers.get_mut(&dst).filter(|p| p.is_valid(now)) {
            p.waiting = false;
            p.set_nonce(None);
            p.bubbles = 0;
            return;
        }
        let Some(mut gone) = self.peers.remove(&dst) else {
            return;
        };
        let mut q = gone.queue.drain();
        while let Some(packet) = q.next_packet() {
            if let Ok(ip) = Ipv6Packet::new_checked(packet) {
                self.error_to_host(now, &ip, unreachable::ADDRESS, tx);
            }
        }
    }
}

/// Whether `ip` is an ICMPv6 echo reply (no extension headers) carrying `nonce`.
fn is_echo_reply_with(ip: &Ipv6Packet<&[u8]>, nonce: &[u8; 8]) -> bool {
    if ip.next_header() != ip_protocol::ICMPV6 {
        return false;
    }
    let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else {
        return false;
    };
    icmp.msg_type() == message::ECHO_REPLY
        && icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr())
        && icmp.payload() == nonce
}
