//! One peer's state, as callers see it ([`Peer`]) and as the table stores it: a hot
//! entry of one 64-byte cache line ([`Slot`]) with everything a packet's look-up reads
//! or writes, and, outside it, the state few peers need at a time ([`Cold`]: a waiting
//! peer's queue, a native peer's connectivity-test nonce).
//!
//! Callers work on a decoded copy ([`PeerRef`], [`PeerMut`]); a `PeerMut` writes its
//! copy back when dropped, so every change lands in the line it came from.

use super::queue::{self, PacketQueue, QueueDrain};
use bytemuck::{Pod, Zeroable};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::num::NonZeroU32;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

/// RFC 4380 §5.2.4: an entry is valid while its last reception is this recent.
pub const VALIDITY: Duration = Duration::from_secs(30);

/// One peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The peer's IPv6 address (the key: changing it through a [`PeerMut`] changes
    /// nothing in the table).
    pub addr: Ipv6Addr,
    /// Where its packets come from and go to.
    pub mapped: SocketAddrV4,
    /// Trusted: its mapping was confirmed by a packet from it.
    pub trusted: bool,
    /// Last reception from the peer.
    pub last_rx: Duration,
    /// Last transmission to the peer (bubbles included).
    pub last_tx: Duration,
    /// Tries to reach the peer since it last spoke directly: bubbles to a Teredo peer,
    /// connectivity-test echoes to a native one.
    pub tries: u8,
    /// When the current 300-second bubble window started.
    pub bubble_window: Duration,
    /// Bubbles are out and unanswered: the owner's timer list holds this peer.
    pub waiting: bool,
    /// RFC 6081 §5.2.1 Nonce Sent: the Nonce trailer of our last indirect bubble to this
    /// peer, which its direct bubble must echo to be accepted from a port its address
    /// does not embed.
    pub nonce_sent: Option<NonZeroU32>,
    /// RFC 6081 §5.2.1 Nonce Received: the Nonce trailer of the peer's last indirect
    /// bubble, echoed in our direct ones (none, or the peer sent none).
    pub nonce_received: Option<NonZeroU32>,
    /// RFC 6081 §5.7.1: direct bubbles with a Neighbor Discovery solicitation sent
    /// since the peer last spoke (Server Load Reduction).
    pub solicitations: u8,
    /// The peer sent us an RFC 6081 trailer: it may answer a solicitation.
    pub knows_trailers: bool,
    /// What is queued for the peer waits although we trust it: it wrote to us from
    /// where it may not take our packets yet (a client, until it proves it does).
    pub holding: bool,
    /// A relay's wait that only its nonce may end: the client's own packet from a port
    /// it has not proved started it (a host behind the same address could answer a
    /// bubble in its name, not echo a nonce that went through the client's server).
    pub proving: bool,
    /// A relay's client whose port our nonce proved, elsewhere than the mapping its
    /// address embeds: kept there until it proves another (a nonce-less answer, which
    /// a host behind the same address could have sent, seals nothing).
    pub sealed: bool,
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
            tries: 0,
            bubble_window: now,
            waiting: false,
            nonce_sent: None,
            nonce_received: None,
            solicitations: 0,
            knows_trailers: false,
            holding: false,
            proving: false,
            sealed: false,
        }
    }

    /// Trusted and heard from within 30 s: packets may go straight to its mapping.
    pub fn is_valid(&self, now: Duration) -> bool {
        self.trusted && now.saturating_sub(self.last_rx) < VALIDITY
    }
}

const TRUSTED: u8 = 1;
const WAITING: u8 = 2;
const KNOWS_TRAILERS: u8 = 4;
/// The entry's queue holds packets (kept in the hot line so that eviction and the
/// sweep never read the cold state).
const QUEUED: u8 = 8;
const HOLDING: u8 = 16;
const PROVING: u8 = 32;
const SEALED: u8 = 64;

