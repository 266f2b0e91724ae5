//! The peer list of RFC 4380 §5.2 / §5.4, shared by relays and clients: one entry per
//! IPv6 peer, with its mapping, trust, timers, bubble budget and a bounded queue.
//!
//! Built for millions of entries and for floods: entries live in a slab indexed by a
//! hash map keyed with SipHash-1-3 under secret keys (addresses are chosen by
//! attackers), the total is capped, and when full a new entry may only take the place
//! of an untrusted or idle one, never of a peer in use — a flood of new peers cannot
//! push established ones out. Nothing here allocates per packet except a pending
//! peer's queue, which is bounded.

use siphasher::sip::SipHasher13;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::Duration;

/// RFC 4380 §5.2.4: an entry is valid while its last reception is this recent.
pub const VALIDITY: Duration = Duration::from_secs(30);

/// SipHash-1-3 with keys chosen by the caller (the daemon draws them at random).
#[derive(Debug, Clone, Copy)]
pub struct KeyedHash {
    k0: u64,
    k1: u64,
}

impl KeyedHash {
    /// A hasher builder with these secret keys.
    pub fn new(k0: u64, k1: u64) -> Self {
        KeyedHash { k0, k1 }
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = SipHasher13;
    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.k0, self.k1)
    }
}

/// Packets waiting for a peer's bubble exchange, in order, bounded in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PacketQueue {
    /// Length-prefixed packets (u16 big-endian length, then the bytes).
    buf: Vec<u8>,
    packets: usize,
}

impl PacketQueue {
    /// Append `packet` unless that would take the queue past `cap` bytes of packets.
    pub fn push(&mut self, packet: &[u8], cap: usize) -> bool {
        let used = self.buf.len() - 2 * self.packets;
        if packet.len() > u16::MAX as usize || used + packet.len() > cap {
            return false;
        }
        self.buf.extend_from_slice(&(packet.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(packet);
        self.packets += 1;
        true
    }

    /// Number of queued packets.
    pub fn len(&self) -> usize {
        self.packets
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }

    /// Bytes of packet data queued.
    pub fn bytes(&self) -> usize {
        self.buf.len() - 2 * self.packets
    }

    /// The oldest queued packet, left in place.
    pub fn first(&self) -> Option<&[u8]> {
        let len = usize::from(u16::from_be_bytes([*self.buf.first()?, *self.buf.get(1)?]));
        self.buf.get(2..2 + len)
    }

    /// Take every packet out, in order, releasing the memory.
    pub fn drain(&mut self) -> QueueDrain {
        self.packets = 0;
        QueueDrain { buf: std::mem::take(&mut self.buf), at: 0 }
    }
}

/// The packets taken out of a queue.
#[derive(Debug)]
pub struct QueueDrain {
    buf: Vec<u8>,
    at: usize,
}

impl QueueDrain {
    /// The next packet.
    pub fn next_packet(&mut self) -> Option<&[u8]> {
        let len = usize::from(u16::from_be_bytes([*self.buf.get(self.at)?, *self.buf.get(self.at + 1)?]));
        let p = self.buf.get(self.at + 2..self.at + 2 + len)?;
        self.at += 2 + len;
        Some(p)
    }
}

/// One peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The peer's IPv6 address (the key).
    pub addr: Ipv6Addr,
    /// Where its packets come from and go to.
    pub mapped: SocketAddrV4,
    /// Trusted: its mapping was confirmed by a packet from it.
    pub trusted: bool,
    /// Last reception from the peer.
    pub last_rx: Duration,
    /// Last transmission to the peer (bubbles included).
    pub last_tx: Duration,
    /// Bubbles sent since the last direct reception.
    pub bubbles: u8,
    /// When the current 300-second bubble window started.
    pub bubble_window: Duration,
    /// Bubbles are out and unanswered: the owner's timer list holds this peer.
    pub waiting: bool,
    /// The nonce of the direct IPv6 connectivity test under way (clients, native peers).
    pub nonce: Option<[u8; 8]>,
    /// RFC 6081 §5.2.1 Nonce Sent: the Nonce trailer of our last indirect bubble to this
    /// peer, which its direct bubble must echo to be accepted from a port its address
    /// does not embed (0: none sent).
    pub nonce_sent: u32,
    /// RFC 6081 §5.2.1 Nonce Received: the Nonce trailer of the peer's last indirect
    /// bubble, echoed in our direct ones (0: none, or the peer sent none).
    pub nonce_received: u32,
    /// RFC 6081 §5.7.1: direct bubbles with a Neighbor Discovery solicitation sent
    /// since the peer last spoke (Server Load Reduction).
    pub solicitations: u8,
    /// The peer sent us an RFC 6081 trailer: it may answer a solicitation.
    pub knows_trailers: bool,
    /// Packets waiting for the peer to answer.
    pub queue: PacketQueue,
}

impl Peer {
    /// A new untrusted entry, as RFC 4380 §5.2.6 creates one: last reception and
    /// transmission 30 s in the past, no bubbles sent.
    pub fn new(addr: Ipv6Addr, mapped: SocketAddrV4, now: Duration) -> Peer {
        let past = now.saturating_sub(VALIDITY);
        Peer {
            addr,
            mapped,
            trusted: false,
            last_rx: past,
            last_tx: past,
            bubbles: 0,
            bubble_window: now,
            waiting: false,
            nonce: None,
            nonce_sent: 0,
            nonce_received: 0,
            solicitations: 0,
            knows_trailers: false,
            queue: PacketQueue::default(),
        }
    }

