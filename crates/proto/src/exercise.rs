//! The fuzz harness of the role state machines: a little world of one server, one
//! relay and one client wired together, driven by arbitrary bytes read as a script —
//! deliver, drop or replay what the parties sent each other, inject datagrams and TUN
//! packets from anyone (spoofing the parties too), forge made-up clients' first packets
//! at the relay (emptying its budget, so that cookies go out), mutate what was sent, step
//! time, move the client to another network. Real outputs travel, so the script reaches the deep
//! states (qualified, peers trusted, queues held) that noise alone never would. After
//! every step the caps must hold; a panic anywhere is a finding.
//!
//! Built only with the `fuzzing` feature: for `fuzz/` (`world` target) and the bounded
//! property runs in `tests/world.rs`.

use crate::client::{Client, ClientConfig, ServerAddrs, Via};
use crate::drop_reason::DropCounters;
use crate::outcome::Outcome;
use crate::relay::{Relay, RelayConfig};
use crate::server::{Local, Server, ServerConfig};
use crate::transmit::{Random, Recorder, Source};
use shipworm_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use shipworm_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::num::NonZeroU16;
use std::time::Duration;

const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SERVER2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const RELAY: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 100), 3544);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 5);
const CLIENT_PORT: u16 = 40000;
const PROBE_PORT: u16 = 40001;
const NATIVE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
/// Who else sends: a stranger, and strangers spoofing each party.
const SENDERS: [SocketAddrV4; 6] = [
    SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 3544),
    SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 1),
    SocketAddrV4::new(SERVER, 3544),
    SocketAddrV4::new(SERVER2, 3544),
    RELAY,
    SocketAddrV4::new(CLIENT_IP, CLIENT_PORT),
];

/// The caps under test, small so the script can reach them.
pub const RELAY_PEERS: usize = 16;
/// Peers waiting at once, relay and client.
pub const WAITING: usize = 4;
/// Bytes queued per waiting peer, relay and client.
pub const QUEUE_BYTES: usize = 2048;
/// Random ports the client may hold.
pub const CLIENT_PORTS: usize = 4;

/// Largest UDP payload over IPv4, and largest IPv6 packet without jumbograms.
const UDP_MAX: usize = 65_507;
const IPV6_MAX: usize = 40 + 65_535;
/// What the world keeps in flight, and of what was sent, to replay and mutate.
const FLIGHT: usize = 256;
const SEEN: usize = 64;
const STEPS: usize = 4096;

#[derive(Clone, Copy)]
enum Party {
    Server,
    Relay,
    Client,
}

impl Party {
    fn name(self) -> &'static str {
        match self {
            Party::Server => "the server",
            Party::Relay => "the relay",
            Party::Client => "the client",
        }
    }
}

/// A datagram on its way.
struct Datagram {
    from: SocketAddrV4,
    to: SocketAddrV4,
    data: Vec<u8>,
}

/// Deterministic randomness for the client (xorshift).
struct Rng(u64);
impl Random for Rng {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *b = self.0 as u8;
        }
    }
}

/// The script's bytes, read front to back; zeros once they run out.
struct Script<'a>(&'a [u8]);
impl Script<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = (self.u16() as usize).min(max).min(self.0.len());
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        taken.to_vec()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

struct World {
    now: Duration,
    server: Server,
    relay: Relay,
    client: Client<Rng>,
    /// The client's random ports open, and the last number given.
    ports: Vec<NonZeroU16>,
    last_port: u16,
    flight: VecDeque<Datagram>,
    native: VecDeque<Vec<u8>>,
    seen: VecDeque<Vec<u8>>,
    host_packets: usize,
}

