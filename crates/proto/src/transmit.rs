//! Where a state machine's output goes: the one output contract of every role (server,
//! relay, client). A state machine calls it while it handles an input, as many times
//! as that input asks (a relay's flushed queue, a client's two bubbles); the daemon
//! implements it over its sockets and TUN, batching as it likes, and tests record
//! everything into a [`Recorder`].
//!
//! Two calls: [`Transmit::send`] a datagram from one of the node's sockets, and
//! [`Transmit::deliver`] an IPv6 packet to the IPv6 side. The client alone also opens
//! and closes sockets ([`Ports`]); a role that has none does not implement it, so no
//! call of one role's can silently do nothing in another's.

use std::collections::BTreeMap;
use std::net::{Ipv6Addr, SocketAddrV4};
use std::num::NonZeroU16;
use std::time::Duration;

/// Which of the node's UDP sockets a datagram leaves from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The service socket: the server's primary address, the relay's and the client's
    /// Teredo port.
    Service,
    /// The server's secondary address (the answer to the cone test).
    Secondary,
    /// The client's probe-only socket (NAT kind detection).
    Probe,
    /// A client's random port for one peer (RFC 6081 §5.4), as [`Ports::open_port`]
    /// gave it.
    Port(NonZeroU16),
}

impl Source {
    /// The service socket, or the random port `port` if there is one.
    pub fn service_or(port: Option<NonZeroU16>) -> Source {
        port.map_or(Source::Service, Source::Port)
    }
}

/// Output of the server, relay and client state machines.
pub trait Transmit {
    /// Send a UDP datagram whose payload is `payload` to `to`, from socket `from`, with
    /// the IPv4 TTL limited to `ttl` hops if given: the client's opening bubble, which
    /// must pass its own NAT (and open it) but die before it reaches the peer's.
    fn send(&mut self, from: Source, to: SocketAddrV4, payload: &[u8], ttl: Option<u8>);

    /// Write an IPv6 packet to the IPv6 side: the host stack (client), the native
    /// network (relay, and the server's connectivity-test echoes).
    fn deliver(&mut self, packet: &[u8]);

    /// The kernel data path's peer list, where the daemon has one (`DataPath`): the
    /// relay keeps it to what it trusts. `None` (the default): every packet passes
    /// through the state machine.
    fn kernel(&mut self) -> Option<&mut dyn KernelPeers> {
        None
    }
}

/// The peers whose packets the kernel moves without the state machine: each trusted at
/// its mapping, with the time it was last heard from. The state machine is its only
/// writer; the kernel only writes last-heard times (and, for a client, when it first
/// sent to a peer since), which the state machine reads back before it judges a peer
/// silent.
pub trait KernelPeers {
    /// `peer` is trusted at `mapped`, heard from at `heard` (entered or updated). A full
    /// list refuses it quietly: the peer's packets then pass through the state machine.
    /// What the node sent before this call is handed to the kernel's sockets before the
    /// list may carry anything to `peer` (a waiting peer's queue, sent just before its
    /// listing, is not overtaken on the host): a node that batches its sends lets the
    /// batch go first.
    fn trust(&mut self, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: Duration);
    /// `peer` is trusted no more.
    fn forget(&mut self, peer: &Ipv6Addr);
    /// When the kernel last heard from `peer` (`None`: not in the list).
    fn heard(&mut self, peer: &Ipv6Addr) -> Option<Duration> {
        self.heard_and_sent(peer).map(|(heard, _)| heard)
    }
    /// When the kernel last heard from `peer`, and when it first sent to it since, if
    /// it did (`None`: not in the list).
    fn heard_and_sent(&mut self, peer: &Ipv6Addr) -> Option<(Duration, Option<Duration>)>;
}

/// A [`KernelPeers`] in memory, for tests: what a kernel's list would hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelModel {
    /// Each peer's mapping and last-heard time.
    pub peers: BTreeMap<Ipv6Addr, (SocketAddrV4, Duration)>,
    /// The first transmission since, where the kernel sent one (a client's programs
    /// write it).
    pub sent: BTreeMap<Ipv6Addr, Duration>,
    /// How many datagrams the node had sent when each peer last entered the list or
    /// moved in it: what a test checks a queue's leaving before the listing by.
    pub listed_after: BTreeMap<Ipv6Addr, usize>,
    /// Datagrams the node has sent so far ([`Recorder`] writes it before each use).
    pub sends_seen: usize,
}