    /// Trusted and heard from within 30 s: packets may go straight to its mapping.
    pub fn is_valid(&self, now: Duration) -> bool {
        self.trusted && now.saturating_sub(self.last_rx) < VALIDITY
    }

    /// In active use: valid, or waiting for an answer, or holding packets. Such an
    /// entry never gives its place to a newcomer.
    pub fn in_use(&self, now: Duration) -> bool {
        self.is_valid(now) || self.waiting || !self.queue.is_empty()
    }
}

/// Why an insertion was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFull {
    /// Every entry the bounded search looked at is in active use.
    Full,
    /// The IPv4 address the newcomer embeds has its share of entries already.
    AddressFull,
}

/// The public IPv4 address a Teredo address embeds (its last 32 bits, inverted,
/// whatever the prefix): where its client's packets come from.
pub fn embedded_ipv4(addr: &Ipv6Addr) -> Ipv4Addr {
    let o = addr.octets();
    Ipv4Addr::new(!o[12], !o[13], !o[14], !o[15])
}

/// The peer table.
#[derive(Debug)]
pub struct PeerTable {
    index: HashMap<Ipv6Addr, u32, KeyedHash>,
    slots: Vec<Option<Peer>>,
    free: Vec<u32>,
    capacity: usize,
    hand: usize,
    idle: Duration,
    /// Entries per embedded IPv4 address, and their cap (a relay's table, whose keys
    /// are all Teredo addresses: one endpoint cannot fill it with addresses that
    /// differ only in their server field or random bits).
    per_address: Option<(usize, HashMap<Ipv4Addr, u32, KeyedHash>)>,
}

/// How many slots an insertion into a full table may look at for one to replace.
const EVICTION_PROBES: usize = 32;

impl PeerTable {
    /// A table of at most `capacity` peers; trusted peers silent for `idle` may be
    /// replaced or swept.
    pub fn new(capacity: usize, idle: Duration, keys: KeyedHash) -> PeerTable {
        PeerTable {
            index: HashMap::with_hasher(keys),
            slots: Vec::new(),
            free: Vec::new(),
            capacity: capacity.max(1),
            hand: 0,
            idle,
            per_address: None,
        }
    }

