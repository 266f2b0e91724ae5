//! A Teredo client scripted from the RFC texts as Windows sends its packets (RFC 6081
//! documents Windows' extensions; no Windows machine is in the lab): a router
//! solicitation with a Source Link-Layer Address option, indirect bubbles with a Nonce
//! and a Random Port trailer (either type code), direct bubbles echoing the nonce they
//! answer. It is a socket in a client's namespace and a small automaton, not a Teredo
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
use shipworm_wire::teredo_trailer::{trailer_type, TrailerRepr};
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

/// The nonce of the scripted client's indirect bubbles (a script has no secrets).
pub const CALL_NONCE: [u8; 4] = [0x0b, 0xad, 0xf0, 0x0d];

/// The identifier of the scripted client's own echo requests.
pub const PING_IDENT: u16 = 0x5744;

/// What arrived at the scripted peer.
#[derive(Debug, Clone)]
pub struct Heard {
    /// The UDP source.
    pub from: SocketAddrV4,
    /// The origin indication, if any (an indirect bubble through our server).
    pub origin: Option<SocketAddrV4>,
    /// IPv6 source.
    pub src: Ipv6Addr,
    /// The Nonce trailer, if any.
    pub nonce: Option<[u8; 4]>,
    /// A bubble (no payload).
    pub bubble: bool,
    /// An ICMPv6 echo: (request?, identifier, sequence).
    pub echo: Option<(bool, u16, u16)>,
}

/// A scripted Teredo client, qualified at its server.
pub struct ScriptedClient {
    sock: UdpSocket,
    server: Ipv4Addr,
    /// Its Teredo address.
    pub address: Ipv6Addr,
    /// Its mapping, as the server reported it.
    pub mapped: SocketAddrV4,
    /// The nonce of its last indirect bubble, which a direct answer must echo.
    nonce_sent: [u8; 4],
    /// Peers proven by our nonce, and where.
    pub trusted: Vec<(Ipv6Addr, SocketAddrV4)>,
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
                let address = TeredoAddr { prefix: PREFIX, server, flags: Flags(0), mapped }.to_ipv6();
                return Ok(ScriptedClient { sock, server, address, mapped, nonce_sent: [0; 4], trusted: Vec::new() });
            }
        }
        err(format!("no router advertisement from {server} to an RS with a link-layer address option"))
    }

    /// An indirect bubble to Teredo peer `to` through its server, with a fresh Nonce
    /// and, if asked, a Random Port trailer naming our mapped port (RFC 6081 §5.2.4.1,
    /// §5.4.4.2), and the direct bubble that goes with it (RFC 4380 §5.2.6).
    pub fn call(&mut self, to: Ipv6Addr, random_port: Option<RandomPortCode>) -> Result<()> {
        let peer = TeredoAddr::decode(&to).ok_or_else(|| LabError::new(format!("{to} is not a Teredo address")))?;
        self.nonce_sent = CALL_NONCE;
        let mut trailers = Vec::new();
        trailers.extend_from_slice(&[trailer_type::NONCE, 4]);
        trailers.extend_from_slice(&self.nonce_sent);
        if let Some(code) = random_port {
            let t = match code {
                RandomPortCode::Section4 => 0x05,
                RandomPortCode::Iana => 0x02,
            };
            trailers.extend_from_slice(&[t, 2]);
            trailers.extend_from_slice(&self.mapped.port().to_be_bytes());
        }
        self.send(peer.mapped, &bubble(self.address, to, &[]))?;
        self.send(SocketAddrV4::new(peer.server, TEREDO_PORT), &bubble(self.address, to, &trailers))
    }

    /// Send an echo request to `to` at `at` (a trusted peer's endpoint, or our server
    /// for a native host).
    pub fn ping(&self, to: Ipv6Addr, at: SocketAddrV4, seq: u16) -> Result<()> {
        self.send(at, &echo(self.address, to, true, PING_IDENT, seq, b"scripted"))
    }

    /// Our server's endpoint.
    pub fn server(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.server, TEREDO_PORT)
    }

    fn send(&self, to: SocketAddrV4, payload: &[u8]) -> Result<()> {
        self.sock.send_to(payload, to).map(drop).map_err(io("send"))
    }

    /// Hear and answer for `within`, as a Windows client would: an indirect bubble
    /// (through our server, with an origin indication) gets a direct bubble to the
    /// origin echoing its nonce, and, from a Teredo peer we do not trust yet, our own
    /// indirect bubble with a nonce; a direct bubble echoing our nonce proves its
    /// sender where it came from; an echo request to us is answered where it came from.
    /// Returns what was heard, and stops early once `done` says so.
    pub fn answer(&mut self, within: Duration, mut done: impl FnMut(&Heard) -> bool) -> Result<Vec<Heard>> {
        let deadline = Instant::now() + within;
        let mut heard = Vec::new();
        let mut buf = [0u8; 2048];
        while Instant::now() < deadline {
            let Ok((n, SocketAddr::V4(from))) = self.sock.recv_from(&mut buf) else { continue };
            let Ok(p) = TeredoPacket::parse(&buf[..n]) else { continue };
            let h = hear(from, &p);
            if p.ipv6.dst_addr() != self.address {
                continue;
            }
            if let Some(origin) = h.origin.filter(|_| h.bubble) {
                let echo: Vec<u8> =
                    h.nonce.map(|n| [&[trailer_type::NONCE, 4][..], &n[..]].concat()).unwrap_or_default();
                self.send(origin, &bubble(self.address, h.src, &echo))?;
                let trusted = self.trusted.iter().any(|(a, _)| *a == h.src);
                if !trusted && TeredoAddr::decode(&h.src).is_some() && !h.src.is_link_local() {
                    self.call(h.src, Some(RandomPortCode::Section4))?;
                }
            } else if h.bubble && h.nonce == Some(self.nonce_sent) {
                self.trusted.retain(|(a, _)| *a != h.src);
                self.trusted.push((h.src, from));
            } else if let Some((true, ident, seq)) = h.echo {
                // The request's data back, as a host's stack does (ping checks it).
                let data = p.ipv6.payload().get(8..).unwrap_or_default();
                self.send(from, &echo(self.address, h.src, false, ident, seq, data))?;
            }
            let stop = done(&h);
            heard.push(h);
            if stop {
                break;
            }
        }
        Ok(heard)
    }
}

fn hear(from: SocketAddrV4, p: &TeredoPacket<'_>) -> Heard {
    let src = p.ipv6.src_addr();
    let nonce = match p.trailers.get(trailer_type::NONCE) {
        Some(TrailerRepr::Nonce(n)) => Some(n),
        _ => None,
    };
    let echo = (p.ipv6.next_header() == ip_protocol::ICMPV6)
        .then(|| Icmpv6Packet::new_checked(p.ipv6.payload()).ok())
        .flatten()
        .and_then(|i| match i.msg_type() {
            message::ECHO_REQUEST => Some((true, i.echo_ident(), i.echo_seq_no())),
            message::ECHO_REPLY => Some((false, i.echo_ident(), i.echo_seq_no())),
            _ => None,
        });
    Heard { from, origin: p.origin, src, nonce, bubble: p.is_bubble(), echo }
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
