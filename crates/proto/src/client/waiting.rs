//! The client's waiting list: the peers it is reaching (bubbles, a connectivity test),
//! oldest first, and among them the silent native peers under a test of ours; when the
//! list's next try is due. A part of its own: the peer table holds each peer's tries
//! and queue, this list the order, the cap and the time.

use std::collections::{HashSet, VecDeque};
use std::net::Ipv6Addr;
use std::time::Duration;

#[derive(Debug, Default)]
pub(super) struct WaitingList {
    /// Oldest first. Entries whose peer stopped waiting are dropped at the timer's next
    /// run, so the packet path never searches the list.
    order: VecDeque<Ipv6Addr>,
    /// Native peers under a test of ours (they fell silent while we sent): each is on
    /// the list too, and leaves this set when it leaves the list.
    retests: HashSet<Ipv6Addr>,
    /// When the next try is due, or earlier (a peer that answered leaves its time
    /// behind), never later.
    due: Option<Duration>,
}

impl WaitingList {
    /// Peers on the list (stale ones included until the timer drops them).
    pub(super) fn len(&self) -> usize {
        self.order.len()
    }

    /// The peers on the list, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Ipv6Addr> {
        self.order.iter()
    }

    /// `peer` waits from now on, at the back.
    pub(super) fn join(&mut self, peer: Ipv6Addr) {
        self.order.push_back(peer);
    }

    /// `peer`, a silent native peer, waits for our test of it, unless the list or the
    /// tests are at `cap` (false: not taken; a later packet tries again).
    pub(super) fn join_retest(&mut self, peer: Ipv6Addr, cap: usize) -> bool {
        if self.order.len() >= cap || self.retests.len() >= cap {
            return false;
        }
        self.retests.insert(peer);
        self.order.push_back(peer);
        true
    }

    /// The oldest peer leaves the list (to make room).
    pub(super) fn give_way(&mut self) -> Option<Ipv6Addr> {
        let old = self.order.pop_front()?;
        self.retests.remove(&old);
        Some(old)
    }

    /// The oldest peer, taken off for the timer to look at (it joins again if it
    /// still waits).
    pub(super) fn next(&mut self) -> Option<Ipv6Addr> {
        self.order.pop_front()
    }

    /// `peer`'s wait ended (answered, given up, gone): no test of ours runs for it.
    pub(super) fn ended(&mut self, peer: &Ipv6Addr) {
        self.retests.remove(peer);
    }

    /// Whether `peer` waits for a test of ours (it fell silent while we sent).
    pub(super) fn is_retest(&self, peer: &Ipv6Addr) -> bool {
        self.retests.contains(peer)
    }

    /// Nobody waits any more (the peers were forgotten).
    pub(super) fn clear(&mut self) {
        self.order.clear();
        self.retests.clear();
    }

    /// When the next try is due, if any.
    pub(super) fn due(&self) -> Option<Duration> {
        self.due
    }

    /// A try is due at `at`: the list's time comes no later.
    pub(super) fn due_by(&mut self, at: Duration) {
        self.due = Some(self.due.map_or(at, |d| d.min(at)));
    }

    /// The list's time, worked out again from every peer's.
    pub(super) fn set_due(&mut self, due: Option<Duration>) {
        self.due = due;
    }
}
