//! A rate per IPv4 address in constant memory: how much one address may make us answer
//! or send to it, whatever the number of addresses in play.
//!
//! Addresses are hashed with a secret key onto a fixed array of buckets, so a few
//! unrelated addresses may share one. They then share its rate, stricter and never
//! looser, and an attacker cannot choose whom they share with. Each bucket is one time
//! stamp (the generic cell rate algorithm: the moment the bucket would be empty again),
//! so admitting is one comparison and no refill arithmetic can round a rate away.

use crate::peer_table::KeyedHash;
use core::hash::BuildHasher;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Token buckets for IPv4 addresses: `rate` a second each, bursts of `burst`.
#[derive(Debug, Clone)]
pub struct AddressRate {
    /// Per bucket, when (ns of virtual time) it would be empty again.
    empty_at: Box<[u64]>,
    hasher: KeyedHash,
    /// Nanoseconds one admission costs.
    interval: u64,
    /// How far ahead of now a bucket may run: the burst.
    tolerance: u64,
}

impl AddressRate {
    /// `buckets` (rounded up to a power of two) admitting `rate` a second per address,
    /// `burst` at once; keys for the hash.
    pub fn new(buckets: usize, rate: u32, burst: u32, keys: (u64, u64)) -> AddressRate {
        let interval = 1_000_000_000 / u64::from(rate.max(1));
        AddressRate {
            empty_at: vec![0; buckets.next_power_of_two()].into_boxed_slice(),
            hasher: KeyedHash::new(keys.0, keys.1),
            interval,
            tolerance: interval * u64::from(burst.max(1)),
        }
    }

    /// Whether `addr` may have one more at `now`; counts it if so.
    pub fn allow(&mut self, addr: Ipv4Addr, now: Duration) -> bool {
        let now = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        let i = (self.hasher.hash_one(u32::from(addr)) as usize) & (self.empty_at.len() - 1);
        let at = self.empty_at[i].max(now);
        if at + self.interval > now + self.tolerance {
            return false;
        }
        self.empty_at[i] = at + self.interval;
        true
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
        let mut r = AddressRate::new(64, 10, 5, (1, 2));
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
    fn a_flood_from_one_address_leaves_the_others_their_rate() {
        let mut r = AddressRate::new(4096, 10, 5, (3, 4));
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
