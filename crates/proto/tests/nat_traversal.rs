//! Two clients behind model NATs, one server, a router between them, in virtual time:
//! RFC 6081's Symmetric NAT Support exchange and the opening bubble that lets two
//! clients behind Linux NATs meet, packet by packet. Each case also runs with the
//! mechanism off and shows the exchange failing, so a pass is the mechanism's doing.
//!
//! The NAT models behave as the lab's nftables boxes do:
//! * a port-restricted NAT is Linux `masquerade`: it keeps the client's port unless
//!   conntrack already holds an unanswered inbound packet from the same remote to that
//!   port, whose entry the new mapping would clash with; then it takes another port;
//! * a symmetric NAT gives every destination a new port;
//! * an address-restricted NAT maps 1:1 and lets in any port of an address written to;
//! * a packet is forwarded only with a TTL above 1, and the router between the NATs and
//!   the server decrements it once more.

use shipworm_proto::client::{Client, ClientConfig, ClientEvent, ServerAddrs, Via};
use shipworm_proto::server::{Local, Server, ServerConfig};
use shipworm_proto::transmit::{Recorder, Sent, Source};
use shipworm_proto::Action;
use shipworm_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use shipworm_wire::teredo_packet::TeredoPacket;
use shipworm_wire::teredo_trailer::{trailer_type, DiscoveryType, TrailerRepr};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::num::NonZeroU16;
use std::time::Duration;

const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SERVER2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const TTL: u8 = 64;

mod common;
use common::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    AddressRestricted,
    PortRestricted,
    Symmetric,
    /// Symmetric, keeping an endpoint's port for its first mapping.
    PortPreserving,
    /// Symmetric, giving each new mapping the next port.
    Sequential,
    /// Symmetric, with the service port mapped open to anyone (what a PCP MAP or a
    /// UPnP mapping sets up on miniupnpd: inbound only, outbound stays random).
    SymmetricMapped,
}

/// A NAT box: its public address, mappings and what conntrack remembers.
struct Nat {
    kind: Kind,
    public: Ipv4Addr,
    /// (inside endpoint, remote) → public port.
    out: HashMap<(SocketAddrV4, SocketAddrV4), u16>,
    /// Public port → inside endpoint.
    inside: HashMap<u16, SocketAddrV4>,
    /// (public port, remote) pairs written to.
    contacted: HashSet<(u16, SocketAddrV4)>,
    /// Unanswered inbound packets conntrack keeps: (remote, public port).
    unreplied: HashSet<(SocketAddrV4, u16)>,
    next_port: u16,
    seed: u64,
    /// A port mapped open to anyone: public port → inside endpoint.
    static_map: Option<(u16, SocketAddrV4)>,
}

impl Nat {
    fn new(kind: Kind, public: Ipv4Addr) -> Nat {
        Nat {
            kind,
            public,
            out: HashMap::new(),
            inside: HashMap::new(),
            contacted: HashSet::new(),
            unreplied: HashSet::new(),
            next_port: 61000,
            seed: 0x9e37_79b9_7f4a_7c15 ^ u64::from(public.to_bits()),
            static_map: None,
        }
    }

    /// A free public port nobody can guess (`masquerade fully-random`).
    fn random_port(&mut self) -> u16 {
        loop {
            self.seed ^= self.seed << 13;
            self.seed ^= self.seed >> 7;
            self.seed ^= self.seed << 17;
            let p = 1024 + (self.seed % 64000) as u16;
            if !self.inside.contains_key(&p) {
                return p;
            }
        }
    }

    /// The public endpoint `from` (inside) gets towards `to`.
    fn outbound(&mut self, from: SocketAddrV4, to: SocketAddrV4) -> SocketAddrV4 {
        let port = match self.out.get(&(from, to)) {
            Some(&p) => p,
            None => {
                let p = match self.kind {
                    Kind::AddressRestricted => from.port(),
                    Kind::PortRestricted => {
                        // Port kept unless it clashes with a held inbound entry.
                        let taken = |p: u16, n: &Nat| {
                            n.unreplied.contains(&(to, p)) || n.inside.get(&p).is_some_and(|i| *i != from)
                        };
                        if taken(from.port(), self) {
                            while taken(self.next_port, self) {
                                self.next_port += 1;
                            }
                            self.next_port
                        } else {
                            from.port()
                        }
                    }
                    Kind::Symmetric | Kind::SymmetricMapped => self.random_port(),
                    Kind::PortPreserving if !self.inside.contains_key(&from.port()) => from.port(),
                    Kind::PortPreserving => self.random_port(),
                    Kind::Sequential => {
                        self.next_port += 1;
                        self.next_port
                    }
                };
                self.out.insert((from, to), p);
                self.inside.insert(p, from);
                p
            }
        };
        self.contacted.insert((port, to));
        SocketAddrV4::new(self.public, port)
    }

    /// The inside endpoint a packet from `from` to public `port` goes to, if let in.
    fn inbound(&mut self, from: SocketAddrV4, port: u16) -> Option<SocketAddrV4> {
        if let Some((_, inside)) = self.static_map.filter(|(p, _)| *p == port && port != 0) {
            return Some(inside);
        }
        let inside = self.inside.get(&port).copied();
        let allowed = inside.is_some()
            && match self.kind {
                Kind::AddressRestricted => self.contacted.iter().any(|(p, r)| *p == port && r.ip() == from.ip()),
                _ => self.contacted.contains(&(port, from)),
            };
        if allowed {
            inside
        } else {
            self.unreplied.insert((from, port));
            None
        }
    }
}

/// Where a datagram is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    /// Client i's socket (service or probe), inside its NAT.
    Client(usize, Via),
    /// The server's primary or secondary address.
    Server(Local),
}

struct Datagram {
    from: SocketAddrV4,
    to: SocketAddrV4,
    /// TTL left, and as sent.
    ttl: u8,
    sent_ttl: u8,
    bytes: Vec<u8>,
}

