//! The client's timer: what is due when, so that the daemon sleeps until the next of
//! it (a phone's client wakes for its refresh, not ten times a second). Each part says
//! when it next has something to do; the waiting list, which packets change, keeps a
//! time that may be early (a peer that answered leaves its time behind), never late.

use super::*;
use crate::transmit::KernelIntent;

/// How often the table is swept of idle peers while it holds any (they go after five
/// minutes' silence), and listed peers' times read back from the kernel.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// Entries a sweep looks at.
const SWEEP_BUDGET: usize = 25_600;
/// A waiting peer none of whose tries went yet (nothing to send it from, a budget
/// spent) is looked at again this much later.
const TRY_AGAIN: Duration = Duration::from_millis(100);

impl<R: Random> Client<R> {
    /// When [`Client::on_timer`] next has something to do (`None`: nothing until a
    /// packet or a call comes): the daemon sleeps until then or until I/O. It may be
    /// early, never late; a time already past means at once.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let settle = self.kernel.has_orphans() || self.peers.has_removed_trusted();
        let sweep = (!self.peers.is_empty() || self.kernel.len() > 0).then_some(self.next_sweep);
        // A connectivity test ends within its tries; anything older lost its entry.
        let contacts = self.first_contacts.oldest().map(|t| t + RETRY * (u32::from(PEER_TRIES) + 1));
        [
            self.qualifier_due(),
            self.waiting.due(),
            sweep,
            settle.then_some(Duration::ZERO),
            self.random_ports_due(),
            contacts,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Time passes: RS retries, failover, maintenance, peers' bubbles and echoes, the
    /// sweep of idle peers. Called at [`Client::poll_timeout`] or whenever the daemon
    /// likes: each part does only what is due.
    pub fn on_timer(&mut self, now: Duration, tx: &mut (impl Transmit + Ports)) {
        self.on_qualifier_timer(now, tx);
        self.retry_waiting(now, tx);
        if now >= self.next_sweep {
            self.next_sweep = now + SWEEP_EVERY;
            self.kernel_refresh(tx);
            self.peers.sweep(now, SWEEP_BUDGET, &mut |peer| tx.kernel(KernelIntent::Read { peer, sweep: true }));
        }
        self.kernel_settle(tx);
        self.tend_random_ports(now, tx);
        let stale = self.first_contacts.expire(now, RETRY * (u32::from(PEER_TRIES) + 1));
        self.stats.drops.count_n(DropReason::ConnectivityTestFailed, stale);
        // Worked out again, after every step that may have changed the list: the
        // waiting peers' next tries (entries whose peer answered or went are dropped
        // at the next run, whenever it comes).
        self.waiting.set_due(self.waiting.iter().filter_map(|a| self.retry_at(a, now)).min());
    }

    /// When waiting peer `peer`'s next try is due: two seconds after its last, or soon
    /// if none went yet or the last one due could not go (nothing to send it from, a
    /// budget spent: looked at again as the fixed tick did). `None`: it waits no more,
    /// or is gone.
    fn retry_at(&self, peer: &Ipv6Addr, now: Duration) -> Option<Duration> {
        let p = self.peers.get(peer).filter(|p| p.waiting)?;
        let next = p.last_tx + RETRY;
        Some(if p.tries > 0 && next > now { next } else { now + TRY_AGAIN })
    }

    /// `peer` is on the waiting list (or just stayed on it): the timer is due by its
    /// next try.
    pub(super) fn waits(&mut self, peer: &Ipv6Addr, now: Duration) {
        let at = self.retry_at(peer, now).unwrap_or(now);
        self.waiting.due_by(at);
    }
}
