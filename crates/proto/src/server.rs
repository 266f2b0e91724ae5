//! The Teredo server (RFC 4380 §5.3, RFC 5991): stateless. It answers router
//! solicitations so clients learn their mapping, and relays bubbles and the ICMPv6
//! echoes of the connectivity test — nothing else.
//!
//! Decisions where the RFC leaves room (see docs/decisions.md):
//! * Forwarded between Teredo peers: bubbles, echo request and echo reply. Forwarded to
//!   native IPv6: echo requests only (the direct connectivity test). ICMPv6 must not sit
//!   behind extension headers, and is capped in size (`max_forwarded_icmpv6`). RFC 6081
//!   trailers are forwarded intact when well formed and no longer than any node sends.
//! * Solicitations are answered at a bounded rate per IPv4 source, so forged ones cannot
//!   aim a stream of advertisements at one address.
//! * Forwarding between Teredo peers leaves the hop limit alone (the Teredo service is
//!   one link); forwarding to native IPv6 decrements it like a router.
//! * RS checks: link-local source, destination ff02::2, hop limit 255, valid checksum,
//!   code 0, valid options, no extension headers.

use crate::address_rate::AddressRate;
use crate::drop_reason::{DropCounters, DropReason};
use crate::outcome::{Action, Outcome};
use crate::routing_loop;
use crate::secure;
use crate::transmit::{Source, Transmit};
use shipworm_wire::icmpv6::{message, Icmpv6Packet, Icmpv6Repr, RouterAdvertRepr};
use shipworm_wire::ipv4_scope::is_global_unicast;
use shipworm_wire::ipv6::{Ipv6AddrExt, Ipv6Packet, Ipv6Repr};
use shipworm_wire::teredo_addr::{self, server_link_local, TeredoAddr, TEREDO_PORT};
use shipworm_wire::teredo_auth::AuthRepr;
use shipworm_wire::teredo_packet::{TeredoHeaderRepr, TeredoPacket};
use shipworm_wire::teredo_trailer::{trailer_type, TrailerRepr, Trailers};
use shipworm_wire::{ip_protocol, teredo_origin};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::Duration;

/// All-routers multicast, the destination of router solicitations.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

/// Default cap on a forwarded ICMPv6 message (header and data). Enough for any
/// connectivity-test echo; keeps the server from relaying bulk ICMPv6.
pub const DEFAULT_MAX_FORWARDED_ICMPV6: usize = 1232;

/// Router solicitations answered per second for one IPv4 source, and the burst: far
/// above what a NAT's clients ask (three each to qualify, then one each every 30 s or
/// so, so a thousand clients behind one address ask some 35 a second), and a bound on
/// the advertisements anyone can reflect to one address by forging its solicitations.
pub const DEFAULT_SOLICITATIONS_PER_ADDRESS: (u32, u32) = (100, 400);

/// Rate buckets for solicitations (8 bytes each).
const SOLICITATION_BUCKETS: usize = 1 << 16;

/// Server settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Primary address: embedded in clients' addresses and in the advertised prefix.
    pub primary: Ipv4Addr,
    /// Secondary address (by convention primary + 1), for the cone test.
    pub secondary: Ipv4Addr,
    /// The Teredo prefix, first 32 bits (2001:0 unless configured).
    pub prefix: u32,
    /// MTU advertised in router advertisements.
    pub mtu: u32,
    /// Largest ICMPv6 message (header and data) the server forwards.
    pub max_forwarded_icmpv6: usize,
    /// Secure qualification: when not empty, only these clients, with valid MACs, get
    /// router advertisements.
    pub clients: Vec<secure::Credentials>,
    /// Secure qualification: identifiers whose key the operator retired, kept for the
    /// clients that still hold it: a solicitation signed with it gets an advertisement
    /// signed with it whose confirmation byte is not zero (RFC 4380 §5.3.2), which tells
    /// the client to get a new key.
    pub retired: Vec<secure::Credentials>,
    /// Router solicitations answered per second for one IPv4 source, and the burst.
    pub solicitations_per_address: (u32, u32),
    /// Secret keys for hashing sources onto rate buckets (random in the daemon).
    pub hash_keys: (u64, u64),
}

