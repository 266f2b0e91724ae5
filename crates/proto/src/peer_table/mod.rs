//! The peer list of RFC 4380 §5.2 / §5.4, shared by relays and clients: one entry per
//! IPv6 peer, with its mapping, trust, timers, bubble budget and a bounded queue.
//!
//! Built for millions of entries and for floods. Each entry's hot part is one 64-byte
//! cache line (`entry`) stored in place in an open-addressing table (Robin Hood
//! linear probing, so a look-up reads one line, or its neighbours, and a miss stops
//! early); the slot is chosen by SipHash-1-3 under secret keys, since addresses are
//! chosen by attackers. The table doubles as it fills, up to what its cap needs, so its
//! memory follows its use (64 bytes an entry over a load of 2/5 to 4/5). The
//! total is capped, and when full a new entry may only take the place of an idle one,
//! never of a peer in use — a flood of new peers cannot push established ones out.
//! Nothing here allocates per packet except a waiting peer's queue, which is bounded.

mod address_counts;
mod entry;
mod lines;
mod queue;

pub use entry::{Peer, PeerMut, PeerRef, VALIDITY};
pub use queue::{PacketQueue, QueueDrain};

use address_counts::AddressCounts;
use bytemuck::Zeroable;
use entry::{Cold, ColdSlab, Slot};
use lines::Lines;
use siphasher::sip::SipHasher13;
use std::hash::BuildHasher;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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

impl KeyedHash {
    /// `addr` with its hash under these keys.
    pub fn key(&self, addr: &Ipv6Addr) -> Key {
        Key { addr: *addr, hash: self.hash_one(u128::from(*addr)) }
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = SipHasher13;
    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.k0, self.k1)
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
    /// The hot lines, one slot per entry, at most [`MAX_LOAD`] of them taken.
    slots: Lines,
    cold: ColdSlab,
    keys: KeyedHash,
    len: usize,
    capacity: usize,
    hand: usize,
    idle: Duration,
    /// Entries per embedded IPv4 address, and their cap (a relay's table, whose keys
    /// are all Teredo addresses: one endpoint cannot fill it with addresses that
    /// differ only in their server field or random bits).
    per_address: Option<AddressCounts>,
    /// Trusted entries removed since the owner last took the list (kept only for an
    /// owner that mirrors its trusted peers into a kernel data path).
    removed_trusted: Option<Vec<Ipv6Addr>>,
}

/// How many slots an insertion into a full table may look at for one to replace.
const EVICTION_PROBES: usize = 32;

/// The most of its slots a table fills, as a fraction (numerator, denominator):
/// Robin Hood probing keeps look-ups to a line or two at this load.
const MAX_LOAD: (usize, usize) = (4, 5);

/// Slots a sweep may pass for each entry it may look at.
const SWEEP_SLOTS_PER_ENTRY: usize = 8;

/// Lines fetched ahead for a key: its home and what follows, where Robin Hood probing
/// at 4/5 load often finds it.
const PREFETCH_LINES: usize = 2;

/// Slots a new table starts with (it doubles as it fills).
const FIRST_SLOTS: usize = 1024;

/// Slots a table of `capacity` entries has when full.
fn slots_for(capacity: usize) -> usize {
    capacity * MAX_LOAD.1 / MAX_LOAD.0 + 1
}

/// The most entries one table holds (slot indices are reduced from 32 hash bits).
pub const MAX_CAPACITY: usize = 1 << 31;

/// A peer's address with its hash under the table's keys: computed once, used to pick
/// a shard, prefetch the line and find the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The address.
    pub addr: Ipv6Addr,
    /// Its keyed hash: the low 32 bits choose the slot, the high 32 bits are free for
    /// the caller (a relay picks the shard with them).
    pub hash: u64,
}

/// The slot a hash chooses among `slots`: Lemire's multiply-shift over the hash's low
/// 32 bits, uniform without a division.
fn home(hash: u64, slots: usize) -> usize {
    (((hash & 0xffff_ffff) * slots as u64) >> 32) as usize
}

