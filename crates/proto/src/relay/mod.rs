//! The Teredo relay (RFC 4380 §5.4) and host-specific relay (§5.5): the bridge between
//! Teredo clients (UDP/IPv4) and the native IPv6 side (a TUN device).
//!
//! Decisions (see docs/decisions.md):
//! * No trusted entry → bubble first, whatever the cone bit says (RFC 5991 deprecates
//!   it; bubbling avoids the §7.4.3 reflection attack). The bubble goes to the client's
//!   server; a direct bubble to its mapping too only in `restricted` mode, since on a
//!   public relay it opens nothing and a Linux NAT that sees it first may re-map the
//!   client's next packet to another port.
//! * Packets from a Teredo source with no entry are dropped (as Miredo): the relay is
//!   not an open IPv4→IPv6 gateway. Every legitimate exchange starts with the relay's
//!   bubble, which creates the entry.
//! * Bubbles carry the source address of the packet that caused them.
//! * A client behind a symmetric NAT answers our bubble from another port than its
//!   address embeds; the bubble is accepted when it comes from the embedded IPv4
//!   address while we wait for it, and that port becomes the peer's mapping.
//!
//! Threads: [`SharedRelay`] holds what every worker shares — the peer table cut into
//! shards by a keyed hash of the peer's address, each shard behind its own lock — and
//! each worker keeps a [`RelayWorker`] of its own (counters, scratch space). A packet
//! takes one shard's lock, never a global one; forwarded packets are written out after
//! it is released (bubbles, the timer's output, and a waiting peer's queue released
//! when it answers, which must go before the peer enters the kernel's list, may leave
//! under it). [`Relay`] is the
//! one-shard, one-worker form (tests, a single thread).

use crate::address_rate::AddressRate;
use crate::drop_reason::DropReason;
use crate::icmp_error::{self, RateLimit};
use crate::outcome::{Action, Outcome};
use crate::peer_table::{Key, KeyedHash, Peer, PeerTable, SharedPrefetcher, TableFull};
use crate::routing_loop;
pub use crate::transmit::{KernelIntent, KernelSeen, Source, Transmit};
use shipworm_wire::icmpv6::{unreachable, Icmpv6Repr};
use shipworm_wire::ipv4_scope::is_global_unicast;
use shipworm_wire::ipv6::{Ipv6AddrExt, Ipv6Packet};
use shipworm_wire::teredo_addr::{self, TeredoAddr, TEREDO_PORT};
use shipworm_wire::teredo_packet::{emit_bubble, TeredoPacket};
use shipworm_wire::teredo_trailer::{trailer_type, TrailerRepr};
use std::collections::VecDeque;
use std::net::{Ipv6Addr, SocketAddrV4};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

mod admission;
mod config;
mod cookie;
mod held;
mod kernel;
mod single;
mod timer;

pub use config::{RelayConfig, RelayStats, Served};
pub use cookie::COOKIE_WINDOW;

use crate::bubble_budget::{self, BubbleBudget};
use admission::{admit, Admission, Datagram};
pub use held::HELD_PER_SHARD;
use held::{hold, take_held, Held, HELD_FOR};
pub use kernel::KERNEL_HEARD_GRAIN;
use kernel::{kernel_forget_removed, mirrors, KernelAsks};
pub use single::Relay;
pub use timer::SWEEP_EVERY;

/// RFC 4380 §5.2.6: bubbles to one peer at least this far apart.
pub const BUBBLE_SPACING: Duration = Duration::from_secs(2);
/// Bubbles sent without an answer before the peer is given up.
pub const MAX_BUBBLES: u8 = 4;
/// The window the bubble budget counts over.
pub const BUBBLE_WINDOW: Duration = Duration::from_secs(300);
/// Bubbles a second to one IPv4 target (a server, or a mapping in `restricted` mode),
/// and the burst: room for hundreds of new peers a second behind one server, and a
/// bound on what native packets to made-up addresses can aim at one host.
pub const BUBBLES_PER_TARGET: (u32, u32) = (500, 1000);
/// Rate buckets for bubble targets (8 bytes each).
const BUBBLE_RATE_BUCKETS: usize = 1 << 14;

/// One shard of the peer state: its part of the peer table and of the list of peers
/// waiting for a bubble answer, with caps that add up to the configured ones.
#[derive(Debug)]
struct Shard {
    peers: PeerTable,
    /// Peers waiting for an answer to their bubbles, oldest first. Entries whose peer
    /// stopped waiting are dropped lazily by the timer, so the packet path never
    /// searches this list.
    pending: VecDeque<Ipv6Addr>,
    pending_capacity: usize,
    /// Packets from clients met first through their own traffic from another port than
    /// their address embeds (a symmetric NAT's), held until a bubble exchange proves
    /// that port: at most [`HELD_PER_SHARD`], the oldest giving way.
    held: VecDeque<Held>,
    /// The bubbles each peer was sent lately, apart from its entry, which is made anew
    /// by the next native packet once given up (RFC 4380 §5.2.6: 4 of a kind per 300 s
    /// without a direct answer).
    spent: BubbleBudget,
}