    /// The same table, keyed by Teredo addresses, holding at most `cap` entries that
    /// embed any one IPv4 address.
    pub fn with_address_cap(mut self, cap: usize) -> PeerTable {
        let keys = *self.index.hasher();
        self.per_address = Some((cap.max(1), HashMap::with_hasher(keys)));
        self
    }

    /// Entries that embed `ip` (0 without an address cap).
    pub fn entries_for(&self, ip: Ipv4Addr) -> usize {
        self.per_address.as_ref().and_then(|(_, m)| m.get(&ip)).map_or(0, |&n| n as usize)
    }

    /// Number of peers.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The cap.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The entry for `addr`.
    pub fn get(&self, addr: &Ipv6Addr) -> Option<&Peer> {
        let i = *self.index.get(addr)? as usize;
        self.slots[i].as_ref()
    }

    /// The entry for `addr`, to change it.
    pub fn get_mut(&mut self, addr: &Ipv6Addr) -> Option<&mut Peer> {
        let i = *self.index.get(addr)? as usize;
        self.slots[i].as_mut()
    }

    /// Where to send to `addr` right now: its mapping if the entry is trusted and
    /// valid (and then the transmission is recorded), else `None`.
    pub fn send_to(&mut self, addr: &Ipv6Addr, now: Duration) -> Option<SocketAddrV4> {
        let p = self.get_mut(addr)?;
        if !p.is_valid(now) {
            return None;
        }
        p.last_tx = now;
        Some(p.mapped)
    }

    /// `addr` leaves the waiting list to make room: if it is waiting, a trusted entry
    /// stops waiting and drops its queue, an untrusted one is removed. Returns the
    /// packets lost, or `None` if it was not waiting (answered or gone since).
    pub fn give_way(&mut self, addr: &Ipv6Addr) -> Option<usize> {
        let p = self.get_mut(addr).filter(|p| p.waiting)?;
        let lost = p.queue.len();
        if p.trusted {
            p.waiting = false;
            p.queue = PacketQueue::default();
        } else {
            self.remove(addr);
        }
        Some(lost)
    }

    /// Bytes held in every entry's queue (a walk over the table: for status and tests).
    pub fn queued_bytes(&self) -> usize {
        self.slots.iter().flatten().map(|p| p.queue.bytes()).sum()
    }

