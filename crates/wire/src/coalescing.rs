//! Joining consecutive packets of one flow into one super-packet for a TUN device with
//! offloads: one write and one trip up the stack for a row of segments, which the
//! kernel cuts again exactly where they were joined (or hands whole to a local socket
//! or a forwarding path that keeps it whole). The rules keep this invisible to the two
//! ends, as the kernel's own GRO does:
//!
//! * only IPv6 packets with TCP or UDP right after the header, whose checksum verifies
//!   (joining would otherwise give a corrupted packet a fresh, correct checksum);
//! * the same addresses, traffic class, flow label and hop limit, the same ports;
//! * TCP: flags ACK or ACK|PSH only, payload in sequence, the same acknowledgement,
//!   window, urgent pointer and options; a PSH ends the row;
//! * every segment the size of the first but the last, which may be shorter and ends
//!   the row; at most 64 segments and 64 KiB.
//!
//! Cutting the super-packet again ([`crate::segmentation`]) gives back the joined
//! packets byte for byte; the property tests and the fuzz target hold this.

use crate::checksum;
use crate::ip_protocol;
use crate::ipv6;
use crate::segmentation::{pseudo_sum, verified_transport};
use crate::tcp::{self, TcpPacket};
use crate::udp;
use crate::vnet_hdr::{self, gso, VnetHdr, NEEDS_CSUM};
use crate::{read_u16, write_u16, Error, Result};

/// Segments one super-packet carries at most.
pub const MAX_SEGMENTS: usize = 64;
/// The largest packet a row can grow to (an IPv6 payload length is 16 bits).
pub const MAX_ROW_LEN: usize = ipv6::HEADER_LEN + 0xffff;

/// A row being built in a caller's buffer: a virtio-net header's room, then the first
/// packet with the later packets' payloads appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// Bytes of packet in the buffer, after the header's room.
    len: usize,
    /// TCP, UDP, or 0: a packet that cannot be joined.
    proto: u8,
    l4_len: usize,
    /// Payload bytes per segment: the first packet's.
    seg: usize,
    count: usize,
    /// No more can be appended (a shorter last segment, a PSH, the limits).
    closed: bool,
    /// The sequence number the next TCP segment must carry.
    next_seq: u32,
}

/// What a joinable packet is: transport, transport header length, payload length.
fn joinable(packet: &[u8]) -> Option<(u8, usize, usize)> {
    let proto = verified_transport(packet)?;
    let l4 = &packet[ipv6::HEADER_LEN..];
    let l4_len = if proto == ip_protocol::TCP {
        let t = TcpPacket::new_checked(l4).ok()?;
        let f = t.flags();
        if f != tcp::flags::ACK && f != tcp::flags::ACK | tcp::flags::PSH {
            return None;
        }
        t.header_len()
    } else {
        if usize::from(read_u16(&l4[4..6])) != l4.len() {
            return None;
        }
        udp::HEADER_LEN
    };
    let payload = l4.len() - l4_len;
    (payload > 0).then_some((proto, l4_len, payload))
}

impl Row {
    /// Start a row with `packet`, copied into `buf` after room for the header. `buf` must
    /// hold [`vnet_hdr::HEADER_LEN`] more bytes than the packet; rows grow into it up
    /// to its length.
    pub fn start(buf: &mut [u8], packet: &[u8]) -> Result<Row> {
        let at = vnet_hdr::HEADER_LEN;
        if buf.len() < at + packet.len() {
            return Err(Error::BufferTooSmall);
        }
        buf[at..at + packet.len()].copy_from_slice(packet);
        let mut row = Row { len: packet.len(), proto: 0, l4_len: 0, seg: 0, count: 1, closed: true, next_seq: 0 };
        if let Some((proto, l4_len, payload)) = joinable(packet) {
            row.proto = proto;
            row.l4_len = l4_len;
            row.seg = payload;
            row.closed = proto == ip_protocol::TCP && packet[ipv6::HEADER_LEN + 13] & tcp::flags::PSH != 0;
            if proto == ip_protocol::TCP {
                let t = TcpPacket::new_unchecked(&packet[ipv6::HEADER_LEN..]);
                row.next_seq = t.seq().wrapping_add(payload as u32);
            }
        }
        Ok(row)
    }

    /// Packets in the row.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether more packets may still join.
    pub fn is_open(&self) -> bool {
        !self.closed
    }

