//! Packets a client received from native IPv6 sources it cannot trust yet (RFC 4380
//! §5.2.3 case 6): held until the direct IPv6 connectivity test (§5.2.9) says which
//! relay really serves that source, then delivered in order, or dropped and counted.
//!
//! A native host that speaks first reaches the client through whatever relay is
//! nearest to it; the client has never heard of that relay, and anyone able to send a
//! datagram through the client's NAT could claim any native source. So the packet
//! waits while an echo request goes to the source through the server; the echo reply
//! comes back through the relay that serves the source, and only packets that arrived
//! from that same relay are delivered.
//!
//! Every first contact can be forged, so everything here is bounded as a whole, not
//! only per source: how many sources wait at once, how many bytes they hold together,
//! and how many echo requests leave per second. A flood of spoofed first contacts
//! costs the client at most those budgets; packets over them are dropped and counted.

use crate::drop_reason::DropReason;
use crate::icmp_error::RateLimit;
use crate::peer_table::{KeyedHash, PacketQueue};
use std::collections::HashMap;
use std::net::{Ipv6Addr, SocketAddrV4};
use std::time::Duration;

/// The budgets shared by every waiting source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstContactLimits {
    /// Native sources waiting for their test at once.
    pub sources: usize,
    /// Bytes of packets held for all of them together.
    pub bytes: usize,
    /// Bytes held for one source.
    pub bytes_per_source: usize,
    /// Echo requests of connectivity tests per second, all peers together (bursts up
    /// to as many).
    pub tests_per_sec: u32,
}

impl Default for FirstContactLimits {
    fn default() -> Self {
        FirstContactLimits { sources: 256, bytes: 256 * 1024, bytes_per_source: 4096, tests_per_sec: 50 }
    }
}

/// IPv4 endpoints one native source's packets are held for at once. Held apart: a
/// packet forged in the source's name from elsewhere, arriving first, must not shut
/// out the genuine ones from its relay (which then only the test's verdict sorts out).
/// A newcomer past the cap takes the place of the endpoint held longest: forgeries
/// sent first cannot fill the places before the genuine packet comes.
pub const ENDPOINTS_PER_SOURCE: usize = 4;

/// Packets from one native source through one IPv4 endpoint.
#[derive(Debug)]
struct Waiting {
    from: SocketAddrV4,
    since: Duration,
    queue: PacketQueue,
}

/// What became of a source's held packets.
#[derive(Debug)]
pub struct Release {
    /// Those that came through the endpoint the test proved: deliver them, in order.
    pub deliver: Option<crate::peer_table::QueueDrain>,
    /// How many came through any other endpoint: dropped.
    pub dropped: usize,
}

/// The held packets of every native source under test.
#[derive(Debug)]
pub struct FirstContacts {
    limits: FirstContactLimits,
    waiting: HashMap<Ipv6Addr, Vec<Waiting>, KeyedHash>,
    bytes: usize,
    tests: RateLimit,
    /// When the oldest waiting packet came, or earlier (a release or discard leaves it
    /// behind): read every loop round for the timer's deadline, so kept rather than
    /// looked for; made exact again by [`FirstContacts::expire`].
    oldest: Option<Duration>,
}

impl FirstContacts {
    /// Empty, within `limits`; `keys` key the table's hash (sources are chosen by
    /// whoever sends).
    pub fn new(limits: FirstContactLimits, keys: KeyedHash) -> Self {
        FirstContacts {
            limits,
            waiting: HashMap::with_hasher(keys),
            bytes: 0,
            tests: RateLimit::new(limits.tests_per_sec.max(1)),
            oldest: None,
        }
    }

    /// Sources waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Bytes held for all sources.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether `src` has packets held.
    pub fn contains(&self, src: &Ipv6Addr) -> bool {
        self.waiting.contains_key(src)
    }