    /// Remove `addr`'s entry.
    pub fn remove(&mut self, addr: &Ipv6Addr) -> Option<Peer> {
        let i = self.index.remove(addr)?;
        self.free.push(i);
        if let Some((_, counts)) = self.per_address.as_mut() {
            let ip = embedded_ipv4(addr);
            if let Some(n) = counts.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&ip);
                }
            }
        }
        self.slots[i as usize].take()
    }

    /// Insert `peer` (replacing any entry for the same address). When the table is
    /// full, the least recently heard of the entries a bounded search looks at that
    /// are not in active use ([`Peer::in_use`]) gives up its place; if all are in
    /// use the newcomer is refused and the table is unchanged. With an address cap, a
    /// newcomer whose embedded IPv4 address has its share already is refused too.
    pub fn insert(&mut self, peer: Peer, now: Duration) -> Result<&mut Peer, TableFull> {
        if let Some(&i) = self.index.get(&peer.addr) {
            let slot = &mut self.slots[i as usize];
            *slot = Some(peer);
            return Ok(slot.as_mut().expect("just set"));
        }
        let ip = embedded_ipv4(&peer.addr);
        if let Some((cap, counts)) = &self.per_address {
            if counts.get(&ip).is_some_and(|&n| n as usize >= *cap) {
                return Err(TableFull::AddressFull);
            }
        }
        if self.index.len() >= self.capacity {
            let n = self.slots.len();
            // Sampled LRU: of the probed entries not in use, the one heard from longest ago.
            let victim = (0..EVICTION_PROBES.min(n))
                .filter_map(|k| {
                    let i = (self.hand + k) % n;
                    let p = self.slots[i].as_ref()?;
                    (!p.in_use(now)).then_some((p.last_rx, p.addr))
                })
                .min();
            let (_, addr) = victim.ok_or(TableFull::Full)?;
            self.hand = (self.hand + EVICTION_PROBES.min(n)) % n;
            self.remove(&addr);
        }
        if let Some((_, counts)) = self.per_address.as_mut() {
            *counts.entry(ip).or_insert(0) += 1;
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(peer.addr, i);
        let slot = &mut self.slots[i as usize];
        *slot = Some(peer);
        Ok(slot.as_mut().expect("just set"))
    }

    /// Remove idle entries, looking at no more than `budget` slots from where the last
    /// sweep stopped (so a tick costs the same with ten peers or ten million).
    pub fn sweep(&mut self, now: Duration, budget: usize) -> usize {
        let n = self.slots.len();
        if n == 0 {
            return 0;
        }
        let mut removed = 0;
        for _ in 0..budget.min(n) {
            let i = self.hand % n;
            self.hand = (i + 1) % n;
            let idle = match &self.slots[i] {
                Some(p) => now.saturating_sub(p.last_rx) >= self.idle && p.queue.is_empty(),
                None => false,
            };
            if idle {
                let addr = self.slots[i].as_ref().map(|p| p.addr).expect("checked");
                self.remove(&addr);
                removed += 1;
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u32) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0, 0, (i >> 16) as u16, i as u16)
    }
    const M: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(192, 0, 2, 45), 40000);
    const KEYS: KeyedHash = KeyedHash { k0: 1, k1: 2 };

    #[test]
    fn queue_is_bounded_and_ordered() {
        let mut q = PacketQueue::default();
        assert!(q.push(&[1; 600], 1280));
        assert!(q.push(&[2; 600], 1280));
        assert!(!q.push(&[3; 600], 1280), "third packet exceeds the cap");
        assert_eq!((q.len(), q.bytes()), (2, 1200));
        assert_eq!(q.first().unwrap()[0], 1);
        let mut d = q.drain();
        assert_eq!(d.next_packet().unwrap()[0], 1);
        assert_eq!(d.next_packet().unwrap()[0], 2);
        assert!(d.next_packet().is_none());
        assert!(q.is_empty());
    }

    #[test]
    fn flood_of_newcomers_cannot_evict_established_peers() {
        let now = Duration::from_secs(100);
        let mut t = PeerTable::new(100, Duration::from_secs(300), KEYS);
        for i in 0..50 {
            let mut p = Peer::new(addr(i), M, now);
            p.trusted = true;
            p.last_rx = now;
            t.insert(p, now).unwrap();
        }
        for i in 1000..100_000 {
            let _ = t.insert(Peer::new(addr(i), M, now), now);
        }
        assert_eq!(t.len(), 100, "capped");
        for i in 0..50 {
            assert!(t.get(&addr(i)).is_some_and(|p| p.trusted), "established peer {i} survived");
        }
    }

    #[test]
    fn a_full_table_of_busy_peers_refuses_newcomers() {
        let now = Duration::from_secs(10);
        let mut t = PeerTable::new(8, Duration::from_secs(300), KEYS);
        for i in 0..8 {
            let mut p = Peer::new(addr(i), M, now);
            p.trusted = true;
            p.last_rx = now;
            t.insert(p, now).unwrap();
        }
        assert_eq!(t.insert(Peer::new(addr(99), M, now), now).unwrap_err(), TableFull::Full);
        // Once they fall idle, newcomers may take their place.
        let later = now + Duration::from_secs(301);
        assert!(t.insert(Peer::new(addr(99), M, later), later).is_ok());
        assert_eq!(t.len(), 8);
    }

    #[test]
    fn a_full_table_gives_the_least_recently_heard_idle_place_and_never_one_in_use() {
        let now = Duration::from_secs(1000);
        let mut t = PeerTable::new(16, Duration::from_secs(300), KEYS);
        // Trusted peers heard from 40 s to 55 s ago (idle, not valid) and one waiting.
        for i in 0..15 {
            let mut p = Peer::new(addr(i), M, now);
            p.trusted = true;
            p.last_rx = now - Duration::from_secs(40 + u64::from(i));
            t.insert(p, now).unwrap();
        }
        let mut waiting = Peer::new(addr(15), M, now);
        waiting.waiting = true;
        waiting.last_rx = Duration::ZERO;
        t.insert(waiting, now).unwrap();
        // Each newcomer takes the place of the one heard from longest ago, never the
        // waiting one, however old.
        for k in 0..15u32 {
            t.insert(Peer::new(addr(100 + k), M, now), now).unwrap();
            assert!(t.get(&addr(14 - k)).is_none(), "newcomer {k} replaced peer {}", 14 - k);
            assert!(t.get(&addr(15)).is_some(), "the waiting peer stays");
        }
        // Now every entry is a newcomer (not in use) or waiting: a valid peer arrives and
        // stays when more newcomers push in.
        let mut busy = Peer::new(addr(500), M, now);
        busy.trusted = true;
        busy.last_rx = now;
        t.insert(busy, now).unwrap();
        for k in 0..100u32 {
            t.insert(Peer::new(addr(1000 + k), M, now), now).unwrap();
        }
        assert!(t.get(&addr(500)).is_some() && t.get(&addr(15)).is_some());
        assert_eq!(t.len(), 16);
    }

    #[test]
    fn one_embedded_address_gets_its_share_and_no_more() {
        let now = Duration::from_secs(10);
        let mut t = PeerTable::new(1000, Duration::from_secs(300), KEYS).with_address_cap(4);
        // Teredo addresses that embed the same IPv4 address and differ in the server field.
        let behind = |server: u16| Ipv6Addr::new(0x2001, 0, 0x4136, server, 0, 0xf227, 0x39cc, 0x9bf8);
        let ip = embedded_ipv4(&behind(0));
        assert_eq!(ip, Ipv4Addr::new(198, 51, 100, 7));
        for s in 0..4 {
            t.insert(Peer::new(behind(s), M, now), now).unwrap();
        }
        assert_eq!(t.insert(Peer::new(behind(4), M, now), now).unwrap_err(), TableFull::AddressFull);
        assert_eq!(t.entries_for(ip), 4);
        // Another address is not held back, and a freed entry makes room again.
        assert!(t.insert(Peer::new(addr(1), M, now), now).is_ok());
        t.remove(&behind(0));
        assert_eq!(t.entries_for(ip), 3);
        assert!(t.insert(Peer::new(behind(4), M, now), now).is_ok());
        // Replacing an entry for the same address does not count twice.
        assert!(t.insert(Peer::new(behind(4), M, now), now).is_ok());
        assert_eq!(t.entries_for(ip), 4);
    }

    #[test]
    fn sweep_removes_idle_entries_a_bounded_step_at_a_time() {
        let now = Duration::from_secs(10);
        let mut t = PeerTable::new(1000, Duration::from_secs(60), KEYS);
        for i in 0..1000 {
            t.insert(Peer::new(addr(i), M, now), now).unwrap();
        }
        let later = now + Duration::from_secs(61);
        assert_eq!(t.sweep(later, 100), 100);
        assert_eq!(t.len(), 900);
        while t.sweep(later, 100) > 0 {}
        assert!(t.is_empty());
        // Removed slots are reused.
        t.insert(Peer::new(addr(5), M, later), later).unwrap();
        assert_eq!(t.slots.len(), 1000);
    }

    #[test]
    fn new_entries_start_thirty_seconds_in_the_past() {
        let now = Duration::from_secs(100);
        let p = Peer::new(addr(1), M, now);
        assert_eq!(p.last_tx, Duration::from_secs(70));
        assert!(!p.is_valid(now));
    }
}