/// What one worker keeps to itself: counters and scratch space, never shared, so
/// counting a packet touches no other core's cache lines.
#[derive(Debug)]
pub struct RelayWorker {
    stats: RelayStats,
    scratch: [u8; 64],
    /// What the input in hand asked of the kernel, and was answered.
    kernel: KernelAsks,
}

impl RelayWorker {
    /// This worker's counters.
    pub fn stats(&self) -> &RelayStats {
        &self.stats
    }

    fn dropped(&mut self, r: DropReason) -> Outcome {
        self.stats.drops.count(r);
        Err(r)
    }
}

/// The relay state shared by every worker thread.
#[derive(Debug)]
pub struct SharedRelay {
    cfg: RelayConfig,
    shards: Box<[Mutex<Shard>]>,
    /// Each shard's timer: when it next has something due (see `timer`).
    timers: Box<[timer::ShardTimer]>,
    /// The earliest of them, in milliseconds (see `timer`).
    next_due: std::sync::atomic::AtomicU64,
    /// The tables' keys: a peer's hash is computed once, its high half picks the shard
    /// and its low half the slot, so the entries of one shard do not share slot bits.
    keys: KeyedHash,
    /// Keys of the bubbles' nonces (apart from the table's: a nonce must tell nothing
    /// of where a peer lies).
    nonce_keys: KeyedHash,
    /// Where each shard's lines are, to fetch ahead without its lock (renewed under the
    /// lock after each insertion, which may have grown the table).
    lines: Box<[SharedPrefetcher]>,
    /// The peers have outgrown the caches, so a batch's look-ups are worth fetching
    /// ahead (below that, hashing each key twice would cost more than it saves); the
    /// timer updates it.
    large: AtomicBool,
    icmp: Mutex<RateLimit>,
    /// Peers entered by their own first packet, a second (see
    /// [`RelayConfig::client_first_per_s`]), and per public address, so that one
    /// address cannot spend everyone's.
    client_first: (AddressRate, AddressRate),
    /// Bubbles per target IPv4 address (server or mapping); taken under a shard's
    /// lock, never the other way round.
    bubble_rate: AddressRate,
    /// Cookies per server (`cookie`), and the entries they let in: apart from the
    /// bubbles', so that forged first packets naming a server spend neither its
    /// clients' bubbles nor more than its share of entries.
    cookie_rate: AddressRate,
    /// A host-specific relay's served addresses, as the host's change (empty for a relay).
    host_addresses: RwLock<Vec<Ipv6Addr>>,
}

/// Most addresses a host-specific relay serves: far more than any host has, and a
/// bound on the list a local user could grow by adding addresses.
pub const HOST_ADDRESSES_CAP: usize = 1024;

/// Peers from which look-ups are fetched ahead: their lines (64 bytes each) no longer
/// fit a last-level cache.
pub const FETCH_AHEAD_FROM: usize = 1 << 17;

/// Smallest share of the peer cap a shard gets.
pub const MIN_SHARD_PEERS: usize = 256;
/// Smallest share of the waiting-peer cap a shard gets.
pub const MIN_SHARD_PENDING: usize = 32;