    /// Append `packet` to the row in `buf` if the rules allow; false leaves both as they
    /// were (the caller starts a new row, after this one).
    pub fn append(&mut self, buf: &mut [u8], packet: &[u8]) -> bool {
        if self.closed || self.count >= MAX_SEGMENTS {
            return false;
        }
        let Some((proto, l4_len, payload)) = joinable(packet) else {
            return false;
        };
        let head = vnet_hdr::HEADER_LEN;
        let first = &buf[head..head + ipv6::HEADER_LEN + self.l4_len];
        let end = head + self.len + payload;
        if proto != self.proto
            || l4_len != self.l4_len
            || payload > self.seg
            || self.len + payload > MAX_ROW_LEN
            || end > buf.len()
            // Version, class, flow label; next header and hop limit; addresses.
            || first[0..4] != packet[0..4]
            || first[6..40] != packet[6..40]
        {
            return false;
        }
        let (l4, p4) = (&first[ipv6::HEADER_LEN..], &packet[ipv6::HEADER_LEN..]);
        if l4[0..4] != p4[0..4] {
            return false;
        }
        let mut push = false;
        if proto == ip_protocol::TCP {
            let t = TcpPacket::new_unchecked(p4);
            // Acknowledgement, data offset, window; urgent pointer and options.
            if t.seq() != self.next_seq
                || l4[8..13] != p4[8..13]
                || l4[14..16] != p4[14..16]
                || l4[18..l4_len] != p4[18..l4_len]
            {
                return false;
            }
            push = t.flags() & tcp::flags::PSH != 0;
            self.next_seq = self.next_seq.wrapping_add(payload as u32);
        }
        buf[head + self.len..end].copy_from_slice(&packet[ipv6::HEADER_LEN + l4_len..]);
        if push {
            buf[head + ipv6::HEADER_LEN + 13] |= tcp::flags::PSH;
        }
        self.len += payload;
        self.count += 1;
        self.closed = push || payload < self.seg;
        true
    }