impl ServerConfig {
    /// Defaults for a server on `primary` (secondary = primary + 1).
    pub fn new(primary: Ipv4Addr) -> Self {
        ServerConfig {
            primary,
            secondary: Ipv4Addr::from_bits(primary.to_bits().wrapping_add(1)),
            prefix: teredo_addr::PREFIX,
            mtu: shipworm_wire::ipv6::MIN_MTU as u32,
            max_forwarded_icmpv6: DEFAULT_MAX_FORWARDED_ICMPV6,
            clients: Vec::new(),
            retired: Vec::new(),
            solicitations_per_address: DEFAULT_SOLICITATIONS_PER_ADDRESS,
            hash_keys: (0x5348_4950, 0x574f_524d),
        }
    }

    /// Whether qualification is secure: some client identifier is held, current or
    /// retired.
    pub fn secure(&self) -> bool {
        !self.clients.is_empty() || !self.retired.is_empty()
    }
}

/// Which of the server's two addresses a datagram arrived on or leaves from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Local {
    /// The primary address, port 3544.
    Primary,
    /// The secondary address, port 3544.
    Secondary,
}

impl Local {
    /// The other address: the cone test answers from it.
    pub fn other(self) -> Local {
        match self {
            Local::Primary => Local::Secondary,
            Local::Secondary => Local::Primary,
        }
    }
}

/// What a datagram or packet led to, built in the server's scratch buffer before it
/// goes out through [`Transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerAction {
    /// Answer with `out[..len]`, a router advertisement, from `from`:3544 to `to`.
    Answer {
        /// Which local address sends it.
        from: Local,
        /// Destination.
        to: SocketAddrV4,
        /// Payload length in the output buffer.
        len: usize,
    },
    /// Forward `out[..len]` as a UDP payload from the primary address to `to`.
    Forward {
        /// Destination.
        to: SocketAddrV4,
        /// Payload length in the output buffer.
        len: usize,
    },
    /// Write `out[..len]`, an IPv6 packet, to the native IPv6 side.
    Native {
        /// Packet length in the output buffer.
        len: usize,
    },
}

/// What the server has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Router advertisements sent.
    pub advertisements: u64,
    /// Packets relayed to Teredo clients over UDP.
    pub forwarded_udp: u64,
    /// Packets relayed to native IPv6.
    pub forwarded_native: u64,
    /// Bytes of the IPv6 packets in `forwarded_udp` (origin indications and trailers not
    /// counted, as the relay counts).
    pub forwarded_udp_bytes: u64,
    /// Bytes of the IPv6 packets in `forwarded_native`.
    pub forwarded_native_bytes: u64,
    /// Drops by reason.
    pub drops: DropCounters,
}

/// The Teredo server state machine. It holds no per-client state: only its
/// configuration, counters, and a fixed array of rate buckets for solicitations.
#[derive(Debug, Clone)]
pub struct Server {
    config: ServerConfig,
    link_local: Ipv6Addr,
    stats: ServerStats,
    solicitations: AddressRate,
    /// Where answers are built: room for any UDP payload plus an origin indication, so
    /// no input is refused for the buffer's sake.
    scratch: Vec<u8>,
}

/// Which trailers a forwarded bubble keeps.
#[derive(Clone, Copy)]
enum Passed {
    /// All of them (well-formed, within [`MAX_FORWARDED_TRAILERS`]).
    All,
    /// What RFC 6081 §6 needs of a bubble admitted from a port its source does not embed
    /// (§6.1): its Nonce, and its Random Port if it has one (§6.4's sequential
    /// port-symmetric example: packet 7 carries the predicted port, and across two
    /// servers it comes this way). No Alternate Address: the peer's private endpoints
    /// are for peers behind its own address, never through a server.
    SymmetricPeer,
}

/// How a datagram passed the admission checks of RFC 4380 §5.3.1.
enum Admitted {
    /// Check 5: a Teredo source whose mapping is the outer source.
    Client,
    /// RFC 6081 §6.1's indirect bubble: a Teredo source behind a symmetric NAT, whose
    /// bubble to one of our clients comes from another port of the address its mapping
    /// names, with a Nonce trailer (see [`Server::on_udp`]).
    SymmetricPeerBubble,
    /// Check 6: a native source writing to one of our clients (a relay's bubble or a
    /// native host's echo reply).
    NativeToClient,
}

