//! IPv6 header (RFC 8200 §3).
//!
//! The view's payload is bounded by Payload Length; anything after it in the buffer is
//! exposed as [`Ipv6Packet::trailer`], which is where RFC 6081 trailers live when the
//! buffer is a Teredo UDP payload.

use crate::{read_ipv6, read_u16, read_u32, write_u16, write_u32, Error, Result};
use core::net::{Ipv4Addr, Ipv6Addr};

mod field {
    use crate::field::*;

    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Field = 0..4;
    pub const PAYLOAD_LEN: Field = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

/// The IPv6 minimum link MTU, Teredo's default (RFC 4380 §5.1.2).
pub const MIN_MTU: usize = 1280;

/// A view over an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wrap a buffer without checking it; accessors may panic until checked.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wrap an untrusted buffer: after this succeeds no accessor can panic.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validate the version and that Payload Length fits in the buffer. A longer buffer
    /// is fine: the rest is the trailer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::BadVersion);
        }
        if b.len() < self.total_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Return the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The underlying buffer, trailer included.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn ver_tc_flow(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::VER_TC_FLOW])
    }
    /// Version field (6 once checked).
    pub fn version(&self) -> u8 {
        (self.ver_tc_flow() >> 28) as u8
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (self.ver_tc_flow() >> 20) as u8
    }
    /// Flow label.
    pub fn flow_label(&self) -> u32 {
        self.ver_tc_flow() & FLOW_LABEL_MASK
    }
    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::PAYLOAD_LEN])
    }
    /// Header plus payload: the length of the packet proper.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len())
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        read_ipv6(&self.buffer.as_ref()[field::SRC_ADDR])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        read_ipv6(&self.buffer.as_ref()[field::DST_ADDR])
    }
    /// The packet proper: header and payload, trailer excluded.
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.total_len()]
    }
    /// The payload (extension headers and upper layer), bounded by Payload Length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }
    /// Bytes after the packet proper (RFC 6081 trailers in a Teredo payload).
    pub fn trailer(&self) -> &[u8] {
        &self.buffer.as_ref()[self.total_len()..]
    }
    /// A Teredo bubble: Next Header 59 and Payload Length 0 (RFC 4380 §2.8). A packet
    /// with Next Header 59 and a payload is not a bubble.
    pub fn is_bubble(&self) -> bool {
        self.payload_len() == 0 && self.next_header() == crate::ip_protocol::NO_NEXT_HEADER
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    fn set_ver_tc_flow(&mut self, v: u32) {
        write_u32(&mut self.buffer.as_mut()[field::VER_TC_FLOW], v);
    }
    /// Set the version.
    pub fn set_version(&mut self, v: u8) {
        self.set_ver_tc_flow((self.ver_tc_flow() & 0x0fff_ffff) | (u32::from(v & 0x0f) << 28));
    }
    /// Set the traffic class.
    pub fn set_traffic_class(&mut self, v: u8) {
        self.set_ver_tc_flow((self.ver_tc_flow() & 0xf00f_ffff) | (u32::from(v) << 20));
    }
    /// Set the flow label (its low 20 bits).
    pub fn set_flow_label(&mut self, v: u32) {
        self.set_ver_tc_flow((self.ver_tc_flow() & !FLOW_LABEL_MASK) | (v & FLOW_LABEL_MASK));
    }
    /// Set the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::PAYLOAD_LEN], v);
    }
    /// Set the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }
    /// Set the hop limit (routers decrement it when forwarding).
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Set the source address.
    pub fn set_src_addr(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    pub fn set_dst_addr(&mut self, a: &Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }
    /// Mutable payload, bounded by Payload Length.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// A parsed IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header.
    pub next_header: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Parse a checked packet.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Self {
        Ipv6Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
        }
    }

    /// Bytes the header needs.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header (traffic class and flow label zero) into the first 40 bytes of
    /// `buf`. The payload is the caller's to place, before or after. Returns the header
    /// length, where the payload goes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let plen = u16::try_from(self.payload_len).map_err(|_| Error::BadLength)?;
        let mut packet = Ipv6Packet::new_unchecked(buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall)?);
        packet.set_version(6);
        packet.set_traffic_class(0);
        packet.set_flow_label(0);
        packet.set_payload_len(plen);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(&self.src_addr);
        packet.set_dst_addr(&self.dst_addr);
        Ok(HEADER_LEN)
    }
}