struct Net {
    now: Duration,
    server: Server,
    nats: [Nat; 2],
    clients: [Client<Rng>; 2],
    /// Inside addresses of the clients' service and probe sockets.
    inside: [(SocketAddrV4, SocketAddrV4); 2],
    /// The NAT each client is behind (both behind the first: one network).
    nat_of: [usize; 2],
    /// Each client's open random ports, and the last number given.
    open: [Vec<NonZeroU16>; 2],
    next_port: [u16; 2],
    /// What reached each client's host stack.
    delivered: [Vec<Vec<u8>>; 2],
    addresses: [Option<Ipv6Addr>; 2],
    /// How many of each client's next announcements on the link are lost.
    lose_announcements: [u32; 2],
    trace: String,
}

impl Net {
    fn new(kinds: [Kind; 2], configure: impl Fn(usize, &mut ClientConfig)) -> Net {
        Net::build(kinds, false, configure)
    }

    /// Both clients behind one NAT of kind `kind`, which does not hairpin.
    fn shared(kind: Kind, configure: impl Fn(usize, &mut ClientConfig)) -> Net {
        Net::build([kind, kind], true, configure)
    }

    fn build(kinds: [Kind; 2], shared: bool, configure: impl Fn(usize, &mut ClientConfig)) -> Net {
        let client = |i, seed| {
            let mut cfg = ClientConfig::new(vec![ServerAddrs::new(SERVER)]);
            configure(i, &mut cfg);
            Client::new(cfg, Rng(seed))
        };
        let host = |i: u8| if shared { Ipv4Addr::new(10, 1, 0, 1 + i) } else { Ipv4Addr::new(10, i, 0, 2) };
        let inside = |i: u8| (SocketAddrV4::new(host(i), 40000), SocketAddrV4::new(host(i), 40001));
        let mut net = Net {
            now: Duration::ZERO,
            server: Server::new(ServerConfig::new(SERVER)),
            nats: [Nat::new(kinds[0], Ipv4Addr::new(192, 0, 2, 21)), Nat::new(kinds[1], Ipv4Addr::new(192, 0, 2, 22))],
            clients: [client(0, 0x1234_5678_9abc_def0), client(1, 0x0fed_cba9_8765_4321)],
            inside: [inside(1), inside(2)],
            nat_of: if shared { [0, 0] } else { [0, 1] },
            open: [Vec::new(), Vec::new()],
            next_port: [50000, 50000],
            delivered: [Vec::new(), Vec::new()],
            addresses: [None, None],
            lose_announcements: [0, 0],
            trace: String::new(),
        };
        for i in 0..2 {
            net.clients[i].set_local_address(Some(net.inside[i].0));
            let n = net.nat_of[i];
            if net.nats[n].kind == Kind::SymmetricMapped {
                // The gateway will map the port the server sees, once it is known.
                net.nats[n].static_map = Some((0, net.inside[i].0));
            }
        }
        net
    }

    /// The client whose socket is `at`, behind NAT `nat`.
    fn client_at(&self, nat: usize, at: SocketAddrV4) -> Option<(usize, Via)> {
        (0..2).filter(|&k| self.nat_of[k] == nat).find_map(|k| {
            if self.inside[k].0 == at {
                Some((k, Via::Service))
            } else if self.inside[k].1 == at {
                Some((k, Via::Probe))
            } else {
                NonZeroU16::new(at.port())
                    .filter(|p| *self.inside[k].0.ip() == *at.ip() && self.open[k].contains(p))
                    .map(|p| (k, Via::Port(p)))
            }
        })
    }

    fn deliver(&mut self, k: usize, via: Via, d: &Datagram, queue: &mut VecDeque<(Node, Datagram)>) {
        let mut out = self.out(k);
        let _ = self.clients[k].on_udp(self.now, via, d.from, &d.bytes, &mut out);
        self.collect(k, out, queue);
    }

    fn name(&self, a: SocketAddrV4) -> String {
        let who = if *a.ip() == SERVER || *a.ip() == SERVER2 {
            "server".to_string()
        } else if let Some(i) = (0..2).find(|&i| self.nats[i].public == *a.ip()) {
            format!("NAT {}", ["A", "B"][i])
        } else if let Some(i) = (0..2).find(|&i| self.inside[i].0.ip() == a.ip()) {
            ["A", "B"][i].to_string()
        } else {
            "?".to_string()
        };
        format!("{who} {a}")
    }

    fn note(&mut self, d: &Datagram, fate: &str) {
        let what = match TeredoPacket::parse(&d.bytes) {
            Ok(p) if p.is_bubble() => {
                let mut nonce = match p.trailers.get(trailer_type::NONCE) {
                    Some(TrailerRepr::Nonce(n)) => format!(" nonce {:08x}", u32::from_be_bytes(n)),
                    _ => String::new(),
                };
                match p.trailers.get(trailer_type::NEIGHBOR_DISCOVERY) {
                    Some(TrailerRepr::NeighborDiscovery(DiscoveryType::Solicitation)) => nonce += " solicitation",
                    Some(TrailerRepr::NeighborDiscovery(DiscoveryType::Advertisement)) => nonce += " advertisement",
                    _ => {}
                }
                let via = if p.origin.is_some() { "relayed " } else { "" };
                if let Some(TrailerRepr::RandomPort(port)) = p.trailers.get(trailer_type::RANDOM_PORT) {
                    nonce += &format!(" random port {port}");
                }
                if let Some(TrailerRepr::AlternateAddress(l)) = p.trailers.get(trailer_type::ALTERNATE_ADDRESS) {
                    let l: Vec<String> = l.iter().map(|a| a.to_string()).collect();
                    nonce += &format!(" alternate {}", l.join(" "));
                }
                format!("{via}bubble{nonce}")
            }
            Ok(p) if p.auth.is_some() || p.ipv6.src_addr().segments()[0] & 0xffc0 == 0xfe80 => {
                "qualification".to_string()
            }
            Ok(_) => "data".to_string(),
            Err(_) => "garbage".to_string(),
        };
        let ttl = if d.sent_ttl == TTL { String::new() } else { format!(" sent with TTL {}", d.sent_ttl) };
        let _ = writeln!(
            self.trace,
            "{:>6.1} s  {} → {}  {what}{ttl}: {fate}",
            self.now.as_secs_f64(),
            self.name(d.from),
            self.name(d.to)
        );
    }