impl World {
    fn new(seed: u64) -> World {
        let relay_cfg = RelayConfig {
            capacity: RELAY_PEERS,
            pending_capacity: WAITING,
            per_address: RELAY_PEERS / 2,
            queue_bytes: QUEUE_BYTES,
            icmp_source: Some(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1)),
            hash_keys: (seed, !seed),
            // A budget a script can empty, so that first packets over it draw cookies
            // (`relay::cookie`), or (a seed bit) one it cannot, so that forged first
            // packets can fill the table and its caps.
            client_first_per_s: if (seed >> 32) & 1 == 0 { 2 } else { 1000 },
            ..RelayConfig::default()
        };
        let mut client_cfg = ClientConfig::new(vec![ServerAddrs::new(SERVER)]);
        client_cfg.peer_capacity = RELAY_PEERS;
        client_cfg.pending_capacity = WAITING;
        client_cfg.queue_bytes = QUEUE_BYTES;
        client_cfg.random_ports = CLIENT_PORTS;
        client_cfg.service_port = NonZeroU16::new(CLIENT_PORT);
        client_cfg.hash_keys = (!seed, seed);
        let mut server_cfg = ServerConfig::new(SERVER);
        server_cfg.hash_keys = (seed, seed);
        World {
            now: Duration::from_secs(1),
            server: Server::new(server_cfg),
            relay: Relay::new(relay_cfg),
            client: Client::new(client_cfg, Rng(seed | 1)),
            ports: Vec::new(),
            last_port: 0,
            flight: VecDeque::new(),
            native: VecDeque::new(),
            seen: VecDeque::new(),
            host_packets: 0,
        }
    }

    fn remember(&mut self, data: &[u8]) {
        if self.seen.len() == SEEN {
            self.seen.pop_front();
        }
        self.seen.push_back(data.to_vec());
    }

    /// Route what `who` sent: datagrams into the air, IPv6 packets to the native side
    /// (server, relay) or the host (client).
    fn route(&mut self, who: Party, out: Recorder) {
        for sent in out.sent {
            let (to, data) = (sent.to, sent.payload);
            assert!(data.len() <= UDP_MAX, "a UDP payload of {} bytes", data.len());
            let from = match (who, sent.from) {
                (Party::Server, Source::Service) => SocketAddrV4::new(SERVER, 3544),
                (Party::Server, Source::Secondary) => SocketAddrV4::new(SERVER2, 3544),
                (Party::Relay, Source::Service) => RELAY,
                (Party::Client, Source::Port(p)) => SocketAddrV4::new(CLIENT_IP, p.get()),
                (Party::Client, Source::Service) => SocketAddrV4::new(CLIENT_IP, CLIENT_PORT),
                (Party::Client, Source::Probe) => SocketAddrV4::new(CLIENT_IP, PROBE_PORT),
                (who, from) => panic!("{} sent from a socket it does not have: {from:?}", who.name()),
            };
            self.remember(&data);
            if self.flight.len() == FLIGHT {
                self.flight.pop_front();
            }
            self.flight.push_back(Datagram { from, to, data });
        }
        for packet in out.delivered {
            assert!(packet.len() <= IPV6_MAX, "an IPv6 packet of {} bytes", packet.len());
            self.remember(&packet);
            if matches!(who, Party::Client) {
                self.host_packets += 1;
            } else {
                if self.native.len() == FLIGHT {
                    self.native.pop_front();
                }
                self.native.push_back(packet);
            }
        }
        if matches!(who, Party::Client) {
            self.ports = out.open;
            self.last_port = out.last_port;
        }
    }

    /// A recorder for the next call, holding the client's random ports as they are.
    fn out(&self) -> Recorder {
        Recorder {
            open: self.ports.clone(),
            last_port: self.last_port,
            port_cap: Some(CLIENT_PORTS * 2),
            ..Recorder::default()
        }
    }

    fn deliver(&mut self, d: Datagram) {
        let mut out = self.out();
        let now = self.now;
        let who = match (*d.to.ip(), d.to.port()) {
            (SERVER, 3544) | (SERVER2, 3544) => {
                let local = if *d.to.ip() == SERVER { Local::Primary } else { Local::Secondary };
                let before = self.server.stats().drops.clone();
                let outcome = self.server.on_udp(now, local, d.from, &d.data, &mut out);
                counted(outcome, &before, &self.server.stats().drops);
                Party::Server
            }
            (ip, 3544) if ip == *RELAY.ip() => {
                let before = self.relay.stats().drops.clone();
                let outcome = self.relay.on_udp(now, d.from, &d.data, &mut out);
                counted(outcome, &before, &self.relay.stats().drops);
                Party::Relay
            }
            (CLIENT_IP, port) => {
                let via = match port {
                    CLIENT_PORT => Via::Service,
                    PROBE_PORT => Via::Probe,
                    p => match NonZeroU16::new(p).filter(|p| self.ports.contains(p)) {
                        Some(p) => Via::Port(p),
                        None => return,
                    },
                };
                let before = self.client.stats().drops.clone();
                let outcome = self.client.on_udp(now, via, d.from, &d.data, &mut out);
                counted(outcome, &before, &self.client.stats().drops);
                Party::Client
            }
            _ => return,
        };
        self.route(who, out);
    }

    /// A packet of the script's making from the client's host, or from the native side
    /// to the relay.
    fn made_up_packet(&mut self, s: &mut Script<'_>) {
        let packet = s.bytes(1500);
        let mut out = self.out();
        let now = self.now;
        if s.byte() % 2 == 0 {
            let before = self.client.stats().drops.clone();
            let outcome = self.client.on_tun(now, &packet, &mut out);
            counted(outcome, &before, &self.client.stats().drops);
            self.route(Party::Client, out);
        } else {
            let before = self.relay.stats().drops.clone();
            let outcome = self.relay.on_tun(now, &packet, &mut out);
            counted(outcome, &before, &self.relay.stats().drops);
            self.route(Party::Relay, out);
        }
    }

    /// Something sent before, one byte changed, to anyone.
    fn mutated_datagram(&mut self, s: &mut Script<'_>) {
        if self.seen.is_empty() {
            return;
        }
        let mut data = self.seen[s.byte() as usize % self.seen.len()].clone();
        if !data.is_empty() {
            let at = s.u16() as usize % data.len();
            data[at] = s.byte();
        }
        let to = self.target(s.byte());
        let from = SENDERS[s.byte() as usize % SENDERS.len()];
        self.deliver(Datagram { from, to, data });
    }

    /// A first packet to the native host in the name of a made-up client, from the
    /// mapping its address embeds (a forged source): a few empty the relay's
    /// client-first budget, and the client's own first packets then draw cookies.
    fn forged_first_packet(&mut self, s: &mut Script<'_>) {
        use shipworm_wire::teredo_addr::{Flags, TeredoAddr};
        let mapped = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, s.byte().max(1)), 1024 + s.u16() % 60_000);
        let addr = TeredoAddr { prefix: 0x2001_0000, server: SERVER, flags: Flags(0), mapped }.to_ipv6();
        let data = echo(addr, NATIVE, Icmpv6Repr::EchoRequest { ident: 2, seq_no: 0, data: b"forged" });
        self.deliver(Datagram { from: mapped, to: RELAY, data });
    }

    /// The client's host pings the native host (the relay's path).
    fn ping_native(&mut self, s: &mut Script<'_>) {
        if let Some(me) = self.client.address() {
            let p = echo(me, NATIVE, Icmpv6Repr::EchoRequest { ident: 1, seq_no: s.u16(), data: b"ping" });
            let mut out = self.out();
            let before = self.client.stats().drops.clone();
            let outcome = self.client.on_tun(self.now, &p, &mut out);
            counted(outcome, &before, &self.client.stats().drops);
            self.route(Party::Client, out);
        }
    }

    /// A packet reaches the native side: to a Teredo address it goes to the relay (it
    /// routes the prefix); an echo request to the native host is answered.
    fn native_step(&mut self, packet: Vec<u8>) {
        let Ok(ip) = Ipv6Packet::new_checked(&packet[..]) else { return };
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        if dst.segments()[0] == 0x2001 && dst.segments()[1] == 0 {
            let mut out = self.out();
            let before = self.relay.stats().drops.clone();
            let outcome = self.relay.on_tun(self.now, &packet, &mut out);
            counted(outcome, &before, &self.relay.stats().drops);
            self.route(Party::Relay, out);
            return;
        }
        if dst != NATIVE || ip.next_header() != 58 {
            return;
        }
        let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else { return };
        if let Ok(Icmpv6Repr::EchoRequest { ident, seq_no, data }) = Icmpv6Repr::parse(&src, &dst, &icmp) {
            let reply = echo(NATIVE, src, Icmpv6Repr::EchoReply { ident, seq_no, data });
            if self.native.len() < FLIGHT {
                self.native.push_back(reply);
            }
        }
    }

    /// Both timers at `now`, whatever their deadlines said. Their promises: a timer
    /// run before its deadline sends nothing (the deadline was not late), and a run
    /// leaves nothing due at once (a daemon sleeping until the next would not spin).
    fn timers(&mut self) {
        let now = self.now;
        let early = |due: Option<Duration>| due.is_none_or(|t| now < t);
        let mut out = self.out();
        let client_early = early(self.client.poll_timeout());
        self.client.on_timer(now, &mut out);
        assert!(!client_early || out.sent.is_empty(), "the client sent before its deadline: {:?}", out.sent);
        let next = self.client.poll_timeout();
        assert!(next.is_none_or(|t| t > now), "the client's timer at {now:?} left itself due at {next:?}");
        self.route(Party::Client, out);
        let mut out = self.out();
        let relay_early = early(self.relay.poll_timeout());
        self.relay.on_timer(now, &mut out);
        assert!(
            !relay_early || (out.sent.is_empty() && out.delivered.is_empty()),
            "the relay sent before its deadline"
        );
        let next = self.relay.poll_timeout();
        assert!(next.is_none_or(|t| t > now), "the relay's timer at {now:?} left itself due at {next:?}");
        self.route(Party::Relay, out);
        while self.client.poll_event().is_some() {}
    }

    fn target(&self, pick: u8) -> SocketAddrV4 {
        match pick % 6 {
            0 => SocketAddrV4::new(CLIENT_IP, CLIENT_PORT),
            1 => SocketAddrV4::new(CLIENT_IP, PROBE_PORT),
            2 => RELAY,
            3 => SocketAddrV4::new(SERVER, 3544),
            4 => SocketAddrV4::new(SERVER2, 3544),
            _ => SocketAddrV4::new(CLIENT_IP, self.ports.first().map_or(CLIENT_PORT, |p| p.get())),
        }
    }

    /// The caps every party promises, whatever came in.
    fn check(&self) {
        assert!(self.relay.peer_count() <= RELAY_PEERS, "relay peers {}", self.relay.peer_count());
        assert!(self.relay.pending_len() <= WAITING, "relay waiting {}", self.relay.pending_len());
        assert!(self.relay.queued_bytes() <= WAITING * QUEUE_BYTES, "relay queued {}", self.relay.queued_bytes());
        assert!(self.client.waiting_peers() <= WAITING, "client waiting {}", self.client.waiting_peers());
        assert!(self.client.queued_bytes() <= WAITING * QUEUE_BYTES, "client queued {}", self.client.queued_bytes());
        assert!(self.ports.len() <= CLIENT_PORTS, "client random ports {}", self.ports.len());
    }
}

