//! A Teredo client scripted from the RFC texts as Windows sends its packets (RFC 6081
//! documents Windows' extensions; no Windows machine is in the lab): an address with
//! random flag bits (RFC 5991 §3.1, Windows Vista SP1 and later), a fresh Nonce in each
//! indirect bubble (RFC 6081 §5.2.4.1), direct bubbles echoing the nonce they answer
//! (§5.2.4.2), trust only for a direct bubble echoing its own (§5.2.4.3), a random
//! port of its own whose number its indirect bubbles announce (§5.4: a second socket,
//! so that only a peer reading the trailer reaches it there), the peer's announced
//! port answered from that random port (§5.4.4.3), and Server Load Reduction's
//! solicitations answered (§5.7.4.2), its server solicited again every randomized
//! refresh interval while it listens (RFC 6081 §5.1.1). A router solicitation with a Source Link-Layer
//! Address option is a tolerance case (RFC 4861 §4.1 allows the option), not a claim
//! about what Windows sends.
//!
//! It is sockets in a client's namespace and a small automaton, not a Teredo
//! implementation: it answers bubbles and echo requests as RFC 4380 §5.2 and RFC 6081
//! §5.2.4 say, so that shipworm's server, relay and client can be run against it.

use crate::error::{err, LabError, Result};
use shipworm_wire::checksum;
use shipworm_wire::icmpv6::{message, Icmpv6Packet, Icmpv6Repr};
use shipworm_wire::ip_protocol;
use shipworm_wire::ipv6::{Ipv6AddrExt, Ipv6Repr};
use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX, RS_SOURCE_RESTRICTED, TEREDO_PORT};
use shipworm_wire::teredo_auth::AuthRepr;
use shipworm_wire::teredo_packet::{emit_bubble, TeredoPacket};
use shipworm_wire::teredo_trailer::{trailer_type, DiscoveryType, TrailerRepr};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// The Random Port trailer's type code: 0x05 in RFC 6081 §4.5, 0x02 in its §9 table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RandomPortCode {
    /// §4.5.
    Section4,
    /// §9's IANA table.
    Iana,
}

impl RandomPortCode {
    fn trailer_type(self) -> u8 {
        match self {
            RandomPortCode::Section4 => trailer_type::RANDOM_PORT,
            RandomPortCode::Iana => trailer_type::RANDOM_PORT_IANA,
        }
    }
}

/// The identifier of the scripted client's own echo requests.
pub const PING_IDENT: u16 = 0x5744;

/// Which of the scripted client's sockets a datagram came in on or leaves from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The port its address embeds.
    Primary,
    /// Its random port (RFC 6081 §5.4).
    Random,
}

/// What arrived at the scripted peer.
#[derive(Debug, Clone)]
pub struct Heard {
    /// The UDP source.
    pub from: SocketAddrV4,
    /// The socket it arrived on.
    pub on: Via,
    /// The origin indication, if any (an indirect bubble through our server).
    pub origin: Option<SocketAddrV4>,
    /// IPv6 source.
    pub src: Ipv6Addr,
    /// The Nonce trailer, if any.
    pub nonce: Option<[u8; 4]>,
    /// The Random Port trailer, if any (type 0x05 or 0x02).
    pub random_port: Option<u16>,
    /// A neighbour-discovery option trailer asking for an answer (SLR, RFC 6081 §4.4).
    pub solicitation: bool,
    /// A bubble (no payload).
    pub bubble: bool,
    /// An ICMPv6 echo: (request?, identifier, sequence).
    pub echo: Option<(bool, u16, u16)>,
}

/// A peer proven by a direct bubble echoing our nonce: where, and on which socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trusted {
    pub peer: Ipv6Addr,
    pub at: SocketAddrV4,
    pub via: Via,
}

/// What it keeps of a Teredo peer (RFC 6081 §5.2.1, §5.4.1).
#[derive(Debug, Clone, Copy)]
struct Peer {
    addr: Ipv6Addr,
    /// The nonce of our last indirect bubble to it, which its direct bubble must echo.
    nonce_sent: Option<[u8; 4]>,
    /// The nonce of its last indirect bubble, which our direct bubbles echo (§5.2.4.2).
    nonce_received: Option<[u8; 4]>,
    /// The port its indirect bubble announced (Peer Random Port), and the trailer type
    /// our own announcements to it use (the one we called it with).
    random_port: Option<u16>,
    code: RandomPortCode,
    /// When we last heard from it or sent it anything (§5.4.4.4's 30 s).
    last: Instant,
    /// The socket everything to it leaves from: the random port once we called it
    /// from there.
    via: Via,
    /// When we last called it (bubbles go 2 s apart at least, RFC 4380 §5.2.6: a
    /// nonce a peer is still answering is not replaced at once).
    called: Option<Instant>,
}

