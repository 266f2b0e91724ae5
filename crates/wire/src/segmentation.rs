//! Cutting what a TUN device with offloads hands over into the packets it stands for.
//! With checksum offload the kernel leaves a packet's transport checksum half done
//! (`NEEDS_CSUM`); with TCP or UDP segmentation offload it hands over one super-packet,
//! up to 64 KiB, for a row of segments of `gso_size` payload bytes each. A Teredo peer
//! needs every packet whole and checksummed, so the daemon finishes the checksum in
//! place or cuts the super-packet here, one segment at a time into a caller's buffer:
//! one read from the device instead of one per packet, and the segments of one flow
//! then leave as one segmented UDP send.
//!
//! Only what the kernel produces for an IPv6 device is taken: TCP or UDP right after
//! the IPv6 header. Anything else is refused (and counted by the caller), never guessed.

use crate::checksum;
use crate::ip_protocol;
use crate::ipv6;
use crate::tcp::{self, TcpPacket};
use crate::udp;
use crate::vnet_hdr::{gso, VnetHdr, NEEDS_CSUM};
use crate::{read_u16, write_u16, Error, Result};

/// Offset of the IPv6 payload length field.
const PAYLOAD_LEN: core::ops::Range<usize> = 4..6;
/// The source and destination addresses: the pseudo-header's share of the header.
const ADDRESSES: core::ops::Range<usize> = 8..40;
/// Offset of the UDP length field from the UDP header.
const UDP_LENGTH: core::ops::Range<usize> = 4..6;

/// The unfolded sum of the IPv6 pseudo-header of `packet` (an IPv6 packet, header
/// checked) for `proto` and an upper-layer length of `l4_len`: the addresses are summed
/// where they lie, without reading them out.
pub(crate) fn pseudo_sum(packet: &[u8], proto: u8, l4_len: usize) -> u64 {
    checksum::sum(&packet[ADDRESSES]) + u64::from(proto) + l4_len as u64
}

/// Finish a checksum the kernel left to the device (`NEEDS_CSUM` on a single packet):
/// the field at `csum_start + csum_offset` holds the pseudo-header's sum, and the sum of
/// everything from `csum_start` is added to it, as `skb_checksum_help` does (a zero
/// result is written as 0xffff, which UDP over IPv6 needs and TCP reads the same).
pub fn complete_checksum(hdr: &VnetHdr, packet: &mut [u8]) -> Result<()> {
    if hdr.flags & NEEDS_CSUM == 0 {
        return Ok(());
    }
    let start = usize::from(hdr.csum_start);
    let at = start + usize::from(hdr.csum_offset);
    if start > packet.len() || at + 2 > packet.len() {
        return Err(Error::BadLength);
    }
    if hdr.csum_offset % 2 != 0 {
        // Not a 16-bit word of the checksummed data: no transport puts it there.
        return Err(Error::BadValue);
    }
    let c = checksum::finish(checksum::sum(&packet[start..]));
    write_u16(&mut packet[at..at + 2], if c == 0 { 0xffff } else { c });
    Ok(())
}

/// The transport protocol of a super-packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp,
    Udp,
}

/// A checked super-packet (`gso_type` TCPV6 or UDP_L4): after [`parse`](Self::parse)
/// succeeds, [`segment`](Self::segment) cannot panic.
#[derive(Debug, Clone, Copy)]
pub struct SuperPacket<'a> {
    packet: &'a [u8],
    transport: Transport,
    /// Transport header length (TCP with options, or UDP's 8).
    l4_len: usize,
    /// Payload bytes per segment.
    seg: usize,
    /// Segments it stands for.
    count: usize,
}