/// The stored form of a [`Peer`]: one cache line. All zeros is an empty slot (no peer
/// has the unspecified address as its key). Times are nanoseconds of the caller's clock,
/// exact for 584 years.
#[derive(Debug, Clone, Copy, Zeroable, Pod)]
#[repr(C, align(64))]
pub(super) struct Slot {
    pub(super) addr: [u8; 16],
    last_rx: u64,
    last_tx: u64,
    bubble_window: u64,
    nonce_sent: u32,
    nonce_received: u32,
    /// Index + 1 of the entry's cold state (0: none).
    pub(super) cold: u32,
    mapped_ip: [u8; 4],
    mapped_port: u16,
    /// How far the entry sits from the slot its hash chose (Robin Hood probing).
    pub(super) dist: u16,
    flags: u8,
    tries: u8,
    solicitations: u8,
    _spare: u8,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64);

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Slot {
    /// A slot holding `peer`, without cold state, at its home.
    pub(super) fn holding(peer: &Peer) -> Slot {
        let mut s = Slot::zeroed();
        s.addr = peer.addr.octets();
        s.encode(peer);
        s
    }

    pub(super) fn is_empty(&self) -> bool {
        self.addr == [0; 16]
    }

    /// Write `peer`'s fields (all but the key, the probe distance, the cold index and the
    /// queued flag, which belong to the table).
    fn encode(&mut self, p: &Peer) {
        self.last_rx = nanos(p.last_rx);
        self.last_tx = nanos(p.last_tx);
        self.bubble_window = nanos(p.bubble_window);
        // The slot keeps 0 for "none", as the Nonce trailer never carries it.
        self.nonce_sent = p.nonce_sent.map_or(0, NonZeroU32::get);
        self.nonce_received = p.nonce_received.map_or(0, NonZeroU32::get);
        self.mapped_ip = p.mapped.ip().octets();
        self.mapped_port = p.mapped.port();
        self.tries = p.tries;
        self.solicitations = p.solicitations;
        let bit = |on: bool, b: u8| if on { b } else { 0 };
        self.flags = (self.flags & QUEUED)
            | bit(p.trusted, TRUSTED)
            | bit(p.waiting, WAITING)
            | bit(p.knows_trailers, KNOWS_TRAILERS)
            | bit(p.holding, HOLDING)
            | bit(p.proving, PROVING)
            | bit(p.sealed, SEALED);
    }

    pub(super) fn decode(&self) -> Peer {
        Peer {
            addr: Ipv6Addr::from(self.addr),
            mapped: SocketAddrV4::new(Ipv4Addr::from(self.mapped_ip), self.mapped_port),
            trusted: self.flags & TRUSTED != 0,
            last_rx: Duration::from_nanos(self.last_rx),
            last_tx: Duration::from_nanos(self.last_tx),
            tries: self.tries,
            bubble_window: Duration::from_nanos(self.bubble_window),
            waiting: self.flags & WAITING != 0,
            nonce_sent: NonZeroU32::new(self.nonce_sent),
            nonce_received: NonZeroU32::new(self.nonce_received),
            solicitations: self.solicitations,
            knows_trailers: self.flags & KNOWS_TRAILERS != 0,
            holding: self.flags & HOLDING != 0,
            proving: self.flags & PROVING != 0,
            sealed: self.flags & SEALED != 0,
        }
    }

    pub(super) fn last_rx(&self) -> Duration {
        Duration::from_nanos(self.last_rx)
    }

    pub(super) fn trusted(&self) -> bool {
        self.flags & TRUSTED != 0
    }

    pub(super) fn queued(&self) -> bool {
        self.flags & QUEUED != 0
    }

    /// In active use: valid, waiting for an answer, or holding packets. Such an entry
    /// never gives its place to a newcomer.
    pub(super) fn in_use(&self, now: Duration) -> bool {
        let valid = self.flags & TRUSTED != 0 && now.saturating_sub(self.last_rx()) < VALIDITY;
        valid || self.flags & (WAITING | QUEUED) != 0
    }
}

/// What few entries need, kept out of the hot line.
#[derive(Debug, Default)]
pub(super) struct Cold {
    pub(super) queue: PacketQueue,
    nonce: Option<[u8; 8]>,
}

/// The cold states, reused through a free list.
#[derive(Debug, Default)]
pub(super) struct ColdSlab {
    items: Vec<Cold>,
    free: Vec<u32>,
}

impl ColdSlab {
    pub(super) fn get(&self, slot: &Slot) -> Option<&Cold> {
        self.items.get((slot.cold as usize).checked_sub(1)?)
    }

    fn get_or_add(&mut self, slot: &mut Slot) -> &mut Cold {
        if slot.cold == 0 {
            let i = match self.free.pop() {
                Some(i) => i,
                None => {
                    self.items.push(Cold::default());
                    (self.items.len() - 1) as u32
                }
            };
            slot.cold = i + 1;
        }
        &mut self.items[slot.cold as usize - 1]
    }

    /// Take `slot`'s cold state out (the slot keeps none).
    pub(super) fn release(&mut self, slot: &mut Slot) -> Cold {
        let Some(i) = (slot.cold as usize).checked_sub(1) else {
            return Cold::default();
        };
        slot.cold = 0;
        slot.flags &= !QUEUED;
        self.free.push(i as u32);
        std::mem::take(&mut self.items[i])
    }

