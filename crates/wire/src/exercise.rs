//! Harnesses that drive every parser over arbitrary bytes, touch every accessor and
//! check that what was parsed emits back to the same thing. Shared by the bounded
//! property tests (run on every `cargo test`) and the cargo-fuzz targets in `fuzz/`,
//! so both exercise exactly the same code. Each function panics only when an oracle
//! fails — a parser panicking by itself is the bug being hunted.

use crate::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use crate::ipv4::{Ipv4Packet, Ipv4Repr};
use crate::ipv6::{Ipv6Packet, Ipv6Repr};
use crate::ipv6_ext::{self, ExtHeaders};
use crate::ndisc_option::{self, NdOptions, PrefixInfo};
use crate::teredo_addr::TeredoAddr;
use crate::teredo_packet::{TeredoHeaderRepr, TeredoPacket};
use crate::teredo_trailer::{TrailerRepr, Trailers};
use crate::udp::{UdpPacket, UdpRepr};
use crate::{ip_protocol, ipv4_scope};
use core::hint::black_box;
use core::net::Ipv6Addr;

/// Largest message the harnesses re-emit on the stack.
const SCRATCH: usize = 2048;

/// A Teredo UDP payload: parse, walk, and re-emit the encapsulation headers, which must
/// reproduce the input's bytes exactly.
pub fn teredo_payload(data: &[u8]) {
    let Ok(p) = TeredoPacket::parse(data) else {
        return;
    };
    let headers = TeredoHeaderRepr { auth: p.auth_repr(), origin: p.origin };
    assert_eq!(headers.buffer_len(), p.ipv6_offset, "header length mismatch");
    let mut scratch = [0u8; TeredoHeaderRepr::MAX_LEN];
    let n = headers.emit(&mut scratch).expect("parsed headers must emit");
    assert_eq!(&scratch[..n], &data[..p.ipv6_offset], "headers do not round-trip");
    if let Some(a) = &p.auth {
        black_box((a.client_id(), a.auth_value(), a.nonce(), a.confirmation()));
    }
    assert_eq!(p.ipv6.packet().len() + p.trailers.as_bytes().len() + p.ipv6_offset, data.len());
    black_box(p.is_bubble());
    trailers(p.trailers.as_bytes());
    ipv6_packet(p.ipv6.packet());
}

/// An IPv6 packet: header round trip, extension chain, and ICMPv6 when it is there.
pub fn ipv6_packet(data: &[u8]) {
    let Ok(p) = Ipv6Packet::new_checked(data) else {
        return;
    };
    black_box((p.traffic_class(), p.flow_label(), p.hop_limit(), p.trailer(), p.is_bubble()));
    let repr = Ipv6Repr::parse(&p);
    let mut hdr = [0u8; 40];
    repr.emit(&mut hdr).expect("header emits");
    assert_eq!(Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&hdr[..])), repr);
    for h in ExtHeaders::new(&p).flatten() {
        assert!(h.offset + h.bytes.len() <= p.total_len(), "extension header out of bounds");
        black_box(h.next_header());
    }
    let Ok(end) = ipv6_ext::walk(&p) else { return };
    assert!(end.offset <= p.total_len(), "chain end out of bounds");
    if end.protocol == ip_protocol::ICMPV6 && end.has_upper_layer() {
        icmpv6(&p.src_addr(), &p.dst_addr(), &p.packet()[end.offset..]);
    }
}

/// An ICMPv6 message between `src` and `dst`: parse, then emit and parse again.
pub fn icmpv6(src: &Ipv6Addr, dst: &Ipv6Addr, data: &[u8]) {
    let Ok(p) = Icmpv6Packet::new_checked(data) else {
        return;
    };
    black_box((p.msg_type(), p.msg_code(), p.payload(), p.verify_checksum(src, dst)));
    let Ok(repr) = Icmpv6Repr::parse(src, dst, &p) else {
        return;
    };
    let len = repr.buffer_len();
    if len > SCRATCH {
        return;
    }
    let mut out = [0u8; SCRATCH];
    assert_eq!(repr.emit(src, dst, &mut out).expect("parsed message emits"), len);
    let again = Icmpv6Packet::new_checked(&out[..len]).expect("emitted message checks");
    let reparsed = Icmpv6Repr::parse(src, dst, &again).expect("emitted message parses");
    match (repr, reparsed) {
        // The RA representation keeps one PIO and counts the rest.
        (Icmpv6Repr::RouterAdvert(mut a), Icmpv6Repr::RouterAdvert(b)) => {
            a.prefix_info_count = u8::from(a.prefix_info.is_some());
            assert_eq!(a, b, "RA does not round-trip");
        }
        (a, b) => assert_eq!(a, b, "ICMPv6 does not round-trip"),
    }
}