    /// Hold `packet` from `src`, received from `from`: apart for each endpoint it came
    /// through, at most [`ENDPOINTS_PER_SOURCE`] of them. Returns how many packets of
    /// another endpoint gave way to it (dropped).
    pub fn hold(
        &mut self,
        src: Ipv6Addr,
        from: SocketAddrV4,
        packet: &[u8],
        now: Duration,
    ) -> Result<usize, DropReason> {
        if self.bytes + packet.len() > self.limits.bytes {
            return Err(DropReason::FirstContactBudget);
        }
        if !self.waiting.contains_key(&src) && self.waiting.len() >= self.limits.sources {
            return Err(DropReason::FirstContactBudget);
        }
        let ws = self.waiting.entry(src).or_default();
        let mut gave_way = 0;
        if ws.len() >= ENDPOINTS_PER_SOURCE && !ws.iter().any(|w| w.from == from) {
            if let Some(oldest) = (0..ws.len()).min_by_key(|&i| ws[i].since) {
                let w = ws.remove(oldest);
                self.bytes -= w.queue.bytes();
                gave_way = w.queue.len();
            }
        }
        let at = match ws.iter().position(|w| w.from == from) {
            Some(i) => i,
            None => {
                ws.push(Waiting { from, since: now, queue: PacketQueue::default() });
                self.oldest = Some(self.oldest.map_or(now, |o| o.min(now)));
                ws.len() - 1
            }
        };
        if !ws[at].queue.push(packet, self.limits.bytes_per_source) {
            if ws[at].queue.is_empty() {
                ws.remove(at);
            }
            if ws.is_empty() {
                self.waiting.remove(&src);
            }
            return Err(DropReason::QueueFull);
        }
        self.bytes += packet.len();
        Ok(gave_way)
    }

    /// The test for `src` succeeded with its reply from `proven`: release its packets
    /// that came through there, drop the rest.
    pub fn release(&mut self, src: &Ipv6Addr, proven: SocketAddrV4) -> Option<Release> {
        let ws = self.waiting.remove(src)?;
        let mut release = Release { deliver: None, dropped: 0 };
        for mut w in ws {
            self.bytes -= w.queue.bytes();
            if w.from == proven {
                release.deliver = Some(w.queue.drain());
            } else {
                release.dropped += w.queue.len();
            }
        }
        Some(release)
    }

    /// Give up on `src`: its packets are dropped; returns how many.
    pub fn discard(&mut self, src: &Ipv6Addr) -> usize {
        let ws = self.waiting.remove(src).unwrap_or_default();
        for w in &ws {
            self.bytes -= w.queue.bytes();
        }
        ws.iter().map(|w| w.queue.len()).sum()
    }

    /// Drop what waited longer than `max_age` (a test ends well before: this only
    /// catches sources whose peer entry went away without a verdict). Returns the
    /// packets dropped.
    pub fn expire(&mut self, now: Duration, max_age: Duration) -> usize {
        let mut dropped = 0;
        let bytes = &mut self.bytes;
        self.waiting.retain(|_, ws| {
            ws.retain(|w| {
                let keep = now.saturating_sub(w.since) < max_age;
                if !keep {
                    *bytes -= w.queue.bytes();
                    dropped += w.queue.len();
                }
                keep
            });
            !ws.is_empty()
        });
        self.oldest = self.waiting.values().flatten().map(|w| w.since).min();
        dropped
    }

    /// When the oldest waiting packet came, or earlier (`None`: none waits): never
    /// later than it.
    pub fn oldest(&self) -> Option<Duration> {
        self.oldest.filter(|_| !self.waiting.is_empty())
    }

    /// Forget everything (the address changed): returns the packets dropped.
    pub fn clear(&mut self) -> usize {
        let n = self.waiting.values().flatten().map(|w| w.queue.len()).sum();
        self.waiting.clear();
        self.bytes = 0;
        self.oldest = None;
        n
    }

    /// Take one echo request's worth of the test budget, if there is one.
    pub fn allow_test(&mut self, now: Duration) -> bool {
        self.tests.allow(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(192, 0, 2, 10), 3544);
    const R2: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(192, 0, 2, 11), 3544);