impl<'a> SuperPacket<'a> {
    /// Check a super-packet and its header. Refused: another `gso_type`, a packet that is
    /// not IPv6 with TCP or UDP right after the header, a checksum not where that
    /// transport keeps it, no payload, a segment size of 0.
    pub fn parse(hdr: &VnetHdr, packet: &'a [u8]) -> Result<SuperPacket<'a>> {
        let (transport, proto, csum_offset) = match hdr.gso_type & !gso::ECN {
            gso::TCPV6 => (Transport::Tcp, ip_protocol::TCP, tcp::CHECKSUM_OFFSET),
            gso::UDP_L4 => (Transport::Udp, ip_protocol::UDP, 6),
            _ => return Err(Error::BadValue),
        };
        if packet.len() < ipv6::HEADER_LEN {
            return Err(Error::Truncated);
        }
        if packet[0] >> 4 != 6 {
            return Err(Error::BadVersion);
        }
        if packet[6] != proto || usize::from(hdr.csum_start) != ipv6::HEADER_LEN {
            // Extension headers between: the kernel does not offload such packets to us.
            return Err(Error::BadChain);
        }
        if usize::from(hdr.csum_offset) != csum_offset {
            return Err(Error::BadValue);
        }
        let l4 = &packet[ipv6::HEADER_LEN..];
        let l4_len = match transport {
            Transport::Tcp => TcpPacket::new_checked(l4)?.header_len(),
            Transport::Udp if l4.len() < udp::HEADER_LEN => return Err(Error::Truncated),
            Transport::Udp => udp::HEADER_LEN,
        };
        let payload = l4.len() - l4_len;
        let seg = usize::from(hdr.gso_size);
        if payload == 0 || seg == 0 {
            return Err(Error::BadLength);
        }
        Ok(SuperPacket { packet, transport, l4_len, seg, count: payload.div_ceil(seg) })
    }

    /// How many packets it stands for.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The length of the longest segment (every one but perhaps the last).
    pub fn segment_len(&self) -> usize {
        ipv6::HEADER_LEN + self.l4_len + self.seg.min(self.packet.len() - ipv6::HEADER_LEN - self.l4_len)
    }

    /// Write segment `i` (of [`count`](Self::count)) at the start of `out`, a whole
    /// packet with its lengths and checksum; returns its length. TCP segments take the
    /// sequence number of their first byte; FIN and PSH stay with the last segment, CWR
    /// with the first, as the kernel's own segmentation does.
    pub fn segment(&self, i: usize, out: &mut [u8]) -> Result<usize> {
        if i >= self.count {
            return Err(Error::BadValue);
        }
        let head = ipv6::HEADER_LEN + self.l4_len;
        let from = head + i * self.seg;
        let to = (from + self.seg).min(self.packet.len());
        let chunk = to - from;
        let len = head + chunk;
        if out.len() < len {
            return Err(Error::BufferTooSmall);
        }
        out[..head].copy_from_slice(&self.packet[..head]);
        out[head..len].copy_from_slice(&self.packet[from..to]);
        let l4_total = self.l4_len + chunk;
        // At most a 64 KiB read's worth: fits the 16-bit fields.
        write_u16(&mut out[PAYLOAD_LEN], l4_total as u16);
        let (proto, at) = match self.transport {
            Transport::Tcp => {
                let mut t = TcpPacket::new_unchecked(&mut out[ipv6::HEADER_LEN..len]);
                t.set_seq(t.seq().wrapping_add((i * self.seg) as u32));
                let mut f = t.flags();
                if i + 1 != self.count {
                    f &= !(tcp::flags::FIN | tcp::flags::PSH);
                }
                if i != 0 {
                    f &= !tcp::flags::CWR;
                }
                t.set_flags(f);
                (ip_protocol::TCP, ipv6::HEADER_LEN + tcp::CHECKSUM_OFFSET)
            }
            Transport::Udp => {
                let l = ipv6::HEADER_LEN + UDP_LENGTH.start;
                write_u16(&mut out[l..l + 2], l4_total as u16);
                (ip_protocol::UDP, ipv6::HEADER_LEN + 6)
            }
        };
        write_u16(&mut out[at..at + 2], 0);
        let acc = pseudo_sum(out, proto, l4_total) + checksum::sum(&out[ipv6::HEADER_LEN..len]);
        let c = checksum::finish(acc);
        write_u16(&mut out[at..at + 2], if c == 0 { 0xffff } else { c });
        Ok(len)
    }
}

/// Whether an IPv6 packet's TCP or UDP checksum (right after the IPv6 header) verifies,
/// and its transport: `None` for anything else or a bad checksum.
pub(crate) fn verified_transport(packet: &[u8]) -> Option<u8> {
    if packet.len() < ipv6::HEADER_LEN + udp::HEADER_LEN || packet[0] >> 4 != 6 {
        return None;
    }
    let l4_total = packet.len() - ipv6::HEADER_LEN;
    if usize::from(read_u16(&packet[PAYLOAD_LEN])) != l4_total {
        return None;
    }
    let proto = packet[6];
    if proto == ip_protocol::UDP && read_u16(&packet[ipv6::HEADER_LEN + 6..ipv6::HEADER_LEN + 8]) == 0 {
        return None;
    }
    if proto != ip_protocol::TCP && proto != ip_protocol::UDP {
        return None;
    }
    let acc = pseudo_sum(packet, proto, l4_total) + checksum::sum(&packet[ipv6::HEADER_LEN..]);
    (checksum::fold(acc) == 0xffff).then_some(proto)
}

/// Packets the tests of this module and of [`crate::coalescing`] build.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// An IPv6 TCP packet from 2001:db8::1 to 2001:db8::2 with `payload`, checksummed.
    pub(crate) fn tcp_packet(seq: u32, flags: u8, payload: &[u8]) -> [u8; 2048] {
        let mut p = [0u8; 2048];
        let l4 = tcp::HEADER_LEN + payload.len();
        p[0] = 0x60;
        p[4..6].copy_from_slice(&(l4 as u16).to_be_bytes());
        p[6] = ip_protocol::TCP;
        p[7] = 64;
        p[8..10].copy_from_slice(&[0x20, 0x01]);
        p[10..12].copy_from_slice(&[0x0d, 0xb8]);
        p[23] = 1;
        p[24..28].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        p[39] = 2;
        p[40..42].copy_from_slice(&443u16.to_be_bytes());
        p[42..44].copy_from_slice(&50000u16.to_be_bytes());
        p[44..48].copy_from_slice(&seq.to_be_bytes());
        p[52] = 5 << 4;
        p[53] = flags;
        p[54..56].copy_from_slice(&512u16.to_be_bytes());
        p[60..60 + payload.len()].copy_from_slice(payload);
        let end = 40 + l4;
        let c = checksum::finish(checksum::sum(&p[8..40]) + 6 + l4 as u64 + checksum::sum(&p[40..end]));
        p[56..58].copy_from_slice(&c.to_be_bytes());
        p
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::tcp_packet;
    use super::*;

    #[test]
    fn a_tcp_super_packet_is_cut_into_segments_with_their_sequence_numbers_and_checksums() {
        let data: [u8; 250] = core::array::from_fn(|i| i as u8);
        let whole = tcp_packet(1000, tcp::flags::ACK | tcp::flags::PSH | tcp::flags::CWR, &data);
        let hdr = VnetHdr {
            flags: NEEDS_CSUM,
            gso_type: gso::TCPV6 | gso::ECN,
            hdr_len: 60,
            gso_size: 100,
            csum_start: 40,
            csum_offset: 16,
        };
        let sp = SuperPacket::parse(&hdr, &whole[..310]).unwrap();
        assert_eq!((sp.count(), sp.segment_len()), (3, 160));
        let mut out = [0u8; 2048];
        for (i, (want_len, want_flags)) in
            [(160, tcp::flags::ACK | tcp::flags::CWR), (160, tcp::flags::ACK), (110, tcp::flags::ACK | tcp::flags::PSH)]
                .into_iter()
                .enumerate()
        {
            let n = sp.segment(i, &mut out).unwrap();
            assert_eq!(n, want_len);
            let want = tcp_packet(1000 + 100 * i as u32, want_flags, &data[100 * i..(100 * i + 100).min(250)]);
            assert_eq!(&out[..n], &want[..n], "segment {i}");
            assert_eq!(verified_transport(&out[..n]), Some(ip_protocol::TCP));
        }
        assert_eq!(sp.segment(3, &mut out), Err(Error::BadValue));
        assert_eq!(sp.segment(0, &mut out[..100]), Err(Error::BufferTooSmall));
    }

    #[test]
    fn what_the_kernel_would_not_offload_is_refused() {
        let whole = tcp_packet(1, tcp::flags::ACK, &[1; 10]);
        let good = VnetHdr {
            flags: NEEDS_CSUM,
            gso_type: gso::TCPV6,
            hdr_len: 60,
            gso_size: 4,
            csum_start: 40,
            csum_offset: 16,
        };
        assert!(SuperPacket::parse(&good, &whole[..70]).is_ok());
        let refused = |h: VnetHdr, len: usize| SuperPacket::parse(&h, &whole[..len]).unwrap_err();
        assert_eq!(refused(VnetHdr { gso_type: gso::TCPV4, ..good }, 70), Error::BadValue);
        assert_eq!(refused(VnetHdr { gso_type: gso::UDP_L4, ..good }, 70), Error::BadChain);
        assert_eq!(refused(VnetHdr { csum_start: 48, ..good }, 70), Error::BadChain);
        assert_eq!(refused(VnetHdr { csum_offset: 6, ..good }, 70), Error::BadValue);
        assert_eq!(refused(VnetHdr { gso_size: 0, ..good }, 70), Error::BadLength);
        assert_eq!(refused(good, 60), Error::BadLength);
        assert_eq!(refused(good, 50), Error::Truncated);
    }

    #[test]
    fn a_checksum_left_to_the_device_is_finished_in_place() {
        let mut p = tcp_packet(5, tcp::flags::ACK, &[7; 33]);
        let want = p;
        // What the kernel hands over: the pseudo-header's folded sum in the field.
        let pseudo = checksum::fold(checksum::sum(&p[8..40]) + 6 + 53);
        p[56..58].copy_from_slice(&pseudo.to_be_bytes());
        let hdr = VnetHdr { flags: NEEDS_CSUM, csum_start: 40, csum_offset: 16, ..VnetHdr::default() };
        complete_checksum(&hdr, &mut p[..93]).unwrap();
        assert_eq!(p, want);
        assert_eq!(complete_checksum(&VnetHdr { csum_offset: 60, ..hdr }, &mut p[..93]), Err(Error::BadLength));
        assert_eq!(complete_checksum(&VnetHdr { csum_start: 200, ..hdr }, &mut p[..93]), Err(Error::BadLength));
    }
}