/// Where a table's lines are, to fetch them ahead from another thread or before its
/// lock is taken. It reads nothing: a prefetch of a line that changed or went away
/// since costs a wasted fetch, never a wrong answer.
#[derive(Debug, Clone, Copy)]
pub struct Prefetcher {
    base: usize,
    slots: usize,
}

impl Prefetcher {
    /// Start fetching the line `key` hashes to.
    pub fn prefetch(&self, key: &Key) {
        let at = self.base + home(key.hash, self.slots) * std::mem::size_of::<Slot>();
        for k in 0..PREFETCH_LINES {
            prefetch_line(at + k * std::mem::size_of::<Slot>());
        }
    }
}

/// A [`Prefetcher`] other threads read while its table's owner renews it (after an
/// insertion, which may have grown the table). A read between the two halves of a
/// renewal may fetch a wrong line: a wasted fetch, nothing else.
#[derive(Debug, Default)]
pub struct SharedPrefetcher {
    base: AtomicUsize,
    slots: AtomicUsize,
}

impl SharedPrefetcher {
    /// Point at `p`'s table.
    pub fn set(&self, p: Prefetcher) {
        self.base.store(p.base, Ordering::Relaxed);
        self.slots.store(p.slots, Ordering::Relaxed);
    }

    /// Start fetching the line `key` hashes to.
    pub fn prefetch(&self, key: &Key) {
        let p = Prefetcher { base: self.base.load(Ordering::Relaxed), slots: self.slots.load(Ordering::Relaxed) };
        p.prefetch(key);
    }
}

