//! The model both NAT-traversal test files run on: two clients behind model NATs, one
//! server, a router between them, in virtual time, packet by packet, with a trace of
//! every datagram's fate.
//!
//! The NAT models behave as the lab's nftables boxes do:
//! * a port-restricted NAT is Linux `masquerade`: it keeps the client's port unless
//!   conntrack already holds an unanswered inbound packet from the same remote to that
//!   port, whose entry the new mapping would clash with; then it takes another port;
//! * a symmetric NAT gives every destination a new port;
//! * an address-restricted NAT maps 1:1 and lets in any port of an address written to;
//! * a packet is forwarded only with a TTL above 1, and the router between the NATs and
//!   the server decrements it once more.
//!
//! Both clients may sit behind one NAT that does not hairpin, on one network, where
//! local discovery's multicast reaches the other.

// Each test file builds only the networks it needs.
#![allow(dead_code)]

use crate::common::Rng;
use shipworm_proto::client::{Client, ClientConfig, ClientEvent, ServerAddrs, Via};
use shipworm_proto::server::{Local, Server, ServerConfig};
use shipworm_proto::transmit::{Recorder, Sent, Source};
use shipworm_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use shipworm_wire::teredo_packet::TeredoPacket;
use shipworm_wire::teredo_trailer::{trailer_type, DiscoveryType, TrailerRepr};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::num::NonZeroU16;
use std::time::Duration;

pub const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const SERVER2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
pub const TTL: u8 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
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
pub struct Nat {
    pub kind: Kind,
    pub public: Ipv4Addr,
    /// (inside endpoint, remote) → public port.
    pub out: HashMap<(SocketAddrV4, SocketAddrV4), u16>,
    /// Public port → inside endpoint.
    pub inside: HashMap<u16, SocketAddrV4>,
    /// (public port, remote) pairs written to.
    pub contacted: HashSet<(u16, SocketAddrV4)>,
    /// Unanswered inbound packets conntrack keeps: (remote, public port).
    pub unreplied: HashSet<(SocketAddrV4, u16)>,
    pub next_port: u16,
    pub seed: u64,
    /// A port mapped open to anyone: public port → inside endpoint.
    pub static_map: Option<(u16, SocketAddrV4)>,
}

impl Nat {
    pub fn new(kind: Kind, public: Ipv4Addr) -> Nat {
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
    pub fn random_port(&mut self) -> u16 {
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
    pub fn outbound(&mut self, from: SocketAddrV4, to: SocketAddrV4) -> SocketAddrV4 {
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
    pub fn inbound(&mut self, from: SocketAddrV4, port: u16) -> Option<SocketAddrV4> {
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
pub enum Node {
    /// Client i's socket (service or probe), inside its NAT.
    Client(usize, Via),
    /// The server's primary or secondary address.
    Server(Local),
}

pub struct Datagram {
    pub from: SocketAddrV4,
    pub to: SocketAddrV4,
    /// TTL left, and as sent.
    pub ttl: u8,
    pub sent_ttl: u8,
    pub bytes: Vec<u8>,
}

pub struct Net {
    pub now: Duration,
    pub server: Server,
    pub nats: [Nat; 2],
    pub clients: [Client<Rng>; 2],
    /// Inside addresses of the clients' service and probe sockets.
    pub inside: [(SocketAddrV4, SocketAddrV4); 2],
    /// The NAT each client is behind (both behind the first: one network).
    pub nat_of: [usize; 2],
    /// Each client's open random ports, and the last number given.
    pub open: [Vec<NonZeroU16>; 2],
    pub next_port: [u16; 2],
    /// What reached each client's host stack.
    pub delivered: [Vec<Vec<u8>>; 2],
    pub addresses: [Option<Ipv6Addr>; 2],
    /// How many of each client's next announcements on the link are lost.
    pub lose_announcements: [u32; 2],
    pub trace: String,
}

impl Net {
    pub fn new(kinds: [Kind; 2], configure: impl Fn(usize, &mut ClientConfig)) -> Net {
        Net::build(kinds, false, configure)
    }

    /// Both clients behind one NAT of kind `kind`, which does not hairpin.
    pub fn shared(kind: Kind, configure: impl Fn(usize, &mut ClientConfig)) -> Net {
        Net::build([kind, kind], true, configure)
    }

    pub fn build(kinds: [Kind; 2], shared: bool, configure: impl Fn(usize, &mut ClientConfig)) -> Net {
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
    pub fn client_at(&self, nat: usize, at: SocketAddrV4) -> Option<(usize, Via)> {
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

    pub fn deliver(&mut self, k: usize, via: Via, d: &Datagram, queue: &mut VecDeque<(Node, Datagram)>) {
        let mut out = self.out(k);
        let _ = self.clients[k].on_udp(self.now, via, d.from, &d.bytes, &mut out);
        self.collect(k, out, queue);
    }

    pub fn name(&self, a: SocketAddrV4) -> String {
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

    pub fn note(&mut self, d: &Datagram, fate: &str) {
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
    pub fn run(&mut self, mut queue: VecDeque<(Node, Datagram)>) {
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
    pub fn out(&self, i: usize) -> Recorder {
        Recorder { last_port: self.next_port[i], ..Recorder::default() }
    }

    pub fn collect(&mut self, i: usize, out: Recorder, queue: &mut VecDeque<(Node, Datagram)>) {
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

    /// Let `d` of virtual time pass, from one client's deadline to the next, as a
    /// daemon sleeps until its state machine's `poll_timeout`: each client's timer runs
    /// only when it said it has something due. A deadline reported late (or not at
    /// all) stalls what it was for, and the cases built on this world fail: this is
    /// where every NAT pair's qualification, bubbles and refreshes prove the deadlines.
    pub fn pass(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let due = (0..2).filter_map(|i| self.clients[i].poll_timeout()).min();
            let at = due.map_or(end, |t| t.max(self.now)).min(end);
            if at >= end && self.now >= end {
                break;
            }
            self.now = at;
            for i in 0..2 {
                if self.clients[i].poll_timeout().is_none_or(|t| t > self.now) {
                    continue;
                }
                let mut out = self.out(i);
                self.clients[i].on_timer(self.now, &mut out);
                let next = self.clients[i].poll_timeout();
                assert!(
                    next.is_none_or(|t| t > self.now),
                    "client {i}'s timer at {:?} left itself due: {next:?}",
                    self.now
                );
                let mut q = VecDeque::new();
                self.collect(i, out, &mut q);
                self.run(q);
            }
        }
    }

    /// Client `i`'s host sends a UDP packet to the other client.
    pub fn host_sends(&mut self, i: usize, body: &[u8]) {
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

    pub fn received(&self, i: usize, body: &[u8]) -> bool {
        self.delivered[i].iter().any(|p| Ipv6Packet::new_checked(&p[..]).is_ok_and(|ip| ip.payload() == body))
    }

    /// Qualify both, then A's host speaks first and B's host answers once A's packet
    /// arrived; true if both packets got through within 10 s.
    pub fn a_calls_b(&mut self) -> bool {
        self.calls(0)
    }

    /// Qualify both, then client `caller`'s host speaks first and the other's answers
    /// once that packet arrived; true if both packets got through within 10 s.
    pub fn calls(&mut self, caller: usize) -> bool {
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
