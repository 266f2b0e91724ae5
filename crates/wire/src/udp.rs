//! UDP header (RFC 768) with the IPv4 pseudo-header checksum.

use crate::checksum;
use crate::{be16, ip_protocol, Error, Result};
use core::net::Ipv4Addr;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

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
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length field (header and payload).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Checksum field; 0 means "none" over IPv4.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// The payload, bounded by the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
    /// Whether the checksum verifies (a zero checksum is legal over IPv4).
    pub fn verify_checksum(&self, src: &Ipv4Addr, dst: &Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let len = self.len();
        let data = &self.buffer.as_ref()[..usize::from(len)];
        let acc = checksum::ipv4_pseudo_header(src, dst, ip_protocol::UDP, len) + checksum::sum(data);
        checksum::fold(acc) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Mutable payload, bounded by the length field.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }
    /// Compute and store the checksum over the pseudo-header, header and payload.
    pub fn fill_checksum(&mut self, src: &Ipv4Addr, dst: &Ipv4Addr) {
        let len = self.len();
        let b = self.buffer.as_mut();
        b[field::CHECKSUM..field::CHECKSUM + 2].fill(0);
        let acc = checksum::ipv4_pseudo_header(src, dst, ip_protocol::UDP, len) + checksum::sum(&b[..usize::from(len)]);
        // A computed 0 is sent as 0xffff: 0 means "no checksum" (RFC 768).
        let c = match checksum::finish(acc) {
            0 => 0xffff,
            c => c,
        };
        b[field::CHECKSUM..field::CHECKSUM + 2].copy_from_slice(&c.to_be_bytes());
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parse a checked datagram, verifying its checksum.
    pub fn parse<T: AsRef<[u8]>>(packet: &UdpPacket<T>, src: &Ipv4Addr, dst: &Ipv4Addr) -> Result<Self> {
        if !packet.verify_checksum(src, dst) {
            return Err(Error::BadChecksum);
        }
        Ok(UdpRepr { src_port: packet.src_port(), dst_port: packet.dst_port() })
    }

    /// Write the header for a payload of `payload_len` bytes that the caller has already
    /// placed (or will place) after it, then the checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut UdpPacket<T>,
        payload_len: usize,
        src: &Ipv4Addr,
        dst: &Ipv4Addr,
    ) -> Result<()> {
        let len = HEADER_LEN + payload_len;
        let len16 = u16::try_from(len).map_err(|_| Error::BadLength)?;
        let b = packet.buffer.as_mut();
        if b.len() < len {
            return Err(Error::BufferTooSmall);
        }
        b[field::SRC_PORT..field::SRC_PORT + 2].copy_from_slice(&self.src_port.to_be_bytes());
        b[field::DST_PORT..field::DST_PORT + 2].copy_from_slice(&self.dst_port.to_be_bytes());
        b[field::LENGTH..field::LENGTH + 2].copy_from_slice(&len16.to_be_bytes());
        packet.fill_checksum(src, dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 45);
    const DST: Ipv4Addr = Ipv4Addr::new(65, 54, 227, 120);

    #[test]
    fn emit_parse_and_checksum() {
        let mut buf = [0u8; 8 + 5];
        buf[8..].copy_from_slice(b"hello");
        let repr = UdpRepr { src_port: 40000, dst_port: 3544 };
        let mut p = UdpPacket::new_unchecked(&mut buf[..]);
        repr.emit(&mut p, 5, &SRC, &DST).unwrap();
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
}