    /// Send what client `i` output, then everything that follows, until the wire is quiet.
    fn run(&mut self, mut queue: VecDeque<(Node, Datagram)>) {
        while let Some((from_node, mut d)) = queue.pop_front() {
            // Out of a NAT (client side) or straight onto the public side (server).
            if let Node::Client(i, _) = from_node {
                let n = self.nat_of[i];
                // Local discovery: the group reaches every other client on this network.
                if d.to == shipworm_proto::local_discovery::GROUP {
                    if self.lose_announcements[i] > 0 {
                        self.lose_announcements[i] -= 1;
                        self.note(&d, "lost");
                        continue;
                    }
                    let others: Vec<usize> = (0..2).filter(|&k| k != i && self.nat_of[k] == n).collect();
                    self.note(
                        &d,
                        if others.is_empty() { "nobody else on the network" } else { "multicast on the local network" },
                    );
                    for k in others {
                        self.deliver(k, Via::Discovery, &d, &mut queue);
                    }
                    continue;
                }
                // On the NAT's own network: straight there.
                if let Some((k, via)) = self.client_at(n, d.to) {
                    self.note(&d, "delivered on the local network");
                    self.deliver(k, via, &d, &mut queue);
                    continue;
                }
                if self.nats[n].public == *d.to.ip() {
                    self.note(&d, "dropped: the NAT does not hairpin");
                    continue;
                }
                if d.ttl <= 1 {
                    self.note(&d, "TTL ran out in NAT");
                    continue;
                }
                d.ttl -= 1;
                let public = self.nats[n].outbound(d.from, d.to);
                d.from = public;
            }
            // The router between the NATs and the server, for traffic to or from a NAT.
            let to_nat = (0..2).find(|&j| self.nats[j].public == *d.to.ip());
            if to_nat.is_some() || matches!(from_node, Node::Client(..)) {
                if d.ttl <= 1 {
                    self.note(&d, "TTL ran out at the router");
                    continue;
                }
                d.ttl -= 1;
            }
            if let Some(j) = to_nat {
                let Some(inside) = self.nats[j].inbound(d.from, d.to.port()) else {
                    self.note(&d, "dropped by the NAT");
                    continue;
                };
                let Some((k, via)) = self.client_at(j, inside) else {
                    self.note(&d, "dropped: the port is closed");
                    continue;
                };
                self.note(&d, "delivered");
                self.deliver(k, via, &d, &mut queue);
            } else if *d.to.ip() == SERVER || *d.to.ip() == SERVER2 {
                let local = if *d.to.ip() == SERVER { Local::Primary } else { Local::Secondary };
                let mut out = Recorder::default();
                let _ = self.server.on_udp(self.now, local, d.from, &d.bytes, &mut out);
                let forwarded = !out.sent.is_empty();
                self.note(&d, if forwarded { "delivered" } else { "dropped by the server" });
                for Sent { from, to, payload: bytes, .. } in out.sent {
                    let l = match from {
                        Source::Service => Local::Primary,
                        Source::Secondary => Local::Secondary,
                        other => panic!("the server sent from {other:?}"),
                    };
                    let from = SocketAddrV4::new(self.server.address(l), 3544);
                    queue.push_back((Node::Server(l), Datagram { from, to, ttl: TTL, sent_ttl: TTL, bytes }));
                }
            } else {
                self.note(&d, "no such host");
            }
        }
    }

    /// An output recorder for client `i`, numbering its random ports on.
    fn out(&self, i: usize) -> Recorder {
        Recorder { last_port: self.next_port[i], ..Recorder::default() }
    }

    fn collect(&mut self, i: usize, out: Recorder, queue: &mut VecDeque<(Node, Datagram)>) {
        self.next_port[i] = out.last_port;
        self.open[i].extend(&out.opened);
        self.open[i].retain(|p| !out.closed.contains(p));
        for Sent { from, to, payload: bytes, ttl } in out.sent {
            let (via, from) = match from {
                Source::Service => (Via::Service, self.inside[i].0),
                Source::Probe => (Via::Probe, self.inside[i].1),
                Source::Port(p) => (Via::Port(p), SocketAddrV4::new(*self.inside[i].0.ip(), p.get())),
                Source::Secondary => unreachable!("clients send from their service, probe or random ports"),
            };
            let ttl = ttl.unwrap_or(TTL);
            queue.push_back((Node::Client(i, via), Datagram { from, to, ttl, sent_ttl: ttl, bytes }));
        }
        self.delivered[i].extend(out.delivered);
        while let Some(ev) = self.clients[i].poll_event() {
            if let ClientEvent::Up { address, .. } = ev {
                self.addresses[i] = Some(address);
            }
        }
    }