impl Server {
    /// A server with this configuration.
    pub fn new(config: ServerConfig) -> Self {
        let link_local = server_link_local(config.primary);
        let (rate, burst) = config.solicitations_per_address;
        let solicitations = AddressRate::new(SOLICITATION_BUCKETS, rate, burst, config.hash_keys);
        Server { config, link_local, stats: ServerStats::default(), solicitations, scratch: vec![0u8; 65536 + 64] }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// The prefix advertised to clients: `prefix:primary::/64`.
    pub fn client_prefix(&self) -> Ipv6Addr {
        TeredoAddr::client_prefix(self.config.prefix, self.config.primary)
    }

    /// The IPv4 address of `l`.
    pub fn address(&self, l: Local) -> Ipv4Addr {
        match l {
            Local::Primary => self.config.primary,
            Local::Secondary => self.config.secondary,
        }
    }

    fn is_own(&self, ip: &Ipv4Addr) -> bool {
        *ip == self.config.primary || *ip == self.config.secondary
    }

    fn own_addresses(&self) -> [Ipv4Addr; 2] {
        [self.config.primary, self.config.secondary]
    }

    /// Whether `addr` is a Teredo address this server issued.
    fn issued_by_us(&self, addr: &Ipv6Addr) -> bool {
        TeredoAddr::decode_with_prefix(addr, self.config.prefix).is_some_and(|t| t.server == self.config.primary)
    }

    fn dropped(&mut self, reason: DropReason) {
        self.stats.drops.count(reason);
    }

    /// When the server next has something to do without a packet: never. It keeps
    /// nothing that ages (its rate buckets refill as packets come), so a server alone
    /// sleeps until I/O.
    pub fn poll_timeout(&self) -> Option<Duration> {
        None
    }

    /// A datagram arrived on `local`:3544 from `from`: its answer or forward, if any,
    /// goes out through `tx` (from the secondary address as `Source::Secondary`); anything
    /// else is dropped and counted.
    ///
    /// Admission is RFC 4380 §5.3.1's, with one exception RFC 6081 §6.1 needs and does
    /// not write down: a client behind a symmetric NAT whose peer uses another server
    /// reaches that server from a port its address does not embed, and check 5 would drop
    /// its indirect bubble (Miredo's server does). Such a bubble is passed on when it
    /// comes from the IPv4 address its source embeds, carries a Nonce trailer (its
    /// sender speaks RFC 6081), comes from another server's client and goes to one of
    /// ours, with an origin indication naming the port it really came from and its
    /// Nonce as its only trailer. No data passes this way, only a bubble; the client
    /// trusts nobody for it (its answer must echo the client's own nonce, which travels
    /// through the peer's server), and what it answers is bounded as for any bubble.
    /// What it gives a host sharing that IPv4 address (a carrier-grade NAT's other
    /// subscribers, who cannot choose the peer's port): bubbles in the peer's name,
    /// without Random Port or Alternate Address trailers.
    pub fn on_udp(
        &mut self,
        now: Duration,
        local: Local,
        from: SocketAddrV4,
        datagram: &[u8],
        tx: &mut impl Transmit,
    ) -> Outcome {
        self.with_scratch(tx, |s, out| s.handle_udp(now, local, from, datagram, out))
    }

    /// Run `handle` with the scratch buffer to build in, then send what it built.
    fn with_scratch(
        &mut self,
        tx: &mut impl Transmit,
        handle: impl FnOnce(&mut Self, &mut [u8]) -> Result<ServerAction, DropReason>,
    ) -> Outcome {
        let mut out = std::mem::take(&mut self.scratch);
        let action = handle(self, &mut out);
        let outcome = self.emit(action, &out, tx);
        self.scratch = out;
        outcome
    }

    fn emit(&mut self, action: Result<ServerAction, DropReason>, out: &[u8], tx: &mut impl Transmit) -> Outcome {
        match action {
            Ok(ServerAction::Answer { from, to, len }) => {
                let source = if from == Local::Primary { Source::Service } else { Source::Secondary };
                tx.send(source, to, &out[..len], None);
                Ok(Action::Answered)
            }
            Ok(ServerAction::Forward { to, len }) => {
                tx.send(Source::Service, to, &out[..len], None);
                Ok(Action::Forwarded)
            }
            Ok(ServerAction::Native { len }) => {
                tx.deliver(&out[..len]);
                Ok(Action::Forwarded)
            }
            Err(reason) => {
                self.dropped(reason);
                Err(reason)
            }
        }
    }

    fn handle_udp(
        &mut self,
        now: Duration,
        local: Local,
        from: SocketAddrV4,
        datagram: &[u8],
        out: &mut [u8],
    ) -> Result<ServerAction, DropReason> {
        if from.port() == TEREDO_PORT && self.is_own(from.ip()) {
            return Err(DropReason::LoopGuard);
        }
        // Check 1: a well-formed Teredo payload.
        let pkt = TeredoPacket::parse(datagram)?;
        let ip = &pkt.ipv6;
        let icmp = bubble_or_icmpv6(&pkt)?;
        // Check 3: the outer source must be global unicast.
        if !is_global_unicast(*from.ip()) {
            return Err(DropReason::SourceNotGlobal);
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        // Check 4: router solicitation.
        if let Some(icmp) = &icmp {
            if icmp.msg_type() == message::ROUTER_SOLICIT {
                if !self.solicitations.allow(*from.ip(), now) {
                    return Err(DropReason::RateLimited);
                }
                return self.answer_solicitation(local, from, datagram, &pkt, icmp, out);
            }
        }
        let admitted = self.admit(&pkt, from)?;
        // §5.3.1 dispatch on the destination: the server's own link-local address takes
        // an Echo Request from a client (checks 5 passed: its own mapping), answered as
        // solicitations are, within the same per-address rate.
        if dst == self.link_local && matches!(admitted, Admitted::Client) {
            if let Some(icmp) = icmp.as_ref().filter(|i| i.msg_type() == message::ECHO_REQUEST) {
                if !self.solicitations.allow(*from.ip(), now) {
                    return Err(DropReason::RateLimited);
                }
                return self.answer_echo(local, from, &src, icmp, out);
            }
        }
        if dst == ALL_ROUTERS || dst == self.link_local {
            return Err(DropReason::LocalDestination);
        }
        if !dst.is_forwardable() {
            return Err(DropReason::DestinationNotGlobal);
        }
        self.pass_on(admitted, from, &pkt, icmp.as_ref(), out)
    }

    /// Checks 5 to 7: whose packet this is.
    fn admit(&self, pkt: &TeredoPacket<'_>, from: SocketAddrV4) -> Result<Admitted, DropReason> {
        let (src, dst) = (pkt.ipv6.src_addr(), pkt.ipv6.dst_addr());
        match TeredoAddr::decode_with_prefix(&src, self.config.prefix) {
            Some(t) if t.mapped == from => Ok(Admitted::Client),
            Some(t)
                if t.mapped.ip() == from.ip()
                    && t.server != self.config.primary
                    && pkt.is_bubble()
                    && pkt.trailers.find(trailer_type::NONCE).is_some()
                    && self.issued_by_us(&dst) =>
            {
                Ok(Admitted::SymmetricPeerBubble)
            }
            Some(_) => Err(DropReason::SourceMismatch),
            None if self.issued_by_us(&dst) => Ok(Admitted::NativeToClient),
            None => Err(DropReason::SourceMismatch),
        }
    }

    /// An admitted packet for a global destination: to a Teredo peer, or (a client's
    /// connectivity test) to a native host.
    fn pass_on(
        &mut self,
        admitted: Admitted,
        from: SocketAddrV4,
        pkt: &TeredoPacket<'_>,
        icmp: Option<&Icmpv6Packet<&[u8]>>,
        out: &mut [u8],
    ) -> Result<ServerAction, DropReason> {
        let ip = &pkt.ipv6;
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        match TeredoAddr::decode_with_prefix(&dst, self.config.prefix) {
            Some(t) => {
                if let Some(icmp) = icmp {
                    self.check_icmpv6_forward(icmp, &[message::ECHO_REQUEST, message::ECHO_REPLY])?;
                }
                let trailers = match admitted {
                    Admitted::SymmetricPeerBubble => Passed::SymmetricPeer,
                    _ => Passed::All,
                };
                self.forward_to_teredo(&t, from, pkt, trailers, out)
            }
            // Out of the tunnel to a native host: never to one of our own 6to4 or
            // ISATAP addresses, which would come back (RFC 6324 §3.3).
            None if routing_loop::embeds_own_ipv4(&dst, &self.own_addresses()) => Err(DropReason::RoutingLoop),
            // The direct connectivity test: a client's echo request to a native host.
            None => match (admitted, icmp) {
                (Admitted::Client, Some(icmp)) => {
                    self.check_icmpv6_forward(icmp, &[message::ECHO_REQUEST])?;
                    // An echo request has code 0 (RFC 4443 §4.1): nothing else is a test.
                    if icmp.msg_code() != 0 {
                        return Err(DropReason::Icmpv6TypeNotForwarded);
                    }
                    if !icmp.verify_checksum(&src, &dst) {
                        return Err(DropReason::BadChecksum);
                    }
                    self.forward_native(ip, out)
                }
                (Admitted::Client, None) => Err(DropReason::NotBubbleOrIcmpv6),
                (Admitted::NativeToClient | Admitted::SymmetricPeerBubble, _) => Err(DropReason::SourceMismatch),
            },
        }
    }

    /// An Echo Reply from our link-local address to client `src` at `from`, from the
    /// address the request came to (RFC 4380 §5.3.1: the server processes ICMPv6 Echo
    /// Requests sent to its link-local address), echoing the request's identifier,
    /// sequence number and data.
    fn answer_echo(
        &mut self,
        local: Local,
        from: SocketAddrV4,
        src: &Ipv6Addr,
        icmp: &Icmpv6Packet<&[u8]>,
        out: &mut [u8],
    ) -> Result<ServerAction, DropReason> {
        self.check_icmpv6_forward(icmp, &[message::ECHO_REQUEST])?;
        let Icmpv6Repr::EchoRequest { ident, seq_no, data } = Icmpv6Repr::parse(src, &self.link_local, icmp)? else {
            return Err(DropReason::BadValue);
        };
        let reply = Icmpv6Repr::EchoReply { ident, seq_no, data };
        let ipv6 = Ipv6Repr {
            src_addr: self.link_local,
            dst_addr: *src,
            next_header: ip_protocol::ICMPV6,
            payload_len: reply.buffer_len(),
            hop_limit: 64,
        };
        ipv6.emit(out)?;
        let n = reply.emit(&self.link_local, src, out.get_mut(40..).ok_or(DropReason::TooBig)?)?;
        Ok(ServerAction::Answer { from: local, to: from, len: 40 + n })
    }

    fn check_icmpv6_forward(&self, icmp: &Icmpv6Packet<&[u8]>, allowed: &[u8]) -> Result<(), DropReason> {
        if !allowed.contains(&icmp.msg_type()) {
            return Err(DropReason::Icmpv6TypeNotForwarded);
        }
        if icmp.into_inner().len() > self.config.max_forwarded_icmpv6 {
            return Err(DropReason::Icmpv6TooLarge);
        }
        Ok(())
    }

    /// Secure qualification (RFC 4380 §5.3.1 check 4, §5.3.2): the key a solicitation
    /// is signed with and the confirmation byte to answer with (`None`: the server is
    /// not secure). A client identifier the server holds, with a valid MAC, gets a
    /// signed RA; a retired one, with a valid MAC under its retired key, a signed RA
    /// whose confirmation byte is not zero, so that the client learns to get a new key.
    /// Anything else gets nothing: an identifier the server does not hold (an unsigned
    /// answer would qualify anyone who ignores the byte, and reflect RAs at forged
    /// sources), a wrong MAC, no identifier at all.
    fn credentials(
        &self,
        pkt: &TeredoPacket<'_>,
        datagram: &[u8],
    ) -> Result<Option<(&secure::Credentials, u8)>, DropReason> {
        if !self.config.secure() {
            return Ok(None);
        }
        // A nonce-only header carries no identifier: authentication is absent.
        let auth = pkt.auth.as_ref().filter(|a| !a.client_id().is_empty()).ok_or(DropReason::AuthenticationFailed)?;
        let id = auth.client_id();
        let current = self.config.clients.iter().find(|c| c.client_id == id);
        let retired = self.config.retired.iter().find(|c| c.client_id == id);
        let (c, confirmation) = match (current, retired) {
            (Some(c), _) => (c, 0),
            (None, Some(c)) => (c, 1),
            (None, None) => return Err(DropReason::UnknownClientId),
        };
        if !secure::verify(&c.secret, auth, datagram) {
            return Err(DropReason::AuthenticationFailed);
        }
        Ok(Some((c, confirmation)))
    }

    fn answer_solicitation(
        &mut self,
        local: Local,
        from: SocketAddrV4,
        datagram: &[u8],
        pkt: &TeredoPacket<'_>,
        icmp: &Icmpv6Packet<&[u8]>,
        out: &mut [u8],
    ) -> Result<ServerAction, DropReason> {
        let ip = &pkt.ipv6;
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        if !src.is_link_local() || dst != ALL_ROUTERS || ip.hop_limit() != 255 {
            return Err(DropReason::InvalidSolicitation);
        }
        match Icmpv6Repr::parse(&src, &dst, icmp) {
            Ok(Icmpv6Repr::RouterSolicit) => {}
            Ok(_) => return Err(DropReason::InvalidSolicitation),
            Err(e) => return Err(e.into()),
        }
        // The cone bit of the solicitation's link-local source asks for the cone test:
        // answer from the other address, so only a cone NAT lets the answer in.
        let cone = src.octets()[8] & 0x80 != 0;
        let send_from = if cone { local.other() } else { local };
        let creds = self.credentials(pkt, datagram)?;
        let zero_mac = [0u8; secure::MAC_LEN];
        let auth = pkt.auth_repr().map(|a| match creds {
            Some((c, confirmation)) => {
                AuthRepr { client_id: &c.client_id, auth_value: &zero_mac, nonce: a.nonce, confirmation }
            }
            None => AuthRepr::with_nonce(a.nonce),
        });
        let headers = TeredoHeaderRepr { auth, origin: Some(from) };
        let ra = Icmpv6Repr::RouterAdvert(RouterAdvertRepr::teredo(self.client_prefix(), self.config.mtu));
        let at = headers.emit(out)?;
        let ipv6 = Ipv6Repr {
            src_addr: self.link_local,
            dst_addr: src,
            next_header: ip_protocol::ICMPV6,
            payload_len: ra.buffer_len(),
            hop_limit: 255,
        };
        ipv6.emit(out.get_mut(at..).ok_or(DropReason::TooBig)?)?;
        let n = ra.emit(&self.link_local, &src, out.get_mut(at + 40..).ok_or(DropReason::TooBig)?)?;
        let len = at + 40 + n;
        if let Some((c, _)) = creds {
            secure::sign(&c.secret, &mut out[..len]);
        }
        self.stats.advertisements += 1;
        Ok(ServerAction::Answer { from: send_from, to: from, len })
    }

    /// Relay to a Teredo destination: to its embedded mapping, from the primary
    /// address, with an origin indication when the destination is one of our clients,
    /// and the trailers kept intact.
    fn forward_to_teredo(
        &mut self,
        dest: &TeredoAddr,
        from: SocketAddrV4,
        pkt: &TeredoPacket<'_>,
        trailers: Passed,
        out: &mut [u8],
    ) -> Result<ServerAction, DropReason> {
        if !is_global_unicast(*dest.mapped.ip()) || self.is_own(dest.mapped.ip()) {
            return Err(DropReason::DestinationMappingNotGlobal);
        }
        let mut at = 0;
        if dest.server == self.config.primary {
            at = teredo_origin::emit(from, out)?;
        }
        let packet_len = pkt.ipv6.total_len();
        out.get_mut(at..at + packet_len).ok_or(DropReason::TooBig)?.copy_from_slice(pkt.ipv6.packet());
        at += packet_len;
        let rest = out.get_mut(at..).ok_or(DropReason::TooBig)?;
        at += match trailers {
            Passed::All => copy_trailers(&pkt.trailers, rest)?,
            Passed::SymmetricPeer => {
                let mut n = match pkt.trailers.get(trailer_type::NONCE) {
                    Some(nonce @ TrailerRepr::Nonce(_)) => nonce.emit(rest).map_err(|_| DropReason::TooBig)?,
                    _ => return Err(DropReason::BadTrailers),
                };
                // The Random Port under the type it came with (0x05 as RFC 6081 writes
                // it, or 0x02 as IANA lists it: see decisions.md), well formed, once.
                let random_port = [trailer_type::RANDOM_PORT, trailer_type::RANDOM_PORT_IANA]
                    .into_iter()
                    .find_map(|kind| pkt.trailers.find(kind).filter(|t| TrailerRepr::parse(t).is_ok()));
                if let Some(t) = random_port {
                    let len = 2 + t.value.len();
                    let slot = rest.get_mut(n..n + len).ok_or(DropReason::TooBig)?;
                    slot[0] = t.kind;
                    slot[1] = t.value.len() as u8;
                    slot[2..].copy_from_slice(t.value);
                    n += len;
                }
                n
            }
        };
        self.stats.forwarded_udp += 1;
        self.stats.forwarded_udp_bytes += packet_len as u64;
        Ok(ServerAction::Forward { to: dest.mapped, len: at })
    }

    /// Relay natively, as a router: hop limit decremented, trailers dropped.
    fn forward_native(&mut self, ip: &Ipv6Packet<&[u8]>, out: &mut [u8]) -> Result<ServerAction, DropReason> {
        let len = copy_routed(ip, out)?;
        debug_assert!(is_connectivity_test_echo(&self.config, &out[..len]), "a native packet the rule refuses");
        self.stats.forwarded_native += 1;
        self.stats.forwarded_native_bytes += len as u64;
        Ok(ServerAction::Native { len })
    }

    /// A bubble the relay function beside this server ([`crate::server_relay`]) sends one
    /// of our clients: passed on as any relay's indirect bubble is, with an origin
    /// indication naming our primary address and port 3544, where that relay is.
    pub fn on_own_relay_bubble(&mut self, datagram: &[u8], tx: &mut impl Transmit) -> Outcome {
        self.with_scratch(tx, |s, out| s.handle_own_relay_bubble(datagram, out))
    }

    fn handle_own_relay_bubble(&mut self, datagram: &[u8], out: &mut [u8]) -> Result<ServerAction, DropReason> {
        let pkt = TeredoPacket::parse(datagram)?;
        if !pkt.is_bubble() {
            return Err(DropReason::NotBubbleOrIcmpv6);
        }
        match TeredoAddr::decode_with_prefix(&pkt.ipv6.dst_addr(), self.config.prefix) {
            Some(t) if t.server == self.config.primary => {
                self.forward_to_teredo(&t, SocketAddrV4::new(self.config.primary, TEREDO_PORT), &pkt, Passed::All, out)
            }
            _ => Err(DropReason::NotOurClient),
        }
    }

    /// An IPv6 packet arrived from the native side (the server's own IPv6 link, when
    /// it routes the server's Teredo prefix): echo replies for one of our clients go
    /// back over UDP to its mapping. No origin indication: there is no outer source to
    /// report.
    pub fn on_native(&mut self, packet: &[u8], tx: &mut impl Transmit) -> Outcome {
        self.with_scratch(tx, |s, out| s.handle_native(packet, out))
    }

    fn handle_native(&mut self, packet: &[u8], out: &mut [u8]) -> Result<ServerAction, DropReason> {
        let ip = Ipv6Packet::new_checked(packet)?;
        let dst = ip.dst_addr();
        let Some(dest) = TeredoAddr::decode_with_prefix(&dst, self.config.prefix) else {
            return Err(DropReason::NotOurClient);
        };
        if dest.server != self.config.primary {
            return Err(DropReason::NotOurClient);
        }
        // Into the tunnel: never from one of our own 6to4 or ISATAP addresses (RFC 6324 §3.3).
        if routing_loop::embeds_own_ipv4(&ip.src_addr(), &self.own_addresses()) {
            return Err(DropReason::RoutingLoop);
        }
        if ip.next_header() != ip_protocol::ICMPV6 {
            return Err(DropReason::NotBubbleOrIcmpv6);
        }
        let icmp = Icmpv6Packet::new_checked(ip.payload())?;
        self.check_icmpv6_forward(&icmp, &[message::ECHO_REPLY])?;
        if !is_global_unicast(*dest.mapped.ip()) || self.is_own(dest.mapped.ip()) {
            return Err(DropReason::DestinationMappingNotGlobal);
        }
        let len = copy_routed(&ip, out)?;
        self.stats.forwarded_udp += 1;
        self.stats.forwarded_udp_bytes += len as u64;
        Ok(ServerAction::Forward { to: dest.mapped, len })
    }
}

/// Most trailer bytes a forwarded packet keeps: more than every trailer RFC 6081 defines
/// at once (nonce 6, alternate addresses 28, neighbor discovery 6, random port 4), so
/// nothing a node sends is cut, and far less than the kilobytes of their
/// choosing someone could otherwise have the server reflect to an address of theirs.
pub const MAX_FORWARDED_TRAILERS: usize = 64;

/// The trailers a server passes on: intact (RFC 6081 has servers forward them, and a
/// kind the server does not know may be one the peer must act on), when they are well
/// formed TLVs and within [`MAX_FORWARDED_TRAILERS`]; otherwise the packet is dropped
/// (no node sends that). Written at the start of `out`; returns the bytes written.
fn copy_trailers(trailers: &Trailers<'_>, out: &mut [u8]) -> Result<usize, DropReason> {
    let bytes = trailers.as_bytes();
    if bytes.len() > MAX_FORWARDED_TRAILERS || trailers.validate().is_err() {
        return Err(DropReason::BadTrailers);
    }
    out.get_mut(..bytes.len()).ok_or(DropReason::TooBig)?.copy_from_slice(bytes);
    Ok(bytes.len())
}

/// Whether a pure server may send `packet` to native IPv6: an ICMPv6 Echo Request
/// standing alone, within the forwarding cap, with a valid checksum, from a Teredo
/// address under our prefix to a native destination that does not come back to us (the
/// direct connectivity test, RFC 4380 §5.2.9). The only thing it ever sends there; the
/// process that holds the raw socket checks each packet against this rule, so a server
/// subverted through a datagram cannot use that socket for anything else (a spoofed
/// router advertisement, a TCP reset).
pub fn is_connectivity_test_echo(config: &ServerConfig, packet: &[u8]) -> bool {
    let Ok(ip) = Ipv6Packet::new_checked(packet) else { return false };
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let own = [config.primary, config.secondary];
    if ip.total_len() != packet.len()
        || ip.next_header() != ip_protocol::ICMPV6
        || ip.hop_limit() == 0
        || ip.payload().len() > config.max_forwarded_icmpv6
        || TeredoAddr::decode_with_prefix(&src, config.prefix).is_none()
        || !dst.is_forwardable()
        || TeredoAddr::decode_with_prefix(&dst, config.prefix).is_some()
        || routing_loop::embeds_own_ipv4(&dst, &own)
    {
        return false;
    }
    let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else { return false };
    icmp.msg_type() == message::ECHO_REQUEST && icmp.msg_code() == 0 && icmp.verify_checksum(&src, &dst)
}

/// Copy `ip` (trailers dropped) into `out` as a router forwards it: hop limit
/// decremented, refused when it would reach zero. Returns its length.
fn copy_routed(ip: &Ipv6Packet<&[u8]>, out: &mut [u8]) -> Result<usize, DropReason> {
    if ip.hop_limit() <= 1 {
        return Err(DropReason::HopLimitExceeded);
    }
    let len = ip.total_len();
    let o = out.get_mut(..len).ok_or(DropReason::TooBig)?;
    o.copy_from_slice(ip.packet());
    Ipv6Packet::new_unchecked(&mut o[..]).set_hop_limit(ip.hop_limit() - 1);
    Ok(len)
}

/// Check 2: bubbles and ICMPv6 only; ICMPv6 must stand alone (its message, for an
/// ICMPv6 packet).
fn bubble_or_icmpv6<'a>(pkt: &'a TeredoPacket<'_>) -> Result<Option<Icmpv6Packet<&'a [u8]>>, DropReason> {
    if pkt.is_bubble() {
        return Ok(None);
    }
    match pkt.ipv6.next_header() {
        ip_protocol::ICMPV6 => Ok(Some(Icmpv6Packet::new_checked(pkt.ipv6.payload())?)),
        ip_protocol::HOP_BY_HOP
        | ip_protocol::ROUTING
        | ip_protocol::FRAGMENT
        | ip_protocol::DEST_OPTS
        | ip_protocol::AH => Err(DropReason::ExtensionHeaders),
        _ => Err(DropReason::NotBubbleOrIcmpv6),
    }
}