/// The outcome's promise: a drop it names was counted under that reason.
fn counted(outcome: Outcome, before: &DropCounters, after: &DropCounters) {
    if let Err(reason) = outcome {
        assert!(after.get(reason) > before.get(reason), "dropped for {reason:?} but not counted");
    }
}

/// An IPv6 packet carrying an ICMPv6 echo.
fn echo(src: Ipv6Addr, dst: Ipv6Addr, repr: Icmpv6Repr<'_>) -> Vec<u8> {
    let len = repr.buffer_len();
    let mut buf = vec![0u8; 40 + len];
    let ip = Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: len, hop_limit: 64 };
    if ip.emit(&mut buf).is_err() || repr.emit(&src, &dst, &mut buf[40..]).is_err() {
        return Vec::new();
    }
    buf
}

/// How far a script got: for tests that the world reaches the deep states.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reached {
    /// The client has an address.
    pub qualified: bool,
    /// Peers in the relay's table at the end.
    pub relay_peers: usize,
    /// Echo replies the client handed its host.
    pub host_packets: usize,
    /// Cookies the relay sent (first packets over its budget), and clients they let in.
    pub relay_cookies: (u64, u64),
}

/// Run the script in `data` against a new world.
pub fn world(data: &[u8]) -> Reached {
    let mut s = Script(data);
    let seed = u64::from_be_bytes([s.byte(), s.byte(), s.byte(), s.byte(), 0, 0, 0, 1]);
    let mut w = World::new(seed);
    w.timers();
    for _ in 0..STEPS {
        if s.is_empty() {
            break;
        }
        match s.byte() % 11 {
            0 | 1 => {
                if let Some(d) = w.flight.pop_front() {
                    w.deliver(d);
                }
            }
            2 => {
                w.flight.pop_front();
            }
            3 => {
                if let Some(p) = w.native.pop_front() {
                    w.native_step(p);
                }
            }
            4 => {
                let to = w.target(s.byte());
                let from = SENDERS[s.byte() as usize % SENDERS.len()];
                let data = s.bytes(1500);
                w.deliver(Datagram { from, to, data });
            }
            5 => w.made_up_packet(&mut s),
            6 => w.mutated_datagram(&mut s),
            7 => {
                w.now += Duration::from_millis(u64::from(s.u16()) * 16);
                w.timers();
            }
            8 => w.ping_native(&mut s),
            9 => w.forged_first_packet(&mut s),
            _ => {
                let mut out = w.out();
                w.client.on_network_change(w.now, &mut out);
                w.route(Party::Client, out);
            }
        }
        w.check();
    }
    let st = w.relay.stats();
    Reached {
        qualified: w.client.address().is_some(),
        relay_peers: w.relay.peer_count(),
        host_packets: w.host_packets,
        relay_cookies: (st.cookies_sent, st.cookies_proved),
    }
}