    /// Let `d` of virtual time pass, in 100 ms ticks.
    fn pass(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now += Duration::from_millis(100);
            for i in 0..2 {
                let mut out = self.out(i);
                self.clients[i].on_timer(self.now, &mut out);
                let mut q = VecDeque::new();
                self.collect(i, out, &mut q);
                self.run(q);
            }
        }
    }

    /// Client `i`'s host sends a UDP packet to the other client.
    fn host_sends(&mut self, i: usize, body: &[u8]) {
        let (src, dst) = (self.addresses[i].expect("qualified"), self.addresses[1 - i].expect("qualified"));
        let mut p = vec![0u8; 40];
        Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 17, payload_len: body.len(), hop_limit: 64 }
            .emit(&mut p)
            .unwrap();
        p.extend_from_slice(body);
        let mut out = self.out(i);
        let _ = self.clients[i].on_tun(self.now, &p, &mut out);
        let mut q = VecDeque::new();
        self.collect(i, out, &mut q);
        self.run(q);
    }

    fn received(&self, i: usize, body: &[u8]) -> bool {
        self.delivered[i].iter().any(|p| Ipv6Packet::new_checked(&p[..]).is_ok_and(|ip| ip.payload() == body))
    }

    /// Qualify both, then A's host speaks first and B's host answers once A's packet
    /// arrived; true if both packets got through within 10 s.
    fn a_calls_b(&mut self) -> bool {
        self.calls(0)
    }

    /// Qualify both, then client `caller`'s host speaks first and the other's answers
    /// once that packet arrived; true if both packets got through within 10 s.
    fn calls(&mut self, caller: usize) -> bool {
        let callee = 1 - caller;
        let (hello, answer) = (format!("hello {}", ["A", "B"][callee]), format!("hello {}", ["A", "B"][caller]));
        self.pass(Duration::from_secs(3));
        // A gateway that maps ports: the client asks for the port the server saw (PCP
        // MAP, as the daemon does on qualification), and gets it.
        for i in 0..2 {
            let n = self.nat_of[i];
            if let (Some((0, inside)), Some(a)) = (self.nats[n].static_map, self.addresses[i]) {
                let m = shipworm_wire::teredo_addr::TeredoAddr::decode(&a).unwrap().mapped;
                self.nats[n].static_map = Some((m.port(), inside));
                self.clients[i].set_port_mapping(Some(m));
            }
        }
        assert!(
            self.addresses.iter().all(Option::is_some),
            "both qualify ({:?}, {:?} / {:?}):\n{}",
            self.addresses,
            self.clients[0].status().state,
            self.clients[1].status().state,
            self.trace
        );
        self.trace.clear();
        self.host_sends(caller, hello.as_bytes());
        for _ in 0..100 {
            self.pass(Duration::from_millis(100));
            if self.received(callee, hello.as_bytes()) {
                break;
            }
        }
        if !self.received(callee, hello.as_bytes()) {
            return false;
        }
        self.host_sends(callee, answer.as_bytes());
        self.pass(Duration::from_secs(3));
        // The exchange, for `cargo test -- --nocapture`.
        println!("{:?} calls {:?}:\n{}", self.nats[caller].kind, self.nats[callee].kind, self.trace);
        self.received(caller, answer.as_bytes())
    }
}

#[test]
fn two_linux_nats_meet_through_the_opening_bubble() {
    let mut net = Net::new([Kind::PortRestricted, Kind::PortRestricted], |_, _| {});
    assert!(net.a_calls_b(), "A and B behind masquerading NATs must meet:\n{}", net.trace);
    // The opening bubble died at the router, so B's NAT kept B's port for A.
    assert!(net.trace.contains("sent with TTL 2: TTL ran out at the router"), "{}", net.trace);
    let service = net.inside[1].0;
    let ports =
        |n: &Net| n.nats[1].out.iter().filter(|((from, _), _)| *from == service).map(|(_, &p)| p).collect::<Vec<_>>();
    assert!(ports(&net).iter().all(|&p| p == 40000), "B kept its port: {:?}", net.nats[1].out);
    // A full-TTL first bubble (RFC 4380 as written, Miredo) leaves an entry at B's NAT
    // that moves B's answer to another port, which A's NAT refuses.
    let mut net = Net::new([Kind::PortRestricted, Kind::PortRestricted], |_, c| c.opening_bubble_ttl = 0);
    assert!(!net.a_calls_b(), "without the opening bubble:\n{}", net.trace);
    assert!(ports(&net).iter().any(|&p| p != 40000), "B's answer left from another port");
}

#[test]
fn a_client_behind_a_symmetric_nat_calls_first() {
    // RFC 6081 §6.1: A behind a port-symmetric NAT, B behind an address-restricted one.
    let mut net = Net::new([Kind::Symmetric, Kind::AddressRestricted], |_, _| {});
    assert!(net.a_calls_b(), "A symmetric calling B:\n{}", net.trace);
    // B took A's direct bubble from a port A's address does not embed, on the nonce of
    // B's own indirect bubble.
    let echoed = net.trace.lines().any(|l| {
        l.contains("NAT A") && l.contains("→ NAT B") && l.contains("bubble nonce") && l.ends_with("delivered")
    });
    assert!(echoed, "A's nonce-carrying direct bubble reached B:\n{}", net.trace);
    // With B speaking RFC 4380 alone, B never trusts that port.
    let mut net = Net::new([Kind::Symmetric, Kind::AddressRestricted], |i, c| c.symmetric_nat_support = i == 0);
    assert!(!net.a_calls_b(), "without nonces:\n{}", net.trace);
}

