//! Walking the IPv6 extension-header chain (RFC 8200 §4) where it lies in the buffer.
//!
//! Nothing is copied: each step reads the next-header and length bytes in place and
//! advances an offset. The walk is bounded (at most [`MAX_EXT_HEADERS`] headers, each
//! inside Payload Length) and refuses chains that repeat headers or put hop-by-hop
//! options anywhere but first, so a crafted chain cannot make it loop or over-read.

use crate::ip_protocol as proto;
use crate::ipv6::{Ipv6Packet, HEADER_LEN};
use crate::{read_u16, read_u32, Error, Result};

mod field {
    use crate::field::*;

    // Every extension header.
    pub const NEXT_HEADER: usize = 0;
    /// In 8-octet units not counting the first (4-octet units not counting the first
    /// two for the authentication header); reserved in the fragment header.
    pub const LENGTH: usize = 1;

    // Routing header (RFC 8200 §4.4).
    pub const ROUTING_TYPE: usize = 2;
    pub const SEGMENTS_LEFT: usize = 3;

    // Fragment header (RFC 8200 §4.5), whose length is fixed.
    /// Fragment offset (13 bits, in 8-octet units), two reserved bits, M.
    pub const FRAG_OFFSET_M: Field = 2..4;
    pub const FRAG_IDENT: Field = 4..8;
}

/// Length of a fragment header.
const FRAGMENT_LEN: usize = field::FRAG_IDENT.end;
/// The fragment offset bits of the fragment header's offset field, already in bytes.
const FRAG_OFFSET_MASK: u16 = 0xfff8;
const FRAG_MORE: u16 = 0x0001;

/// Most extension headers the walk accepts before refusing the chain.
pub const MAX_EXT_HEADERS: usize = 8;

/// One extension header, as it lies in the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader<'a> {
    /// Which extension header this is (0, 43, 44, 51 or 60).
    pub kind: u8,
    /// Offset of the header from the start of the IPv6 packet.
    pub offset: usize,
    /// The header's bytes, in place.
    pub bytes: &'a [u8],
}

impl ExtHeader<'_> {
    /// The next-header byte of this extension header.
    pub fn next_header(&self) -> u8 {
        self.bytes[field::NEXT_HEADER]
    }
}

/// What a fragment header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentInfo {
    /// Fragment offset in bytes.
    pub offset: u16,
    /// More-fragments flag.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

impl FragmentInfo {
    /// An atomic fragment (offset 0, M = 0) is a whole packet (RFC 6946).
    pub fn is_atomic(&self) -> bool {
        self.offset == 0 && !self.more
    }
}

/// What a routing header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutingInfo {
    /// Routing type (0 is deprecated by RFC 5095 and must never be acted on).
    pub routing_type: u8,
    /// Segments left.
    pub segments_left: u8,
}

/// Where the chain ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainEnd {
    /// The protocol of what follows the last extension header: an upper layer, 59 (no
    /// next header) or 50 (ESP, opaque).
    pub protocol: u8,
    /// Offset of that header from the start of the IPv6 packet.
    pub offset: usize,
    /// Number of extension headers walked.
    pub ext_headers: usize,
    /// The fragment header, if any.
    pub fragment: Option<FragmentInfo>,
    /// The routing header, if any.
    pub routing: Option<RoutingInfo>,
}

impl ChainEnd {
    /// Whether the upper-layer header is in this packet (it is not in a fragment with
    /// a non-zero offset).
    pub fn has_upper_layer(&self) -> bool {
        self.fragment.is_none_or(|f| f.offset == 0)
    }
}

/// An iterator over the extension headers of a checked IPv6 packet. It yields
/// `Err` once and then stops if the chain is malformed.
#[derive(Debug, Clone)]
pub struct ExtHeaders<'a> {
    packet: &'a [u8],
    offset: usize,
    next: u8,
    count: usize,
    seen: u8,
    dest_opts: u8,
    done: bool,
    stopped_at_fragment: bool,
}

