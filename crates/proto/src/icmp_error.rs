//! ICMPv6 errors a Teredo node sends back to the IPv6 side (RFC 4443 §2.4): never
//! about an error or a packet from an unspecified/multicast source or to a multicast
//! destination, at most as much of the offending packet as keeps the error within
//! 1280 bytes, and rate limited.

use shipworm_wire::icmpv6::{message, Icmpv6Repr};
use shipworm_wire::ip_protocol;
use shipworm_wire::ipv6::{Ipv6Packet, Ipv6Repr, HEADER_LEN, MIN_MTU};
use std::net::Ipv6Addr;
use std::time::Duration;

/// A token bucket: `rate` errors per second, bursts up to `rate`.
#[derive(Debug, Clone)]
pub struct RateLimit {
    rate: u32,
    tokens: u32,
    last: Duration,
}

impl RateLimit {
    /// `rate` per second.
    pub fn new(rate: u32) -> RateLimit {
        RateLimit { rate, tokens: rate, last: Duration::ZERO }
    }

    /// Take a token if there is one.
    pub fn allow(&mut self, now: Duration) -> bool {
        let elapsed = now.saturating_sub(self.last);
        let refill = (elapsed.as_millis() as u64 * u64::from(self.rate) / 1000) as u32;
        if refill > 0 {
            self.tokens = (self.tokens + refill).min(self.rate);
            self.last = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// Whether RFC 4443 §2.4 (e) allows an error about `offending`.
pub fn may_answer(offending: &Ipv6Packet<&[u8]>) -> bool {
    let (src, dst) = (offending.src_addr(), offending.dst_addr());
    if src.is_unspecified() || src.is_multicast() || dst.is_multicast() {
        return false;
    }
    // An ICMPv6 error (not behind extension headers: then we cannot be sure, stay quiet).
    match offending.next_header() {
        ip_protocol::ICMPV6 => offending.payload().first().is_some_and(|&t| !message::is_error(t)),
        ip_protocol::HOP_BY_HOP | ip_protocol::DEST_OPTS | ip_protocol::ROUTING | ip_protocol::FRAGMENT => false,
        _ => true,
    }
}

/// Build into `out` an error `kind` (a representation whose invoking part is filled
/// here) from `from` about `offending`; returns the packet length, or `None` when the
/// rules forbid an error or `out` is too small.
pub fn build(
    from: &Ipv6Addr,
    offending: &Ipv6Packet<&[u8]>,
    make: impl FnOnce(&[u8]) -> Icmpv6Repr<'_>,
    out: &mut [u8],
) -> Option<usize> {
    if !may_answer(offending) {
        return None;
    }
    let room = MIN_MTU - HEADER_LEN - 8;
    let quoted = &offending.packet()[..offending.packet().len().min(room)];
    let icmp = make(quoted);
    let to = offending.src_addr();
    let len = icmp.buffer_len();
    Ipv6Repr { src_addr: *from, dst_addr: to, next_header: ip_protocol::ICMPV6, payload_len: len, hop_limit: 64 }
        .emit(out)
        .ok()?;
    icmp.emit(from, &to, out.get_mut(HEADER_LEN..)?).ok()?;
    Some(HEADER_LEN + len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shipworm_wire::icmpv6::unreachable;

    fn packet(src: &str, dst: &str, nh: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; 40];
        Ipv6Repr {
            src_addr: src.parse().unwrap(),
            dst_addr: dst.parse().unwrap(),
            next_header: nh,
            payload_len: payload.len(),
            hop_limit: 64,
        }
        .emit(&mut v)
        .unwrap();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn errors_quote_at_most_what_fits_in_1280() {
        let p = packet("2001:db8::1", "2001:0:4136:e378::1", 17, &[0u8; 1400]);
        let p = Ipv6Packet::new_checked(&p[..]).unwrap();
        let mut out = [0u8; 2000];
        let n = build(
            &"2001:db8::ff".parse().unwrap(),
            &p,
            |q| Icmpv6Repr::DstUnreachable { code: unreachable::ADDRESS, invoking: q },
            &mut out,
        )
        .unwrap();
        assert_eq!(n, 1280);
        let e = Ipv6Packet::new_checked(&out[..n]).unwrap();
        assert_eq!(e.dst_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn case47_no_error_about_errors_or_from_multicast_or_unspecified() {
        let mut out = [0u8; 2000];
        let me: Ipv6Addr = "2001:db8::ff".parse().unwrap();
        for p in [
            packet("2001:db8::1", "2001:0::1", 58, &[1, 0, 0, 0, 0, 0, 0, 0]),
            packet("ff02::1", "2001:0::1", 17, &[0; 8]),
            packet("::", "2001:0::1", 17, &[0; 8]),
            packet("2001:db8::1", "ff0e::1", 17, &[0; 8]),
        ] {
            let p = Ipv6Packet::new_checked(&p[..]).unwrap();
            assert!(build(&me, &p, |q| Icmpv6Repr::DstUnreachable { code: 3, invoking: q }, &mut out).is_none());
        }
        // An echo request is not an error: it may be answered with one.
        let p = packet("2001:db8::1", "2001:0::1", 58, &[128, 0, 0, 0, 0, 0, 0, 0]);
        let p = Ipv6Packet::new_checked(&p[..]).unwrap();
        assert!(build(&me, &p, |q| Icmpv6Repr::DstUnreachable { code: 3, invoking: q }, &mut out).is_some());
    }

    #[test]
    fn case48_rate_limit() {
        let mut r = RateLimit::new(10);
        let t0 = Duration::from_secs(5);
        let sent = (0..1000).filter(|_| r.allow(t0)).count();
        assert_eq!(sent, 10);
        assert!(!r.allow(t0 + Duration::from_millis(50)));
        assert!(r.allow(t0 + Duration::from_millis(100)));
        let sent: usize =
            (0..100).filter(|i| r.allow(t0 + Duration::from_secs(1) + Duration::from_millis(*i * 10))).count();
        assert!(sent <= 20, "{sent}");
    }
}
