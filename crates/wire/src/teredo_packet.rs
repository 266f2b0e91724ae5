//! A Teredo UDP payload (RFC 4380 §5.1.1):
//!
//! ```text
//! [ authentication ]? [ origin indication ]? IPv6 packet [ RFC 6081 trailers ]?
//! ```
//! Parsing follows the order strictly: authentication first, then origin indication,
//! then an IPv6 packet (version 6, Payload Length inside the datagram). Anything else
//! — an unknown `00 xx` indicator, an origin indication before the authentication —
//! is refused. Nothing is copied: the result borrows the datagram.

use crate::ipv6::{self, Ipv6Packet};
use crate::teredo_auth::{self, AuthHeader, AuthRepr};
use crate::teredo_origin;
use crate::teredo_trailer::Trailers;
use crate::{Error, Result};
use core::net::{Ipv6Addr, SocketAddrV4};

mod field {
    use crate::field::*;

    /// What each part starts with: an indicator (`00 01` authentication, `00 00`
    /// origin), or the IPv6 version nibble, never 0.
    pub const INDICATOR: Field = 0..2;
    pub const IPV6_VERSION: usize = 0;
}

/// The parsed layout of a Teredo UDP payload, borrowing the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeredoPacket<'a> {
    /// The authentication header, if present.
    pub auth: Option<AuthHeader<&'a [u8]>>,
    /// The origin indication (de-obfuscated), if present.
    pub origin: Option<SocketAddrV4>,
    /// Offset of the IPv6 packet in the datagram.
    pub ipv6_offset: usize,
    /// The IPv6 packet proper, trailers excluded: exactly what goes to a TUN device.
    pub ipv6: Ipv6Packet<&'a [u8]>,
    /// The bytes after the IPv6 packet.
    pub trailers: Trailers<'a>,
}

impl<'a> TeredoPacket<'a> {
    /// Parse an untrusted UDP payload.
    pub fn parse(datagram: &'a [u8]) -> Result<Self> {
        let mut at = 0;
        let mut auth = None;
        let mut origin = None;
        if datagram.get(field::INDICATOR).ok_or(Error::Truncated)? == teredo_auth::INDICATOR {
            let h = AuthHeader::new_checked(datagram)?;
            at = h.header_len();
            auth = Some(AuthHeader::new_unchecked(&datagram[..at]));
        }
        if datagram[at..].get(field::INDICATOR) == Some(&teredo_origin::INDICATOR[..]) {
            origin = Some(teredo_origin::parse(&datagram[at..])?);
            at += teredo_origin::LEN;
        }
        let rest = &datagram[at..];
        if rest.get(field::IPV6_VERSION) == Some(&0) {
            // `00 02…`, a second indicator, or an origin before an authentication.
            return Err(Error::BadIndicator);
        }
        let full = Ipv6Packet::new_checked(rest)?;
        let end = full.total_len();
        Ok(TeredoPacket {
            auth,
            origin,
            ipv6_offset: at,
            ipv6: Ipv6Packet::new_unchecked(&rest[..end]),
            trailers: Trailers::new(&rest[end..]),
        })
    }

    /// The authentication header as a plain value.
    pub fn auth_repr(&self) -> Option<AuthRepr<'a>> {
        self.auth.as_ref().map(AuthRepr::parse)
    }

    /// Whether the IPv6 packet is a bubble (Payload Length 0, Next Header 59).
    pub fn is_bubble(&self) -> bool {
        self.ipv6.is_bubble()
    }

    /// Offset of the first trailer byte in the datagram.
    pub fn trailers_offset(&self) -> usize {
        self.ipv6_offset + self.ipv6.total_len()
    }
}

/// The encapsulation headers to put before an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TeredoHeaderRepr<'a> {
    /// Authentication header.
    pub auth: Option<AuthRepr<'a>>,
    /// Origin indication.
    pub origin: Option<SocketAddrV4>,
}

impl TeredoHeaderRepr<'_> {
    /// The most bytes the headers can take: an authentication header whose client
    /// identifier and authentication value are both 255 bytes long (their one-byte
    /// lengths' limit), then an origin indication.
    pub const MAX_LEN: usize = crate::teredo_auth::field::CONFIRMATION(255, 255) + 1 + teredo_origin::LEN;

    /// Bytes the headers need.
    pub fn buffer_len(&self) -> usize {
        self.auth.map_or(0, |a| a.buffer_len()) + self.origin.map_or(0, |_| teredo_origin::LEN)
    }

    /// Write the headers at the start of `buf`; returns where the IPv6 packet goes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut at = 0;
        if let Some(a) = &self.auth {
            at += a.emit(buf)?;
        }
        if let Some(o) = self.origin {
            at += teredo_origin::emit(o, buf.get_mut(at..).ok_or(Error::BufferTooSmall)?)?;
        }
        Ok(at)
    }
}