    fn src(i: u32) -> Ipv6Addr {
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, (i >> 16) as u16, i as u16)
    }

    fn limits() -> FirstContactLimits {
        FirstContactLimits { sources: 4, bytes: 1000, bytes_per_source: 300, tests_per_sec: 5 }
    }

    #[test]
    fn held_packets_are_released_in_order_only_to_the_proven_endpoint() {
        let mut f = FirstContacts::new(limits(), KeyedHash::new(1, 2));
        let t = Duration::ZERO;
        // A packet forged from elsewhere first, then the genuine ones (#40, 6): each
        // endpoint's are held apart, and the test's verdict delivers the genuine ones.
        assert_eq!(f.hold(src(1), R2, &[3; 10], t), Ok(0));
        assert_eq!(f.hold(src(1), R, &[1; 10], t), Ok(0));
        assert_eq!(f.hold(src(1), R, &[2; 10], t), Ok(0));
        assert_eq!(f.hold(src(2), R, &[4; 10], t), Ok(0));
        assert_eq!(f.bytes(), 40);
        let Some(Release { deliver: Some(mut d), dropped: 1 }) = f.release(&src(1), R) else { panic!("deliver") };
        assert_eq!(d.next_packet(), Some(&[1u8; 10][..]));
        assert_eq!(d.next_packet(), Some(&[2u8; 10][..]));
        assert!(d.next_packet().is_none());
        assert!(matches!(f.release(&src(2), R2), Some(Release { deliver: None, dropped: 1 })), "proven elsewhere");
        assert_eq!((f.len(), f.bytes()), (0, 0));
        // As many forged endpoints as there are places, then the genuine one: the one
        // held longest gives way, and the genuine packet waits for the verdict.
        for i in 0..ENDPOINTS_PER_SOURCE as u16 {
            let forged = SocketAddrV4::new(R2.ip().to_owned(), 4000 + i);
            assert_eq!(f.hold(src(3), forged, &[0; 10], t + Duration::from_millis(u64::from(i))), Ok(0));
        }
        assert_eq!(f.hold(src(3), R, &[7; 10], t + Duration::from_secs(1)), Ok(1));
        let Some(Release { deliver: Some(mut d), dropped }) = f.release(&src(3), R) else { panic!("deliver") };
        assert_eq!((d.next_packet(), dropped), (Some(&[7u8; 10][..]), ENDPOINTS_PER_SOURCE - 1));
        assert_eq!(f.bytes(), 0);
    }

    #[test]
    fn every_budget_holds_against_a_flood() {
        let mut f = FirstContacts::new(limits(), KeyedHash::new(1, 2));
        let t = Duration::ZERO;
        let mut refused = 0;
        for i in 0..10_000 {
            if f.hold(src(i), R, &[0; 200], t).is_err() {
                refused += 1;
            }
            assert!(f.len() <= 4 && f.bytes() <= 1000);
        }
        assert_eq!(refused, 10_000 - 4);
        // One source cannot take more than its share.
        let mut f = FirstContacts::new(limits(), KeyedHash::new(1, 2));
        assert!(f.hold(src(1), R, &[0; 200], t).is_ok());
        assert_eq!(f.hold(src(1), R, &[0; 200], t), Err(DropReason::QueueFull));
        // Nor all of them more than the total.
        let mut f = FirstContacts::new(FirstContactLimits { bytes: 450, ..limits() }, KeyedHash::new(1, 2));
        assert!(f.hold(src(1), R, &[0; 200], t).is_ok());
        assert!(f.hold(src(2), R, &[0; 200], t).is_ok());
        assert_eq!(f.hold(src(3), R, &[0; 200], t), Err(DropReason::FirstContactBudget));
        assert!(!f.contains(&src(3)));
        // Tests: a burst of the rate, then the rate.
        let mut f = FirstContacts::new(limits(), KeyedHash::new(1, 2));
        let allowed = (0..100).filter(|_| f.allow_test(Duration::from_secs(10))).count();
        assert_eq!(allowed, 5);
        let later = (0..100).filter(|_| f.allow_test(Duration::from_secs(11))).count();
        assert_eq!(later, 5);
    }

    #[test]
    fn expiry_and_discard_return_the_bytes() {
        let mut f = FirstContacts::new(limits(), KeyedHash::new(1, 2));
        f.hold(src(1), R, &[0; 100], Duration::from_secs(1)).unwrap();
        f.hold(src(2), R, &[0; 100], Duration::from_secs(5)).unwrap();
        assert_eq!(f.expire(Duration::from_secs(12), Duration::from_secs(10)), 1);
        assert_eq!((f.len(), f.bytes()), (1, 100));
        assert_eq!(f.discard(&src(2)), 1);
        assert_eq!((f.len(), f.bytes()), (0, 0));
        f.hold(src(3), R, &[0; 100], Duration::from_secs(5)).unwrap();
        assert_eq!(f.clear(), 1);
        assert_eq!(f.bytes(), 0);
    }
}
