//! The peer table alone, no lab: insertions and look-ups at a size, as a relay's.

use shipworm_proto::peer_table::{KeyedHash, Peer, PeerTable};
use shipworm_proto::relay::RelayConfig;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// What one thread does with a peer table of `peers` entries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TableFigures {
    pub(crate) peers: usize,
    /// Insertions per second, filling an empty table.
    pub(crate) insert_per_s: f64,
    /// Look-ups of present keys per second, in a shuffled order, a batch at a time (keys
    /// hashed and their lines fetched ahead, as the relay does with a received batch).
    pub(crate) lookup_per_s: f64,
    /// The same look-ups one at a time, nothing fetched ahead.
    pub(crate) single_lookup_per_s: f64,
    /// Look-ups of absent keys per second, in a shuffled order, batched.
    pub(crate) miss_per_s: f64,
    /// Resident memory the filled table added, per peer.
    pub(crate) bytes_per_peer: f64,
    /// Bytes of one entry's hot line.
    pub(crate) entry_bytes: usize,
}

impl std::fmt::Display for TableFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "peers={} insert_per_s={:.0} lookup_per_s={:.0} miss_per_s={:.0} bytes_per_peer={:.0}",
            self.peers, self.insert_per_s, self.lookup_per_s, self.miss_per_s, self.bytes_per_peer
        )
    }
}

/// Rounds of the peer-table measurement per size.
pub(crate) const TABLE_ROUNDS: usize = 3;

/// Keys a batched look-up hashes and fetches ahead before looking any up (a received
/// batch's worth).
pub(crate) const LOOKUP_AHEAD: usize = 16;

/// Peer table, on one thread, set up as a relay's (keyed hash, per-address cap):
/// `n` insertions into an empty table, then a look-up of every key in a shuffled order
/// (batched, then one at a time), then as many of absent keys; memory from the resident
/// set before and after filling (the shuffled orders are made after).
pub(crate) fn peer_table(n: usize) -> TableFigures {
    let rss = || -> f64 {
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<f64>().ok()))
            .unwrap_or(0.0)
            * 4096.0
    };
    let before = rss();
    let now = Duration::from_secs(1000);
    let defaults = RelayConfig::default();
    let mut t = PeerTable::new(n, defaults.idle, KeyedHash::new(1, 2)).with_address_cap(defaults.per_address);
    // Distinct clients: each address embeds an IPv4 address of its own.
    let addr = |i: usize| Ipv6Addr::new(0x2001, 0, 0x0102, 0x0304, 0, (i >> 32) as u16, (i >> 16) as u16, i as u16);
    let m = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 1);
    let t0 = Instant::now();
    for i in 0..n {
        let _ = t.insert(Peer::new(addr(i), m, now), now);
    }
    let insert_per_s = n as f64 / t0.elapsed().as_secs_f64();
    let bytes_per_peer = (rss() - before).max(0.0) / n.max(1) as f64;
    // A Fisher-Yates shuffle by xorshift: look-ups in an order the table cannot predict.
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let batched = |offset: usize| {
        let t1 = Instant::now();
        // A pipeline: the key LOOKUP_AHEAD places on is hashed and its line fetched
        // while this one is looked up, as the relay does over a received batch.
        let mut keys = [t.key(&Ipv6Addr::UNSPECIFIED); LOOKUP_AHEAD];
        let key_of = |i: u32| t.key(&addr(offset + i as usize));
        for (k, &i) in keys.iter_mut().zip(&order) {
            *k = key_of(i);
            t.prefetch(k);
        }
        let mut found = 0;
        for (j, _) in order.iter().enumerate() {
            let slot = j % LOOKUP_AHEAD;
            found += usize::from(t.get_keyed(&keys[slot]).is_some());
            if let Some(&next) = order.get(j + LOOKUP_AHEAD) {
                keys[slot] = key_of(next);
                t.prefetch(&keys[slot]);
            }
        }
        (n as f64 / t1.elapsed().as_secs_f64(), found)
    };
    let (lookup_per_s, found) = batched(0);
    assert_eq!(found, n, "every inserted peer is found");
    let (miss_per_s, found) = batched(n);
    assert_eq!(found, 0, "no absent peer is found");
    let t1 = Instant::now();
    let found = order.iter().filter(|&&i| t.get(&addr(i as usize)).is_some()).count();
    let single_lookup_per_s = n as f64 / t1.elapsed().as_secs_f64();
    assert_eq!(found, n, "every inserted peer is found, one at a time too");
    TableFigures {
        peers: n,
        insert_per_s,
        lookup_per_s,
        single_lookup_per_s,
        miss_per_s,
        bytes_per_peer,
        entry_bytes: t.entry_bytes(),
    }
}