#[test]
fn a_forged_nonce_does_not_move_a_peer() {
    // A direct bubble from an unexpected port with the wrong nonce is dropped (RFC 6081
    // §5.2.4.4 c), and so is a replay of the nonce that proved A once: run the symmetric
    // exchange, then send B bubbles "from A" through another port.
    let mut net = Net::new([Kind::Symmetric, Kind::AddressRestricted], |_, _| {});
    assert!(net.a_calls_b());
    let (a, b) = (net.addresses[0].unwrap(), net.addresses[1].unwrap());
    // The nonce B's indirect bubble carried, which A's direct bubble echoed to B.
    let proven = net
        .trace
        .lines()
        .find(|l| l.contains("NAT A") && l.contains("→ NAT B") && l.contains("bubble nonce"))
        .and_then(|l| l.split("nonce ").nth(1))
        .and_then(|w| u32::from_str_radix(&w[..8], 16).ok())
        .expect("A echoed B's nonce");
    let forger = SocketAddrV4::new(net.nats[0].public, 1);
    for nonce in [0xdead_beef_u32, proven] {
        let mut bytes = vec![0u8; 40];
        shipworm_wire::teredo_packet::emit_bubble(&a, &b, 0, &mut bytes).unwrap();
        bytes.extend_from_slice(&[trailer_type::NONCE, 4]);
        bytes.extend_from_slice(&nonce.to_be_bytes());
        let mut out = net.out(1);
        let _ = net.clients[1].on_udp(net.now, Via::Service, forger, &bytes, &mut out);
        net.collect(1, out, &mut VecDeque::new());
        // B's host answers A again: it must go where it went before, not to the forger.
        let mut p = vec![0u8; 40];
        Ipv6Repr { src_addr: b, dst_addr: a, next_header: 17, payload_len: 3, hop_limit: 64 }.emit(&mut p).unwrap();
        p.extend_from_slice(b"bye");
        let mut out = net.out(1);
        let _ = net.clients[1].on_tun(net.now, &p, &mut out);
        assert_eq!(out.sent.len(), 1);
        assert_ne!(out.sent[0].to, forger, "nonce {nonce:08x} moved the peer to the forger");
    }
}

/// After `a_calls_b`, both silent for 40 s; then A's host sends again. True if B got it.
fn after_silence(net: &mut Net) -> bool {
    net.pass(Duration::from_secs(40));
    net.trace.clear();
    net.host_sends(0, b"again");
    net.pass(Duration::from_secs(10));
    net.received(1, b"again")
}

#[test]
fn server_load_reduction_asks_a_silent_peer_directly() {
    // RFC 6081 §5.7: a trusted peer silent for 30 s is solicited with a direct bubble;
    // its advertisement re-opens the path without a bubble through the server.
    let mut net = Net::new([Kind::PortRestricted, Kind::AddressRestricted], |_, _| {});
    assert!(net.a_calls_b(), "{}", net.trace);
    assert!(after_silence(&mut net), "{}", net.trace);
    assert!(
        net.trace.contains("solicitation: delivered") && net.trace.contains("advertisement: delivered"),
        "{}",
        net.trace
    );
    assert!(
        !net.trace.lines().any(|l| l.contains("bubble") && l.contains("→ server")),
        "no bubble through the server:\n{}",
        net.trace
    );
    assert_eq!(net.clients[0].stats().peer_solicitations, 1);
    assert_eq!(net.clients[1].stats().peer_advertisements, 1);
}

#[test]
fn server_load_reduction_falls_back_after_three_solicitations() {
    // B's NAT forgot A (its filter entry expired): three solicitations 2 s apart are
    // dropped, then A starts over with the indirect bubble (§5.7.2).
    let mut net = Net::new([Kind::PortRestricted, Kind::PortRestricted], |_, _| {});
    assert!(net.a_calls_b(), "{}", net.trace);
    net.pass(Duration::from_secs(40));
    let a_public = net.nats[0].public;
    net.nats[1].contacted.retain(|(_, r)| *r.ip() != a_public);
    net.trace.clear();
    net.host_sends(0, b"again");
    net.pass(Duration::from_secs(10));
    assert!(net.received(1, b"again"), "{}", net.trace);
    let dropped = net.trace.lines().filter(|l| l.contains("solicitation: dropped by the NAT")).count();
    assert_eq!(dropped, 3, "{}", net.trace);
    // Solicitations at 0, 2 and 4 s, and the indirect bubble with the third (§5.7.2:
    // when the count reaches three), not a retry period later.
    let at = |what: &dyn Fn(&str) -> bool| -> f64 {
        let line = net.trace.lines().find(|l| what(l)).expect("in the trace");
        line.split_whitespace().next().and_then(|t| t.parse().ok()).expect("a time")
    };
    let first = at(&|l| l.contains("solicitation"));
    let indirect = at(&|l| l.contains("→ server") && l.contains("bubble nonce"));
    assert!(
        (indirect - first - 4.0).abs() < 0.05,
        "indirect bubble {:.1} s after the first solicitation:\n{}",
        indirect - first,
        net.trace
    );
}

#[test]
fn server_load_reduction_spares_peers_without_rfc6081() {
    // A peer that never sent a trailer (Miredo) would not answer: no solicitation, the
    // indirect bubble at once.
    let mut net = Net::new([Kind::PortRestricted, Kind::AddressRestricted], |i, c| {
        c.symmetric_nat_support = i == 0;
        c.server_load_reduction = i == 0;
    });
    assert!(net.a_calls_b(), "{}", net.trace);
    assert!(after_silence(&mut net), "{}", net.trace);
    assert!(!net.trace.contains("solicitation"), "{}", net.trace);
}

#[test]
fn two_clients_behind_one_nat_meet_by_hairpinning() {
    // RFC 6081 §5.6, §6.5: the NAT does not hairpin, so bubbles to each other's mapping
    // die there; the local address listed in the indirect bubble brings them together
    // on their own network, and the packets go there, not through the NAT.
    let mut net = Net::shared(Kind::PortRestricted, |_, _| {});
    assert!(net.a_calls_b(), "{}", net.trace);
    assert!(net.trace.contains("alternate 10.1.0.2:40000"), "A listed its local address:\n{}", net.trace);
    let data: Vec<&str> = net.trace.lines().filter(|l| l.contains(" data")).collect();
    assert!(
        !data.is_empty() && data.iter().all(|l| l.ends_with("delivered on the local network")),
        "data between them stays on their network:\n{}",
        net.trace
    );
    // Without it (and without local discovery) they never meet.
    let mut net = Net::shared(Kind::PortRestricted, |_, c| {
        c.hairpinning = false;
        c.local_discovery = false;
    });
    assert!(!net.a_calls_b(), "{}", net.trace);
}