/// The one unsafe call in this crate: a prefetch instruction. It is a hint that cannot
/// fault and whose read no code observes, so any address is sound; on targets without
/// a stable prefetch intrinsic it does nothing.
#[allow(unsafe_code)]
fn prefetch_line(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults and has no architectural effect; SSE, which it
    // belongs to, is in every x86-64 target's baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// An entry taken out of the table.
#[derive(Debug)]
pub struct Removed {
    /// Its state.
    pub peer: Peer,
    /// Its queued packets.
    pub queue: PacketQueue,
}

impl PeerTable {
    /// A table of at most `capacity` peers; trusted peers silent for `idle` may be
    /// replaced or swept.
    pub fn new(capacity: usize, idle: Duration, keys: KeyedHash) -> PeerTable {
        let capacity = capacity.clamp(1, MAX_CAPACITY);
        let slots = slots_for(capacity).min(FIRST_SLOTS);
        PeerTable {
            slots: Lines::zeroed(slots),
            cold: ColdSlab::default(),
            keys,
            len: 0,
            capacity,
            hand: 0,
            idle,
            per_address: None,
            removed_trusted: None,
        }
    }

    /// The same table, listing the trusted entries it removes (for
    /// [`take_removed_trusted`](Self::take_removed_trusted)): its owner mirrors them.
    pub fn mirrored(mut self) -> PeerTable {
        self.removed_trusted = Some(Vec::new());
        self
    }

    /// Trusted entries were removed since the last take.
    pub fn has_removed_trusted(&self) -> bool {
        self.removed_trusted.as_ref().is_some_and(|r| !r.is_empty())
    }

    /// The trusted entries removed since the last call (always empty for a table that
    /// is not [`mirrored`](Self::mirrored)).
    pub fn take_removed_trusted(&mut self) -> Vec<Ipv6Addr> {
        self.removed_trusted.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The same table, keyed by Teredo addresses, holding at most `cap` entries that
    /// embed any one IPv4 address.
    pub fn with_address_cap(mut self, cap: usize) -> PeerTable {
        self.per_address = Some(AddressCounts::new(self.capacity, cap, self.keys));
        self
    }

    /// Entries that embed `ip` (0 without an address cap).
    pub fn entries_for(&self, ip: Ipv4Addr) -> usize {
        self.per_address.as_ref().map_or(0, |c| c.get(ip) as usize)
    }

    /// Number of peers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The cap.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of one entry's hot line.
    pub fn entry_bytes(&self) -> usize {
        std::mem::size_of::<Slot>()
    }

    /// Bytes the table's slots take.
    pub fn reserved_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }

    /// `addr` with its hash under this table's keys.
    pub fn key(&self, addr: &Ipv6Addr) -> Key {
        self.keys.key(addr)
    }

    fn home(&self, hash: u64) -> usize {
        home(hash, self.slots.len())
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// Bring the line `key` hashes to towards the cache, so that a look-up a few
    /// packets later does not wait for memory (a batch's keys are hashed and fetched
    /// first, then looked up).
    pub fn prefetch(&self, key: &Key) {
        self.prefetcher().prefetch(key);
    }

    /// What fetching ahead needs of this table, to use without holding it: valid until
    /// the table grows (a stale one fetches the wrong line, which costs a fetch, no more).
    pub fn prefetcher(&self) -> Prefetcher {
        Prefetcher { base: self.slots.as_ptr() as usize, slots: self.slots.len() }
    }

    fn find(&self, key: &Key) -> Option<usize> {
        let want = key.addr.octets();
        let slots: &[Slot] = &self.slots;
        let mut i = self.home(key.hash);
        let mut d = 0u16;
        loop {
            let s = slots.get(i)?;
            // Robin Hood order: past an entry nearer its home than we are to ours, ours
            // cannot be.
            if s.is_empty() || s.dist < d {
                return None;
            }
            if s.addr == want {
                return Some(i);
            }
            i = if i + 1 == slots.len() { 0 } else { i + 1 };
            d = d.checked_add(1)?;
        }
    }

    /// The entry for `addr`.
    pub fn get(&self, addr: &Ipv6Addr) -> Option<PeerRef<'_>> {
        self.get_keyed(&self.key(addr))
    }

    /// The entry for `key`, whose hash is already known.
    pub fn get_keyed(&self, key: &Key) -> Option<PeerRef<'_>> {
        let i = self.find(key)?;
        Some(PeerRef::new(&self.slots[i], &self.cold))
    }

    /// The entry for `addr`, to change it.
    pub fn get_mut(&mut self, addr: &Ipv6Addr) -> Option<PeerMut<'_>> {
        self.get_mut_keyed(&self.key(addr))
    }

    /// The entry for `key`, whose hash is already known, to change it.
    pub fn get_mut_keyed(&mut self, key: &Key) -> Option<PeerMut<'_>> {
        let i = self.find(key)?;
        Some(PeerMut::new(&mut self.slots[i], &mut self.cold))
    }

    /// Where to send to `key` right now: its mapping if the entry is trusted and
    /// valid (and then the transmission is recorded), else `None` — also while what is
    /// queued for it is held back ([`Peer::holding`], a client's): what follows waits
    /// behind it.
    pub fn send_to(&mut self, key: &Key, now: Duration) -> Option<SocketAddrV4> {
        let mut p = self.get_mut_keyed(key)?;
        if !p.is_valid(now) || p.holding {
            return None;
        }
        p.last_tx = now;
        Some(p.mapped)
    }

    /// Where to send to `key` right now, as [`PeerTable::send_to`], for a sender that
    /// watches for silence: the transmission is recorded only when it is the first since
    /// the peer last spoke, and the answer also says for how long that first one has gone
    /// unanswered (zero for the first itself).
    pub fn send_to_watching(&mut self, key: &Key, now: Duration) -> Option<(SocketAddrV4, Duration)> {
        let mut p = self.get_mut_keyed(key)?;
        if !p.is_valid(now) {
            return None;
        }
        if p.last_tx <= p.last_rx {
            p.last_tx = now;
        }
        Some((p.mapped, now.saturating_sub(p.last_tx)))
    }

    /// `addr` leaves the waiting list to make room: if it is waiting, a trusted entry
    /// stops waiting and drops its queue, an untrusted one is removed. Returns the
    /// packets lost, or `None` if it was not waiting (answered or gone since).
    pub fn give_way(&mut self, addr: &Ipv6Addr) -> Option<usize> {
        let key = self.key(addr);
        let i = self.find(&key).filter(|&i| self.slots[i].decode().waiting)?;
        let mut p = PeerMut::new(&mut self.slots[i], &mut self.cold);
        let lost = p.queue().len();
        drop(p.take_queue());
        if p.trusted {
            p.waiting = false;
            p.proving = false;
        } else {
            drop(p);
            self.remove_at(i);
        }
        Some(lost)
    }

    /// Bytes held in every entry's queue (a walk over the queues: for status and tests).
    pub fn queued_bytes(&self) -> usize {
        self.cold.queued_bytes()
    }

    /// Entries holding cold state (a queue or a test nonce).
    pub fn cold_entries(&self) -> usize {
        self.cold.len()
    }

    /// Remove `addr`'s entry.
    pub fn remove(&mut self, addr: &Ipv6Addr) -> Option<Removed> {
        let i = self.find(&self.key(addr))?;
        Some(self.remove_at(i))
    }

    /// Empty slot `i` and close the gap: the entries after it that sit away from their
    /// home move back one (backward-shift deletion: no tombstones, probes stay short).
    fn remove_at(&mut self, i: usize) -> Removed {
        let slot = self.slots[i];
        let (mut gap, mut j) = (i, self.next(i));
        while !self.slots[j].is_empty() && self.slots[j].dist > 0 {
            self.slots[gap] = self.slots[j];
            self.slots[gap].dist -= 1;
            gap = j;
            j = self.next(j);
        }
        self.slots[gap] = Slot::zeroed();
        self.forget(slot)
    }

    /// Insert `peer` (replacing any entry for the same address, its queue too). When
    /// the table is full, the least recently heard of the entries a bounded search
    /// looks at that are not in active use (valid, waiting or holding packets) gives up
    /// its place; if all are in use the newcomer is refused and the table is
    /// unchanged. With an address cap, a newcomer whose embedded IPv4 address has its
    /// share already is refused too. The unspecified address is no peer's: refused.
    ///
    /// A [`mirrored`](Self::mirrored) table's trusted peers may be heard by the kernel
    /// without the table knowing: its owner asks the kernel about
    /// [`eviction_candidates`](Self::eviction_candidates) first, and brings their times
    /// up to date, so that one heard within [`VALIDITY`] keeps its place.
    pub fn insert(&mut self, peer: Peer, now: Duration) -> Result<PeerMut<'_>, TableFull> {
        if peer.addr.is_unspecified() {
            return Err(TableFull::Full);
        }
        let key = self.key(&peer.addr);
        if let Some(i) = self.find(&key) {
            if let Some(removed) = self.removed_trusted.as_mut().filter(|_| self.slots[i].trusted() && !peer.trusted) {
                removed.push(peer.addr);
            }
            let (dist, mut slot) = (self.slots[i].dist, Slot::holding(&peer));
            drop(self.cold.release(&mut self.slots[i]));
            slot.dist = dist;
            self.slots[i] = slot;
            return Ok(PeerMut::new(&mut self.slots[i], &mut self.cold));
        }
        let ip = embedded_ipv4(&peer.addr);
        if self.per_address.as_ref().is_some_and(|c| c.full(ip)) {
            return Err(TableFull::AddressFull);
        }
        if self.len >= self.capacity {
            let n = self.slots.len();
            let probes = EVICTION_PROBES.min(n);
            // Sampled LRU: of the probed entries not in use, the one heard from longest ago.
            let victim = (0..probes)
                .map(|k| (self.hand + k) % n)
                .filter(|&i| !self.slots[i].is_empty() && !self.slots[i].in_use(now))
                .min_by_key(|&i| self.slots[i].last_rx())
                .ok_or(TableFull::Full)?;
            self.hand = (self.hand + probes) % n;
            self.remove_at(victim);
        }
        if let Some(counts) = self.per_address.as_mut() {
            counts.add(ip);
        }
        if (self.len + 1) * MAX_LOAD.1 > self.slots.len() * MAX_LOAD.0 {
            self.grow();
        }
        self.len += 1;
        let at = self.place(key.hash, Slot::holding(&peer)).ok_or(TableFull::Full)?;
        Ok(PeerMut::new(&mut self.slots[at], &mut self.cold))
    }

    /// The trusted entries the insertion of `newcomer` into a full table would look at
    /// that seem out of use: in a [`mirrored`](Self::mirrored) table, those the kernel
    /// may have heard from since the table did (none while the table has room, nor for
    /// a newcomer its address's share refuses).
    pub fn eviction_candidates(&self, now: Duration, newcomer: &Ipv6Addr) -> impl Iterator<Item = Ipv6Addr> + '_ {
        let n = self.slots.len();
        let refused = self.per_address.as_ref().is_some_and(|c| c.full(embedded_ipv4(newcomer)));
        let evicts = self.removed_trusted.is_some() && self.len >= self.capacity && !refused;
        let probes = if evicts { EVICTION_PROBES.min(n) } else { 0 };
        (0..probes)
            .map(move |k| &self.slots[(self.hand + k) % n])
            .filter(move |s| !s.is_empty() && s.trusted() && !s.in_use(now))
            .map(|s| Ipv6Addr::from(s.addr))
    }

    /// Remove `addr`'s entry if the sweep would: silent for the table's idle time and
    /// holding no packets. True if it went.
    pub fn remove_if_idle(&mut self, addr: &Ipv6Addr, now: Duration) -> bool {
        let key = self.key(addr);
        let Some(i) = self.find(&key) else { return false };
        let s = &self.slots[i];
        if now.saturating_sub(s.last_rx()) < self.idle || s.queued() {
            return false;
        }
        self.remove_at(i);
        true
    }

    /// Forget an entry no slot holds any more (its count and cold state go too).
    fn forget(&mut self, mut slot: Slot) -> Removed {
        let Cold { queue, .. } = self.cold.release(&mut slot);
        let peer = slot.decode();
        if let Some(counts) = self.per_address.as_mut() {
            counts.remove(embedded_ipv4(&peer.addr));
        }
        if let Some(removed) = self.removed_trusted.as_mut().filter(|_| peer.trusted) {
            removed.push(peer.addr);
        }
        self.len -= 1;
        Removed { peer, queue }
    }

    /// Twice the slots (or those the cap needs, if fewer), every entry placed anew.
    /// The one pause in a table's life that grows with it, and it comes once per
    /// doubling; the table stays at least 2/5 full, so its memory stays near its use.
    fn grow(&mut self) {
        let n = (self.slots.len() * 2).min(slots_for(self.capacity));
        if n <= self.slots.len() {
            return;
        }
        let old = std::mem::replace(&mut self.slots, Lines::zeroed(n));
        for s in old.iter().filter(|s| !s.is_empty()) {
            let mut s = *s;
            s.dist = 0;
            let hash = self.key(&Ipv6Addr::from(s.addr)).hash;
            self.place(hash, s);
        }
        self.hand = 0;
    }

    /// Robin Hood insertion of a new entry: walking from its home, it takes the place of
    /// the first entry nearer its own home than the newcomer is, which walks on in turn.
    /// Returns where the new entry landed (the entries it displaced land further on).
    fn place(&mut self, hash: u64, mut carried: Slot) -> Option<usize> {
        let mut i = self.home(hash);
        let mut landed = None;
        loop {
            let s = &mut self.slots[i];
            if s.is_empty() {
                *s = carried;
                return Some(landed.unwrap_or(i));
            }
            if s.dist < carried.dist {
                std::mem::swap(s, &mut carried);
                landed.get_or_insert(i);
            }
            // Below MAX_LOAD a run this long does not happen; should it, the carried
            // entry is forgotten rather than the order broken.
            let Some(d) = carried.dist.checked_add(1) else {
                self.forget(carried);
                return landed;
            };
            carried.dist = d;
            i = self.next(i);
        }
    }

    /// Remove idle entries, looking at no more than `budget` entries (and eight times
    /// as many slots, empty ones being cheap to pass) from where the last sweep stopped,
    /// so a tick costs the same with ten peers or ten million. In a
    /// [`mirrored`](Self::mirrored) table an idle trusted entry is not removed but
    /// handed to `ask`: the kernel may have heard from it since the table did, and the
    /// answer decides ([`remove_if_idle`](Self::remove_if_idle) once its time is read
    /// back).
    pub fn sweep(&mut self, now: Duration, budget: usize, ask: &mut dyn FnMut(Ipv6Addr)) -> usize {
        let (mut removed, mut seen) = (0, 0);
        for _ in 0..budget.saturating_mul(SWEEP_SLOTS_PER_ENTRY).min(self.slots.len()) {
            if seen == budget {
                break;
            }
            let i = self.hand;
            let s = &self.slots[i];
            if s.is_empty() {
                self.hand = self.next(i);
                continue;
            }
            seen += 1;
            let idle_for = self.idle;
            let idle = |t: Duration| now.saturating_sub(t) >= idle_for;
            let (addr, last, queued) = (s.addr, s.last_rx(), s.queued());
            if idle(last) && !queued && s.trusted() && self.removed_trusted.is_some() {
                // The kernel may have heard from it since the state machine did.
                ask(Ipv6Addr::from(addr));
                self.hand = self.next(i);
            } else if idle(last) && !queued {
                // The gap closes with the entry after it, which is looked at next.
                self.remove_at(i);
                removed += 1;
            } else {
                self.hand = self.next(i);
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap as Model;

    fn addr(i: u32) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0, 0, (i >> 16) as u16, i as u16)
    }
    const M: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(192, 0, 2, 45), 40000);
    const KEYS: KeyedHash = KeyedHash { k0: 1, k1: 2 };

    fn trusted(i: u32, heard: Duration) -> Peer {
        let mut p = Peer::new(addr(i), M, heard);
        p.trusted = true;
        p.last_rx = heard;
        p
    }

    #[test]
    fn the_table_agrees_with_a_map_through_inserts_and_removals() {
        // Small tables wrap around and form long runs: every entry stays findable, and
        // removed ones stay gone, whatever order they came and went in.
        let now = Duration::from_secs(1);
        for cap in [1usize, 2, 7, 64, 1000] {
            let mut t = PeerTable::new(cap, Duration::from_secs(300), KEYS);
            let mut model = Model::new();
            let mut x = 12345u32;
            for step in 0..20_000u32 {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                let i = (x >> 8) % (cap as u32 * 2);
                if x & 1 == 0 && model.len() < cap {
                    let mut p = trusted(i, now);
                    p.tries = (step % 5) as u8;
                    t.insert(p, now).unwrap();
                    model.insert(i, p.tries);
                } else {
                    assert_eq!(t.remove(&addr(i)).map(|r| r.peer.tries), model.remove(&i));
                }
                assert_eq!(t.len(), model.len());
            }
            for i in 0..cap as u32 * 2 {
                assert_eq!(t.get(&addr(i)).map(|p| p.tries), model.get(&i).copied(), "cap {cap}, peer {i}");
            }
        }
    }

    #[test]
    fn changes_through_an_entry_land_in_the_table() {
        let now = Duration::from_secs(5);
        let mut t = PeerTable::new(10, Duration::from_secs(300), KEYS);
        t.insert(Peer::new(addr(1), M, now), now).unwrap();
        {
            let mut p = t.get_mut(&addr(1)).unwrap();
            p.trusted = true;
            p.last_rx = now;
            assert!(p.queue_mut().push(&[1, 2, 3], 100));
            p.set_nonce(Some([9; 8]));
        }
        let p = t.get(&addr(1)).unwrap();
        assert!(p.is_valid(now));
        assert_eq!((p.queue().len(), p.nonce()), (1, Some([9; 8])));
        assert_eq!((t.queued_bytes(), t.cold_entries()), (3, 1));
        // Cold state that holds nothing any more is given back.
        {
            let mut p = t.get_mut(&addr(1)).unwrap();
            assert!(p.take_queue().is_some());
            p.set_nonce(None);
        }
        assert_eq!((t.queued_bytes(), t.cold_entries()), (0, 0));
        // A replaced entry starts afresh, queue and all.
        t.get_mut(&addr(1)).unwrap().queue_mut().push(&[1], 100);
        t.insert(Peer::new(addr(1), M, now), now).unwrap();
        assert!(t.get(&addr(1)).unwrap().queue().is_empty());
        assert_eq!((t.len(), t.cold_entries()), (1, 0));
        assert!(t.insert(Peer::new(Ipv6Addr::UNSPECIFIED, M, now), now).is_err());
    }

    #[test]
    fn flood_of_newcomers_cannot_evict_established_peers() {
        let now = Duration::from_secs(100);
        let mut t = PeerTable::new(100, Duration::from_secs(300), KEYS);
        for i in 0..50 {
            t.insert(trusted(i, now), now).unwrap();
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
            t.insert(trusted(i, now), now).unwrap();
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
        // Trusted peers heard from 40 s to 53 s ago (idle, not valid), one waiting, one
        // holding packets.
        for i in 0..14 {
            t.insert(trusted(i, now - Duration::from_secs(40 + u64::from(i))), now).unwrap();
        }
        let mut waiting = Peer::new(addr(14), M, now);
        waiting.waiting = true;
        waiting.last_rx = Duration::ZERO;
        t.insert(waiting, now).unwrap();
        let mut queued = Peer::new(addr(15), M, now);
        queued.last_rx = Duration::ZERO;
        t.insert(queued, now).unwrap().queue_mut().push(&[0; 40], 100);
        // Each newcomer takes the place of the one heard from longest ago, never the
        // waiting or queueing one, however old.
        for k in 0..14u32 {
            t.insert(Peer::new(addr(100 + k), M, now), now).unwrap();
            assert!(t.get(&addr(13 - k)).is_none(), "newcomer {k} replaced peer {}", 13 - k);
            assert!(t.get(&addr(14)).is_some() && t.get(&addr(15)).is_some(), "the peers in use stay");
        }
        // Now every entry is a newcomer (not in use) or in use: a valid peer arrives and
        // stays when more newcomers push in.
        t.insert(trusted(500, now), now).unwrap();
        for k in 0..100u32 {
            t.insert(Peer::new(addr(1000 + k), M, now), now).unwrap();
        }
        assert!([500, 14, 15].iter().all(|&i| t.get(&addr(i)).is_some()));
        assert_eq!(t.get(&addr(15)).unwrap().queue().bytes(), 40, "its packets too");
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
        t.get_mut(&addr(7)).unwrap().queue_mut().push(&[1], 10);
        let later = now + Duration::from_secs(61);
        assert!(t.sweep(later, 100, &mut |_| ()) <= 100);
        let mut rounds = 1;
        while t.sweep(later, 100, &mut |_| ()) > 0 {
            rounds += 1;
        }
        assert!(rounds >= 10, "{rounds} sweeps of 100 for 1000 entries");
        assert_eq!(t.len(), 1, "all gone but the one holding packets");
        assert!(t.get(&addr(7)).is_some());
        t.insert(Peer::new(addr(5), M, later), later).unwrap();
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn the_table_grows_with_its_entries_and_stops_at_what_its_cap_needs() {
        let now = Duration::from_secs(1);
        let mut t = PeerTable::new(100_000, Duration::from_secs(60), KEYS);
        assert_eq!(t.reserved_bytes(), 1024 * 64, "a new table is small");
        for i in 0..5000 {
            t.insert(trusted(i, now), now).unwrap();
        }
        // 5000 entries over at most 4/5 of a doubling of 1024 slots.
        assert_eq!(t.reserved_bytes(), 8192 * 64);
        assert!((0..5000).all(|i| t.get(&addr(i)).is_some()), "every entry found after growing");
        for i in 5000..100_000 {
            t.insert(trusted(i, now), now).unwrap();
        }
        assert_eq!(t.reserved_bytes(), (100_000 * 5 / 4 + 1) * 64, "full: just what the cap needs");
        assert_eq!(t.insert(trusted(100_000, now), now).unwrap_err(), TableFull::Full);
        assert!((0..100_000).all(|i| t.get(&addr(i)).is_some()));
    }
}