/// One more peer is about to wait: the shard's list is capped, and with it the bytes
/// queues hold. The oldest waiting peers give way, their packets lost; a trusted one
/// keeps its entry.
fn make_room_to_wait(shard: &mut Shard, w: &mut RelayWorker) {
    while shard.pending.len() >= shard.pending_capacity {
        let Some(old) = shard.pending.pop_front() else { break };
        if let Some(lost) = shard.peers.give_way(&old) {
            w.stats.drops.count_n(DropReason::QueueFull, lost);
        }
    }
}

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A worker that panicked mid-update leaves a consistent table (every step is a
    // whole field write); go on rather than take the relay down.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SharedRelay {
    /// Relay state cut into at most `shards` shards. Each shard enforces its share of
    /// the caps on its own, so shares must stay large enough for the hash's unevenness
    /// not to matter: at least 256 peers and 32 waiting peers a shard. The shares add up
    /// to the caps exactly.
    pub fn new(cfg: RelayConfig, shards: usize) -> SharedRelay {
        let n = shards.clamp(1, (cfg.capacity / MIN_SHARD_PEERS).min(cfg.pending_capacity / MIN_SHARD_PENDING).max(1));
        let (k0, k1) = cfg.hash_keys;
        let keys = KeyedHash::new(k0, k1);
        let part = |total: usize, i: usize| total / n + usize::from(i < total % n);
        let mirrored = mirrors(&cfg);
        let shards: Box<[Mutex<Shard>]> = (0..n)
            .map(|i| {
                let peers = PeerTable::new(part(cfg.capacity.max(1), i), cfg.idle, keys)
                    .with_address_cap(cfg.per_address.div_ceil(n).max(1));
                Mutex::new(Shard {
                    peers: if mirrored { peers.mirrored() } else { peers },
                    pending: VecDeque::new(),
                    pending_capacity: part(cfg.pending_capacity.max(1), i),
                    held: VecDeque::new(),
                    // A peer is bubbled for 8 s of a 300 s window: room for the waiting
                    // list's turnover over the window, the first counted giving way.
                    spent: BubbleBudget::new(part(cfg.pending_capacity.max(1), i) * 8, keys),
                })
            })
            .collect();
        SharedRelay {
            keys,
            nonce_keys: KeyedHash::new(k1.rotate_left(7) ^ 0x5bd1_e995, k0.rotate_left(41) ^ 0x2545_f491),
            lines: shards
                .iter()
                .map(|s: &Mutex<Shard>| {
                    let p = SharedPrefetcher::default();
                    p.set(lock(s).peers.prefetcher());
                    p
                })
                .collect(),
            large: AtomicBool::new(false),
            timers: (0..n).map(|_| timer::ShardTimer::new()).collect(),
            next_due: std::sync::atomic::AtomicU64::new(u64::MAX),
            icmp: Mutex::new(RateLimit::new(cfg.icmp_rate)),
            client_first: (
                AddressRate::total(cfg.client_first_per_s, cfg.client_first_per_s),
                AddressRate::new(
                    BUBBLE_RATE_BUCKETS,
                    (cfg.client_first_per_s / 20).max(1),
                    (cfg.client_first_per_s / 10).max(1),
                    (k0.rotate_left(53), k1.rotate_left(11)),
                ),
            ),
            bubble_rate: AddressRate::new(
                BUBBLE_RATE_BUCKETS,
                cfg.bubbles_per_target.0,
                cfg.bubbles_per_target.1,
                (k1.rotate_left(17), k0.rotate_left(29)),
            ),
            cookie_rate: AddressRate::new(
                BUBBLE_RATE_BUCKETS,
                (cfg.bubbles_per_target.0 / 10).max(1),
                (cfg.bubbles_per_target.1 / 10).max(1),
                (k0.rotate_left(37), k1.rotate_left(3)),
            ),
            host_addresses: RwLock::new(match &cfg.served {
                Served::Only(v) => v.iter().copied().take(HOST_ADDRESSES_CAP).collect(),
                Served::AnyGlobal => Vec::new(),
            }),
            shards,
            cfg,
        }
    }

    /// A host-specific relay serves `addresses` from now on (the host's global
    /// addresses, as they come and go), at most [`HOST_ADDRESSES_CAP`]; false when some
    /// were left out. A relay that serves any destination ignores it.
    pub fn set_served(&self, addresses: &[Ipv6Addr]) -> bool {
        if self.cfg.served == Served::AnyGlobal {
            return true;
        }
        let kept = addresses.len().min(HOST_ADDRESSES_CAP);
        *self.host_addresses.write().unwrap_or_else(PoisonError::into_inner) = addresses[..kept].to_vec();
        kept == addresses.len()
    }

    /// The addresses a host-specific relay serves now.
    pub fn served(&self) -> Vec<Ipv6Addr> {
        self.host_addresses.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// A worker's own state, to pass to every call that worker makes.
    pub fn worker(&self) -> RelayWorker {
        RelayWorker { stats: RelayStats::default(), scratch: [0; 64], kernel: KernelAsks::default() }
    }

    fn shard_index(&self, key: &Key) -> usize {
        // Lemire's multiply-shift over the hash's high half: uniform without a division.
        (((key.hash >> 32) * self.shards.len() as u64) >> 32) as usize
    }

    fn shard(&self, key: &Key) -> &Mutex<Shard> {
        &self.shards[self.shard_index(key)]
    }

    /// Whether look-ups are worth fetching ahead (the table has outgrown the caches).
    pub fn fetches_ahead(&self) -> bool {
        self.large.load(Ordering::Relaxed)
    }

    /// Start fetching the entry that `datagram`, from a Teredo client, will look up:
    /// called over a received batch before it is handled, so that the batch's memory
    /// waits overlap. Takes no lock.
    pub fn prefetch_udp(&self, datagram: &[u8]) {
        if let Ok(pkt) = TeredoPacket::parse(datagram) {
            let key = self.keys.key(&pkt.ipv6.src_addr());
            self.lines[self.shard_index(&key)].prefetch(&key);
        }
    }

    /// Peers per shard (status and tests).
    pub fn shard_lens(&self) -> Vec<usize> {
        self.shards.iter().map(|s| lock(s).peers.len()).collect()
    }

    /// Number of peers (locks each shard in turn: for status, not the packet path).
    pub fn peer_count(&self) -> usize {
        self.shards.iter().map(|s| lock(s).peers.len()).sum()
    }

    /// A copy of `addr`'s entry (status and tests).
    pub fn peer(&self, addr: &Ipv6Addr) -> Option<Peer> {
        lock(self.shard(&self.keys.key(addr))).peers.get(addr).map(|p| *p)
    }

    /// Bytes held in the peers' queues, over all shards (a walk over every table: for
    /// status and tests).
    pub fn queued_bytes(&self) -> usize {
        self.shards.iter().map(|s| lock(s).peers.queued_bytes()).sum()
    }

    /// Peers waiting for bubble answers (counted, for status and tests).
    pub fn pending_len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = lock(s);
                s.pending.iter().filter(|a| s.peers.get(a).is_some_and(|p| p.waiting)).count()
            })
            .sum()
    }

    /// An IPv6 packet from the native side, for a Teredo client.
    pub fn on_tun(&self, w: &mut RelayWorker, now: Duration, packet: &[u8], tx: &mut impl Transmit) -> Outcome {
        let outcome = self.native_packet(w, now, packet, tx);
        w.kernel.after(outcome)
    }

    fn native_packet(&self, w: &mut RelayWorker, now: Duration, packet: &[u8], tx: &mut impl Transmit) -> Outcome {
        let Ok(ip) = Ipv6Packet::new_checked(packet) else {
            return w.dropped(DropReason::MalformedVersion);
        };
        let ip = Ipv6Packet::new_unchecked(ip.packet());
        let dst = ip.dst_addr();
        let Some(t) = TeredoAddr::decode_with_prefix(&dst, self.cfg.prefix) else {
            // A routing error: only Teredo destinations belong on this interface.
            self.icmp_error(w, now, &ip, unreachable::NO_ROUTE, tx);
            return w.dropped(DropReason::NotOurClient);
        };
        if let Err(r) = self.tunnel_destination(&t) {
            return w.dropped(r);
        }
        // Into the tunnel: never from one of our own 6to4 or ISATAP addresses.
        if routing_loop::embeds_own_ipv4(&ip.src_addr(), &self.cfg.own_ipv4) {
            return w.dropped(DropReason::RoutingLoop);
        }
        let key = self.keys.key(&dst);
        let mut shard = lock(self.shard(&key));
        let to = shard.peers.send_to(&key, now);
        if to.is_none() && self.ask_if_listed(&shard.peers, &key, w, tx) {
            return Ok(Action::AskedKernel);
        }
        if let Some(to) = to {
            drop(shard);
            tx.send(Source::Service, to, ip.packet(), None);
            w.stats.to_teredo += 1;
            w.stats.to_teredo_bytes += ip.packet().len() as u64;
            return Ok(Action::Forwarded);
        }
        let outcome = self.queue_and_bubble(&mut shard, w, now, &ip, (&key, t.mapped), tx);
        kernel_forget_removed(&mut shard.peers, tx);
        outcome
    }

    /// What a Teredo destination's address must satisfy for anything to be sent to it:
    /// a global mapping and server that are not ours nor a subnet's broadcast.
    fn tunnel_destination(&self, t: &TeredoAddr) -> Result<(), DropReason> {
        if !is_global_unicast(*t.mapped.ip())
            || !is_global_unicast(t.server)
            || self.cfg.own_ipv4.contains(t.mapped.ip())
        {
            return Err(DropReason::DestinationMappingNotGlobal);
        }
        if [*t.mapped.ip(), t.server].iter().any(|a| self.cfg.local_broadcasts.contains(a)) {
            return Err(DropReason::AttachedSubnet);
        }
        Ok(())
    }

    fn queue_and_bubble(
        &self,
        shard: &mut Shard,
        w: &mut RelayWorker,
        now: Duration,
        ip: &Ipv6Packet<&[u8]>,
        (key, mapped): (&Key, SocketAddrV4),
        tx: &mut impl Transmit,
    ) -> Outcome {
        let dst = key.addr;
        // None: no entry; Some(waiting).
        let known = shard.peers.get_keyed(key).map(|p| p.waiting);
        if known.is_none() && self.ask_before_eviction(&shard.peers, w, (now, &dst), tx) {
            return Ok(Action::AskedKernel);
        }
        if known != Some(true) {
            // One more peer waits, whatever made it wait (a newcomer, or a trusted peer
            // gone silent).
            make_room_to_wait(shard, w);
        }
        // Making room removed only waiting entries, so `known` still tells.
        if known.is_none() {
            let inserted = shard.peers.insert(Peer::new(dst, mapped, now), now);
            match inserted.map(drop) {
                Ok(()) => {}
                Err(TableFull::AddressFull) => return w.dropped(DropReason::AddressFull),
                Err(TableFull::Full) => return w.dropped(DropReason::TableFull),
            }
            // The insertion may have grown the table: fetching ahead follows it.
            self.lines[self.shard_index(key)].set(shard.peers.prefetcher());
            self.entered(self.shard_index(key), now);
        }
        let cap = self.cfg.queue_bytes;
        let mut p = shard.peers.get_mut_keyed(key).expect("present");
        // A trusted but silent peer keeps its mapping; bubbles check it again.
        let queued = p.queue_mut().push(ip.packet(), cap);
        let newly = !p.waiting;
        let listed = newly && p.trusted;
        p.waiting = true;
        drop(p);
        if newly {
            shard.pending.push_back(dst);
        }
        // A trusted peer waited for leaves the kernel's list until it answers: what
        // comes from it meanwhile reaches us (its answer sends the queue at once), and
        // nothing newer leaves for it before what waits here.
        if listed && mirrors(&self.cfg) {
            tx.kernel(KernelIntent::Forget { peer: dst });
        }
        self.send_bubbles((&mut shard.peers, &mut shard.spent), w, now, &dst, tx);
        if newly {
            self.waits(self.shard_index(key), &shard.peers, &dst, now);
        }
        if queued {
            Ok(Action::Queued)
        } else {
            w.dropped(DropReason::QueueFull)
        }
    }

    /// Bubbles to `dst` within the RFC 4380 §5.2.6 limits: none sooner than 2 s after
    /// the last, none once 4 of a kind went unanswered in 300 s (`spent`, whatever
    /// became of the entries they went for).
    fn send_bubbles(
        &self,
        (peers, spent): (&mut PeerTable, &mut BubbleBudget),
        w: &mut RelayWorker,
        now: Duration,
        dst: &Ipv6Addr,
        tx: &mut impl Transmit,
    ) -> bool {
        let Some(mut p) = peers.get_mut(dst) else {
            return false;
        };
        if now.saturating_sub(p.bubble_window) >= BUBBLE_WINDOW {
            p.bubble_window = now;
            p.tries = 0;
        }
        // The first bubble goes at once (a new entry's "30 s ago" may predate time zero).
        if (p.tries > 0 && now.saturating_sub(p.last_tx) < BUBBLE_SPACING) || p.tries >= MAX_BUBBLES {
            return false;
        }
        let Some(t) = TeredoAddr::decode_with_prefix(dst, self.cfg.prefix) else {
            return false;
        };
        // Whoever sends native packets chooses the server field (and the mapping) of
        // the addresses they write to: one target gets at most its rate of bubbles,
        // however many addresses name it. Over it, the peer keeps its budget and waits
        // for a later try.
        let direct = self.cfg.direct_bubbles.then_some(p.mapped);
        let rate = &self.bubble_rate;
        if !rate.allow(t.server, now) || direct.is_some_and(|m| !rate.allow(*m.ip(), now)) {
            w.stats.drops.count(DropReason::RateLimited);
            return false;
        }
        // RFC 6081 §5.2.4's Nonce, one for each round of reaching the peer: a client that
        // speaks RFC 6081 echoes it in its direct bubble, and that answer wins over any
        // without it. It goes only through the client's server (not in the direct
        // bubble, which anyone at the mapping would see): a host sharing the client's
        // public address never has it.
        if p.tries == 0 || p.nonce_sent.is_none() {
            let h = std::hash::BuildHasher::hash_one(&self.nonce_keys, (u128::from(*dst), now.as_nanos()));
            p.nonce_sent = Some(NonZeroU32::new(h as u32).unwrap_or(NonZeroU32::MIN));
        }
        let nonce = p.nonce_sent.expect("just set");
        // The try counts whether or not the budget lets its bubbles go: the entry is
        // given up after its tries, as one whose bubbles all went unanswered.
        p.last_tx = now;
        p.tries += 1;
        drop(p);
        let direct = direct.filter(|_| spent.spend(now, *dst, bubble_budget::Kind::Direct));
        let indirect = spent.spend(now, *dst, bubble_budget::Kind::Indirect);
        w.stats.bubbles_withheld += u64::from(!indirect) + u64::from(self.cfg.direct_bubbles && direct.is_none());
        let n = emit_bubble(&self.bubble_source(dst, nonce), dst, 0, &mut w.scratch).expect("scratch holds a bubble");
        if let Some(mapped) = direct {
            tx.send(Source::Service, mapped, &w.scratch[..n], None);
            w.stats.bubbles += 1;
        }
        if !indirect {
            return true;
        }
        w.scratch[n..n + 2].copy_from_slice(&[trailer_type::NONCE, 4]);
        w.scratch[n + 2..n + 6].copy_from_slice(&nonce.get().to_be_bytes());
        tx.send(Source::Service, SocketAddrV4::new(t.server, TEREDO_PORT), &w.scratch[..n + 6], None);
        w.stats.bubbles += 1;
        true
    }

    /// The source of our bubbles to `client` in the round of `nonce` (RFC 4380 §5.4.1:
    /// "a local IPv6 address"): a link-local address whose interface identifier is a
    /// keyed hash of the client's address and the round's nonce, as Miredo's relay
    /// makes one of the address. A client answers a bubble to its source, so an answer
    /// addressed there comes from someone who saw one of this round's bubbles, which go
    /// to the client's mapping and through its server only: what proves a nonce-less
    /// answer (Miredo's client, RFC 4380 alone) from a port its address does not embed,
    /// where a host behind the same address could otherwise answer in its name.
    fn bubble_source(&self, client: &Ipv6Addr, nonce: NonZeroU32) -> Ipv6Addr {
        self.keyed_link_local((b"bubble source", u128::from(*client), nonce.get()))
    }

    /// A link-local address whose interface identifier is a keyed hash of `what`
    /// (modified EUI-64: local, individual).
    fn keyed_link_local(&self, what: impl std::hash::Hash) -> Ipv6Addr {
        let mut iid = std::hash::BuildHasher::hash_one(&self.nonce_keys, what).to_be_bytes();
        iid[0] &= 0xfc;
        Ipv6Addr::from((0xfe80u128 << 112) | u128::from(u64::from_be_bytes(iid)))
    }

    /// A UDP datagram from a Teredo client.
    pub fn on_udp(
        &self,
        w: &mut RelayWorker,
        now: Duration,
        from: SocketAddrV4,
        datagram: &[u8],
        tx: &mut impl Transmit,
    ) -> Outcome {
        let outcome = self.client_datagram(w, now, (from, datagram), tx);
        w.kernel.after(outcome)
    }

    fn client_datagram(
        &self,
        w: &mut RelayWorker,
        now: Duration,
        dgram: (SocketAddrV4, &[u8]),
        tx: &mut impl Transmit,
    ) -> Outcome {
        let (from, datagram) = dgram;
        let pkt = match TeredoPacket::parse(datagram) {
            Ok(p) => p,
            Err(e) => return w.dropped(e.into()),
        };
        let ip = pkt.ipv6;
        let src = ip.src_addr();
        // §5.4.2: the source must be a Teredo address whose mapping is where it came
        // from — or whose mapping we learned by a bubble exchange: a bubble answering
        // ours from the embedded address but another port (a symmetric NAT, as in
        // RFC 6081's symmetric-NAT example), and what follows from that same port.
        let Some(t) = TeredoAddr::decode_with_prefix(&src, self.cfg.prefix) else {
            return w.dropped(DropReason::SourceMismatch);
        };
        let echo = match pkt.trailers.get(trailer_type::NONCE) {
            Some(TrailerRepr::Nonce(n)) => NonZeroU32::new(u32::from_be_bytes(n)).filter(|_| pkt.is_bubble()),
            _ => None,
        };
        let key = self.keys.key(&src);
        let held = {
            let mut shard = lock(self.shard(&key));
            let held = !shard.held.is_empty() && shard.held.iter().any(|h| h.client == src);
            // The hash only for a bubble: data, the packet path's bulk, pays nothing for it.
            let d = |p: &Peer| {
                let to_us =
                    pkt.is_bubble() && p.nonce_sent.is_some_and(|n| ip.dst_addr() == self.bubble_source(&src, n));
                Datagram { from, embeds: t.mapped, bubble: pkt.is_bubble(), echo, to_us }
            };
            let Some(admission) = shard.peers.get_keyed(&key).map(|p| admit(&p, &d(&p), now)) else {
                return self.client_first(&mut shard, w, now, from, &pkt, (&key, &t), tx);
            };
            match admission {
                Admission::Refused(r) => return w.dropped(r),
                Admission::Passing => Vec::new(),
                Admission::Prove => return self.prove_port(&mut shard, w, now, (&key, src, from), &ip, tx),
                Admission::Hold => {
                    if let Err(r) = self.may_leave(&ip.dst_addr()) {
                        return w.dropped(r);
                    }
                    hold(&mut shard.held, w, (src, from), now, ip.packet());
                    return Ok(Action::Queued);
                }
                Admission::Client { proved, fresh, seal } => {
                    self.accept(&mut shard, w, now, (&key, from), (proved, fresh, held, seal), tx)
                }
            }
        };
        // What the client sent from the port it proved goes now, then this packet.
        for packet in &held {
            // Checked when held; a host-specific relay's served addresses may have
            // changed since.
            let Ok(held_ip) = Ipv6Packet::new_checked(&packet[..]) else { continue };
            self.forward(w, &held_ip, tx).ok();
        }
        if pkt.is_bubble() {
            return Ok(Action::Consumed);
        }
        self.forward(w, &ip, tx)
    }

    /// A client's datagram admitted (`proved`, `fresh`: see [`Admission::Client`];
    /// `held`: some of its packets are held): its entry trusted at `from`, its queue
    /// sent, the kernel's list told, and its held packets from that port returned to
    /// go on (the rest dropped).
    fn accept(
        &self,
        shard: &mut Shard,
        w: &mut RelayWorker,
        now: Duration,
        (key, from): (&Key, SocketAddrV4),
        (proved, fresh, held, seal): (bool, bool, bool, Option<bool>),
        tx: &mut impl Transmit,
    ) -> Vec<Box<[u8]>> {
        let Some(mut p) = shard.peers.get_mut_keyed(key) else { return Vec::new() };
        let src = p.addr;
        // Spent once it proved the client, or once the client spoke from the mapping
        // its address embeds; kept after an answer without it (which of two hosts
        // behind one address answered is not known yet), until the next round.
        if proved {
            p.nonce_sent = None;
        }
        let was_waiting = p.waiting;
        p.trusted = true;
        p.mapped = from;
        p.last_rx = now;
        p.tries = 0;
        p.waiting = false;
        p.proving = false;
        if let Some(seal) = seal {
            p.sealed = seal;
        }
        let queue = p.take_queue();
        drop(p);
        // A direct response (RFC 4380 §5.2.6): its bubbles count from nothing again.
        if was_waiting {
            shard.spent.answered(&src);
        }
        // The queue first, then the kernel's list: what the kernel sends the client from
        // then on cannot overtake it (`KernelIntent::Trust` lets what was sent before it
        // leave first).
        if let Some(mut q) = queue {
            while let Some(packet) = q.next_packet() {
                tx.send(Source::Service, from, packet, None);
                w.stats.to_teredo += 1;
                w.stats.to_teredo_bytes += packet.len() as u64;
            }
        }
        if !fresh {
            self.kernel_trust(tx, &src, from, now);
        }
        // Its held packets from the port proved go on (the others are dropped): once it
        // proved the port it waited for, or a port by our nonce after that wait ended
        // otherwise. A wait ended by a nonce-less answer from the embedded mapping
        // leaves them for the nonce.
        if held && proved && (was_waiting || seal == Some(true)) {
            take_held(&mut shard.held, w, &src, from)
        } else {
            Vec::new()
        }
    }

    /// A client's packet out to the native side, if it may leave for its destination.
    fn forward(&self, w: &mut RelayWorker, ip: &Ipv6Packet<&[u8]>, tx: &mut impl Transmit) -> Outcome {
        if let Err(r) = self.may_leave(&ip.dst_addr()) {
            return w.dropped(r);
        }
        tx.deliver(ip.packet());
        w.stats.to_ipv6 += 1;
        w.stats.to_ipv6_bytes += ip.packet().len() as u64;
        Ok(Action::Forwarded)
    }

    /// Whether a client's packet may leave for native destination `dst`.
    fn may_leave(&self, dst: &Ipv6Addr) -> Result<(), DropReason> {
        let served = match &self.cfg.served {
            // Never back into a Teredo prefix (ours, whatever it is configured to, or the
            // standard one), nor to a site's own or another tunnel's addresses.
            Served::AnyGlobal => {
                dst.is_forwardable()
                    && !teredo_addr::is_teredo(dst)
                    && TeredoAddr::decode_with_prefix(dst, self.cfg.prefix).is_none()
            }
            Served::Only(_) => self.host_addresses.read().unwrap_or_else(PoisonError::into_inner).contains(dst),
        };
        if !served {
            return Err(DropReason::NotServed);
        }
        // Out of the tunnel: never to one of our own 6to4 or ISATAP addresses.
        if routing_loop::embeds_own_ipv4(dst, &self.cfg.own_ipv4) {
            return Err(DropReason::RoutingLoop);
        }
        Ok(())
    }

    /// A packet from a client we have no entry for: its own first packet (RFC 4380
    /// §5.4.2). From the mapping its address embeds, the client is entered, trusted,
    /// and the packet goes on (a relay sharing an anycast address with one that went
    /// takes over its clients so). From another port of the embedded address (a
    /// symmetric NAT's), the packet is held and the port proved as for any new peer: a
    /// bubble through the client's server with a nonce, which the client's direct
    /// bubble echoes from that port. New entries come at a bounded rate; over it, a
    /// cookie proves the client without state (`cookie`), and a bubble answering one
    /// enters it. Anything else, and other bubbles, are dropped.
    #[allow(clippy::too_many_arguments)]
    fn client_first(
        &self,
        shard: &mut Shard,
        w: &mut RelayWorker,
        now: Duration,
        from: SocketAddrV4,
        pkt: &TeredoPacket<'_>,
        (key, t): (&Key, &TeredoAddr),
        tx: &mut impl Transmit,
    ) -> Outcome {
        let embedded = t.mapped == from;
        if pkt.is_bubble() {
            // The answer to a cookie a first packet over budget drew, from the mapping
            // it came from.
            let src = pkt.ipv6.src_addr();
            let answered = self.cookie_answered(&src, from, pkt, now).filter(|_| t.mapped.ip() == from.ip());
            if let Some(echoed) = answered {
                return self.enter_by_cookie(shard, w, now, (key, t, from, echoed), tx);
            }
            return w.dropped(if embedded { DropReason::NoPeerEntry } else { DropReason::SourceMismatch });
        }
        if t.mapped.ip() != from.ip() {
            return w.dropped(DropReason::SourceMismatch);
        }
        // (Its mapping is where it came from: the same checks as a destination's.)
        if let Err(r) = self.tunnel_destination(t) {
            return w.dropped(r);
        }
        let ip = &pkt.ipv6;
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        if let Err(r) = self.may_leave(&dst) {
            return w.dropped(r);
        }
        // The token is spent once, whatever the kernel is asked before the entry comes.
        // Over budget, a cookie proves the client without state (`cookie`).
        if !w.kernel.take_token() && !self.client_first_allowed(from, now) {
            self.send_cookie(w, now, &src, (from, t), tx);
            return w.dropped(DropReason::RateLimited);
        }
        if self.ask_before_eviction(&shard.peers, w, (now, &src), tx) {
            return Ok(Action::AskedKernel);
        }
        if !embedded {
            make_room_to_wait(shard, w);
        }
        let mut peer = Peer::new(src, t.mapped, now);
        if embedded {
            peer.trusted = true;
            peer.last_rx = now;
        }
        if let Err(r) = self.enter_client(shard, key, peer, now, tx) {
            return w.dropped(r);
        }
        if embedded {
            self.kernel_trust(tx, &src, from, now);
            tx.deliver(ip.packet());
            w.stats.to_ipv6 += 1;
            w.stats.to_ipv6_bytes += ip.packet().len() as u64;
            return Ok(Action::Forwarded);
        }
        self.wait_for_proof(shard, w, now, (key, src, from), ip, tx)
    }

    /// A client's new entry `peer` into the table (its shard's lines and timer told);
    /// an entry evicted to make room leaves the kernel's list whatever came of it.
    fn enter_client(
        &self,
        shard: &mut Shard,
        key: &Key,
        peer: Peer,
        now: Duration,
        tx: &mut impl Transmit,
    ) -> Result<(), DropReason> {
        let inserted = shard.peers.insert(peer, now).map(drop);
        kernel_forget_removed(&mut shard.peers, tx);
        match inserted {
            Ok(()) => {}
            Err(TableFull::AddressFull) => return Err(DropReason::AddressFull),
            Err(TableFull::Full) => return Err(DropReason::TableFull),
        }
        self.lines[self.shard_index(key)].set(shard.peers.prefetcher());
        self.entered(self.shard_index(key), now);
        Ok(())
    }

    /// Whether a client's packet that needs a port proved (its first, or one from
    /// another port than its entry's) may start the proof: the client-first budget,
    /// per IPv4 source and in all.
    fn client_first_allowed(&self, from: SocketAddrV4, now: Duration) -> bool {
        let (all, per_address) = &self.client_first;
        per_address.allow(*from.ip(), now) && all.allow_any(now)
    }

    /// Data from another port of the address a trusted client embeds ([`Admission::Prove`]):
    /// proved as a first packet from there is, the entry kept where it is meanwhile.
    fn prove_port(
        &self,
        shard: &mut Shard,
        w: &mut RelayWorker,
        now: Duration,
        (key, src, from): (&Key, Ipv6Addr, SocketAddrV4),
        ip: &Ipv6Packet<&[u8]>,
        tx: &mut impl Transmit,
    ) -> Outcome {
        if let Err(r) = self.may_leave(&ip.dst_addr()) {
            return w.dropped(r);
        }
        if !self.client_first_allowed(from, now) {
            return w.dropped(DropReason::RateLimited);
        }
        make_room_to_wait(shard, w);
        self.wait_for_proof(shard, w, now, (key, src, from), ip, tx)
    }

    /// Holds client `src`'s packet from `from` and bubbles it (a nonce in the indirect
    /// bubble) until it proves that port, or the hold runs out.
    fn wait_for_proof(
        &self,
        shard: &mut Shard,
        w: &mut RelayWorker,
        now: Duration,
        (key, src, from): (&Key, Ipv6Addr, SocketAddrV4),
        ip: &Ipv6Packet<&[u8]>,
        tx: &mut impl Transmit,
    ) -> Outcome {
        if let Some(mut p) = shard.peers.get_mut_keyed(key) {
            p.waiting = true;
            p.proving = true;
        }
        shard.pending.push_back(src);
        hold(&mut shard.held, w, (src, from), now, ip.packet());
        self.send_bubbles((&mut shard.peers, &mut shard.spent), w, now, &src, tx);
        self.waits(self.shard_index(key), &shard.peers, &src, now);
        self.due_at(self.shard_index(key), now + HELD_FOR);
        Ok(Action::Queued)
    }

    fn icmp_error(
        &self,
        w: &mut RelayWorker,
        now: Duration,
        offending: &Ipv6Packet<&[u8]>,
        code: u8,
        tx: &mut impl Transmit,
    ) {
        let Some(from) = self.cfg.icmp_source else {
            return;
        };
        // The limiter's lock is taken on this error path only, and held by nothing else.
        if !icmp_error::may_answer(offending) || !self.icmp.lock().unwrap_or_else(PoisonError::into_inner).allow(now) {
            return;
        }
        let mut out = [0u8; 1280];
        if let Some(n) =
            icmp_error::build(&from, offending, |q| Icmpv6Repr::DstUnreachable { code, invoking: q }, &mut out)
        {
            tx.deliver(&out[..n]);
            w.stats.icmp_errors += 1;
        }
    }
}