#[test]
fn two_clients_behind_one_nat_meet_by_local_discovery() {
    // RFC 4380 §5.2.8: each announces itself on the link; A's bubble goes to B's local
    // address, which B takes because it heard A there (case 5).
    let mut net = Net::shared(Kind::PortRestricted, |_, c| c.hairpinning = false);
    assert!(net.a_calls_b(), "{}", net.trace);
    let data: Vec<&str> = net.trace.lines().filter(|l| l.contains(" data")).collect();
    assert!(!data.is_empty() && data.iter().all(|l| l.ends_with("delivered on the local network")), "{}", net.trace);
    // A discovery bubble from off the link (another /24) or about another NAT's client
    // is not taken.
    let me = net.addresses[0].unwrap();
    let stranger = shipworm_wire::teredo_addr::TeredoAddr {
        prefix: 0x2001_0000,
        server: SERVER,
        flags: shipworm_wire::teredo_addr::Flags(0),
        mapped: SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 9), 4000),
    }
    .to_ipv6();
    let mut b = vec![0u8; 40];
    shipworm_wire::teredo_packet::emit_bubble(&stranger, &shipworm_proto::local_discovery::ALL_NODES, 1, &mut b)
        .unwrap();
    let mut out = net.out(0);
    let _ = net.clients[0].on_udp(
        net.now,
        Via::Discovery,
        SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, 9), 4000),
        &b,
        &mut out,
    );
    assert!(out.sent.is_empty(), "a stranger's announcement is not answered");
    let _ = me;
}

#[test]
fn an_announcement_on_coming_up_is_repeated_twice_then_kept_to_its_interval() {
    // RFC 4380 §5.2.8 announces every 200 to 300 s; we announce on coming up too, and a
    // lost datagram, or a neighbour up a moment later, would wait minutes for the
    // next. Two repeats, 2 s apart; answers to a new neighbour do not use them up.
    let mut net = Net::shared(Kind::PortRestricted, |_, c| c.hairpinning = false);
    net.pass(Duration::from_secs(199));
    let announced = |net: &Net, who: &str| {
        net.trace
            .lines()
            .filter(|l| l.split_whitespace().nth(2) == Some(who) && l.ends_with("multicast on the local network"))
            .map(|l| l.split_whitespace().next().unwrap().parse::<f64>().unwrap())
            .collect::<Vec<f64>>()
    };
    // Both come up in the same tick, A first. A: its own at once, its answer to B's
    // (new to it) when the 200 ms since its own are up, its repeats 2 and 4 s after
    // its own — the answer neither used one up nor moved them. B: its answer to A's at
    // once (none of its own had gone out), its own when the 200 ms are up, its repeats
    // 2 and 4 s after that. Then nothing until 200 s.
    let expected = [("A", [0.2, 0.4, 2.2, 4.2]), ("B", [0.2, 0.4, 2.4, 4.4])];
    for (who, want) in expected {
        let at = announced(&net, who);
        let same = at.len() == want.len() && at.iter().zip(want).all(|(a, w)| (a - w).abs() < 0.05);
        assert!(same, "{who} announced at {at:?}, not {want:?}:\n{}", net.trace);
    }
}

#[test]
fn clients_behind_one_nat_meet_on_the_link_when_every_announcement_before_the_call_was_lost() {
    // Every announcement of both, repeats included, lost before the call: the caller
    // announces itself when it calls a peer behind its own NAT, which the peer answers
    // with its own.
    // Each side calling, cold: A (up first) and B (up a moment after it, in the same
    // tick).
    for caller in [0, 1] {
        let mut net = Net::shared(Kind::PortRestricted, |_, c| c.hairpinning = false);
        net.lose_announcements = [3, 3];
        assert!(net.calls(caller), "client {caller} calling:\n{}", net.trace);
        let data: Vec<&str> = net.trace.lines().filter(|l| l.contains(" data")).collect();
        let local = !data.is_empty() && data.iter().all(|l| l.ends_with("delivered on the local network"));
        assert!(local, "client {caller} calling:\n{}", net.trace);
    }
}

/// The service port is what the model NATs see as the client's local port.
fn with_service_port(_: usize, c: &mut ClientConfig) {
    c.service_port = std::num::NonZeroU16::new(40000);
}

