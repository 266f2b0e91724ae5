//! UDP header (RFC 768), with its checksum over the IPv4 pseudo-header (the Teredo
//! outer layer) or the IPv6 one (UDP inside the tunnel, RFC 2460 §8.1).

use crate::checksum::{self, PseudoHeader};
use crate::{ip_protocol, read_u16, write_u16, Error, Result};

mod field {
    #![allow(non_snake_case)]
    use crate::field::*;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;

    /// The payload of a datagram whose length field says `length`.
    pub const fn PAYLOAD(length: usize) -> Field {
        CHECKSUM.end..length
    }
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// A view over a UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wrap a buffer without checking it; accessors may panic until checked.
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wrap an untrusted buffer: after this succeeds no accessor can panic.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validate the length field against the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if len > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Return the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::SRC_PORT])
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::DST_PORT])
    }
    /// Length field (header and payload).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::LENGTH])
    }
    /// Checksum field; 0 means "none" over IPv4 and is refused over IPv6.
    pub fn checksum(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }
    /// The payload, bounded by the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD(usize::from(self.len()))]
    }
    /// Whether the checksum verifies over the pseudo-header of `src` and `dst`, IPv4 or
    /// IPv6 addresses. A zero checksum is accepted over IPv4 (none was computed) and
    /// refused over IPv6, where it is mandatory.
    pub fn verify_checksum<A: PseudoHeader>(&self, src: &A, dst: &A) -> bool {
        if self.checksum() == 0 {
            return A::UDP_CHECKSUM_OPTIONAL;
        }
        let len = self.len();
        let data = &self.buffer.as_ref()[..usize::from(len)];
        let acc = A::pseudo_header(src, dst, ip_protocol::UDP, len) + checksum::sum(data);
        checksum::fold(acc) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Set the source port.
    pub fn set_src_port(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::SRC_PORT], v);
    }
    /// Set the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::DST_PORT], v);
    }
    /// Set the length field (header and payload).
    pub fn set_len(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::LENGTH], v);
    }
    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], v);
    }
    /// Mutable payload, bounded by the length field.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        &mut self.buffer.as_mut()[field::PAYLOAD(len)]
    }
    /// Compute and store the checksum over the pseudo-header of `src` and `dst` (IPv4
    /// or IPv6 addresses), the header and the payload.
    pub fn fill_checksum<A: PseudoHeader>(&mut self, src: &A, dst: &A) {
        self.set_checksum(0);
        let len = self.len();
        let data = &self.buffer.as_ref()[..usize::from(len)];
        let acc = A::pseudo_header(src, dst, ip_protocol::UDP, len) + checksum::sum(data);
        // A computed 0 is sent as 0xffff: a zero field means "no checksum" (RFC 768).
        let c = match checksum::finish(acc) {
            0 => 0xffff,
            c => c,
        };
        self.set_checksum(c);
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl UdpRepr {
    /// Parse a checked datagram, verifying its checksum over the pseudo-header of `src`
    /// and `dst` (IPv4 or IPv6 addresses).
    pub fn parse<T: AsRef<[u8]>, A: PseudoHeader>(packet: &UdpPacket<T>, src: &A, dst: &A) -> Result<Self> {
        if !packet.verify_checksum(src, dst) {
            return Err(Error::BadChecksum);
        }
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: usize::from(packet.len()) - HEADER_LEN,
        })
    }

    /// Bytes the header needs.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header at the start of `buf`, checksum included. The checksum covers
    /// the payload, so the caller places the `payload_len` bytes after the header first;
    /// `src` and `dst` are the addresses of the IPv4 or IPv6 packet that carries it.
    /// Returns the header length, where the payload starts.
    pub fn emit<A: PseudoHeader>(&self, src: &A, dst: &A, buf: &mut [u8]) -> Result<usize> {
        let len = HEADER_LEN + self.payload_len;
        let len16 = u16::try_from(len).map_err(|_| Error::BadLength)?;
        let mut packet = UdpPacket::new_unchecked(buf.get_mut(..len).ok_or(Error::BufferTooSmall)?);
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len16);
        packet.fill_checksum(src, dst);
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 45);
    const DST: Ipv4Addr = Ipv4Addr::new(65, 54, 227, 120);

    #[test]
    fn emit_parse_and_checksum() {
        let mut buf = [0u8; 8 + 5];
        buf[8..].copy_from_slice(b"hello");
        let repr = UdpRepr { src_port: 40000, dst_port: 3544, payload_len: 5 };
        assert_eq!(repr.emit(&SRC, &DST, &mut buf).unwrap(), 8);
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert!(p.verify_checksum(&SRC, &DST));
        assert_eq!(UdpRepr::parse(&p, &SRC, &DST).unwrap(), repr);
        // Any flipped bit breaks it; a zeroed checksum is accepted.
        let mut bad = buf;
        bad[9] ^= 1;
        let p = UdpPacket::new_checked(&bad[..]).unwrap();
        assert_eq!(UdpRepr::parse(&p, &SRC, &DST).unwrap_err(), Error::BadChecksum);
        bad[6] = 0;
        bad[7] = 0;
        assert!(UdpPacket::new_checked(&bad[..]).unwrap().verify_checksum(&SRC, &DST));
    }

    #[test]
    fn length_field_is_checked() {
        let mut buf = [0u8; 8];
        buf[5] = 7;
        assert_eq!(UdpPacket::new_checked(&buf[..]).unwrap_err(), Error::BadLength);
        buf[5] = 9;
        assert_eq!(UdpPacket::new_checked(&buf[..]).unwrap_err(), Error::Truncated);
        assert_eq!(UdpPacket::new_checked(&buf[..7]).unwrap_err(), Error::Truncated);
    }

    /// UDP from [2001:db8::1]:40000 to [2001:db8::2]:3544 carrying "hello", checksum
    /// 0xb674. Derived apart from this crate, so that a mistake shared by emit and parse
    /// cannot hide: by hand from RFC 2460 §8.1 (16-bit words over the pseudo-header
    /// with a 32-bit length and next header 17, the header with a zero checksum, the
    /// data padded to an even length), and the same bytes from Linux's UDP over IPv6.
    const V6_DATAGRAM: [u8; 13] = [0x9c, 0x40, 0x0d, 0xd8, 0x00, 0x0d, 0xb6, 0x74, b'h', b'e', b'l', b'l', b'o'];

    fn v6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_vector_emits_and_parses() {
        let (src, dst) = (v6("2001:db8::1"), v6("2001:db8::2"));
        let repr = UdpRepr { src_port: 40000, dst_port: 3544, payload_len: 5 };
        let mut buf = [0xffu8; 13];
        buf[8..].copy_from_slice(b"hello");
        assert_eq!(repr.emit(&src, &dst, &mut buf).unwrap(), 8);
        assert_eq!(buf, V6_DATAGRAM);
        let p = UdpPacket::new_checked(&V6_DATAGRAM[..]).unwrap();
        assert_eq!(p.checksum(), 0xb674);
        assert_eq!(UdpRepr::parse(&p, &src, &dst).unwrap(), repr);
        // The pseudo-header counts: another source does not verify.
        assert_eq!(UdpRepr::parse(&p, &v6("2001:db8::3"), &dst).unwrap_err(), Error::BadChecksum);
    }

    #[test]
    fn zero_checksum_is_refused_over_ipv6() {
        let (src, dst) = (v6("2001:db8::1"), v6("2001:db8::2"));
        let mut b = V6_DATAGRAM;
        b[6..8].fill(0);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(!p.verify_checksum(&src, &dst));
        assert_eq!(UdpRepr::parse(&p, &src, &dst).unwrap_err(), Error::BadChecksum);
    }

    #[test]
    fn computed_zero_is_sent_as_all_ones() {
        // Choose the source port so that the checksum computes to 0: the field must
        // then carry 0xffff, which verifies, and never 0.
        let (src, dst) = (v6("2001:db8::1"), v6("2001:db8::2"));
        let mut buf = V6_DATAGRAM;
        buf[6..8].fill(0);
        let acc = checksum::ipv6_pseudo_header(&src, &dst, ip_protocol::UDP, 13) + checksum::sum(&buf);
        // Adding the checksum to a word, with the end-around carry of one's-complement
        // arithmetic, brings the sum to 0xffff.
        let (port, carry) = 40000u16.overflowing_add(checksum::finish(acc));
        let port = port + u16::from(carry);
        let repr = UdpRepr { src_port: port, dst_port: 3544, payload_len: 5 };
        repr.emit(&src, &dst, &mut buf).unwrap();
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum(&src, &dst));
    }

    #[test]
    fn emit_refuses_short_buffers_and_long_payloads() {
        let repr = UdpRepr { src_port: 1, dst_port: 2, payload_len: 5 };
        assert_eq!(repr.emit(&SRC, &DST, &mut [0u8; 12]).unwrap_err(), Error::BufferTooSmall);
        let big = UdpRepr { payload_len: 65_528, ..repr };
        assert_eq!(big.emit(&SRC, &DST, &mut [0u8; 16]).unwrap_err(), Error::BadLength);
    }
}