/// Neighbor-discovery options: validate, iterate, parse the known ones.
pub fn nd_options(data: &[u8]) {
    let valid = NdOptions::validate(data).is_ok();
    let mut seen = 0;
    for opt in NdOptions::new(data) {
        let Ok(opt) = opt else {
            assert!(!valid);
            return;
        };
        seen += opt.bytes.len();
        if let Ok(pi) = PrefixInfo::parse(&opt) {
            let mut b = [0u8; 32];
            pi.emit(&mut b).expect("PIO emits");
            let back = PrefixInfo::parse(&NdOptions::new(&b).next().unwrap().unwrap());
            assert_eq!(back, Ok(pi));
        }
        black_box(ndisc_option::parse_mtu(&opt).ok());
    }
    assert!(valid && seen == data.len());
}

/// RFC 6081 trailers: iterate within bounds, parse and re-emit the known ones.
pub fn trailers(data: &[u8]) {
    let t = Trailers::new(data);
    let valid = t.validate().is_ok();
    // RFC 6081 §5.1.2's processing stays within bounds whatever the bytes.
    black_box(t.must_discard());
    for tl in t.iter() {
        let Ok(tl) = tl else {
            assert!(!valid);
            return;
        };
        if let Ok(repr) = TrailerRepr::parse(&tl) {
            let mut b = [0u8; 64];
            let n = repr.emit(&mut b).expect("trailer emits");
            assert_eq!(n, 2 + tl.value.len());
            if !matches!(repr, TrailerRepr::NeighborDiscovery(_) | TrailerRepr::AlternateAddress(_)) {
                // Reserved bytes are zeroed on emit; the others are byte-exact.
                assert_eq!(&b[2..n], tl.value, "trailer does not round-trip");
            }
        }
    }
}

/// An IPv4 packet carrying UDP: both headers, checksums, and re-emission.
pub fn ipv4_udp(data: &[u8]) {
    let Ok(ip) = Ipv4Packet::new_checked(data) else {
        return;
    };
    black_box((ip.tos(), ip.ident(), ip.dont_frag(), ip.checksum()));
    black_box(ipv4_scope::is_global_unicast(ip.src_addr()));
    let Ok(repr) = Ipv4Repr::parse(&ip) else {
        return;
    };
    let mut hdr = [0u8; 20 + 64];
    let payload_len = repr.payload_len.min(64);
    let small = Ipv4Repr { payload_len, ..repr };
    assert_eq!(small.emit(&mut hdr[..20 + payload_len]).expect("header emits"), 20);
    let back = Ipv4Packet::new_checked(&hdr[..20 + payload_len]).expect("emitted header checks");
    assert_eq!(Ipv4Repr::parse(&back), Ok(small));
    if repr.protocol != ip_protocol::UDP {
        return;
    }
    let Ok(udp) = UdpPacket::new_checked(ip.payload()) else {
        return;
    };
    black_box((udp.src_port(), udp.dst_port(), udp.payload()));
    let Ok(u) = UdpRepr::parse(&udp, &repr.src_addr, &repr.dst_addr) else {
        return;
    };
    let len = usize::from(udp.len());
    assert_eq!(u.buffer_len() + u.payload_len, len);
    // A zero checksum means none was sent; emit always computes one.
    if udp.checksum() != 0 && len <= SCRATCH {
        let mut out = [0u8; SCRATCH];
        out[..len].copy_from_slice(&ip.payload()[..len]);
        u.emit(&repr.src_addr, &repr.dst_addr, &mut out[..len]).expect("parsed datagram emits");
        assert_eq!(&out[..len], &ip.payload()[..len], "UDP does not round-trip");
    }
    teredo_payload(udp.payload());
}

/// A Teredo address: decoding any 16 bytes and encoding back is the identity.
pub fn teredo_address(data: &[u8]) {
    let Some(b) = data.get(..16) else { return };
    let mut o = [0u8; 16];
    o.copy_from_slice(b);
    let addr = Ipv6Addr::from(o);
    let t = TeredoAddr::decode_any(&addr);
    assert_eq!(t.to_ipv6(), addr, "Teredo address does not round-trip");
    let f = t.flags;
    assert_eq!(crate::teredo_addr::Flags::new(f.cone(), f.random_bits()).0, f.0 & 0xbcff);
    black_box((f.conformance(), TeredoAddr::decode(&addr)));
}