    /// Cold states in use.
    pub(super) fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }

    pub(super) fn queued_bytes(&self) -> usize {
        self.items.iter().map(|c| c.queue.bytes()).sum()
    }
}

/// A peer's entry, read.
#[derive(Debug)]
pub struct PeerRef<'a> {
    peer: Peer,
    cold: Option<&'a Cold>,
}

impl<'a> PeerRef<'a> {
    pub(super) fn new(slot: &Slot, cold: &'a ColdSlab) -> PeerRef<'a> {
        PeerRef { peer: slot.decode(), cold: cold.get(slot) }
    }

    /// Packets waiting for the peer to answer.
    pub fn queue(&self) -> &'a PacketQueue {
        self.cold.map_or(&queue::EMPTY, |c| &c.queue)
    }

    /// The nonce of the direct IPv6 connectivity test under way (clients, native peers).
    pub fn nonce(&self) -> Option<[u8; 8]> {
        self.cold.and_then(|c| c.nonce)
    }
}

impl Deref for PeerRef<'_> {
    type Target = Peer;
    fn deref(&self) -> &Peer {
        &self.peer
    }
}

/// A peer's entry, to change: a decoded copy written back when dropped.
#[derive(Debug)]
pub struct PeerMut<'a> {
    peer: Peer,
    slot: &'a mut Slot,
    cold: &'a mut ColdSlab,
}

impl<'a> PeerMut<'a> {
    pub(super) fn new(slot: &'a mut Slot, cold: &'a mut ColdSlab) -> PeerMut<'a> {
        PeerMut { peer: slot.decode(), slot, cold }
    }

    /// Packets waiting for the peer to answer.
    pub fn queue(&self) -> &PacketQueue {
        self.cold.get(self.slot).map_or(&queue::EMPTY, |c| &c.queue)
    }

    /// The queue, to add to.
    pub fn queue_mut(&mut self) -> &mut PacketQueue {
        &mut self.cold.get_or_add(self.slot).queue
    }

    /// Take the queued packets out, if any.
    pub fn take_queue(&mut self) -> Option<QueueDrain> {
        if self.queue().is_empty() {
            return None;
        }
        Some(self.queue_mut().drain())
    }

    /// The nonce of the direct IPv6 connectivity test under way (clients, native peers).
    pub fn nonce(&self) -> Option<[u8; 8]> {
        self.cold.get(self.slot).and_then(|c| c.nonce)
    }

    /// Start (or end, with `None`) a connectivity test.
    pub fn set_nonce(&mut self, nonce: Option<[u8; 8]>) {
        if nonce.is_some() || self.slot.cold != 0 {
            self.cold.get_or_add(self.slot).nonce = nonce;
        }
    }
}

impl Deref for PeerMut<'_> {
    type Target = Peer;
    fn deref(&self) -> &Peer {
        &self.peer
    }
}

impl DerefMut for PeerMut<'_> {
    fn deref_mut(&mut self) -> &mut Peer {
        &mut self.peer
    }
}

impl Drop for PeerMut<'_> {
    fn drop(&mut self) {
        self.slot.encode(&self.peer);
        // Cold state that holds nothing goes back to the slab; the hot line says
        // whether packets are queued.
        let empty = match self.cold.get(self.slot) {
            Some(c) => c.queue.is_empty().then_some(c.nonce.is_none()),
            None => return,
        };
        match empty {
            Some(true) => drop(self.cold.release(self.slot)),
            Some(false) => self.slot.flags &= !QUEUED,
            None => self.slot.flags |= QUEUED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_survives_the_round_trip_through_its_cache_line() {
        let mut p = Peer::new(
            "2001:0:4136:e378:8000:63bf:3fff:fdd2".parse().unwrap(),
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 45), 40000),
            Duration::from_millis(123_456_789),
        );
        p.trusted = true;
        p.waiting = true;
        p.knows_trailers = true;
        p.holding = true;
        p.proving = true;
        p.sealed = true;
        p.tries = 3;
        p.solicitations = 2;
        p.nonce_sent = NonZeroU32::new(0xdead_beef);
        p.nonce_received = NonZeroU32::new(7);
        p.last_rx = Duration::new(1_000_000, 999_999_999);
        assert_eq!(Slot::holding(&p).decode(), p);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    #[test]
    fn new_entries_start_thirty_seconds_in_the_past() {
        let now = Duration::from_secs(100);
        let p = Peer::new(Ipv6Addr::LOCALHOST, SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1), now);
        assert_eq!(p.last_tx, Duration::from_secs(70));
        assert!(!p.is_valid(now));
    }
}