#[test]
fn port_preserving_nat_reaches_a_port_restricted_one() {
    // RFC 6081 §5.4: a random port per peer, announced in the indirect bubble; the
    // port-restricted peer's bubble to it passes the mapping our bubble from it opened.
    let mut net = Net::new([Kind::PortPreserving, Kind::PortRestricted], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
    assert!(net.trace.contains("random port 50001"), "the random port was announced:\n{}", net.trace);
    // Without random ports, RFC 6081 §3 Figure 1 says no.
    let mut net = Net::new([Kind::PortPreserving, Kind::PortRestricted], |i, c| {
        with_service_port(i, c);
        c.random_ports = 0;
    });
    assert!(!net.a_calls_b(), "{}", net.trace);
}

#[test]
fn port_restricted_nat_reaches_a_port_preserving_one() {
    let mut net = Net::new([Kind::PortRestricted, Kind::PortPreserving], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
}

#[test]
fn two_port_preserving_nats_meet() {
    // RFC 6081 §6.3: both announce a random port; the second round of bubbles passes.
    let mut net = Net::new([Kind::PortPreserving, Kind::PortPreserving], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
}

#[test]
fn sequential_nat_predicts_its_port_with_the_echo_test() {
    // RFC 6081 §5.5, §6.4: two solicitations from the random port bracket the bubble
    // sent between them; the peer tries the midpoint.
    let mut net = Net::new([Kind::Sequential, Kind::PortRestricted], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
    assert_eq!(net.clients[0].stats().echo_tests, 1, "{}", net.trace);
    let mut net = Net::new([Kind::Sequential, Kind::PortRestricted], |i, c| {
        with_service_port(i, c);
        c.random_ports = 0;
    });
    assert!(!net.a_calls_b(), "{}", net.trace);
}

#[test]
fn port_restricted_nat_reaches_a_sequential_one() {
    let mut net = Net::new([Kind::PortRestricted, Kind::Sequential], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
}

#[test]
fn two_clients_with_mapped_ports_behind_symmetric_nats_meet() {
    // RFC 6081 §5.3 (UPnP-enabled symmetric NATs), reached with PCP: each address embeds
    // the mapped port, open to anyone; each sends to the other's embedded mapping.
    let mut net = Net::new([Kind::SymmetricMapped, Kind::SymmetricMapped], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
    // Without the mappings they are two plain symmetric NATs: RFC 6081 Figure 1 says no.
    let mut net = Net::new([Kind::Symmetric, Kind::Symmetric], with_service_port);
    assert!(!net.a_calls_b(), "{}", net.trace);
}

#[test]
fn local_discovery_takes_the_attached_subnet_not_a_24() {
    // RFC 6081 §5.6 / RFC 4380 §5.2.8: "on our link" is a subnet the host is attached to.
    let mut net = Net::shared(Kind::PortRestricted, |_, c| c.hairpinning = false);
    assert!(net.a_calls_b(), "{}", net.trace);
    let ours = shipworm_wire::teredo_addr::TeredoAddr::decode(&net.addresses[0].unwrap()).unwrap().mapped;
    net.clients[0].set_attached_subnets(&[(Ipv4Addr::new(10, 1, 0, 0), 16)]);
    let neighbour = shipworm_wire::teredo_addr::TeredoAddr {
        prefix: 0x2001_0000,
        server: SERVER,
        flags: shipworm_wire::teredo_addr::Flags(0),
        mapped: SocketAddrV4::new(*ours.ip(), 4001),
    }
    .to_ipv6();
    let mut b = vec![0u8; 40];
    shipworm_wire::teredo_packet::emit_bubble(&neighbour, &shipworm_proto::local_discovery::ALL_NODES, 1, &mut b)
        .unwrap();
    // Another /24 of the attached /16: a neighbour, answered.
    let mut out = net.out(0);
    let from = SocketAddrV4::new(Ipv4Addr::new(10, 1, 7, 9), 4000);
    assert_eq!(net.clients[0].on_udp(net.now, Via::Discovery, from, &b, &mut out), Ok(Action::Answered));
    assert!(out.sent.iter().any(|s| s.to == from), "a bubble straight back");
    // Off the attached subnet: not on our link.
    let mut out = net.out(0);
    let from = SocketAddrV4::new(Ipv4Addr::new(10, 2, 0, 9), 4000);
    assert_eq!(
        net.clients[0].on_udp(net.now, Via::Discovery, from, &b, &mut out),
        Err(shipworm_proto::DropReason::SourceMismatch)
    );
}

/// Qualify both, then client `caller`'s host sends one packet to the other: true if
/// it reached the other's host at once, with no retry (before any timer ran).
fn first_packet_at_once(net: &mut Net, caller: usize) -> bool {
    net.pass(Duration::from_secs(3));
    net.host_sends(caller, b"first");
    net.received(1 - caller, b"first")
}

#[test]
fn a_caller_heard_on_the_link_but_not_hearing_back_sends_only_once_the_peer_took_it() {
    // Every announcement of the caller lost; it heard the callee's. The callee meets
    // the caller only through hairpinning's alternate address, and takes the caller's
    // packets from there only once the caller echoed the callee's own nonce: a bubble
    // of the callee's from its local address, echoing the caller's nonce, does not mean
    // it heard the caller. The caller's first packet waits for that echo and arrives.
    for caller in [0, 1] {
        let mut net = Net::shared(Kind::PortRestricted, |_, _| {});
        net.lose_announcements[caller] = u32::MAX;
        assert!(first_packet_at_once(&mut net, caller), "client {caller} calling:\n{}", net.trace);
    }
}

#[test]
fn clients_that_heard_each_other_on_the_link_meet_at_once() {
    // Both heard each other's announcements: the first packet goes on the link with no
    // retry, each side calling, with and without hairpinning.
    // Server Load Reduction off too: a neighbour's solicitation is answered anyway.
    for (hairpinning, slr) in [(true, true), (false, true), (true, false)] {
        for caller in [0, 1] {
            let mut net = Net::shared(Kind::PortRestricted, |_, c| {
                c.hairpinning = hairpinning;
                c.server_load_reduction = slr;
            });
            assert!(first_packet_at_once(&mut net, caller), "client {caller} calling:\n{}", net.trace);
            let data: Vec<&str> = net.trace.lines().filter(|l| l.contains(" data")).collect();
            assert!(data.iter().all(|l| l.ends_with("delivered on the local network")), "{}", net.trace);
        }
    }
}

/// Two clients behind one NAT, up for 3 s: A heard B on the link, B never heard A (every
/// announcement of A's lost).
fn heard_one_way() -> Net {
    let mut net = Net::shared(Kind::PortRestricted, |_, _| {});
    net.lose_announcements[0] = u32::MAX;
    net.pass(Duration::from_secs(3));
    net
}

/// A UDP packet from A's host to B carrying `body`.
fn a_to_b(net: &Net, body: &[u8]) -> Vec<u8> {
    let (a, b) = (net.addresses[0].unwrap(), net.addresses[1].unwrap());
    let mut p = vec![0u8; 40];
    Ipv6Repr { src_addr: a, dst_addr: b, next_header: 17, payload_len: body.len(), hop_limit: 64 }
        .emit(&mut p)
        .unwrap();
    p.extend_from_slice(body);
    p
}

/// A bubble from B to A with `trailers`, arriving at A from B's local address: what A
/// sends in answer.
fn bubble_b_to_a(net: &mut Net, trailers: &[u8]) -> Recorder {
    let (a, b) = (net.addresses[0].unwrap(), net.addresses[1].unwrap());
    let mut bytes = vec![0u8; 40];
    shipworm_wire::teredo_packet::emit_bubble(&b, &a, 0, &mut bytes).unwrap();
    bytes.extend_from_slice(trailers);
    let mut out = net.out(0);
    let _ = net.clients[0].on_udp(net.now, Via::Service, net.inside[1].0, &bytes, &mut out);
    out
}

/// The data packets (not bubbles) in `out`, in order: where each went, and its payload.
fn data_sent(out: &Recorder) -> Vec<(SocketAddrV4, Vec<u8>)> {
    out.sent
        .iter()
        .filter(|s| TeredoPacket::parse(&s.payload).is_ok_and(|t| !t.is_bubble()))
        .map(|s| (s.to, s.payload[40..].to_vec()))
        .collect()
}

#[test]
fn a_stale_nonce_bubble_from_a_neighbours_local_address_does_not_release_what_waits() {
    // A heard B on the link, B never heard A. A's host calls B and everything A sends
    // is lost; then a bubble of B's arrives from B's local address, echoing a nonce A
    // no longer expects (an answer to an older indirect bubble's alternate address). B
    // has not heard A: A's packet sent now would be refused, so A keeps it.
    let mut net = heard_one_way();
    let mut out = net.out(0);
    let _ = net.clients[0].on_tun(net.now, &a_to_b(&net, b"first"), &mut out);
    let out = bubble_b_to_a(&mut net, &[&[trailer_type::NONCE, 4][..], &0xdead_beef_u32.to_be_bytes()].concat());
    assert!(data_sent(&out).is_empty(), "A sent what waited to a neighbour that has not heard it");
}

#[test]
fn what_a_caller_holds_for_a_neighbour_stays_in_order_until_the_neighbour_takes_it() {
    // A heard B on the link, B never heard A. A's host sends; B's bubble echoing A's
    // nonce comes from B's local address (hairpinning), before B's indirect bubble: A
    // holds its packet. The host's next packet waits behind it, and so does everything
    // through another echo of the same kind; B's advertisement (it takes A's packets
    // there now) lets all go, in order, to B's local address.
    let mut net = heard_one_way();
    let mut out = net.out(0);
    let _ = net.clients[0].on_tun(net.now, &a_to_b(&net, b"first"), &mut out);
    let nonce = out
        .sent
        .iter()
        .filter_map(|s| TeredoPacket::parse(&s.payload).ok())
        .find_map(|t| match t.trailers.get(trailer_type::NONCE) {
            Some(TrailerRepr::Nonce(n)) if t.trailers.find(trailer_type::ALTERNATE_ADDRESS).is_some() => Some(n),
            _ => None,
        })
        .expect("A's indirect bubble with its nonce and local address");
    for _ in 0..2 {
        let out = bubble_b_to_a(&mut net, &[&[trailer_type::NONCE, 4][..], &nonce[..]].concat());
        assert!(data_sent(&out).is_empty(), "A let go of what waits on B's echo of A's nonce");
        let mut out = net.out(0);
        let _ = net.clients[0].on_tun(net.now, &a_to_b(&net, b"second"), &mut out);
        assert!(data_sent(&out).is_empty(), "A's next packet overtook what waits");
    }
    let out = bubble_b_to_a(&mut net, &[trailer_type::NEIGHBOR_DISCOVERY, 4, 1, 0, 0, 0]);
    let b_local = net.inside[1].0;
    let want: Vec<(SocketAddrV4, Vec<u8>)> =
        [&b"first"[..], b"second", b"second"].iter().map(|body| (b_local, body.to_vec())).collect();
    assert_eq!(data_sent(&out), want, "what waited goes to B's local address on its advertisement, in order");
}

#[test]
fn what_a_caller_holds_for_a_neighbour_goes_once_the_tries_run_out() {
    // B echoes every nonce of A's from its local address and nothing else: no indirect
    // bubble of its own, no answer to a solicitation (a peer that does not speak them).
    // A holds what waits, but not forever: once its tries run out it sends it, as it
    // would have without the wait, rather than keep the host's packets from a peer it
    // trusts.
    let mut net = heard_one_way();
    let nonce_of = |out: &Recorder| {
        out.sent.iter().filter_map(|s| TeredoPacket::parse(&s.payload).ok()).find_map(|t| {
            match t.trailers.get(trailer_type::NONCE) {
                Some(TrailerRepr::Nonce(n)) if t.trailers.find(trailer_type::ALTERNATE_ADDRESS).is_some() => Some(n),
                _ => None,
            }
        })
    };
    let b_local = net.inside[1].0;
    // What A sent to B's local address (not its requests to its server).
    let to_b = |out: &Recorder| -> Vec<Vec<u8>> {
        data_sent(out).into_iter().filter(|(to, _)| *to == b_local).map(|(_, body)| body).collect()
    };
    let mut out = net.out(0);
    let _ = net.clients[0].on_tun(net.now, &a_to_b(&net, b"first"), &mut out);
    let start = net.now;
    let mut nonce = nonce_of(&out).expect("A's indirect bubble");
    let mut sent_at = None;
    while sent_at.is_none() && net.now < start + Duration::from_secs(30) {
        let echoed = bubble_b_to_a(&mut net, &[&[trailer_type::NONCE, 4][..], &nonce[..]].concat());
        if !to_b(&echoed).is_empty() {
            sent_at = Some(net.now);
            break;
        }
        net.now += Duration::from_millis(100);
        let mut out = net.out(0);
        net.clients[0].on_timer(net.now, &mut out);
        if !to_b(&out).is_empty() {
            assert_eq!(to_b(&out), [b"first".to_vec()]);
            sent_at = Some(net.now);
        }
        nonce = nonce_of(&out).unwrap_or(nonce);
    }
    let waited = sent_at.map(|t| t - start).expect("A held what waits for 30 s");
    // Four tries 2 s apart, as for any peer that does not answer.
    let within = Duration::from_secs(2)..=Duration::from_secs(12);
    assert!(within.contains(&waited), "A sent what waits after {waited:?}, not after its tries");
}