/// PCP responses: parsing never panics, and what parses re-emits as the request it
/// answers (the same opcode, nonce, ports and addresses).
pub fn pcp(data: &[u8]) {
    use crate::pcp::{Request, Response};
    let Ok(r) = Response::parse(data) else { return };
    let req = Request {
        opcode: r.opcode,
        lifetime: r.lifetime,
        client: core::net::Ipv4Addr::UNSPECIFIED,
        nonce: r.nonce,
        protocol: r.protocol,
        internal_port: r.internal_port,
        suggested: r.assigned,
        remote: r.remote,
    };
    let mut b = [0u8; 80];
    let n = req.emit(&mut b).expect("a parsed response re-emits as its request");
    assert!(r.answers(&req));
    // Our own bytes, read back as a response, carry the same mapping.
    b[1] |= 0x80;
    let back = Response::parse(&b[..n]).expect("what we emit parses");
    assert_eq!(
        (back.opcode, back.nonce, back.protocol, back.internal_port, back.assigned, back.remote),
        (r.opcode, r.nonce, r.protocol, r.internal_port, r.assigned, r.remote)
    );
}

/// The TUN offloads, on what a device with offloads would hand over: a virtio-net
/// header, then a packet. Finishing a checksum never panics; a super-packet that parses
/// cuts into segments whose checksums verify and whose payloads add up to its own, and
/// the segments joined again as the daemon joins them cut back to the same bytes.
pub fn offload(data: &[u8]) {
    use crate::coalescing::{Row, MAX_ROW_LEN};
    use crate::segmentation::{complete_checksum, SuperPacket};
    use crate::vnet_hdr::{VnetHdr, HEADER_LEN};
    let Ok(hdr) = VnetHdr::parse(data) else { return };
    let packet = &data[HEADER_LEN..];
    let mut copy = [0u8; 65_536];
    let n = packet.len().min(copy.len());
    copy[..n].copy_from_slice(&packet[..n]);
    // The field held the pseudo-header's sum, which a receiver adds back: the finished
    // data plus that sum must verify.
    let (from, at) = (usize::from(hdr.csum_start), usize::from(hdr.csum_start) + usize::from(hdr.csum_offset));
    let pseudo = copy.get(at..at + 2).map_or(0, |f| u16::from_be_bytes([f[0], f[1]]));
    if complete_checksum(&hdr, &mut copy[..n]).is_ok() && hdr.flags & crate::vnet_hdr::NEEDS_CSUM != 0 {
        let acc = crate::checksum::sum(&copy[from..n]) + u64::from(pseudo);
        assert_eq!(crate::checksum::fold(acc), 0xffff, "a finished checksum verifies");
    }
    let Ok(sp) = SuperPacket::parse(&hdr, packet) else { return };
    let (mut seg, mut again) = ([0u8; 65_536], [0u8; 65_536]);
    let mut row_buf = [0u8; HEADER_LEN + MAX_ROW_LEN];
    let head = crate::ipv6::HEADER_LEN;
    let (mut payload, mut row, mut row_first) = (0, None::<Row>, 0);
    // A row is finished and checked when the next segment does not join it, and at the end.
    let check_row = |row: &Row, row_buf: &mut [u8], first: usize, again: &mut [u8]| {
        let len = row.finish(row_buf);
        let h = VnetHdr::parse(row_buf).expect("a finished row has a header");
        let whole = &row_buf[HEADER_LEN..len];
        for i in 0..row.count() {
            let want = sp.segment(first + i, again).expect("segments cut once cut again");
            if row.count() == 1 {
                assert!(h.is_plain());
                assert_eq!(whole, &again[..want], "a row of one is the packet itself");
            } else {
                let back = SuperPacket::parse(&h, whole).expect("a joined row parses as a super-packet");
                let mut out = [0u8; 2048];
                let got = back.segment(i, &mut out).expect("joined rows hold segments of at most a 1500-byte MTU");
                assert_eq!(&out[..got], &again[..want], "joined then cut again: segment {i} differs");
            }
        }
    };
    for i in 0..sp.count() {
        let Ok(len) = sp.segment(i, &mut seg) else { return };
        let s = &seg[..len];
        assert!(len <= sp.segment_len());
        assert!(crate::segmentation::verified_transport(s).is_some(), "segment {i}'s checksum does not verify");
        let l4 = if s[6] == ip_protocol::TCP {
            crate::tcp::TcpPacket::new_checked(&s[head..]).unwrap().header_len()
        } else {
            8
        };
        payload += len - head - l4;
        if len > 1500 {
            continue; // not joined: segments that large never come from the tunnel
        }
        if let Some(r) = row.as_mut() {
            if r.append(&mut row_buf, s) {
                continue;
            }
            check_row(r, &mut row_buf, row_first, &mut again);
        }
        row = Row::start(&mut row_buf, s).ok();
        row_first = i;
    }
    if let Some(r) = row {
        check_row(&r, &mut row_buf, row_first, &mut again);
    }
    let l4 = if packet[6] == ip_protocol::TCP {
        crate::tcp::TcpPacket::new_checked(&packet[head..]).unwrap().header_len()
    } else {
        8
    };
    assert_eq!(payload, packet.len() - head - l4, "the segments carry the super-packet's payload");
}
