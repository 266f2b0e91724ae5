//! When a worker looks for packets again at once instead of sleeping in poll(2). A
//! sleeping thread's wake-up costs more than a relay's own work on a packet, so when
//! the next packet is due within the window (`BusyPoll`), looking again saves it: a
//! request and its answer crossing the relay in turn, or a steady stream of single
//! packets. When the next packet comes later than the window, the spin is all waste:
//! at a moderate rate whose packets arrive in bursts (as NICs and GRO deliver them),
//! a worker that spun the whole window after each burst spent more CPU spinning than
//! relaying. So the worker spins only while the gaps it has seen between its last
//! packet and the next are shorter than the window: it learns the gap (a moving
//! average of the last eight or so) and spins when that says the next packet is near.

use std::time::{Duration, Instant};

/// Weight of the newest gap in the average, as a shift: 1/8.
const SHIFT: u32 = 3;

/// A worker's busy-polling state.
#[derive(Debug)]
pub struct BusyPoll {
    window: Duration,
    /// Moving average of the time from the end of one round with packets to the next
    /// packet, in nanoseconds.
    gap_ns: u64,
    /// When the last round with packets ended.
    last: Option<Instant>,
    /// Spin until then (the window after the last packet, when spinning pays).
    until: Instant,
}

impl BusyPoll {
    /// A state for a worker whose window is `window` (zero: never spin).
    pub fn new(window: Duration, now: Instant) -> BusyPoll {
        // Start as if the gaps were long: an idle relay sleeps.
        BusyPoll { window, gap_ns: (window.as_nanos() as u64).saturating_mul(2), last: None, until: now }
    }

    /// Whether to look again without sleeping.
    pub fn spin(&self, now: Instant) -> bool {
        now < self.until
    }

    /// A round ended at `now`, having handled `packets`.
    pub fn round(&mut self, packets: usize, now: Instant, started: Instant) {
        if packets == 0 {
            return;
        }
        if let Some(last) = self.last {
            // The gap: from the end of the last round with packets to the start of this
            // one, which found the next packet (whether we slept or spun meanwhile).
            // A gap past a few windows says "sleep" as well as a longer one would: held
            // there, one long silence does not outweigh many short gaps.
            let cap = (self.window.as_nanos() as u64).saturating_mul(4);
            let gap = (started.saturating_duration_since(last).as_nanos() as u64).min(cap);
            let avg = self.gap_ns as i64 + ((gap as i64 - self.gap_ns as i64) >> SHIFT);
            self.gap_ns = avg.max(0) as u64;
        }
        self.last = Some(now);
        self.until = if self.pays() { now + self.window } else { now };
    }

    /// Whether the next packet is expected within the window.
    pub fn pays(&self) -> bool {
        !self.window.is_zero() && self.gap_ns < self.window.as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds rounds of one packet `gap` apart, each taking `work`; returns the state.
    fn feed(b: &mut BusyPoll, t: &mut Instant, rounds: usize, gap: Duration, work: Duration) {
        for _ in 0..rounds {
            let started = *t + gap;
            *t = started + work;
            b.round(1, *t, started);
        }
    }

    #[test]
    fn packets_answered_in_turn_keep_the_worker_spinning_and_bursts_far_apart_let_it_sleep() {
        let window = Duration::from_micros(50);
        let mut t = Instant::now();
        let mut b = BusyPoll::new(window, t);
        assert!(!b.spin(t), "an idle relay sleeps");
        // A request and its answer every 20 µs: the next packet is within the window.
        feed(&mut b, &mut t, 30, Duration::from_micros(20), Duration::from_micros(3));
        assert!(b.pays() && b.spin(t));
        assert!(!b.spin(t + window), "never past the window");
        // Bursts every 250 µs (a moderate rate as GRO delivers it): spinning would be waste.
        feed(&mut b, &mut t, 30, Duration::from_micros(220), Duration::from_micros(30));
        assert!(!b.pays() && !b.spin(t));
        // The rate rises again: within a few gaps the worker spins again.
        feed(&mut b, &mut t, 20, Duration::from_micros(10), Duration::from_micros(3));
        assert!(b.spin(t));
        // One long silence does not stop a quick exchange, but a few do.
        feed(&mut b, &mut t, 1, Duration::from_millis(100), Duration::from_micros(3));
        assert!(b.spin(t));
        feed(&mut b, &mut t, 4, Duration::from_millis(100), Duration::from_micros(3));
        assert!(!b.spin(t));
        feed(&mut b, &mut t, 30, Duration::from_micros(10), Duration::from_micros(3));
        assert!(b.spin(t));
        // Rounds without packets change nothing; a zero window never spins.
        b.round(0, t + Duration::from_secs(1), t + Duration::from_secs(1));
        assert!(b.spin(t));
        let mut off = BusyPoll::new(Duration::ZERO, t);
        feed(&mut off, &mut t, 30, Duration::from_micros(1), Duration::from_micros(1));
        assert!(!off.spin(t));
    }
}