/// Write a bubble from `src` to `dst` at the start of `buf` (hop limit as given: Miredo
/// sends 0, local discovery uses 1). Returns its length, 40.
pub fn emit_bubble(src: &Ipv6Addr, dst: &Ipv6Addr, hop_limit: u8, buf: &mut [u8]) -> Result<usize> {
    ipv6::Ipv6Repr {
        src_addr: *src,
        dst_addr: *dst,
        next_header: crate::ip_protocol::NO_NEXT_HEADER,
        payload_len: 0,
        hop_limit,
    }
    .emit(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::icmpv6::{Icmpv6Packet, Icmpv6Repr, RouterAdvertRepr};
    use crate::ipv6::Ipv6Repr;
    use crate::teredo_addr::{self, server_link_local, RS_SOURCE_RESTRICTED};
    use std::vec::Vec;

    fn hex(s: &str) -> Vec<u8> {
        let s: std::string::String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    const RS_HEX: &str = "0001 0000 0102030405060708 00 60000000 0008 3a ff \
        fe800000000000000000ffffffffffff ff020000000000000000000000000002 85 00 7d37 00000000";

    const RA_HEX: &str = "0001000001020304050607080000 0063bf3ffffdd2 6000000000383aff \
        fe800000000000008000f227bec91c87 fe800000000000000000ffffffffffff \
        8600954c00000000000000000000 07d0 03044040ffffffffffffffff00000000 \
        200100004136e3780000000000000000 0501000000000500";

    const NONCE: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
    const SERVER: core::net::Ipv4Addr = core::net::Ipv4Addr::new(65, 54, 227, 120);

    fn reference_ra() -> RouterAdvertRepr {
        RouterAdvertRepr::teredo(teredo_addr::TeredoAddr::client_prefix(teredo_addr::PREFIX, SERVER), 1280)
    }

    #[test]
    fn restricted_rs_vector_parses_and_builds() {
        let bytes = hex(RS_HEX);
        assert_eq!(bytes.len(), 61);
        let p = TeredoPacket::parse(&bytes).unwrap();
        assert_eq!(p.auth_repr(), Some(AuthRepr::with_nonce(NONCE)));
        assert_eq!(p.origin, None);
        assert_eq!(p.ipv6_offset, 13);
        assert_eq!(p.ipv6.src_addr(), RS_SOURCE_RESTRICTED);
        assert_eq!(p.ipv6.hop_limit(), 255);
        let icmp = Icmpv6Packet::new_checked(p.ipv6.payload()).unwrap();
        let dst = p.ipv6.dst_addr();
        assert_eq!(Icmpv6Repr::parse(&RS_SOURCE_RESTRICTED, &dst, &icmp).unwrap(), Icmpv6Repr::RouterSolicit);

        // Build the same bytes from representations.
        let mut out = [0u8; 61];
        let h = TeredoHeaderRepr { auth: Some(AuthRepr::with_nonce(NONCE)), origin: None };
        let at = h.emit(&mut out).unwrap();
        Ipv6Repr { src_addr: RS_SOURCE_RESTRICTED, dst_addr: dst, next_header: 58, payload_len: 8, hop_limit: 255 }
            .emit(&mut out[at..])
            .unwrap();
        Icmpv6Repr::RouterSolicit.emit(&RS_SOURCE_RESTRICTED, &dst, &mut out[at + 40..]).unwrap();
        assert_eq!(&out[..], &bytes[..]);
    }

    #[test]
    fn ra_vector_parses_and_builds() {
        let bytes = hex(RA_HEX);
        assert_eq!(bytes.len(), 117);
        let p = TeredoPacket::parse(&bytes).unwrap();
        assert_eq!(p.auth_repr(), Some(AuthRepr::with_nonce(NONCE)));
        assert_eq!(p.origin, Some("192.0.2.45:40000".parse().unwrap()));
        let (src, dst) = (p.ipv6.src_addr(), p.ipv6.dst_addr());
        assert_eq!(src, server_link_local(SERVER));
        assert_eq!(dst, RS_SOURCE_RESTRICTED);
        let icmp = Icmpv6Packet::new_checked(p.ipv6.payload()).unwrap();
        assert_eq!(icmp.checksum(), 0x954c);
        assert_eq!(Icmpv6Repr::parse(&src, &dst, &icmp).unwrap(), Icmpv6Repr::RouterAdvert(reference_ra()));

        let mut out = [0u8; 117];
        let h = TeredoHeaderRepr {
            auth: Some(AuthRepr::with_nonce(NONCE)),
            origin: Some("192.0.2.45:40000".parse().unwrap()),
        };
        let at = h.emit(&mut out).unwrap();
        assert_eq!(at, 21);
        let ra = Icmpv6Repr::RouterAdvert(reference_ra());
        Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: ra.buffer_len(), hop_limit: 255 }
            .emit(&mut out[at..])
            .unwrap();
        ra.emit(&src, &dst, &mut out[at + 40..]).unwrap();
        assert_eq!(&out[..], &bytes[..]);
    }

    fn bubble() -> Vec<u8> {
        hex("6000000000003b00 200100004136e378000063bf3ffffdd2 200100004136e3780000f22739cc9bf8")
    }

    #[test]
    fn bubble_vector() {
        let mut out = [0u8; 40];
        emit_bubble(
            &"2001:0:4136:e378:0:63bf:3fff:fdd2".parse().unwrap(),
            &"2001:0:4136:e378:0:f227:39cc:9bf8".parse().unwrap(),
            0,
            &mut out,
        )
        .unwrap();
        assert_eq!(&out[..], &bubble()[..]);
        let p = TeredoPacket::parse(&out).unwrap();
        assert!(p.is_bubble());
        assert!(p.trailers.is_empty());
    }

    #[test]
    fn bubble_with_trailer_is_still_a_bubble() {
        // Case 8.
        let mut b = bubble();
        b.extend_from_slice(&[3, 4, 0, 0, 0, 0]);
        let p = TeredoPacket::parse(&b).unwrap();
        assert!(p.is_bubble());
        assert_eq!(p.ipv6.packet().len(), 40);
        assert_eq!(p.trailers.as_bytes(), &[3, 4, 0, 0, 0, 0]);
        assert_eq!(p.trailers_offset(), 40);
    }

    #[test]
    fn nh59_with_payload_is_not_a_bubble() {
        // Case 9.
        let mut b = bubble();
        b[5] = 8;
        b.extend_from_slice(&[0; 8]);
        assert!(!TeredoPacket::parse(&b).unwrap().is_bubble());
    }

    #[test]
    fn black_box_malformed_cases() {
        // Case 1: 0 or 1 byte.
        assert_eq!(TeredoPacket::parse(&[]).unwrap_err(), Error::Truncated);
        assert_eq!(TeredoPacket::parse(&[0x60]).unwrap_err(), Error::Truncated);
        // Case 2: unknown indicator 00 02 before a valid IPv6 packet.
        let mut b = std::vec![0, 2];
        b.extend_from_slice(&bubble());
        assert_eq!(TeredoPacket::parse(&b).unwrap_err(), Error::BadIndicator);
        // Case 3: origin indication truncated to 5 bytes.
        assert_eq!(TeredoPacket::parse(&[0, 0, 0x63, 0xbf, 0x3f]).unwrap_err(), Error::Truncated);
        // Case 4: ID-len 200 in a 60-byte datagram.
        let mut b = std::vec![0u8; 60];
        b[1] = 1;
        b[2] = 200;
        assert_eq!(TeredoPacket::parse(&b).unwrap_err(), Error::Truncated);
        // Case 5: origin indication before the authentication header.
        let mut b = std::vec![0, 0, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2];
        b.extend_from_slice(&[0, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0]);
        b.extend_from_slice(&bubble());
        assert_eq!(TeredoPacket::parse(&b).unwrap_err(), Error::BadIndicator);
        // Case 6: version nibble 4.
        let mut b = bubble();
        b[0] = 0x45;
        assert_eq!(TeredoPacket::parse(&b).unwrap_err(), Error::BadVersion);
        // Case 7: Payload Length 100 with 20 bytes present.
        let mut b = bubble();
        b[5] = 100;
        b.extend_from_slice(&[0; 20]);
        assert_eq!(TeredoPacket::parse(&b).unwrap_err(), Error::Truncated);
        // Two origin indications.
        let mut b = std::vec![0, 0, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2];
        b.extend_from_slice(&[0, 0, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2]);
        b.extend_from_slice(&bubble());
        assert_eq!(TeredoPacket::parse(&b).unwrap_err(), Error::BadIndicator);
    }
}
