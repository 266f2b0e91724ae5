//! IPv4 header (RFC 791). Teredo's outer layer; the daemon normally leaves it to the
//! kernel's UDP sockets, but the benchmark generator and the tests build it by hand.

use crate::checksum;
use crate::{read_ipv4, read_u16, write_u16, Error, Result};
use core::net::Ipv4Addr;

mod field {
    use crate::field::*;

    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLAGS_FRAG: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// The flag bits of the flags and fragment-offset field: reserved, DF, MF.
const FLAGS_MASK: u16 = 0xe000;
const DONT_FRAG: u16 = 0x4000;
const MORE_FRAGS: u16 = 0x2000;

/// A view over an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wrap a buffer without checking it. Accessors may panic until
    /// [`check_len`](Self::check_len) has succeeded; use only for buffers you sized.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wrap an untrusted buffer: after this succeeds no accessor can panic.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validate version, header length and total length against the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 {
            return Err(Error::BadVersion);
        }
        let ihl = self.header_len();
        let total = usize::from(self.total_len());
        if ihl < HEADER_LEN || total < ihl {
            return Err(Error::BadLength);
        }
        if b.len() < total {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Return the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field (4 once checked).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    /// DSCP and ECN byte.
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }
    /// Total length (header and payload).
    pub fn total_len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::LENGTH])
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::IDENT])
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & DONT_FRAG != 0
    }
    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & MORE_FRAGS != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (self.flags_frag() & !FLAGS_MASK) << 3
    }
    fn flags_frag(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::FLAGS_FRAG])
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Upper-layer protocol.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        read_ipv4(&self.buffer.as_ref()[field::SRC_ADDR])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        read_ipv4(&self.buffer.as_ref()[field::DST_ADDR])
    }
    /// Whether the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        let b = self.buffer.as_ref();
        checksum::fold(checksum::sum(&b[..self.header_len()])) == 0xffff
    }
    /// The payload, bounded by the total length (link padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Set the version.
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }
    /// Set the header length in bytes (a multiple of 4).
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }
    /// Set the DSCP and ECN byte.
    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOS] = v;
    }
    /// Set the total length.
    pub fn set_total_len(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::LENGTH], v);
    }
    /// Set the identification.
    pub fn set_ident(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::IDENT], v);
    }
    fn set_flags_frag(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::FLAGS_FRAG], v);
    }
    /// Clear the three flag bits (the reserved bit included), keeping the offset.
    pub fn clear_flags(&mut self) {
        self.set_flags_frag(self.flags_frag() & !FLAGS_MASK);
    }
    /// Set the don't-fragment flag.
    pub fn set_dont_frag(&mut self, on: bool) {
        let v = self.flags_frag() & !DONT_FRAG;
        self.set_flags_frag(if on { v | DONT_FRAG } else { v });
    }
    /// Set the more-fragments flag.
    pub fn set_more_frags(&mut self, on: bool) {
        let v = self.flags_frag() & !MORE_FRAGS;
        self.set_flags_frag(if on { v | MORE_FRAGS } else { v });
    }
    /// Set the fragment offset in bytes (a multiple of 8).
    pub fn set_frag_offset(&mut self, offset: u16) {
        self.set_flags_frag((self.flags_frag() & FLAGS_MASK) | (offset >> 3));
    }
    /// Set the time to live.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Set the upper-layer protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }
    /// Set the header checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], v);
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }
    /// Recompute and store the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let len = self.header_len();
        let c = checksum::finish(checksum::sum(&self.buffer.as_ref()[..len]));
        self.set_checksum(c);
    }
    /// Mutable payload, bounded by the total length.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[start..end]
    }
}

/// A parsed IPv4 header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Upper-layer protocol.
    pub protocol: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
}

impl Ipv4Repr {
    /// Parse a checked packet. Fragments and bad header checksums are refused: Teredo
    /// payloads are consumed whole.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Self> {
        if !packet.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        if packet.more_frags() || packet.frag_offset() != 0 {
            return Err(Error::BadValue);
        }
        Ok(Ipv4Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len()) - packet.header_len(),
            ttl: packet.ttl(),
        })
    }

    /// Bytes this header needs.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header (no options, DF clear as RFC 4380 §5.1.2 advises) at the start
    /// of `buf`, which must hold the payload too since the total length claims it.
    /// Returns the header length, where the payload goes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = HEADER_LEN + self.payload_len;
        let total16 = u16::try_from(total).map_err(|_| Error::BadLength)?;
        let mut packet = Ipv4Packet::new_unchecked(buf.get_mut(..total).ok_or(Error::BufferTooSmall)?);
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN);
        packet.set_tos(0);
        packet.set_total_len(total16);
        packet.set_ident(0);
        packet.clear_flags();
        packet.set_frag_offset(0);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 20-byte header, UDP, 192.0.2.1 -> 198.51.100.7, total length 28.
    static HEADER: [u8; 28] = [
        0x45, 0x00, 0x00, 0x1c, 0x00, 0x00, 0x00, 0x00, 0x40, 0x11, 0x00, 0x00, 192, 0, 2, 1, 198, 51, 100, 7, 0, 1, 0,
        2, 0, 8, 0, 0,
    ];

    #[test]
    fn emit_then_parse() {
        let repr = Ipv4Repr {
            src_addr: Ipv4Addr::new(192, 0, 2, 1),
            dst_addr: Ipv4Addr::new(198, 51, 100, 7),
            protocol: crate::ip_protocol::UDP,
            payload_len: 8,
            ttl: 64,
        };
        let mut buf = [0u8; 28];
        assert_eq!(repr.emit(&mut buf).unwrap(), 20);
        assert_eq!(&buf[..10], &HEADER[..10]);
        assert_eq!(&buf[12..20], &HEADER[12..20]);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), repr);
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn emit_writes_every_header_byte() {
        // Scratch buffers are reused: nothing left in them may leak into a header.
        let repr = Ipv4Repr {
            src_addr: Ipv4Addr::new(192, 0, 2, 1),
            dst_addr: Ipv4Addr::new(198, 51, 100, 7),
            protocol: crate::ip_protocol::UDP,
            payload_len: 8,
            ttl: 64,
        };
        let (mut clean, mut dirty) = ([0u8; 28], [0xffu8; 28]);
        repr.emit(&mut clean).unwrap();
        repr.emit(&mut dirty).unwrap();
        assert_eq!(clean[..20], dirty[..20]);
        assert_eq!(repr.emit(&mut [0u8; 27]).unwrap_err(), Error::BufferTooSmall);
    }

    #[test]
    fn refuses_bad_headers() {
        assert_eq!(Ipv4Packet::new_checked(&HEADER[..19]).unwrap_err(), Error::Truncated);
        let mut b = HEADER;
        b[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::BadVersion);
        b[0] = 0x44;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::BadLength);
        let mut b = HEADER;
        b[3] = 0x40; // total length 64 > 28
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        let b = HEADER; // checksum field zero: does not verify
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p).unwrap_err(), Error::BadChecksum);
    }
}
