//! A rate per IPv4 address in constant memory: how much one address may make us answer
//! or send to it, whatever the number of addresses in play.
//!
//! Addresses are hashed with a secret key onto a fixed array of buckets, so a few
//! unrelated addresses may share one. They then share its rate, stricter and never
//! looser, and an attacker cannot choose whom they share with. Each bucket is one time
//! stamp (the generic cell rate algorithm: the moment the bucket would be empty again),
//! so admitting is one comparison and no refill arithmetic can round a rate away. The
//! stamps are atomics: the relay's workers share one set without a lock (a worker
//! deciding under its shard's lock never waits for another's).

use crate::peer_table::KeyedHash;
use core::hash::BuildHasher;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Token buckets for IPv4 addresses: `rate` a second each, bursts of `burst`.
#[derive(Debug)]
pub struct AddressRate {
    /// Per bucket, when (ns of virtual time) it would be empty again.
    empty_at: Box<[AtomicU64]>,
    hasher: KeyedHash,
    /// Nanoseconds one admission costs.
    interval: u64,
    /// How far ahead of now a bucket may run: the burst.
    tolerance: u64,
}

impl Clone for AddressRate {
    /// A copy of the buckets as they stand.
    fn clone(&self) -> Self {
        AddressRate {
            empty_at: self.empty_at.iter().map(|b| AtomicU64::new(b.load(Ordering::Relaxed))).collect(),
            hasher: self.hasher,
            interval: self.interval,
            tolerance: self.tolerance,
        }
    }
}

impl AddressRate {
    /// `buckets` (rounded up to a power of two) admitting `rate` a second per address,
    /// `burst` at once; keys for the hash.
    pub fn new(buckets: usize, rate: u32, burst: u32, keys: (u64, u64)) -> AddressRate {
        let interval = 1_000_000_000 / u64::from(rate.max(1));
        AddressRate {
            empty_at: (0..buckets.next_power_of_two()).map(|_| AtomicU64::new(0)).collect(),
            hasher: KeyedHash::new(keys.0, keys.1),
            interval,
            tolerance: interval * u64::from(burst.max(1)),
        }
    }

    /// One bucket for everyone: `rate` a second in all, bursts of `burst`; a rate of
    /// zero admits nothing.
    pub fn total(rate: u32, burst: u32) -> AddressRate {
        let mut r = AddressRate::new(1, rate, burst, (0, 0));
        if rate == 0 {
            r.interval = u64::MAX;
        }
        r
    }

    /// Whether `addr` may have one more at `now`; counts it if so.
    pub fn allow(&self, addr: Ipv4Addr, now: Duration) -> bool {
        let i = (self.hasher.hash_one(u32::from(addr)) as usize) & (self.empty_at.len() - 1);
        self.take(&self.empty_at[i], now)
    }

    /// For a [`total`](Self::total) rate: whether one more may go at `now`.
    pub fn allow_any(&self, now: Duration) -> bool {
        self.take(&self.empty_at[0], now)
    }

    /// Spend one of `bucket`'s admissions, if it has one: the stamp moved on by one
    /// interval, by whichever caller gets there first.
    fn take(&self, bucket: &AtomicU64, now: Duration) -> bool {
        let now = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        let mut stamp = bucket.load(Ordering::Relaxed);
        loop {
            let at = stamp.max(now);
            if self.interval == u64::MAX || at.saturating_add(self.interval) > now.saturating_add(self.tolerance) {
                return false;
            }
            let next = at.saturating_add(self.interval);
            match bucket.compare_exchange_weak(stamp, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(seen) => stamp = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn one_address_gets_its_burst_then_its_rate_and_no_more() {
        let r = AddressRate::new(64, 10, 5, (1, 2));
        let a = Ipv4Addr::new(192, 0, 2, 1);
        let t0 = Duration::from_secs(100);
        assert_eq!((0..1000).filter(|_| r.allow(a, t0)).count(), 5);
        assert!(!r.allow(a, t0 + ms(50)));
        assert!(r.allow(a, t0 + ms(100)), "one more every 100 ms");
        // A steady flood over ten seconds: the rate, plus at most the burst.
        let admitted = (0..10_000).filter(|i| r.allow(a, t0 + ms(200 + i))).count();
        assert!((95..=106).contains(&admitted), "{admitted}");
    }

    #[test]
    fn threads_sharing_the_buckets_admit_no_more_than_one_thread_would() {
        let r = AddressRate::new(64, 10, 50, (5, 6));
        let a = Ipv4Addr::new(192, 0, 2, 9);
        let t = Duration::from_secs(7);
        let admitted: usize = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4).map(|_| s.spawn(|| (0..10_000).filter(|_| r.allow(a, t)).count())).collect();
            threads.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 50, "the burst, once, whoever asked");
        assert!(!AddressRate::total(0, 5).allow_any(t), "a rate of zero admits nothing");
        let far = Duration::from_nanos(u64::MAX - 3);
        let r = AddressRate::new(4, 10, 2, (1, 1));
        // At the clock's end (584 years on) the stamps saturate: no overflow panic.
        let _ = (0..5).filter(|_| r.allow(a, far)).count();
        let total = AddressRate::total(100, 20);
        assert_eq!((0..1000).filter(|_| total.allow_any(t)).count(), 20);
        assert!(total.allow_any(t + ms(10)), "one more every 10 ms");
    }

    #[test]
    fn a_flood_from_one_address_leaves_the_others_their_rate() {
        let r = AddressRate::new(4096, 10, 5, (3, 4));
        let flooder = Ipv4Addr::new(203, 0, 113, 9);
        let t0 = Duration::from_secs(1);
        for i in 0..100_000u64 {
            r.allow(flooder, t0 + Duration::from_micros(i * 10));
        }
        let others: Vec<Ipv4Addr> = (1..=200).map(|i| Ipv4Addr::new(198, 51, 100, i)).collect();
        let now = t0 + Duration::from_secs(1);
        let served = others.iter().filter(|&&a| r.allow(a, now)).count();
        // At most a bucket or so shared with the flooder.
        assert!(served >= 198, "{served} of 200");
    }
}
