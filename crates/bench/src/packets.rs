//! The packets the generator sends: native payloads (the kernel adds the headers),
//! whole IPv6/UDP packets for the emulated Teredo clients, built once a client and
//! mended for each sequence number, and whole frames for the rate searches' live
//! generator (every header on, checksums taken).

use shipworm_wire::ipv4::{Ipv4Packet, Ipv4Repr};
use shipworm_wire::ipv6::Ipv6Repr;
use shipworm_wire::udp::UdpRepr;
use std::net::{Ipv6Addr, SocketAddrV4};

/// An Ethernet frame from `src` to `dst` carrying `payload` of EtherType `ethertype`.
fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(14 + payload.len());
    frame.extend_from_slice(&dst);
    frame.extend_from_slice(&src);
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// The frame of IPv6 packet `packet` from hardware address `src` to `dst`.
pub fn ipv6_frame(dst: [u8; 6], src: [u8; 6], packet: &[u8]) -> Vec<u8> {
    ethernet(dst, src, 0x86dd, packet)
}

/// The frame of a Teredo datagram carrying IPv6 packet `packet` from `from` to `to`,
/// from hardware address `src` to `dst`: IPv4 and UDP with its checksum, as a Linux
/// host's unconnected UDP socket sends it unless told otherwise (TTL 64, Don't
/// Fragment set, identification 0, which only DF makes valid), as the generator's
/// sockets sent before: a Teredo client clears DF (RFC 4380 §5.1.1) and numbers its
/// datagrams, which only changes what GRO may join for a socket that asks for rows.
pub fn teredo_frame(dst: [u8; 6], src: [u8; 6], from: SocketAddrV4, to: SocketAddrV4, packet: &[u8]) -> Vec<u8> {
    let mut ip = vec![0u8; 20 + 8 + packet.len()];
    Ipv4Repr { src_addr: *from.ip(), dst_addr: *to.ip(), protocol: 17, payload_len: 8 + packet.len(), ttl: 64 }
        .emit(&mut ip)
        .expect("fits");
    let mut header = Ipv4Packet::new_unchecked(&mut ip[..]);
    header.set_dont_frag(true);
    header.fill_checksum();
    ip[28..].copy_from_slice(packet);
    UdpRepr { src_port: from.port(), dst_port: to.port(), payload_len: packet.len() }
        .emit(from.ip(), to.ip(), &mut ip[20..])
        .expect("fits");
    ethernet(dst, src, 0x0800, &ip)
}

/// Build an IPv6/UDP packet of `size` bytes (≥ 56) carrying `seq`, with its checksum.
pub fn ipv6_udp(buf: &mut [u8], size: usize, src: Ipv6Addr, dst: Ipv6Addr, port: u16, seq: u64) -> usize {
    let udp_len = size - 40;
    Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 17, payload_len: udp_len, hop_limit: 64 }
        .emit(buf)
        .expect("fits");
    let u = &mut buf[40..size];
    // The payload first: the UDP checksum covers it.
    u[8..16].copy_from_slice(&seq.to_be_bytes());
    u[16..].fill(0x5a);
    UdpRepr { src_port: 40000, dst_port: port, payload_len: udp_len - 8 }.emit(&src, &dst, u).expect("fits");
    size
}

/// One client's IPv6/UDP packets of one size to one sink, built once: each packet is the
/// template with its `seq` written in and the checksum mended for it (RFC 1624), not
/// summed again. Summing every 1,280-byte payload cost the traffic core enough that the
/// decapsulating rows' sender fell short of the native rows', whose sums the sending
/// kernel leaves to the interface.
pub struct Ipv6UdpTemplate {
    packet: Vec<u8>,
}

impl Ipv6UdpTemplate {
    /// The packets [`ipv6_udp`] builds with these arguments.
    pub fn new(size: usize, src: Ipv6Addr, dst: Ipv6Addr, port: u16) -> Ipv6UdpTemplate {
        let mut packet = vec![0u8; size];
        ipv6_udp(&mut packet, size, src, dst, port, 0);
        Ipv6UdpTemplate { packet }
    }

