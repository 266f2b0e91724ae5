//! The relay's timer: what is due when (a waiting peer's next bubble, a held packet's
//! end, the sweep of idle peers), so that the daemon sleeps until the next of them
//! rather than ticking, and a timer run visits only the shards that have something due.
//!
//! Each shard's next due time sits beside its lock, readable without it: it is lowered
//! under the shard's lock whenever something is scheduled (a new waiting peer, a held
//! packet, a new entry to sweep one day) and set again, under the same lock, by the
//! timer's visit. It may be early (a peer that answered since leaves its time behind:
//! the visit finds nothing to do), never late. The earliest of them is kept too, so
//! that the daemon's look at the next deadline (every loop round) reads one word, not
//! every shard's; sweeps fall on whole seconds, so that one run sweeps every shard
//! with peers rather than each waking the daemon at its own moment.

use super::*;
use std::sync::atomic::{AtomicU64, AtomicUsize};

/// How often a shard with peers is swept of its idle ones.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Entries the sweeps look at in a [`SWEEP_EVERY`], shared out among the shards: a
/// table of any size is gone over in its idle time's share.
const SWEEP_BUDGET: usize = 4096;
/// A waiting peer whose bubbles the per-target rate held back is tried again this much
/// later (the rate's buckets refill meanwhile).
const RATE_RETRY: Duration = Duration::from_millis(250);
/// A shard with nothing due.
const NOT_DUE: u64 = u64::MAX;

/// One shard's timer, read without the shard's lock (a cache line of its own: shards'
/// timers are written by different workers).
#[derive(Debug)]
#[repr(align(64))]
pub(super) struct ShardTimer {
    /// When the shard next has something due, in whole milliseconds rounded up.
    due: AtomicU64,
    /// Its peers at the last look (the fetch-ahead switch adds them up).
    peers: AtomicUsize,
}

impl ShardTimer {
    pub(super) fn new() -> ShardTimer {
        ShardTimer { due: AtomicU64::new(NOT_DUE), peers: AtomicUsize::new(0) }
    }
}

/// `t` in milliseconds, rounded up: a wake-up at it is never before `t`.
fn millis_up(t: Duration) -> u64 {
    u64::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(NOT_DUE - 1)
}

/// When a waiting peer is next bubbled: two seconds after its last try, or soon when
/// the rate held its bubbles back (before any went, or when the next was due): never at
/// or before `now`, so that a timer run leaves nothing due at once.
/// When a sweep scheduled at `now` runs: a whole second at least [`SWEEP_EVERY`] on.
fn sweep_at(now: Duration) -> Duration {
    Duration::from_secs((now + SWEEP_EVERY).as_secs() + 1)
}

fn retry_at((tries, last_tx): (u8, Duration), now: Duration) -> Duration {
    let next = last_tx + BUBBLE_SPACING;
    if tries > 0 && next > now {
        next
    } else {
        now + RATE_RETRY
    }
}

impl SharedRelay {
    /// Shard `i` has something due at `at` (called under its lock).
    pub(super) fn due_at(&self, i: usize, at: Duration) {
        let at = millis_up(at);
        // Loaded first: most calls bring nothing forward, and a load leaves the line
        // shared where a read-modify-write would take it.
        if self.timers[i].due.load(Ordering::SeqCst) > at {
            self.timers[i].due.fetch_min(at, Ordering::SeqCst);
        }
        if self.next_due.load(Ordering::SeqCst) > at {
            self.next_due.fetch_min(at, Ordering::SeqCst);
        }
    }

    /// Shard `i` took a new entry (called under its lock): its sweep is scheduled.
    pub(super) fn entered(&self, i: usize, now: Duration) {
        self.due_at(i, sweep_at(now));
    }

    /// Shard `i` waits for an answer from `peer` (called under its lock, after its
    /// bubbles): its next try is due.
    pub(super) fn waits(&self, i: usize, peers: &PeerTable, peer: &Ipv6Addr, now: Duration) {
        let at = peers.get(peer).map_or(now, |p| retry_at((p.tries, p.last_tx), now));
        self.due_at(i, at);
    }

