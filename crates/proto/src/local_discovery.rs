//! RFC 4380 §5.2.8 local discovery: clients on one link announce themselves with
//! bubbles to 224.0.0.253:3544 (IPv6 destination ff02::1, IPv4 TTL 1), and a client
//! that hears one may reach that peer at its local address, without the NAT between
//! them and the Internet (which need not hairpin).
//!
//! What a client heard is kept here, apart from the peer table: a local endpoint is
//! only a hint (anyone on the link can announce anything) until the peer answers from
//! it without a nonce (RFC 4380 §5.2.3 case 5). Capped, and forgotten after 600 s of
//! silence.

use crate::peer_table::KeyedHash;
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::Duration;

/// The local discovery group and port.
pub const GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(224, 0, 0, 253), 3544);
/// All-nodes: the IPv6 destination of a discovery bubble.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// How long a discovery bubble vouches for a local peer (RFC 4380 §5.2.4 case 3).
pub const VALIDITY: Duration = Duration::from_secs(600);

/// Local peers heard, by Teredo address: their local endpoint and when.
#[derive(Debug)]
pub struct LocalPeers {
    map: HashMap<Ipv6Addr, (SocketAddrV4, Duration), KeyedHash>,
    cap: usize,
}

impl LocalPeers {
    /// At most `cap` peers.
    pub fn new(cap: usize, keys: KeyedHash) -> LocalPeers {
        LocalPeers { map: HashMap::with_hasher(keys), cap }
    }

    /// `peer` announced itself from `at`. True when it is new (or moved): worth an
    /// announcement of our own, in case it missed ours.
    pub fn heard(&mut self, peer: Ipv6Addr, at: SocketAddrV4, now: Duration) -> bool {
        if !self.map.contains_key(&peer) && self.map.len() >= self.cap {
            self.expire(now);
            if self.map.len() >= self.cap {
                return false;
            }
        }
        self.map.insert(peer, (at, now)).is_none_or(|(old, _)| old != at)
    }

    /// Where `peer` was heard, if within the validity.
    pub fn get(&self, peer: &Ipv6Addr, now: Duration) -> Option<SocketAddrV4> {
        self.map.get(peer).filter(|(_, t)| now.saturating_sub(*t) < VALIDITY).map(|(a, _)| *a)
    }

    /// Forget what is older than the validity.
    pub fn expire(&mut self, now: Duration) {
        self.map.retain(|_, (_, t)| now.saturating_sub(*t) < VALIDITY);
    }

    /// Everything (the mapping changed: we are on another network).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Peers known.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// None known.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heard_kept_for_600_s_and_capped() {
        let mut l = LocalPeers::new(2, KeyedHash::new(3, 4));
        let p = |i: u16| Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, i);
        let at: SocketAddrV4 = "10.1.0.3:40000".parse().unwrap();
        assert!(l.heard(p(1), at, Duration::ZERO), "new");
        assert!(!l.heard(p(1), at, Duration::from_secs(1)), "heard again: nothing new");
        assert!(l.heard(p(2), at, Duration::from_secs(1)));
        assert!(!l.heard(p(3), at, Duration::from_secs(2)), "full");
        assert_eq!(l.get(&p(1), Duration::from_secs(600)), Some(at));
        assert_eq!(l.get(&p(1), Duration::from_secs(601)), None, "stale");
        assert!(l.heard(p(3), at, Duration::from_secs(700)), "room again once the old ones expired");
    }
}