/// Address classes that Teredo nodes refuse to forward (RFC 4380 §5.3.1, §5.4.2).
pub trait Ipv6AddrExt {
    /// fe80::/10.
    fn is_link_local(&self) -> bool;
    /// Global scope: not unspecified, loopback, link-local, site-local or multicast.
    fn is_global_scope(&self) -> bool;
    /// Global scope and meant for the Internet at large, so a Teredo node may forward to
    /// it or accept from it: not unique-local (fc00::/7, a site's own networks, which a
    /// tunnel from outside must not reach), not IPv4-mapped (::ffff:0:0/96) or
    /// IPv4-compatible (::/96), which stand for IPv4 hosts and never travel as IPv6.
    /// 6to4 hosts (2002::/16) are peers like any other (RFC 4380 §5.2.9); the few of
    /// their addresses that would loop are for the caller to refuse, knowing its own
    /// IPv4 addresses ([`Ipv6AddrExt::tunnel_ipv4`]).
    fn is_forwardable(&self) -> bool;
    /// The IPv4 addresses an automatic tunnel's address format embeds, which RFC 6324
    /// §3.3 checks against a tunnel router's own: 6to4's `2002:V4ADDR::/48` (RFC 3056
    /// §2) and ISATAP's interface identifier `[02]00:5efe:V4ADDR` (RFC 5214 §6.1).
    fn tunnel_ipv4(&self) -> [Option<Ipv4Addr>; 2];
}