impl KernelModel {
    /// The kernel moved a packet from `peer` at `at`, as the programs record it.
    pub fn hear(&mut self, peer: &Ipv6Addr, at: Duration) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.1 = at;
        }
    }

    /// The kernel sent a packet to `peer` at `at`, as a client's programs record it.
    pub fn send(&mut self, peer: &Ipv6Addr, at: Duration) {
        let Some(&(_, heard)) = self.peers.get(peer) else { return };
        if self.sent.get(peer).is_none_or(|&t| t <= heard) {
            self.sent.insert(*peer, at);
        }
    }
}

impl KernelPeers for KernelModel {
    fn trust(&mut self, peer: &Ipv6Addr, mapped: SocketAddrV4, heard: Duration) {
        self.peers.insert(*peer, (mapped, heard));
        self.sent.remove(peer);
        self.listed_after.insert(*peer, self.sends_seen);
    }
    fn forget(&mut self, peer: &Ipv6Addr) {
        self.peers.remove(peer);
        self.sent.remove(peer);
    }
    fn heard_and_sent(&mut self, peer: &Ipv6Addr) -> Option<(Duration, Option<Duration>)> {
        let &(_, heard) = self.peers.get(peer)?;
        Some((heard, self.sent.get(peer).copied().filter(|&t| t > heard)))
    }
}

/// The client's random ports (RFC 6081 §5.4): a UDP socket of its own for one peer.
pub trait Ports {
    /// Open a socket on a new random local port: its number, or `None` when none can be
    /// opened. Datagrams to it come back as `client::Via::Port`.
    fn open_port(&mut self) -> Option<NonZeroU16>;
    /// Close a port [`open_port`](Self::open_port) gave.
    fn close_port(&mut self, port: NonZeroU16);
}

/// One datagram a state machine sent, whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The socket it left from.
    pub from: Source,
    /// Where it went.
    pub to: SocketAddrV4,
    /// The UDP payload.
    pub payload: Vec<u8>,
    /// The TTL asked for (`None`: the socket's).
    pub ttl: Option<u8>,
}

impl Sent {
    /// A datagram from the service socket with the socket's TTL.
    pub fn service(to: SocketAddrV4, payload: Vec<u8>) -> Sent {
        Sent { from: Source::Service, to, payload, ttl: None }
    }
}

/// A [`Transmit`] and [`Ports`] that keeps everything, in order, losing nothing (the
/// source socket and the TTL too): for tests and tools.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    /// The datagrams sent.
    pub sent: Vec<Sent>,
    /// The IPv6 packets delivered.
    pub delivered: Vec<Vec<u8>>,
    /// Random ports open now.
    pub open: Vec<NonZeroU16>,
    /// Every port opened, in order.
    pub opened: Vec<NonZeroU16>,
    /// Every port closed.
    pub closed: Vec<NonZeroU16>,
    /// The most ports open at once.
    pub most_open: usize,
    /// The last port number given (the next is above it, from 50001 on).
    pub last_port: u16,
    /// At most this many ports open at once (`None`: no cap).
    pub port_cap: Option<usize>,
    /// A kernel data path's peer list, if the test gives the node one.
    pub kernel: Option<KernelModel>,
}

impl Transmit for Recorder {
    fn send(&mut self, from: Source, to: SocketAddrV4, payload: &[u8], ttl: Option<u8>) {
        self.sent.push(Sent { from, to, payload: payload.to_vec(), ttl });
    }

    fn deliver(&mut self, packet: &[u8]) {
        self.delivered.push(packet.to_vec());
    }

    fn kernel(&mut self) -> Option<&mut dyn KernelPeers> {
        let sent = self.sent.len();
        self.kernel.as_mut().map(|k| {
            k.sends_seen = sent;
            k as &mut dyn KernelPeers
        })
    }
}

impl Ports for Recorder {
    fn open_port(&mut self) -> Option<NonZeroU16> {
        if self.port_cap.is_some_and(|cap| self.open.len() >= cap) {
            return None;
        }
        self.last_port = self.last_port.max(50_000).checked_add(1).unwrap_or(50_001);
        let port = NonZeroU16::new(self.last_port)?;
        self.open.push(port);
        self.opened.push(port);
        self.most_open = self.most_open.max(self.open.len());
        Some(port)
    }

    fn close_port(&mut self, port: NonZeroU16) {
        self.open.retain(|&p| p != port);
        self.closed.push(port);
    }
}

/// Unpredictable bytes (nonces, random address bits, timer jitter). The daemon reads
/// them from the OS; tests use a fixed sequence.
pub trait Random {
    /// Fill `buf`.
    fn fill(&mut self, buf: &mut [u8]);

    /// A uniform value in `0..n` (n > 0), good enough for jitter.
    fn below(&mut self, n: u64) -> u64 {
        let mut b = [0u8; 8];
        self.fill(&mut b);
        u64::from_le_bytes(b) % n.max(1)
    }
}