/// Echo requests from peers not trusted yet, held until they are (RFC 4380 §5.2.3:
/// a Teredo peer's data is not taken before the bubbles prove it), at most this many.
const HELD: usize = 8;

/// A scripted Teredo client, qualified at its server.
pub struct ScriptedClient {
    sock: UdpSocket,
    /// Its random port's socket and number, once opened.
    random: Option<(UdpSocket, u16)>,
    server: Ipv4Addr,
    /// Its Teredo address.
    pub address: Ipv6Addr,
    /// Its mapping, as the server reported it.
    pub mapped: SocketAddrV4,
    peers: Vec<Peer>,
    /// Peers proven by our nonce, and where.
    pub trusted: Vec<Trusted>,
    /// Echo requests waiting for their sender's proof: (source, where from, socket, ident, seq, data).
    held: Vec<(Ipv6Addr, SocketAddrV4, Via, u16, u16, Vec<u8>)>,
    /// Server Load Reduction solicitations answered.
    pub solicitations_answered: usize,
    /// Echo requests answered (at once, or once their sender was proven).
    pub echoes_answered: usize,
    /// When it next solicits its server, its randomized refresh interval on (RFC 4380
    /// §5.2.5; RFC 6081 §5.1.1).
    refresh_at: Instant,
    /// Router solicitations sent to keep its mapping.
    pub refreshes: usize,
}

/// The randomized refresh interval: RFC 4380's 75–100 % of 30 s (within RFC 6081
/// §5.1.1's 50–150 %).
fn refresh_interval() -> Duration {
    let r = u64::from(u16::from_be_bytes(random::<2>()));
    Duration::from_millis(22_500 + r * 7_500 / 65_535)
}

/// Random bytes from the kernel (a script's nonces and flag bits must not be guessable
/// by the peer under test either).
fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    read.expect("/dev/urandom");
    b
}

fn io(what: &str) -> impl Fn(std::io::Error) -> LabError + '_ {
    move |e| LabError::new(format!("scripted peer: {what}: {e}"))
}

