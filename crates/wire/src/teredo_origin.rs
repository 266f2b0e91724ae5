//! The Teredo origin indication (indicator 0x0000, RFC 4380 §5.1.1): the outer source
//! address and port a server saw, obfuscated (every bit inverted).

use crate::teredo_addr::{obfuscate_ipv4, obfuscate_port};
use crate::{be16, Error, Result};
use core::net::{Ipv4Addr, SocketAddrV4};

/// Length of an origin indication.
pub const LEN: usize = 8;

/// Parse an origin indication at the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<SocketAddrV4> {
    let b = buf.get(..LEN).ok_or(Error::Truncated)?;
    if b[..2] != [0, 0] {
        return Err(Error::BadIndicator);
    }
    let port = obfuscate_port(be16(b, 2));
    let ip = obfuscate_ipv4(Ipv4Addr::new(b[4], b[5], b[6], b[7]));
    Ok(SocketAddrV4::new(ip, port))
}

/// Write an origin indication for `origin` at the start of `buf`.
pub fn emit(origin: SocketAddrV4, buf: &mut [u8]) -> Result<usize> {
    let b = buf.get_mut(..LEN).ok_or(Error::BufferTooSmall)?;
    b[..2].fill(0);
    b[2..4].copy_from_slice(&obfuscate_port(origin.port()).to_be_bytes());
    b[4..8].copy_from_slice(&obfuscate_ipv4(*origin.ip()).octets());
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
    fn truncated_origin_is_refused() {
        // Case 3: origin indication cut to 5 bytes.
        assert_eq!(parse(&[0, 0, 0x63, 0xbf, 0x3f]).unwrap_err(), Error::Truncated);
        assert_eq!(parse(&[0, 1, 0, 0, 0, 0, 0, 0]).unwrap_err(), Error::BadIndicator);
    }
}
