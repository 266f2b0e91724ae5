//! Where a state machine's output goes: the one output contract of every role (server,
//! relay, client). A state machine calls it while it handles an input, as many times
//! as that input asks (a relay's flushed queue, a client's two bubbles); the daemon
//! implements it over its sockets and TUN, batching as it likes, and tests record
//! everything into a [`Recorder`].
//!
//! Two calls: [`Transmit::send`] a datagram from one of the node's sockets, and
//! [`Transmit::deliver`] an IPv6 packet to the IPv6 side; a node with a kernel data path
//! also says what it wants of the kernel's peer list ([`Transmit::kernel`], as data:
//! [`KernelIntent`]). The client alone also opens and closes sockets ([`Ports`]); a role
//! that has none does not implement it, so no call of one role's can silently do
//! nothing in another's.
//!
//! The kernel's list is never read or written by a state machine: what it wants goes
//! out as intents, carried out by the daemon once the call returned (outside every lock
//! of the state machine's), and what the kernel saw comes back in as an input
//! (`kernel_saw` of the relay and the client). An input whose decision needs what the
//! kernel saw of a peer asks ([`KernelIntent::Read`]) and ends as
//! [`Action::AskedKernel`](crate::Action::AskedKernel): the daemon answers, then hands
//! the same input again.

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

    /// What the node wants of the kernel data path's peer list (`DataPath`), as data:
    /// carried out by the daemon after the call returns. Only a node whose
    /// configuration says it has a kernel path (`kernel_path`) emits any; one without
    /// never does.
    fn kernel(&mut self, intent: KernelIntent) {
        debug_assert!(false, "a node without a kernel data path wanted {intent:?}");
    }
}

/// What a state machine wants of the kernel data path's peer list: the peers whose
/// packets the kernel moves without the state machine, each trusted at its mapping with
/// the time it was last heard from. The state machine is the list's only writer; the
/// kernel writes last-heard times only (and, for a client, when it first sent to a
/// peer since), which come back as [`KernelSeen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelIntent {
    /// `peer` is trusted at `mapped`, heard from at `heard`: listed (entered or
    /// updated). A full list refuses it quietly: the peer's packets then pass through
    /// the state machine. What the node sent before is handed to the sockets before the
    /// list may carry anything to `peer` (a waiting peer's queue, sent just before its
    /// listing, is not overtaken on the host).
    Trust {
        /// The peer.
        peer: Ipv6Addr,
        /// Its mapping.
        mapped: SocketAddrV4,
        /// When it was last heard from.
        heard: Duration,
    },
    /// `peer` is trusted no more: out of the list (nothing if it was not in it).
    Forget {
        /// The peer.
        peer: Ipv6Addr,
    },
    /// Read what the kernel saw of `peer` and hand it back to the state machine
    /// (`kernel_saw`, with `sweep` as given).
    Read {
        /// The peer.
        peer: Ipv6Addr,
        /// The sweep asks: the answer decides whether the peer, idle in the state
        /// machine's eyes, is idle in the kernel's too, and goes.
        sweep: bool,
    },
}

/// What the kernel saw of a listed peer, in the state machine's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSeen {
    /// When it last heard from the peer.
    pub heard: Duration,
    /// When it first sent to the peer since, if it did (a client's programs write it).
    pub sent: Option<Duration>,
}

/// A [`KernelIntent`] list in memory, for tests: what a kernel's list would hold.
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
    /// Reads asked and not answered yet (the daemon's part: see
    /// `Relay::answer_kernel`, `Client::answer_kernel`).
    pub reads: Vec<(Ipv6Addr, bool)>,
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

    /// What the kernel saw of `peer` (`None`: not in the list), as the daemon reads it.
    pub fn seen(&self, peer: &Ipv6Addr) -> Option<KernelSeen> {
        let &(_, heard) = self.peers.get(peer)?;
        Some(KernelSeen { heard, sent: self.sent.get(peer).copied().filter(|&t| t > heard) })
    }

    /// `intent` carried out, the node having sent `sends` datagrams so far.
    pub fn apply(&mut self, intent: KernelIntent, sends: usize) {
        match intent {
            KernelIntent::Trust { peer, mapped, heard } => {
                self.peers.insert(peer, (mapped, heard));
                self.sent.remove(&peer);
                self.listed_after.insert(peer, sends);
            }
            KernelIntent::Forget { peer } => {
                self.peers.remove(&peer);
                self.sent.remove(&peer);
            }
            KernelIntent::Read { peer, sweep } => self.reads.push((peer, sweep)),
        }
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

    fn kernel(&mut self, intent: KernelIntent) {
        let sends = self.sent.len();
        self.kernel
            .as_mut()
            .expect("a kernel data path's intent, and the test gave the node no model")
            .apply(intent, sends);
    }
}

impl Recorder {
    /// The daemon's part over the kernel model, for tests and tools: each read the model
    /// holds answered with what it saw (`saw`: the state machine's `kernel_saw`), and
    /// those the answers raise, until none is left.
    pub fn answer_reads(&mut self, mut saw: impl FnMut(&mut Recorder, Ipv6Addr, Option<KernelSeen>, bool)) {
        while let Some(model) = self.kernel.as_mut().filter(|k| !k.reads.is_empty()) {
            let reads = std::mem::take(&mut model.reads);
            for (peer, sweep) in reads {
                let seen = self.kernel.as_ref().and_then(|k| k.seen(&peer));
                saw(self, peer, seen, sweep);
            }
        }
    }
}

/// An input handed again (`round`: the input, then the daemon's answers) until it is
/// decided, for tests and tools.
pub fn until_decided(mut round: impl FnMut() -> crate::Outcome) -> crate::Outcome {
    loop {
        let outcome = round();
        if outcome != Ok(crate::Action::AskedKernel) {
            return outcome;
        }
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
