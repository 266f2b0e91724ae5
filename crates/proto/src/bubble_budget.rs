//! RFC 4380 §5.2.6: "The client MUST NOT send a bubble if it has already sent 4 bubbles
//! to the peer in the last 300 seconds without receiving a direct response." Kept per
//! peer address and per kind (direct, indirect), apart from the peer's entry: an
//! application that keeps sending to a dead peer makes a new entry after each one
//! given up, and a count kept in the entry would start over each time. A direct
//! answer from the peer forgets its count. The table is capped; when it is full, the
//! peer whose last bubble is the oldest is forgotten (it is the least likely to be
//! bubbled again within its window), so an address that floods it in is forgotten
//! first among its own. Keyed by an address an attacker may choose (a peer's
//! indirect bubbles make us answer): a keyed hash.

use crate::peer_table::KeyedHash;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;
use std::time::Duration;

/// Bubbles of one kind to one peer within [`WINDOW`] without a direct answer.
pub const BUBBLES: usize = 4;
/// The window the bubbles are counted over.
pub const WINDOW: Duration = Duration::from_secs(300);

/// Which way a bubble goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// To the peer's mapping (or a port of its NAT), from us.
    Direct,
    /// Through the peer's server.
    Indirect,
}

/// When the last [`BUBBLES`] bubbles of each kind went, oldest first.
#[derive(Debug, Clone, Copy, Default)]
struct Spent {
    direct: [Option<Duration>; BUBBLES],
    indirect: [Option<Duration>; BUBBLES],
}

impl Spent {
    fn of(&mut self, kind: Kind) -> &mut [Option<Duration>; BUBBLES] {
        match kind {
            Kind::Direct => &mut self.direct,
            Kind::Indirect => &mut self.indirect,
        }
    }
}

/// The bubbles sent to each peer lately, for [`BUBBLES`] per [`WINDOW`].
#[derive(Debug, Clone)]
pub struct BubbleBudget {
    spent: HashMap<Ipv6Addr, Spent, KeyedHash>,
    /// The peers in the order they were first counted; a peer answered since is
    /// passed over when its turn comes (and cleared out when the list doubles).
    order: VecDeque<Ipv6Addr>,
    cap: usize,
}

impl BubbleBudget {
    /// A budget keeping at most `cap` peers, keyed with `keys`.
    pub fn new(cap: usize, keys: KeyedHash) -> BubbleBudget {
        BubbleBudget { spent: HashMap::with_hasher(keys), order: VecDeque::new(), cap: cap.max(1) }
    }

    /// Whether a bubble of `kind` to `peer` may go at `now`; if it may, it is counted.
    pub fn spend(&mut self, now: Duration, peer: Ipv6Addr, kind: Kind) -> bool {
        if !self.spent.contains_key(&peer) {
            self.make_room();
            self.order.push_back(peer);
        }
        let times = self.spent.entry(peer).or_default().of(kind);
        // The oldest of the last four, if it is still within the window: no more.
        if times[0].is_some_and(|oldest| now.saturating_sub(oldest) < WINDOW) {
            return false;
        }
        times.rotate_left(1);
        times[BUBBLES - 1] = Some(now);
        true
    }

    /// A direct answer came from `peer`: its bubbles count from nothing again.
    pub fn answered(&mut self, peer: &Ipv6Addr) {
        self.spent.remove(peer);
    }

    /// Peers with a count.
    pub fn len(&self) -> usize {
        self.spent.len()
    }

    /// No peer has a count.
    pub fn is_empty(&self) -> bool {
        self.spent.is_empty()
    }

    /// Room for one more peer: the first counted goes when the table is full.
    fn make_room(&mut self) {
        while self.spent.len() >= self.cap {
            let Some(first) = self.order.pop_front() else { break };
            self.spent.remove(&first);
        }
        if self.order.len() >= 2 * self.cap {
            let spent = &self.spent;
            self.order.retain(|a| spent.contains_key(a));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(i: u16) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0x8000, 0x63bf, 0x3fff, i)
    }

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn four_bubbles_of_each_kind_in_300_seconds_and_no_fifth() {
        let mut b = BubbleBudget::new(16, KeyedHash::new(1, 2));
        for i in 0..4 {
            assert!(b.spend(s(2 * i), peer(1), Kind::Direct), "direct {i}");
            assert!(b.spend(s(2 * i), peer(1), Kind::Indirect), "indirect {i}");
        }
        assert!(!b.spend(s(8), peer(1), Kind::Direct));
        assert!(!b.spend(s(299), peer(1), Kind::Indirect));
        // Another peer has its own four.
        assert!(b.spend(s(8), peer(2), Kind::Direct));
        // The first bubble's window passes: one more, and only one.
        assert!(b.spend(s(300), peer(1), Kind::Direct));
        assert!(!b.spend(s(301), peer(1), Kind::Direct));
        assert!(b.spend(s(302), peer(1), Kind::Direct));
    }

    #[test]
    fn a_direct_answer_starts_the_count_over() {
        let mut b = BubbleBudget::new(16, KeyedHash::new(1, 2));
        for i in 0..4 {
            assert!(b.spend(s(i), peer(1), Kind::Indirect));
        }
        assert!(!b.spend(s(5), peer(1), Kind::Indirect));
        b.answered(&peer(1));
        assert!(b.spend(s(6), peer(1), Kind::Indirect));
    }

    /// The cap holds whatever the number of peers bubbled (the list of their order
    /// too, with peers answered in between), and within it every count holds.
    #[test]
    fn the_table_holds_its_cap_and_forgets_the_first_counted_first() {
        let mut b = BubbleBudget::new(8, KeyedHash::new(1, 2));
        for i in 0..4 {
            assert!(b.spend(s(100 + i), peer(1), Kind::Direct));
        }
        for i in 0..10_000u16 {
            b.spend(s(200), peer(1000 + i), Kind::Indirect);
            if i % 3 == 0 {
                b.answered(&peer(1000 + i));
            }
            assert!(b.len() <= 8 && b.order.len() <= 16, "{} peers, {} in order", b.len(), b.order.len());
        }
        // Peer 1 was counted first: forgotten first, its count started over (bounded
        // memory wins over an exact count once the table is full of newer peers).
        assert!(b.spend(s(201), peer(1), Kind::Direct));
        // Within the cap, counts hold.
        let mut small = BubbleBudget::new(8, KeyedHash::new(1, 2));
        for i in 0..4 {
            assert!(small.spend(s(i), peer(1), Kind::Direct));
        }
        for i in 0..7u16 {
            small.spend(s(10), peer(2 + i), Kind::Direct);
        }
        assert!(!small.spend(s(11), peer(1), Kind::Direct), "peer 1 kept its count");
    }
}