impl ScriptedClient {
    /// Qualify at `server` from namespace `ns`, local port `port`, with a router
    /// solicitation carrying a Source Link-Layer Address option (RFC 4861 §4.1 allows
    /// it; RFC 4380 §5.2.1 neither asks for nor forbids it) and a nonce: the router
    /// advertisement must echo the nonce and report our mapping.
    pub fn qualify(ns: &str, port: u16, server: Ipv4Addr) -> Result<ScriptedClient> {
        let sock = crate::nat_probe::socket_in(ns, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))?;
        sock.set_read_timeout(Some(Duration::from_millis(200))).map_err(io("timeout"))?;
        let nonce = [0x57, 0x49, 0x4e, 0x44, 0x4f, 0x57, 0x53, 0x21];
        let rs = router_solicitation(nonce);
        let to = SocketAddrV4::new(server, TEREDO_PORT);
        let deadline = Instant::now() + Duration::from_secs(6);
        let mut next_rs = Instant::now();
        let mut buf = [0u8; 2048];
        while Instant::now() < deadline {
            if Instant::now() >= next_rs {
                sock.send_to(&rs, to).map_err(io("send RS"))?;
                next_rs += Duration::from_secs(2);
            }
            let Ok((n, SocketAddr::V4(from))) = sock.recv_from(&mut buf) else { continue };
            let Ok(p) = TeredoPacket::parse(&buf[..n]) else { continue };
            let echoed = p.auth.as_ref().is_some_and(|a| a.nonce() == nonce);
            let ra = p.ipv6.next_header() == ip_protocol::ICMPV6
                && p.ipv6.payload().first() == Some(&message::ROUTER_ADVERT);
            if from.ip() == &server && echoed && ra {
                let mapped = p.origin.ok_or_else(|| LabError::new("the RA has no origin indication".into()))?;
                // RFC 5991 §3.1: 12 random bits, the cone bit clear (§3.2); never all
                // zero, so that a peer that mistook them for something is seen to.
                let bits = u16::from_be_bytes(random::<2>()) & 0x0fff;
                let flags = Flags::new(false, bits.max(1));
                let address = TeredoAddr { prefix: PREFIX, server, flags, mapped }.to_ipv6();
                return Ok(ScriptedClient {
                    sock,
                    random: None,
                    server,
                    address,
                    mapped,
                    peers: Vec::new(),
                    trusted: Vec::new(),
                    held: Vec::new(),
                    solicitations_answered: 0,
                    echoes_answered: 0,
                    refresh_at: Instant::now() + refresh_interval(),
                    refreshes: 0,
                });
            }
        }
        err(format!("no router advertisement from {server} to an RS with a link-layer address option"))
    }

    /// Open its random port (RFC 6081 §5.4.4.2 a): a second socket on local port
    /// `port`, whose number the NAT keeps (the lab's port-restricted NAT preserves free
    /// ports), so that the number announced is where the peer must answer.
    pub fn open_random_port(&mut self, ns: &str, port: u16) -> Result<()> {
        let sock = crate::nat_probe::socket_in(ns, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))?;
        sock.set_nonblocking(true).map_err(io("non-blocking"))?;
        // Both sockets are read in turn: the primary one's wait kept short.
        self.sock.set_read_timeout(Some(Duration::from_millis(10))).map_err(io("timeout"))?;
        self.random = Some((sock, port));
        Ok(())
    }

    /// The nonce its last indirect bubble to `peer` carried.
    pub fn nonce_sent(&self, peer: Ipv6Addr) -> Option<[u8; 4]> {
        self.peers.iter().find(|p| p.addr == peer).and_then(|p| p.nonce_sent)
    }

    fn peer(&mut self, addr: Ipv6Addr) -> &mut Peer {
        if let Some(i) = self.peers.iter().position(|p| p.addr == addr) {
            return &mut self.peers[i];
        }
        // Everything to a peer leaves from the random port while one is open.
        let via = if self.random.is_some() { Via::Random } else { Via::Primary };
        self.peers.push(Peer {
            addr,
            nonce_sent: None,
            nonce_received: None,
            random_port: None,
            code: RandomPortCode::Section4,
            last: Instant::now(),
            via,
            called: None,
        });
        self.peers.last_mut().expect("pushed")
    }

    /// Call Teredo peer `to`: an indirect bubble through its server with a fresh Nonce
    /// (RFC 6081 §5.2.4.1) and, with a random port open, a Random Port trailer of type
    /// `code` naming it (§5.4.4.2 b), and a direct bubble. With a random port the direct
    /// bubble leaves from it, to the mapping the peer's address embeds, opening our NAT
    /// there and nowhere else (short-lived: it dies before the peer's NAT, which
    /// Linux would otherwise remember and move the peer's answer to another port); its
    /// primary port sends the peer nothing, so only a peer that reads the trailer
    /// reaches it. Without one, as RFC 4380 §5.2.6: the direct bubble from the primary
    /// port.
    pub fn call(&mut self, to: Ipv6Addr, code: RandomPortCode) -> Result<()> {
        let peer = TeredoAddr::decode(&to).ok_or_else(|| LabError::new(format!("{to} is not a Teredo address")))?;
        let nonce = random::<4>();
        let via = if self.random.is_some() { Via::Random } else { Via::Primary };
        let p = self.peer(to);
        p.nonce_sent = Some(nonce);
        p.via = via;
        p.code = code;
        p.called = Some(Instant::now());
        p.last = Instant::now();
        // The direct bubble echoes the peer's nonce, if its indirect bubble had one.
        let direct: Vec<u8> =
            p.nonce_received.map(|n| [&[trailer_type::NONCE, 4][..], &n[..]].concat()).unwrap_or_default();
        let mut trailers = [&[trailer_type::NONCE, 4][..], &nonce[..]].concat();
        match &self.random {
            Some((sock, port)) => {
                trailers.extend_from_slice(&[code.trailer_type(), 2]);
                trailers.extend_from_slice(&port.to_be_bytes());
                let ttl = sock.ttl().map_err(io("ttl"))?;
                sock.set_ttl(OPENING_TTL).map_err(io("ttl"))?;
                let sent = sock.send_to(&bubble(self.address, to, &direct), peer.mapped);
                sock.set_ttl(ttl).map_err(io("ttl"))?;
                sent.map_err(io("send"))?;
            }
            None => self.send(Via::Primary, peer.mapped, &bubble(self.address, to, &direct))?,
        }
        self.send(Via::Primary, SocketAddrV4::new(peer.server, TEREDO_PORT), &bubble(self.address, to, &trailers))
    }

    /// Send an echo request to `to` at `at` from socket `via` (a trusted peer's
    /// endpoint, or our server for a native host).
    pub fn ping(&self, to: Ipv6Addr, via: Via, at: SocketAddrV4, seq: u16) -> Result<()> {
        self.send(via, at, &echo(self.address, to, true, PING_IDENT, seq, b"scripted"))
    }

    /// Our server's endpoint.
    pub fn server(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.server, TEREDO_PORT)
    }

    fn send(&self, via: Via, to: SocketAddrV4, payload: &[u8]) -> Result<()> {
        let sock = match (via, &self.random) {
            (Via::Random, Some((s, _))) => s,
            _ => &self.sock,
        };
        sock.send_to(payload, to).map(drop).map_err(io("send"))
    }

    /// The next datagram on either socket, within the primary socket's read timeout.
    fn recv(&self, buf: &mut [u8]) -> Option<(usize, SocketAddrV4, Via)> {
        if let Some((s, _)) = &self.random {
            if let Ok((n, SocketAddr::V4(from))) = s.recv_from(buf) {
                return Some((n, from, Via::Random));
            }
        }
        match self.sock.recv_from(buf) {
            Ok((n, SocketAddr::V4(from))) => Some((n, from, Via::Primary)),
            _ => None,
        }
    }

    /// Hear and answer for `within`, as a Windows client would:
    /// - an indirect bubble (through our server, with an origin indication) gets a
    ///   direct bubble to the origin echoing its nonce (§5.2.4.2), from the random port
    ///   when the peer announced one of its own, which then gets that bubble too, with
    ///   our Random Port trailer (§5.4.4.3, §5.4.4.4); from a Teredo peer we do not
    ///   trust yet, our own indirect bubble follows (fresh nonce, our random port);
    /// - a direct bubble from the mapping its source embeds, or echoing our nonce,
    ///   proves its sender where it came from, on the socket it came to (§5.2.4.4,
    ///   §5.4.4.5); one asking for an answer (SLR) from a
    ///   trusted peer gets a direct bubble with an advertisement (§5.7.4.2);
    /// - an echo request is answered where it came from if the sender is trusted there
    ///   or is not a Teredo address, else held until it is (a few at most).
    ///
    /// Returns what was heard, and stops early once `done` says so.
    pub fn answer(&mut self, within: Duration, mut done: impl FnMut(&Heard, &Self) -> bool) -> Result<Vec<Heard>> {
        let deadline = Instant::now() + within;
        let mut heard = Vec::new();
        let mut buf = [0u8; 2048];
        while Instant::now() < deadline {
            if Instant::now() >= self.refresh_at {
                let rs = router_solicitation(random::<8>());
                self.send(Via::Primary, self.server(), &rs)?;
                self.refresh_at = Instant::now() + refresh_interval();
                self.refreshes += 1;
            }
            let Some((n, from, on)) = self.recv(&mut buf) else { continue };
            let Ok(p) = TeredoPacket::parse(&buf[..n]) else { continue };
            let h = hear(from, on, &p);
            if p.ipv6.dst_addr() != self.address {
                continue;
            }
            if let Some(peer) = self.peers.iter_mut().find(|p| p.addr == h.src) {
                peer.last = Instant::now();
            }
            if let Some(origin) = h.origin.filter(|_| h.bubble) {
                self.answer_indirect(&h, origin)?;
                let stop = done(&h, self);
                heard.push(h);
                if stop {
                    break;
                }
                continue;
            }
            // What proves its sender (any packet from its embedded mapping, RFC 4380
            // §5.2.3; a direct bubble echoing our nonce, RFC 6081 §5.2.4.4) makes it
            // trusted there, and releases what it sent before.
            if self.proves(&h) && !self.trusted_at(h.src, from, on) {
                self.trusted.retain(|t| t.peer != h.src);
                self.trusted.push(Trusted { peer: h.src, at: from, via: on });
                self.release(h.src)?;
            }
            if h.bubble && h.solicitation && self.trusted_at(h.src, from, on) {
                let ad = [trailer_type::NEIGHBOR_DISCOVERY, 4, 1, 0, 0, 0];
                self.send(on, from, &bubble(self.address, h.src, &ad))?;
                self.solicitations_answered += 1;
            } else if let Some((true, ident, seq)) = h.echo {
                // The request's data back, as a host's stack does (ping checks it).
                let data = p.ipv6.payload().get(8..).unwrap_or_default().to_vec();
                if TeredoAddr::decode(&h.src).is_none() || self.trusted_at(h.src, from, on) {
                    self.send(on, from, &echo(self.address, h.src, false, ident, seq, &data))?;
                    self.echoes_answered += 1;
                } else if self.held.len() < HELD {
                    self.held.push((h.src, from, on, ident, seq, data));
                }
            }
            let stop = done(&h, self);
            heard.push(h);
            if stop {
                break;
            }
        }
        Ok(heard)
    }

    /// What proves its sender: a packet from the mapping its Teredo address embeds
    /// (RFC 4380 §5.2.3; RFC 6081 §5.2.4.4 a), or a direct bubble from elsewhere echoing
    /// the nonce we last sent it (§5.2.4.4 b).
    fn proves(&self, h: &Heard) -> bool {
        let embedded = TeredoAddr::decode(&h.src).is_some_and(|t| t.mapped == h.from);
        embedded || (h.bubble && self.nonce_sent(h.src).is_some_and(|n| h.nonce == Some(n)))
    }

    fn trusted_at(&self, peer: Ipv6Addr, from: SocketAddrV4, on: Via) -> bool {
        self.trusted.iter().any(|t| t.peer == peer && t.at == from && t.via == on)
    }

    /// An indirect bubble from `h.src`, through our server from `origin`.
    fn answer_indirect(&mut self, h: &Heard, origin: SocketAddrV4) -> Result<()> {
        let echo: Vec<u8> = h.nonce.map(|n| [&[trailer_type::NONCE, 4][..], &n[..]].concat()).unwrap_or_default();
        let p = self.peer(h.src);
        // §5.2.4.3: its nonce kept (none: none kept).
        p.nonce_received = h.nonce;
        // §5.4.4.4: the first port it announces is kept; another only once the two of
        // us have been quiet for 30 s.
        if let Some(port) = h.random_port {
            if p.random_port.is_none() || p.last.elapsed() >= Duration::from_secs(30) {
                p.random_port = Some(port);
            }
        }
        p.last = Instant::now();
        let p = *p;
        // To its origin from the socket it is ours to use; and, when it announced a
        // random port, to that too (§5.4.4.3): from ours, naming it, when we have one,
        // else from the primary port.
        self.send(p.via, origin, &bubble(self.address, h.src, &echo))?;
        // Where it proved itself, if elsewhere (RFC 6081 §5.2.4.4 d: its mapping now).
        if let Some(t) = self.trusted.iter().find(|t| t.peer == h.src && t.at != origin).copied() {
            self.send(t.via, t.at, &bubble(self.address, h.src, &echo))?;
        }
        if let (Some(theirs), Some(t)) = (p.random_port, TeredoAddr::decode(&h.src)) {
            // To the address its Teredo address embeds (§5.4.4.3).
            let to = SocketAddrV4::new(*t.mapped.ip(), theirs);
            match &self.random {
                Some((_, ours)) => {
                    let mut trailers = echo.clone();
                    trailers.extend_from_slice(&[p.code.trailer_type(), 2]);
                    trailers.extend_from_slice(&ours.to_be_bytes());
                    self.send(Via::Random, to, &bubble(self.address, h.src, &trailers))?;
                }
                None => self.send(Via::Primary, to, &bubble(self.address, h.src, &echo))?,
            }
        }
        let trusted = self.trusted.iter().any(|t| t.peer == h.src);
        let spaced = p.called.is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
        if !trusted && spaced && TeredoAddr::decode(&h.src).is_some() && !h.src.is_link_local() {
            self.call(h.src, p.code)?;
        }
        Ok(())
    }

    /// What `peer` sent before it was proven, answered now at the place it is proven.
    fn release(&mut self, peer: Ipv6Addr) -> Result<()> {
        let held = std::mem::take(&mut self.held);
        for (src, from, on, ident, seq, data) in held {
            if src == peer && self.trusted_at(src, from, on) {
                self.send(on, from, &echo(self.address, src, false, ident, seq, &data))?;
                self.echoes_answered += 1;
            } else if src != peer {
                self.held.push((src, from, on, ident, seq, data));
            }
        }
        Ok(())
    }
}