    /// Packet `seq` into `buf`, as [`ipv6_udp`] would build it; its length.
    pub fn fill(&self, buf: &mut [u8], seq: u64) -> usize {
        const SEQ: usize = 40 + 8;
        const CHECKSUM: usize = 40 + 6;
        let n = self.packet.len();
        buf[..n].copy_from_slice(&self.packet);
        buf[SEQ..SEQ + 8].copy_from_slice(&seq.to_be_bytes());
        // The template's sequence words are zero: the new sum is the old one plus them.
        let old = u16::from_be_bytes([buf[CHECKSUM], buf[CHECKSUM + 1]]);
        let sum = shipworm_wire::checksum::fold(u64::from(!old) + shipworm_wire::checksum::sum(&seq.to_be_bytes()));
        let check = match !sum {
            0 => 0xffff,
            c => c,
        };
        buf[CHECKSUM..CHECKSUM + 2].copy_from_slice(&check.to_be_bytes());
        n
    }
}

/// The UDP payload of a native packet of IPv6 size `size` (≥ 56) carrying `seq`, built
/// in `buf`; its length (the kernel adds the 48 bytes of IPv6 and UDP headers).
pub(crate) fn udp_payload(buf: &mut [u8], size: usize, seq: u64) -> usize {
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    buf[8..size - 48].fill(0x5a);
    size - 48
}

#[cfg(test)]
mod tests {
    use super::*;
    use shipworm_wire::ipv6::Ipv6Packet;
    use shipworm_wire::udp::UdpPacket;
    use std::net::Ipv4Addr;

    #[test]
    fn a_generated_frame_is_a_datagram_every_receiver_takes() {
        let (dst, src) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let client = Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0x8000, 0x63bf, 0x3fff, 0xfdd2);
        let mut inner = vec![0u8; 1280];
        ipv6_udp(&mut inner, 1280, client, Ipv6Addr::LOCALHOST, 9000, 7);
        let (from, to) = (
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 50), 40123),
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 10), 3544),
        );
        let frame = teredo_frame(dst, src, from, to, &inner);
        assert_eq!((&frame[..6], &frame[6..12], &frame[12..14]), (&dst[..], &src[..], &[0x08, 0x00][..]));
        let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
        let outer = Ipv4Repr::parse(&ip).unwrap();
        assert!(ip.dont_frag() && ip.ident() == 0, "as a host's UDP socket sends");
        assert_eq!(
            (outer.src_addr, outer.dst_addr, outer.protocol, outer.payload_len),
            (*from.ip(), *to.ip(), 17, 1288)
        );
        let udp = UdpPacket::new_checked(ip.payload()).unwrap();
        let repr = UdpRepr::parse(&udp, from.ip(), to.ip()).unwrap();
        assert_eq!((repr.src_port, repr.dst_port, udp.checksum() != 0), (40123, 3544, true));
        assert_eq!(udp.payload(), &inner[..]);
        // The native frame: the packet whole, its own sum still good.
        let frame = ipv6_frame(dst, src, &inner);
        assert_eq!(&frame[12..14], &[0x86, 0xdd]);
        let v6 = Ipv6Packet::new_checked(&frame[14..]).unwrap();
        let u = UdpPacket::new_checked(v6.payload()).unwrap();
        assert!(UdpRepr::parse(&u, &client, &Ipv6Addr::LOCALHOST).is_ok());
    }

    #[test]
    fn a_packet_from_its_template_is_the_packet_built_whole() {
        let (src, dst) =
            (Ipv6Addr::new(0x2001, 0, 0x4136, 0xe378, 0x8000, 0x63bf, 0x3fff, 0xfdd2), Ipv6Addr::LOCALHOST);
        for size in [64, 512, 1280] {
            let t = Ipv6UdpTemplate::new(size, src, dst, 9000);
            let (mut whole, mut filled) = (vec![0u8; 2048], vec![0u8; 2048]);
            // Sequence numbers whose words carry, end at 0xffff, or make the sum wrap;
            // and two that bring it to all ones, so that the sum computed is zero and
            // goes out as 0xffff (RFC 8200: a zero UDP sum is none, which IPv6 refuses).
            let template_sum = u64::from(u16::from_be_bytes([t.packet[46], t.packet[47]]));
            let mut seqs = vec![0, 1, 0xffff, 0xffff_ffff, u64::MAX, 0x8000_0000_0000_0001];
            seqs.extend([template_sum, template_sum << 16]);
            seqs.extend((0..2_000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
            for seq in seqs {
                assert_eq!(t.fill(&mut filled, seq), ipv6_udp(&mut whole, size, src, dst, 9000, seq));
                assert_eq!(filled[..size], whole[..size], "size {size}, seq {seq:#x}");
            }
        }
    }
}
