//! How many entries embed each IPv4 address, for the per-address cap — kept as a
//! count-min sketch: two rows of counters, each address counted in one counter of each
//! row (chosen by keyed hashes), its count the smaller of the two. That is an upper
//! bound, exact unless other addresses share both counters; the rows are sized so that
//! the share of innocent addresses in any counter stays far below the cap, and since the
//! keys are secret nobody can aim an address at another's counters. Unlike a map with
//! an entry per address it is small enough to stay in cache (a few hundred kilobytes
//! for ten million peers), so an insertion pays no second memory miss for the cap.

use super::KeyedHash;
use std::hash::BuildHasher;
use std::net::Ipv4Addr;

/// The counts and their cap.
#[derive(Debug)]
pub(super) struct AddressCounts {
    cap: u32,
    rows: [Box<[u32]>; 2],
    keys: [KeyedHash; 2],
}

/// Counters a row has for each entry's worth of the cap: with sixteen, an address that
/// meets none of the others holds a counter whose innocent share averages a sixteenth
/// of the cap.
const COUNTERS_PER_CAP: usize = 16;
/// The fewest counters a row has.
const MIN_COUNTERS: usize = 4096;

impl AddressCounts {
    /// Counts for a table of `capacity` entries, `cap` of them at most per address.
    pub(super) fn new(capacity: usize, cap: usize, keys: KeyedHash) -> AddressCounts {
        let cap = cap.clamp(1, u32::MAX as usize);
        let n = (capacity.saturating_mul(COUNTERS_PER_CAP) / cap).max(MIN_COUNTERS);
        // Keys of their own, derived from the table's, so a row's choice says nothing of
        // where the address's entries sit.
        let (k0, k1) = (keys.hash_one(0x636f_756e_7430u64), keys.hash_one(0x636f_756e_7431u64));
        AddressCounts {
            cap: cap as u32,
            rows: [vec![0; n].into_boxed_slice(), vec![0; n].into_boxed_slice()],
            keys: [KeyedHash::new(k0, k1), KeyedHash::new(k1, k0 ^ 0x5bd1_e995)],
        }
    }

    fn slots(&self, ip: Ipv4Addr) -> [usize; 2] {
        let n = self.rows[0].len() as u64;
        let at = |k: &KeyedHash| (((k.hash_one(u32::from(ip)) & 0xffff_ffff) * n) >> 32) as usize;
        [at(&self.keys[0]), at(&self.keys[1])]
    }

    /// Entries embedding `ip` (an upper bound).
    pub(super) fn get(&self, ip: Ipv4Addr) -> u32 {
        let [a, b] = self.slots(ip);
        self.rows[0][a].min(self.rows[1][b])
    }

    /// Whether `ip` has its share.
    pub(super) fn full(&self, ip: Ipv4Addr) -> bool {
        self.get(ip) >= self.cap
    }

    pub(super) fn add(&mut self, ip: Ipv4Addr) {
        let [a, b] = self.slots(ip);
        self.rows[0][a] = self.rows[0][a].saturating_add(1);
        self.rows[1][b] = self.rows[1][b].saturating_add(1);
    }

    pub(super) fn remove(&mut self, ip: Ipv4Addr) {
        let [a, b] = self.slots(ip);
        self.rows[0][a] = self.rows[0][a].saturating_sub(1);
        self.rows[1][b] = self.rows[1][b].saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_of_innocent_addresses_leaves_every_one_far_below_the_cap() {
        // A table at its capacity, every entry from another address: no address may
        // look full because of the others.
        let (capacity, cap) = (200_000usize, 64usize);
        let mut c = AddressCounts::new(capacity, cap, KeyedHash::new(7, 8));
        let ip = |i: usize| Ipv4Addr::from(0x0a00_0000 + i as u32);
        for i in 0..capacity {
            c.add(ip(i));
        }
        let worst = (0..capacity).map(|i| c.get(ip(i))).max().unwrap();
        assert!(worst < cap as u32 / 2, "worst count {worst} of a cap of {cap}");
        for i in 0..capacity {
            c.remove(ip(i));
        }
        assert!(c.rows.iter().all(|r| r.iter().all(|&n| n == 0)), "every count back to zero");
    }
}