/// The TTL of a bubble that opens our own NAT only (the lab's NAT is the first hop, the
/// core router the second).
const OPENING_TTL: u32 = 2;

fn hear(from: SocketAddrV4, on: Via, p: &TeredoPacket<'_>) -> Heard {
    let src = p.ipv6.src_addr();
    let nonce = match p.trailers.get(trailer_type::NONCE) {
        Some(TrailerRepr::Nonce(n)) => Some(n),
        _ => None,
    };
    let random_port = [trailer_type::RANDOM_PORT, trailer_type::RANDOM_PORT_IANA].into_iter().find_map(|k| {
        let t = p.trailers.find(k)?;
        (t.value.len() == 2).then(|| u16::from_be_bytes([t.value[0], t.value[1]]))
    });
    let solicitation = matches!(
        p.trailers.get(trailer_type::NEIGHBOR_DISCOVERY),
        Some(TrailerRepr::NeighborDiscovery(DiscoveryType::Solicitation))
    );
    let echo = (p.ipv6.next_header() == ip_protocol::ICMPV6)
        .then(|| Icmpv6Packet::new_checked(p.ipv6.payload()).ok())
        .flatten()
        .and_then(|i| match i.msg_type() {
            message::ECHO_REQUEST => Some((true, i.echo_ident(), i.echo_seq_no())),
            message::ECHO_REPLY => Some((false, i.echo_ident(), i.echo_seq_no())),
            _ => None,
        });
    Heard { from, on, origin: p.origin, src, nonce, random_port, solicitation, bubble: p.is_bubble(), echo }
}