impl<'a> ExtHeaders<'a> {
    /// Start at the first header after the fixed IPv6 header.
    pub fn new<T: AsRef<[u8]> + ?Sized>(packet: &'a Ipv6Packet<&'a T>) -> Self {
        ExtHeaders {
            packet: packet.packet(),
            offset: HEADER_LEN,
            next: packet.next_header(),
            count: 0,
            seen: 0,
            dest_opts: 0,
            done: false,
            stopped_at_fragment: false,
        }
    }

    /// The protocol and offset the walk has reached so far.
    fn position(&self) -> (u8, usize) {
        (self.next, self.offset)
    }

    fn step(&mut self) -> Result<Option<ExtHeader<'a>>> {
        let kind = self.next;
        let bit = match kind {
            proto::HOP_BY_HOP => 1,
            proto::ROUTING => 2,
            proto::FRAGMENT => 4,
            proto::AH => 8,
            proto::DEST_OPTS => 0,
            _ => return Ok(None), // upper layer, ESP, no-next-header or unknown: stop
        };
        if self.stopped_at_fragment {
            return Ok(None);
        }
        if kind == proto::HOP_BY_HOP && self.count != 0 {
            return Err(Error::BadChain);
        }
        if kind == proto::DEST_OPTS {
            self.dest_opts += 1;
            if self.dest_opts > 2 {
                return Err(Error::BadChain);
            }
        } else if self.seen & bit != 0 {
            return Err(Error::BadChain);
        }
        self.seen |= bit;
        self.count += 1;
        if self.count > MAX_EXT_HEADERS {
            return Err(Error::BadChain);
        }
        let rest = self.packet.get(self.offset..).unwrap_or(&[]);
        let units = usize::from(*rest.get(field::LENGTH).ok_or(Error::Truncated)?);
        let len = match kind {
            proto::FRAGMENT => FRAGMENT_LEN,
            proto::AH => (units + 2) * 4,
            _ => (units + 1) * 8,
        };
        let bytes = rest.get(..len).ok_or(Error::Truncated)?;
        let header = ExtHeader { kind, offset: self.offset, bytes };
        self.next = bytes[field::NEXT_HEADER];
        self.offset += len;
        if kind == proto::FRAGMENT && read_u16(&bytes[field::FRAG_OFFSET_M]) & FRAG_OFFSET_MASK != 0 {
            // A later fragment carries no upper-layer header: stop here.
            self.stopped_at_fragment = true;
        }
        Ok(Some(header))
    }
}