    /// When [`SharedRelay::on_timer`] next has something to do (`None`: nothing until
    /// a packet comes): the daemon sleeps until then or until I/O. It may be early,
    /// never late.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let ms = self.next_due.load(Ordering::SeqCst);
        (ms != NOT_DUE).then(|| Duration::from_millis(ms))
    }

    /// Time passes: bubbles are repeated every 2 s for waiting peers; a peer whose
    /// bubbles all went unanswered is given up, and its queued packets get an ICMPv6
    /// address-unreachable each (rate limited); held packets whose client never proved
    /// its port are let go; idle peers are swept a little at a time. One worker calls
    /// it for all, at [`SharedRelay::poll_timeout`] or whenever it likes: it visits
    /// only the shards with something due.
    pub fn on_timer(&self, w: &mut RelayWorker, now: Duration, tx: &mut impl Transmit) {
        let sweep = SWEEP_BUDGET.div_ceil(self.shards.len());
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(NOT_DUE - 1);
        // The earliest is worked out again from every shard's, each read after this
        // reset: a shard a worker brings forward meanwhile is either read lowered here
        // or lowers the earliest itself after the reset.
        self.next_due.store(NOT_DUE, Ordering::SeqCst);
        for (i, shard) in self.shards.iter().enumerate() {
            let mut due = self.timers[i].due.load(Ordering::SeqCst);
            if due <= now_ms {
                let mut guard = lock(shard);
                let next = self.visit(&mut guard, w, now, sweep, tx);
                due = next.map_or(NOT_DUE, millis_up);
                // Under the lock: a worker's lowering waits for it, then applies.
                self.timers[i].due.store(due, Ordering::SeqCst);
                self.timers[i].peers.store(guard.peers.len(), Ordering::Relaxed);
            }
            self.next_due.fetch_min(due, Ordering::SeqCst);
        }
        let peers: usize = self.timers.iter().map(|t| t.peers.load(Ordering::Relaxed)).sum();
        self.large.store(peers >= FETCH_AHEAD_FROM, Ordering::Relaxed);
    }

    /// One shard's due work; returns when it next has some.
    fn visit(
        &self,
        shard: &mut Shard,
        w: &mut RelayWorker,
        now: Duration,
        sweep: usize,
        tx: &mut impl Transmit,
    ) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        let mut due = |t: Duration| next = Some(next.map_or(t, |n| n.min(t)));
        for _ in 0..shard.pending.len() {
            let Some(dst) = shard.pending.pop_front() else {
                break;
            };
            // Gone, or answered since: drop the stale list entry. (A peer waited for is
            // not in the kernel's list: its answer comes to us.)
            let Some(p) = shard.peers.get(&dst).filter(|p| p.waiting) else {
                continue;
            };
            if p.tries > 0 && now.saturating_sub(p.last_tx) < BUBBLE_SPACING {
                due(retry_at((p.tries, p.last_tx), now));
                shard.pending.push_back(dst);
                continue;
            }
            // Something waits for the client: a queued packet, or a held one of its own.
            let waits_for = p.queue().first().is_some() || shard.held.iter().any(|h| h.client == dst);
            match waits_for {
                true if p.tries < MAX_BUBBLES => {
                    self.send_bubbles((&mut shard.peers, &mut shard.spent), w, now, &dst, tx);
                    due(shard.peers.get(&dst).map_or(now, |p| retry_at((p.tries, p.last_tx), now)));
                    shard.pending.push_back(dst);
                }
                // A trusted client's proof of another port that failed (no echo of
                // the nonce): it stays where it was trusted, as a stranger's packet
                // from that port must not cost it its entry.
                _ if p.trusted && p.proving => {
                    shard.peers.give_way(&dst);
                }
                _ => self.give_up(&mut shard.peers, w, now, dst, tx),
            }
        }
        // Held packets whose client never proved its port are let go.
        while shard.held.front().is_some_and(|h| now.saturating_sub(h.at) >= HELD_FOR) {
            shard.held.pop_front();
            w.stats.drops.count(DropReason::PortNotProved);
        }
        if let Some(h) = shard.held.front() {
            due(h.at + HELD_FOR);
        }
        shard.peers.sweep(now, sweep, &mut |peer| tx.kernel(KernelIntent::Read { peer, sweep: true }));
        kernel_forget_removed(&mut shard.peers, tx);
        if !shard.peers.is_empty() {
            due(sweep_at(now));
        }
        next
    }

    fn give_up(
        &self,
        peers: &mut PeerTable,
        w: &mut RelayWorker,
        now: Duration,
        dst: Ipv6Addr,
        tx: &mut impl Transmit,
    ) {
        let Some(mut gone) = peers.remove(&dst) else {
            return;
        };
        kernel_forget_removed(peers, tx);
        w.stats.unreachable_peers += 1;
        let mut q = gone.queue.drain();
        while let Some(packet) = q.next_packet() {
            if let Ok(ip) = Ipv6Packet::new_checked(packet) {
                self.icmp_error(w, now, &ip, unreachable::ADDRESS, tx);
            }
        }
    }
}
