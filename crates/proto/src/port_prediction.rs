//! RFC 6081 §5.4 and §5.5: a random local port per peer, for a client behind a
//! port-preserving or a sequential port-symmetric NAT.
//!
//! Behind such a NAT every destination gets its own mapping, so a peer behind a
//! port-restricted (or another such) NAT cannot answer the mapping our address embeds.
//! The client opens a fresh local port for the peer, predicts the external port the
//! NAT gives it towards that peer (the same port, when the NAT preserves ports; the
//! midpoint of two servers' observations around our first bubble, when it counts them
//! out in sequence: the Echo Test), and tells the peer in a Random Port trailer. The
//! peer's bubble to that port passes the mapping our first bubble from it opened.
//!
//! The same table keeps the random port a peer advertised to us, so that our bubbles
//! go there too. It is small and capped: one entry per peer being reached through
//! such a port, each entry a socket in the daemon.

use crate::peer_table::KeyedHash;
use crate::transmit::Source;
use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::num::NonZeroU16;
use std::time::Duration;

/// An Echo Test under way (§5.5.4.1.1): the nonces of the router solicitations sent
/// to the primary and the secondary server from the random port, and the external
/// ports their answers saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoTest {
    /// Nonces of the solicitations to the primary and the secondary address.
    pub nonces: [[u8; 8]; 2],
    /// External ports the primary's and the secondary's answers reported (`None`: not
    /// yet).
    pub ports: [Option<NonZeroU16>; 2],
    /// Tests run so far for this peer (the failover timer waits this many seconds).
    pub tries: u8,
    /// When to give up on this test.
    pub due: Duration,
}

impl EchoTest {
    /// The predicted port, once both answers came: between the two observations, where
    /// the bubble sent between them went out (§5.5.4.4, read as the midpoint).
    pub fn prediction(&self) -> Option<NonZeroU16> {
        let [Some(lower), Some(upper)] = self.ports else { return None };
        // The midpoint of two ports above zero is above zero.
        NonZeroU16::new(((u32::from(lower.get()) + u32::from(upper.get())) / 2) as u16)
    }
}

/// The random ports of one peer.
#[derive(Debug, Clone, Default)]
pub struct PeerPorts {
    /// Our random local port for this peer, if one is open.
    pub local: Option<NonZeroU16>,
    /// The external port we expect our NAT to give `local` towards the peer, which the
    /// Random Port trailer announces, if known.
    pub predicted: Option<NonZeroU16>,
    /// The random port the peer announced (Peer Random Port), if any.
    pub peer: Option<NonZeroU16>,
    /// The peer answered on our random port: everything to it leaves from there
    /// (DR-Random).
    pub via_local: bool,
    /// The Echo Test under way, for a sequential NAT.
    pub echo: Option<EchoTest>,
    /// Last data sent through `local` (Last Data Packet Sent Timestamp, §5.4.1).
    pub last_data: Duration,
    /// Refresh bubbles since the last data (Connection Refresh Count).
    pub refreshes: u8,
    /// Last refresh round that looked at this entry (the Peer Refresh Timer).
    pub refreshed_at: Duration,
    /// When the entry was made or last used, to retire it with its peer.
    pub touched: Duration,
}

/// The table of peers' random ports, capped.
#[derive(Debug)]
pub struct PortTable {
    map: HashMap<Ipv6Addr, PeerPorts, KeyedHash>,
    cap: usize,
    /// Local ports of forgotten peers, to close at the next chance.
    closing: Vec<NonZeroU16>,
}

impl PortTable {
    /// A table of at most `cap` peers.
    pub fn new(cap: usize, keys: KeyedHash) -> PortTable {
        PortTable { map: HashMap::with_hasher(keys), cap, closing: Vec::new() }
    }

    /// Nothing here: the packet path skips the table.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Every entry.
    pub fn iter(&self) -> impl Iterator<Item = (&Ipv6Addr, &PeerPorts)> {
        self.map.iter()
    }

    /// The entry of `peer`.
    pub fn get(&self, peer: &Ipv6Addr) -> Option<&PeerPorts> {
        self.map.get(peer)
    }

    /// The entry of `peer`, to change it.
    pub fn get_mut(&mut self, peer: &Ipv6Addr) -> Option<&mut PeerPorts> {
        self.map.get_mut(peer)
    }