impl<'a> Iterator for ExtHeaders<'a> {
    type Item = Result<ExtHeader<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(h)) => Some(Ok(h)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Walk the whole chain and report where the upper layer starts.
pub fn walk<T: AsRef<[u8]> + ?Sized>(packet: &Ipv6Packet<&T>) -> Result<ChainEnd> {
    let mut it = ExtHeaders::new(packet);
    let mut fragment = None;
    let mut routing = None;
    let mut count = 0;
    for h in it.by_ref() {
        let h = h?;
        count += 1;
        match h.kind {
            proto::FRAGMENT => {
                let v = read_u16(&h.bytes[field::FRAG_OFFSET_M]);
                fragment = Some(FragmentInfo {
                    offset: v & FRAG_OFFSET_MASK,
                    more: v & FRAG_MORE != 0,
                    ident: read_u32(&h.bytes[field::FRAG_IDENT]),
                });
            }
            proto::ROUTING => {
                routing = Some(RoutingInfo {
                    routing_type: h.bytes[field::ROUTING_TYPE],
                    segments_left: h.bytes[field::SEGMENTS_LEFT],
                })
            }
            _ => {}
        }
    }
    let (protocol, offset) = it.position();
    Ok(ChainEnd { protocol, offset, ext_headers: count, fragment, routing })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv6::Ipv6Repr;
    use core::net::Ipv6Addr;
    use std::vec::Vec;

    fn packet(next: u8, ext: &[u8], upper: &[u8]) -> Vec<u8> {
        let mut v = std::vec![0u8; 40];
        Ipv6Repr {
            src_addr: "2001:db8::1".parse().unwrap(),
            dst_addr: "2001:db8::2".parse().unwrap(),
            next_header: next,
            payload_len: ext.len() + upper.len(),
            hop_limit: 64,
        }
        .emit(&mut v)
        .unwrap();
        v.extend_from_slice(ext);
        v.extend_from_slice(upper);
        v
    }

    #[test]
    fn no_extension_headers() {
        let b = packet(proto::ICMPV6, &[], &[128, 0, 0, 0, 0, 0, 0, 0]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        let end = walk(&p).unwrap();
        assert_eq!((end.protocol, end.offset, end.ext_headers), (proto::ICMPV6, 40, 0));
        assert!(end.has_upper_layer());
    }

    #[test]
    fn hop_by_hop_then_dest_opts_then_udp() {
        let mut ext = std::vec![proto::DEST_OPTS, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[proto::UDP, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let b = packet(proto::HOP_BY_HOP, &ext, &[0; 8]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        let end = walk(&p).unwrap();
        assert_eq!((end.protocol, end.offset, end.ext_headers), (proto::UDP, 64, 2));
    }

    #[test]
    fn hop_by_hop_must_be_first() {
        let ext = [proto::HOP_BY_HOP, 0, 1, 4, 0, 0, 0, 0, proto::UDP, 0, 1, 4, 0, 0, 0, 0];
        let b = packet(proto::DEST_OPTS, &ext, &[]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(walk(&p).unwrap_err(), Error::BadChain);
    }

    #[test]
    fn repeated_headers_are_refused() {
        // Three destination-options headers: at most two are allowed.
        let mut ext = Vec::new();
        for next in [proto::DEST_OPTS, proto::DEST_OPTS, proto::UDP] {
            ext.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
        }
        let b = packet(proto::DEST_OPTS, &ext, &[]);
        assert_eq!(walk(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap_err(), Error::BadChain);
        // Two fragment headers.
        let ext = [proto::FRAGMENT, 0, 0, 0, 0, 0, 0, 1, proto::UDP, 0, 0, 0, 0, 0, 0, 1];
        let b = packet(proto::FRAGMENT, &ext, &[]);
        assert_eq!(walk(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap_err(), Error::BadChain);
    }

    #[test]
    fn truncated_header_is_refused() {
        // Routing header claiming 24 bytes inside a 16-byte payload.
        let ext = [proto::UDP, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let b = packet(proto::ROUTING, &ext, &[]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(walk(&p).unwrap_err(), Error::Truncated);
        // One lonely byte where a header should start.
        let b = packet(proto::DEST_OPTS, &[proto::UDP], &[]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(walk(&p).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn later_fragment_has_no_upper_layer() {
        // Offset 1448, M=1.
        let off: u16 = 1448 | 1;
        let o = off.to_be_bytes();
        let ext = [proto::ICMPV6, 0, o[0], o[1], 0xde, 0xad, 0xbe, 0xef];
        let b = packet(proto::FRAGMENT, &ext, &[1, 2, 3, 4]);
        let end = walk(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(end.fragment, Some(FragmentInfo { offset: 1448, more: true, ident: 0xdeadbeef }));
        assert!(!end.has_upper_layer());
        // Atomic fragment: a whole packet.
        let ext = [proto::ICMPV6, 0, 0, 0, 0, 0, 0, 7];
        let b = packet(proto::FRAGMENT, &ext, &[128, 0, 0, 0]);
        let end = walk(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert!(end.has_upper_layer() && end.fragment.unwrap().is_atomic());
        assert_eq!((end.protocol, end.offset), (proto::ICMPV6, 48));
    }

    #[test]
    fn authentication_header_length_is_in_words() {
        // AH with payload length 4: (4 + 2) * 4 = 24 bytes.
        let mut ext = std::vec![proto::TCP, 4, 0, 0];
        ext.extend_from_slice(&[0; 20]);
        let b = packet(proto::AH, &ext, &[0; 20]);
        let end = walk(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!((end.protocol, end.offset), (proto::TCP, 64));
    }

    #[test]
    fn esp_and_no_next_header_stop_the_walk() {
        let b = packet(proto::ESP, &[], &[0; 16]);
        let end = walk(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!((end.protocol, end.offset), (proto::ESP, 40));
        let ext = [proto::NO_NEXT_HEADER, 0, 1, 4, 0, 0, 0, 0];
        let b = packet(proto::DEST_OPTS, &ext, &[0xff; 8]);
        let end = walk(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!((end.protocol, end.offset), (proto::NO_NEXT_HEADER, 48));
    }

    #[test]
    fn one_of_each_kind_walks_to_the_upper_layer() {
        let kinds = [proto::ROUTING, proto::FRAGMENT, proto::AH, proto::DEST_OPTS];
        let mut ext = Vec::new();
        for (i, _) in kinds.iter().enumerate() {
            let next = *kinds.get(i + 1).unwrap_or(&proto::UDP);
            ext.extend_from_slice(&[next, 0, 0, 0, 0, 0, 0, 0]);
        }
        ext[2] = 0; // routing type 0 …
        ext[3] = 0; // … with no segments left
        let b = packet(proto::ROUTING, &ext, &[0; 8]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        let end = walk(&p).unwrap();
        assert_eq!(end.ext_headers, 4);
        assert_eq!(end.routing, Some(RoutingInfo { routing_type: 0, segments_left: 0 }));
        assert_eq!((end.protocol, end.offset), (proto::UDP, 72));
    }

    /// The packet from the KAME m_pulldown paper: an IPv6 header, a type-0 routing
    /// header carrying four addresses (72 bytes) and an ICMPv6 echo request. The walk
    /// must reach the ICMPv6 header where it lies, without copying anything.
    #[test]
    fn kame_pulldown_packet() {
        let hops: [Ipv6Addr; 4] = [
            "2001:db8:1::1".parse().unwrap(),
            "2001:db8:2::1".parse().unwrap(),
            "2001:db8:3::1".parse().unwrap(),
            "2001:db8:4::1".parse().unwrap(),
        ];
        let mut rh = std::vec![proto::ICMPV6, 8, 0, 4, 0, 0, 0, 0];
        for h in &hops {
            rh.extend_from_slice(&h.octets());
        }
        assert_eq!(rh.len(), 72);
        let echo = [128u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'p', b'u', b'l', b'l'];
        let b = packet(proto::ROUTING, &rh, &echo);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        let end = walk(&p).unwrap();
        assert_eq!((end.protocol, end.offset), (proto::ICMPV6, 112));
        assert_eq!(end.routing, Some(RoutingInfo { routing_type: 0, segments_left: 4 }));
        let icmp = &p.packet()[end.offset..];
        // Zero copies: the ICMPv6 header is the very bytes of the original buffer.
        assert_eq!(icmp.as_ptr(), b[112..].as_ptr());
        let icmp = crate::icmpv6::Icmpv6Packet::new_checked(icmp).unwrap();
        assert_eq!(icmp.msg_type(), crate::icmpv6::message::ECHO_REQUEST);
        assert_eq!(icmp.echo_ident(), 0x1234);
        // And the routing header itself was seen in place too.
        let rh_seen = ExtHeaders::new(&p).next().unwrap().unwrap();
        assert_eq!(rh_seen.bytes.as_ptr(), b[40..].as_ptr());
        assert_eq!(rh_seen.bytes.len(), 72);
    }
}
