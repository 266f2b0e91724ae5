//! IPv4 header (RFC 791). Teredo's outer layer; the daemon normally leaves it to the
//! kernel's UDP sockets, but the benchmark generator and the tests build it by hand.

use crate::checksum;
use crate::{be16, Error, Result};
use core::net::Ipv4Addr;

mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;

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
        if b[field::VER_IHL] >> 4 != 4 {
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
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & 0x4000 != 0
    }
    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & 0x2000 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLAGS_FRAG) & 0x1fff) << 3
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
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[field::SRC], b[field::SRC + 1], b[field::SRC + 2], b[field::SRC + 3])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[field::DST], b[field::DST + 1], b[field::DST + 2], b[field::DST + 3])
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
    fn set_be16(&mut self, at: usize, v: u16) {
        self.buffer.as_mut()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    /// Recompute and store the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_be16(field::CHECKSUM, 0);
        let len = self.header_len();
        let c = checksum::finish(checksum::sum(&self.buffer.as_ref()[..len]));
        self.set_be16(field::CHECKSUM, c);
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

    /// Write the header (no options, DF clear as RFC 4380 §5.1.2 advises) into a
    /// buffer of at least `HEADER_LEN + payload_len` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) -> Result<()> {
        let total = HEADER_LEN + self.payload_len;
        let total16 = u16::try_from(total).map_err(|_| Error::BadLength)?;
        let b = packet.buffer.as_mut();
        if b.len() < total {
            return Err(Error::BufferTooSmall);
        }
        b[field::VER_IHL] = 0x45;
        b[field::TOS] = 0;
        b[field::LENGTH..field::LENGTH + 2].copy_from_slice(&total16.to_be_bytes());
        b[field::IDENT..field::IDENT + 2].fill(0);
        b[field::FLAGS_FRAG..field::FLAGS_FRAG + 2].fill(0);
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = self.protocol;
        b[field::SRC..field::SRC + 4].copy_from_slice(&self.src_addr.octets());
        b[field::DST..field::DST + 4].copy_from_slice(&self.dst_addr.octets());
        packet.fill_checksum();
        Ok(())
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
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p).unwrap();
        assert_eq!(&buf[..10], &HEADER[..10]);
        assert_eq!(&buf[12..20], &HEADER[12..20]);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), repr);
        assert_eq!(p.payload().len(), 8);
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