    /// Write the header and the row's lengths and checksum; returns the bytes of `buf`
    /// to hand to the device. A row of one packet goes as it came (a plain header); a
    /// longer one as a super-packet whose checksum holds the pseudo-header's sum.
    pub fn finish(&self, buf: &mut [u8]) -> usize {
        let head = vnet_hdr::HEADER_LEN;
        let total = head + self.len;
        if self.count == 1 {
            buf[..head].fill(0);
            return total;
        }
        let p = &mut buf[head..total];
        let l4_total = self.len - ipv6::HEADER_LEN;
        // A row never passes MAX_ROW_LEN: the lengths fit their 16 bits.
        write_u16(&mut p[4..6], l4_total as u16);
        let (gso_type, csum_offset) = if self.proto == ip_protocol::TCP {
            (gso::TCPV6, tcp::CHECKSUM_OFFSET)
        } else {
            write_u16(&mut p[ipv6::HEADER_LEN + 4..ipv6::HEADER_LEN + 6], l4_total as u16);
            (gso::UDP_L4, 6)
        };
        let at = ipv6::HEADER_LEN + csum_offset;
        let pseudo = checksum::fold(pseudo_sum(p, self.proto, l4_total));
        write_u16(&mut p[at..at + 2], pseudo);
        let hdr = VnetHdr {
            flags: NEEDS_CSUM,
            gso_type,
            hdr_len: (ipv6::HEADER_LEN + self.l4_len) as u16,
            gso_size: self.seg as u16,
            csum_start: ipv6::HEADER_LEN as u16,
            csum_offset: csum_offset as u16,
        };
        // `start` made room for the header.
        let _ = hdr.emit(&mut buf[..head]);
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segmentation::SuperPacket;
    use std::vec::Vec;

    fn tcp(seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = Vec::from(&crate::segmentation::tests_support::tcp_packet(seq, flags, payload)[..]);
        p.truncate(60 + payload.len());
        p
    }

    /// Joins `packets` into rows as the daemon does (a new row when one refuses), and
    /// returns each row's packet count after cutting it again and comparing.
    fn join_and_cut(packets: &[Vec<u8>]) -> Vec<usize> {
        let mut rows: Vec<(Vec<u8>, Row)> = Vec::new();
        for p in packets {
            if let Some((buf, row)) = rows.last_mut() {
                if row.append(buf, p) {
                    continue;
                }
            }
            let mut buf = std::vec![0u8; 70_000];
            let row = Row::start(&mut buf, p).unwrap();
            rows.push((buf, row));
        }
        let mut at = 0;
        let mut counts = Vec::new();
        for (buf, row) in &mut rows {
            let n = row.finish(buf);
            let hdr = VnetHdr::parse(buf).unwrap();
            let mut out = [0u8; 2048];
            if row.count() == 1 {
                assert!(hdr.is_plain());
                assert_eq!(&buf[10..n], &packets[at][..]);
            } else {
                let sp = SuperPacket::parse(&hdr, &buf[10..n]).unwrap();
                assert_eq!(sp.count(), row.count());
                for i in 0..sp.count() {
                    let len = sp.segment(i, &mut out).unwrap();
                    assert_eq!(&out[..len], &packets[at + i][..], "row packet {i}");
                }
            }
            at += row.count();
            counts.push(row.count());
        }
        counts
    }

    #[test]
    fn a_flow_in_order_is_joined_and_cut_back_byte_for_byte() {
        let d = [9u8; 100];
        let f = tcp::flags::ACK;
        let packets = [tcp(1, f, &d), tcp(101, f, &d), tcp(201, f | tcp::flags::PSH, &d[..40]), tcp(241, f, &d)];
        assert_eq!(join_and_cut(&packets), [3, 1], "PSH ends the row");
    }

    #[test]
    fn gaps_sizes_flags_and_bad_checksums_are_not_joined() {
        let d = [3u8; 100];
        let f = tcp::flags::ACK;
        let mut corrupt = tcp(301, f, &d);
        corrupt[70] ^= 1;
        let packets = [
            tcp(1, f, &d),
            tcp(201, f, &d),                   // a gap
            tcp(301, f, &d[..50]),             // shorter: the last of its row
            tcp(351, f, &d),                   // after a shorter one
            tcp(451, f, &d[..99]),             // shorter: the row ends
            tcp(550, f | tcp::flags::FIN, &d), // FIN is never joined
            tcp(650, f, &[]),                  // no payload
            corrupt,
            tcp(401, f, &d[..80]),
            tcp(481, f, &d[..90]), // longer than the first
        ];
        assert_eq!(join_and_cut(&packets), [1, 2, 2, 1, 1, 1, 1, 1]);
    }

    #[test]
    fn a_different_window_acknowledgement_urgent_pointer_or_flow_label_starts_a_row() {
        let d = [1u8; 64];
        let a = tcp(1, tcp::flags::ACK, &d);
        let fixed = |mut p: Vec<u8>, at: usize, v: u8| {
            p[at] = v;
            let l = p.len();
            p[56..58].fill(0);
            let c = checksum::finish(checksum::sum(&p[8..40]) + 6 + (l - 40) as u64 + checksum::sum(&p[40..]));
            p[56..58].copy_from_slice(&c.to_be_bytes());
            p
        };
        for (at, v) in [(54, 9), (51, 9), (3, 9), (7, 9), (58, 9)] {
            let b = fixed(tcp(65, tcp::flags::ACK, &d), at, v);
            assert_eq!(join_and_cut(&[a.clone(), b]), [1, 1], "byte {at}");
        }
        assert_eq!(join_and_cut(&[a.clone(), tcp(65, tcp::flags::ACK, &d)]), [2]);
    }

    #[test]
    fn a_row_stops_at_its_limits() {
        let d = [5u8; 1100];
        let packets: Vec<Vec<u8>> = (0..70).map(|i| tcp(i * 1100, tcp::flags::ACK, &d)).collect();
        assert_eq!(join_and_cut(&packets), [59, 11], "64 KiB of IPv6 payload at most");
        let d = [5u8; 10];
        let packets: Vec<Vec<u8>> = (0..70).map(|i| tcp(i * 10, tcp::flags::ACK, &d)).collect();
        assert_eq!(join_and_cut(&packets), [64, 6]);
        let mut small = [0u8; 85];
        let mut row = Row::start(&mut small, &packets[0]).unwrap();
        assert!(!row.append(&mut small, &packets[1]), "the caller's buffer is full");
        assert_eq!(Row::start(&mut small[..40], &packets[0]), Err(Error::BufferTooSmall));
    }
}