    /// The entry of `peer`, made if there is room.
    pub fn entry(&mut self, peer: Ipv6Addr, now: Duration) -> Option<&mut PeerPorts> {
        if !self.map.contains_key(&peer) && self.map.len() >= self.cap {
            return None;
        }
        // Made now: its age counts from here (touched again only by what proves the
        // peer, never by an announcement anyone could repeat).
        Some(self.map.entry(peer).or_insert_with(|| PeerPorts { touched: now, ..PeerPorts::default() }))
    }

    /// Forget every peer (learned under a mapping that is gone): their local ports are
    /// closed at the next chance ([`take_closing`](Self::take_closing)).
    pub fn forget_all(&mut self) {
        self.closing.extend(self.map.drain().filter_map(|(_, e)| e.local));
    }

    /// Local ports waiting to be closed.
    pub fn has_closing(&self) -> bool {
        !self.closing.is_empty()
    }

    /// The local ports to close now.
    pub fn take_closing(&mut self) -> Vec<NonZeroU16> {
        std::mem::take(&mut self.closing)
    }

    /// Forget `peer`; its local port, if any, is the caller's to close.
    pub fn remove(&mut self, peer: &Ipv6Addr) -> Option<PeerPorts> {
        self.map.remove(peer)
    }

    /// The socket to send to `peer` from: its random port once the peer answered there,
    /// else the service socket.
    pub fn via(&self, peer: &Ipv6Addr) -> Source {
        if self.map.is_empty() {
            return Source::Service;
        }
        Source::service_or(self.map.get(peer).filter(|p| p.via_local).and_then(|p| p.local))
    }

    /// The peer whose random port is `port`.
    pub fn owner(&self, port: NonZeroU16) -> Option<Ipv6Addr> {
        self.map.iter().find(|(_, p)| p.local == Some(port)).map(|(a, _)| *a)
    }

    /// The peer whose Echo Test sent `nonce`, and which of its two solicitations.
    pub fn echo_nonce(&self, nonce: &[u8; 8]) -> Option<(Ipv6Addr, usize)> {
        self.map.iter().find_map(|(a, p)| {
            let e = p.echo.as_ref()?;
            e.nonces.iter().position(|n| n == nonce).map(|i| (*a, i))
        })
    }

    /// Random ports open.
    pub fn open_ports(&self) -> usize {
        self.map.values().filter(|p| p.local.is_some()).count()
    }

    /// Peers whose traffic goes through our random port for them.
    pub fn routed_peers(&self) -> usize {
        self.map.values().filter(|p| p.via_local && p.local.is_some()).count()
    }

    /// Every peer, for the timer's rounds.
    pub fn peers(&self) -> Vec<Ipv6Addr> {
        self.map.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn midpoint_of_the_two_observations() {
        let port = |p: u16| NonZeroU16::new(p);
        let mut e = EchoTest { nonces: [[1; 8], [2; 8]], ports: [port(1200), None], tries: 1, due: Duration::ZERO };
        assert_eq!(e.prediction(), None);
        e.ports[1] = port(1202);
        assert_eq!(e.prediction(), port(1201));
        e.ports = [port(65534), port(65535)];
        assert_eq!(e.prediction(), port(65534));
    }

    #[test]
    fn the_cap_holds() {
        let mut t = PortTable::new(2, KeyedHash::new(1, 2));
        let a = |i: u16| Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, i);
        assert!(t.entry(a(1), Duration::ZERO).is_some());
        assert!(t.entry(a(2), Duration::ZERO).is_some());
        assert!(t.entry(a(3), Duration::ZERO).is_none(), "a third peer is refused");
        assert!(t.entry(a(1), Duration::ZERO).is_some(), "a known peer still is");
        let port = NonZeroU16::new(5000).unwrap();
        t.get_mut(&a(1)).unwrap().local = Some(port);
        assert_eq!(t.via(&a(1)), Source::Service, "not before the peer answered there");
        t.get_mut(&a(1)).unwrap().via_local = true;
        assert_eq!(t.via(&a(1)), Source::Port(port));
        assert_eq!(t.owner(port), Some(a(1)));
        assert_eq!(t.owner(NonZeroU16::new(5001).unwrap()), None);
    }
}