impl Ipv6AddrExt for Ipv6Addr {
    fn is_link_local(&self) -> bool {
        self.segments()[0] & 0xffc0 == 0xfe80
    }
    fn is_global_scope(&self) -> bool {
        let s0 = self.segments()[0];
        !(self.is_unspecified()
            || self.is_loopback()
            || self.is_multicast()
            || s0 & 0xffc0 == 0xfe80
            || s0 & 0xffc0 == 0xfec0)
    }
    fn is_forwardable(&self) -> bool {
        let s = self.segments();
        let v4_embedding = s[..5] == [0; 5] && (s[5] == 0 || s[5] == 0xffff);
        self.is_global_scope() && s[0] & 0xfe00 != 0xfc00 && !v4_embedding
    }
    fn tunnel_ipv4(&self) -> [Option<Ipv4Addr>; 2] {
        let o = self.octets();
        let sixtofour = (o[..2] == [0x20, 0x02]).then(|| Ipv4Addr::new(o[2], o[3], o[4], o[5]));
        // The universal/local bit (0x02) may be set or not; nothing else.
        let isatap =
            (o[8] & !0x02 == 0 && o[9..12] == [0, 0x5e, 0xfe]).then(|| Ipv4Addr::new(o[12], o[13], o[14], o[15]));
        [sixtofour, isatap]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The bubble of teredo-requirements §2.5.
    static BUBBLE: [u8; 40] = [
        0x60, 0, 0, 0, 0, 0, 0x3b, 0, 0x20, 0x01, 0, 0, 0x41, 0x36, 0xe3, 0x78, 0, 0, 0x63, 0xbf, 0x3f, 0xff, 0xfd,
        0xd2, 0x20, 0x01, 0, 0, 0x41, 0x36, 0xe3, 0x78, 0, 0, 0xf2, 0x27, 0x39, 0xcc, 0x9b, 0xf8,
    ];

    #[test]
    fn bubble_vector() {
        let p = Ipv6Packet::new_checked(&BUBBLE[..]).unwrap();
        assert!(p.is_bubble());
        assert_eq!(p.hop_limit(), 0);
        assert_eq!(p.src_addr(), "2001:0:4136:e378:0:63bf:3fff:fdd2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "2001:0:4136:e378:0:f227:39cc:9bf8".parse::<Ipv6Addr>().unwrap());
        let repr = Ipv6Repr::parse(&p);
        let mut out = [0u8; 40];
        repr.emit(&mut out).unwrap();
        assert_eq!(out, BUBBLE);
    }

    #[test]
    fn version_class_and_label_share_a_word() {
        let mut b = BUBBLE;
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_traffic_class(0xab);
        p.set_flow_label(0xcdef1);
        assert_eq!((p.version(), p.traffic_class(), p.flow_label()), (6, 0xab, 0xcdef1));
        assert_eq!(&b[..4], &[0x6a, 0xbc, 0xde, 0xf1]);
        // Emit overwrites all three, whatever the buffer held.
        let repr = Ipv6Repr::parse(&Ipv6Packet::new_checked(&BUBBLE[..]).unwrap());
        assert_eq!(repr.emit(&mut b).unwrap(), HEADER_LEN);
        assert_eq!(b, BUBBLE);
    }

    #[test]
    fn trailer_is_kept_apart() {
        let mut b = [0u8; 46];
        b[..40].copy_from_slice(&BUBBLE);
        b[40..].copy_from_slice(&[3, 4, 0, 0, 0, 0]);
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert!(p.is_bubble());
        assert_eq!(p.packet().len(), 40);
        assert_eq!(p.trailer(), &[3, 4, 0, 0, 0, 0]);
    }

    #[test]
    fn nh59_with_payload_is_not_a_bubble() {
        let mut b = [0u8; 48];
        b[..40].copy_from_slice(&BUBBLE);
        b[5] = 8;
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert!(!p.is_bubble());
    }

    #[test]
    fn refuses_bad_headers() {
        let mut b = BUBBLE;
        b[0] = 0x40;
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap_err(), Error::BadVersion);
        let mut b = [0u8; 60];
        b[..40].copy_from_slice(&BUBBLE);
        b[5] = 100; // payload length 100, 20 bytes present
        assert_eq!(Ipv6Packet::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        assert_eq!(Ipv6Packet::new_checked(&BUBBLE[..39]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn scopes() {
        let g: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert!(g.is_global_scope());
        for a in ["fe80::1", "ff0e::1", "::", "::1", "fec0::1"] {
            assert!(!a.parse::<Ipv6Addr>().unwrap().is_global_scope(), "{a}");
        }
        assert!("fe80::1".parse::<Ipv6Addr>().unwrap().is_link_local());
    }

    #[test]
    fn only_internet_destinations_are_forwardable() {
        for a in ["2001:db8::1", "2a00:1450::1", "2001::1", "64:ff9b::c000:201", "2003::1", "2002:c000:201::1"] {
            assert!(a.parse::<Ipv6Addr>().unwrap().is_forwardable(), "{a}");
        }
        let refused = [
            "fd00::1",
            "fc12:3456::1",
            "::ffff:192.0.2.1",
            "::192.0.2.1",
            "fe80::1",
            "fec0::1",
            "ff0e::1",
            "::1",
            "::",
        ];
        for a in refused {
            assert!(!a.parse::<Ipv6Addr>().unwrap().is_forwardable(), "{a}");
        }
    }

    #[test]
    fn tunnel_formats_give_their_ipv4() {
        let v4 = |a: &str| a.parse::<Ipv6Addr>().unwrap().tunnel_ipv4();
        let ip = Some(Ipv4Addr::new(192, 0, 2, 10));
        assert_eq!(v4("2002:c000:20a::1"), [ip, None]);
        assert_eq!(v4("2002:c000:20a:1:0:5efe:c000:20a"), [ip, ip]);
        assert_eq!(v4("2001:db8::200:5efe:c000:20a"), [None, ip]);
        assert_eq!(v4("2001:db8::5efe:c000:20a"), [None, ip]);
        // Group bit or other bits set: not ISATAP.
        assert_eq!(v4("2001:db8::100:5efe:c000:20a"), [None, None]);
        assert_eq!(v4("2001:db8::201:5efe:c000:20a"), [None, None]);
        assert_eq!(v4("2003:c000:20a::1"), [None, None]);
    }
}