fn bubble(src: Ipv6Addr, dst: Ipv6Addr, trailers: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    emit_bubble(&src, &dst, 0, &mut b).expect("fits");
    b.extend_from_slice(trailers);
    b
}

fn echo(src: Ipv6Addr, dst: Ipv6Addr, request: bool, ident: u16, seq_no: u16, data: &[u8]) -> Vec<u8> {
    let icmp = if request {
        Icmpv6Repr::EchoRequest { ident, seq_no, data }
    } else {
        Icmpv6Repr::EchoReply { ident, seq_no, data }
    };
    let mut b = vec![0u8; 40 + icmp.buffer_len()];
    Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: ip_protocol::ICMPV6,
        payload_len: icmp.buffer_len(),
        hop_limit: 64,
    }
    .emit(&mut b)
    .expect("fits");
    icmp.emit(&src, &dst, &mut b[40..]).expect("fits");
    b
}

/// An RS as Windows sends it: an authentication header with a nonce, from the
/// restricted link-local source to all-routers, hop limit 255, with a Source Link-Layer
/// Address option (type 1, 8 bytes).
fn router_solicitation(nonce: [u8; 8]) -> Vec<u8> {
    let all_routers = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
    let mut b = vec![0u8; 13];
    let n = AuthRepr::with_nonce(nonce).emit(&mut b).expect("fits");
    b.truncate(n);
    let icmp_len = 8 + 8;
    let at = b.len();
    b.resize(at + 40 + icmp_len, 0);
    Ipv6Repr {
        src_addr: RS_SOURCE_RESTRICTED,
        dst_addr: all_routers,
        next_header: ip_protocol::ICMPV6,
        payload_len: icmp_len,
        hop_limit: 255,
    }
    .emit(&mut b[at..])
    .expect("fits");
    let icmp = &mut b[at + 40..];
    icmp[0] = message::ROUTER_SOLICIT;
    icmp[8..16].copy_from_slice(&[1, 1, 0x02, 0x00, 0x5e, 0x10, 0x00, 0x01]);
    let sum = checksum::ipv6_pseudo_header(&RS_SOURCE_RESTRICTED, &all_routers, ip_protocol::ICMPV6, icmp_len as u32)
        + checksum::sum(icmp);
    let c = checksum::finish(sum);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    b
}
