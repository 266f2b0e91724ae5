//! The Internet checksum (RFC 1071) and the IPv4/IPv6 pseudo-headers.
//!
//! Sums are kept unfolded in a `u64` so that pieces (pseudo-header, header, payload)
//! can be added before one final fold. 32-bit words are summed at a time: since
//! 2^16 ≡ 1 (mod 0xffff), that yields the same folded result as 16-bit words.

use core::net::{Ipv4Addr, Ipv6Addr};

/// The unfolded one's-complement sum of `data`, as if padded with a zero byte.
#[inline]
pub fn sum(data: &[u8]) -> u64 {
    let mut acc: u64 = 0;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut tail = [0u8; 4];
    tail[..rest.len()].copy_from_slice(rest);
    acc + u64::from(u32::from_be_bytes(tail))
}

/// Fold an unfolded sum into 16 bits (without the final complement).
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The checksum field value for data whose unfolded sum is `acc`.
#[inline]
pub fn finish(acc: u64) -> u16 {
    !fold(acc)
}

/// The unfolded sum of the IPv6 pseudo-header (RFC 8200 §8.1).
#[inline]
pub fn ipv6_pseudo_header(src: &Ipv6Addr, dst: &Ipv6Addr, next_header: u8, length: u32) -> u64 {
    sum(&src.octets()) + sum(&dst.octets()) + u64::from(length) + u64::from(next_header)
}

/// The unfolded sum of the IPv4 pseudo-header (RFC 768).
#[inline]
pub fn ipv4_pseudo_header(src: &Ipv4Addr, dst: &Ipv4Addr, protocol: u8, length: u16) -> u64 {
    sum(&src.octets()) + sum(&dst.octets()) + u64::from(protocol) + u64::from(length)
}

/// An IP address family whose pseudo-header an upper-layer checksum covers. UDP runs
/// over both: IPv4 outside the tunnel, IPv6 inside it.
pub trait PseudoHeader: sealed::Sealed {
    /// Whether UDP may go without a checksum (a zero field) over this family. RFC 768
    /// lets IPv4 senders skip it; over IPv6 it is mandatory and receivers discard a
    /// zero checksum (RFC 2460 §8.1, RFC 8200 §8.1).
    const UDP_CHECKSUM_OPTIONAL: bool;

    /// The unfolded sum of the pseudo-header for an upper-layer packet of `length`
    /// bytes between `src` and `dst`.
    fn pseudo_header(src: &Self, dst: &Self, protocol: u8, length: u16) -> u64;
}

impl PseudoHeader for Ipv4Addr {
    const UDP_CHECKSUM_OPTIONAL: bool = true;

    #[inline]
    fn pseudo_header(src: &Self, dst: &Self, protocol: u8, length: u16) -> u64 {
        ipv4_pseudo_header(src, dst, protocol, length)
    }
}

impl PseudoHeader for Ipv6Addr {
    const UDP_CHECKSUM_OPTIONAL: bool = false;

    #[inline]
    fn pseudo_header(src: &Self, dst: &Self, protocol: u8, length: u16) -> u64 {
        ipv6_pseudo_header(src, dst, protocol, u32::from(length))
    }
}

// Only the two IP families have pseudo-headers; the trait is not for others to implement.
mod sealed {
    pub trait Sealed {}
    impl Sealed for core::net::Ipv4Addr {}
    impl Sealed for core::net::Ipv6Addr {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data)), 0xddf2);
        assert_eq!(finish(sum(&data)), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum(&[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
        assert_eq!(fold(sum(&[0xff])), 0xff00);
    }

    #[test]
    fn word_size_does_not_change_the_result() {
        let data: std::vec::Vec<u8> = (0..=255u8).cycle().take(1001).collect();
        let mut acc16: u64 = 0;
        for c in data.chunks(2) {
            let hi = u64::from(c[0]) << 8;
            let lo = c.get(1).map_or(0, |&b| u64::from(b));
            acc16 += hi | lo;
        }
        assert_eq!(fold(sum(&data)), fold(acc16));
    }
}
