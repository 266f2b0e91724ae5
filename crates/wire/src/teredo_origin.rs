//! The Teredo origin indication (indicator 0x0000, RFC 4380 §5.1.1): the outer source
//! address and port a server saw, obfuscated (every bit inverted).
//!
//! ```text
//! 00 00 | ~port (2) | ~IPv4 address (4)
//! ```
//! Its plain value is the `SocketAddrV4` it carries: [`parse`] and [`emit`] convert.

use crate::teredo_addr::{obfuscate_ipv4, obfuscate_port};
use crate::{read_ipv4, read_u16, write_u16, Error, Result};
use core::net::SocketAddrV4;

mod field {
    use crate::field::*;

    pub const INDICATOR: Field = 0..2;
    pub const PORT: Field = 2..4;
    pub const ADDR: Field = 4..8;
}

/// The first two bytes of an origin indication.
pub const INDICATOR: [u8; 2] = [0, 0];
/// Length of an origin indication.
pub const LEN: usize = field::ADDR.end;

/// A view over an origin indication at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OriginHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> OriginHeader<T> {
    /// Wrap a buffer without checking it; accessors may panic until checked.
    pub const fn new_unchecked(buffer: T) -> Self {
        OriginHeader { buffer }
    }

    /// Wrap an untrusted buffer: after this succeeds no accessor can panic.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Check the length and the indicator.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < LEN {
            return Err(Error::Truncated);
        }
        if b[field::INDICATOR] != INDICATOR {
            return Err(Error::BadIndicator);
        }
        Ok(())
    }

    /// The port, de-obfuscated.
    pub fn port(&self) -> u16 {
        obfuscate_port(read_u16(&self.buffer.as_ref()[field::PORT]))
    }
    /// The IPv4 address, de-obfuscated.
    pub fn addr(&self) -> core::net::Ipv4Addr {
        obfuscate_ipv4(read_ipv4(&self.buffer.as_ref()[field::ADDR]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> OriginHeader<T> {
    /// Write the indicator.
    pub fn set_indicator(&mut self) {
        self.buffer.as_mut()[field::INDICATOR].copy_from_slice(&INDICATOR);
    }
    /// Set the port (obfuscated on the way in).
    pub fn set_port(&mut self, port: u16) {
        write_u16(&mut self.buffer.as_mut()[field::PORT], obfuscate_port(port));
    }
    /// Set the IPv4 address (obfuscated on the way in).
    pub fn set_addr(&mut self, addr: core::net::Ipv4Addr) {
        self.buffer.as_mut()[field::ADDR].copy_from_slice(&obfuscate_ipv4(addr).octets());
    }
}

/// Parse an origin indication at the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<SocketAddrV4> {
    let h = OriginHeader::new_checked(buf)?;
    Ok(SocketAddrV4::new(h.addr(), h.port()))
}

/// Write an origin indication for `origin` at the start of `buf`; returns its length.
pub fn emit(origin: SocketAddrV4, buf: &mut [u8]) -> Result<usize> {
    let mut h = OriginHeader::new_unchecked(buf.get_mut(..LEN).ok_or(Error::BufferTooSmall)?);
    h.set_indicator();
    h.set_port(origin.port());
    h.set_addr(*origin.ip());
    Ok(LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4380_example() {
        // 1.2.3.4 port 337 -> 00 00 fe ae fe fd fc fb
        let mut b = [0u8; 8];
        emit("1.2.3.4:337".parse().unwrap(), &mut b).unwrap();
        assert_eq!(b, [0x00, 0x00, 0xfe, 0xae, 0xfe, 0xfd, 0xfc, 0xfb]);
        assert_eq!(parse(&b).unwrap(), "1.2.3.4:337".parse().unwrap());
    }

    #[test]
    fn reference_vector() {
        let mut b = [0u8; 8];
        emit("192.0.2.45:40000".parse().unwrap(), &mut b).unwrap();
        assert_eq!(b, [0x00, 0x00, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2]);
    }

    #[test]
    fn view_reads_and_writes_in_the_clear() {
        let mut b = [0xffu8; 8];
        let mut h = OriginHeader::new_unchecked(&mut b[..]);
        h.set_indicator();
        h.set_port(40000);
        h.set_addr(core::net::Ipv4Addr::new(192, 0, 2, 45));
        assert_eq!(b, [0x00, 0x00, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2]);
        let h = OriginHeader::new_checked(&b[..]).unwrap();
        assert_eq!((h.addr(), h.port()), (core::net::Ipv4Addr::new(192, 0, 2, 45), 40000));
    }

    #[test]
    fn truncated_origin_is_refused() {
        // Case 3: origin indication cut to 5 bytes.
        assert_eq!(parse(&[0, 0, 0x63, 0xbf, 0x3f]).unwrap_err(), Error::Truncated);
        assert_eq!(parse(&[0, 1, 0, 0, 0, 0, 0, 0]).unwrap_err(), Error::BadIndicator);
    }
}
