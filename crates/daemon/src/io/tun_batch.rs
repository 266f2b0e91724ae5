//! The TUN side of the packet path, a batch at a time, with the device's offloads
//! inside (as wireguard-go's tun does): what the roles see is one IPv6 packet at a time
//! either way.
//!
//! * [`TunReader`] reads what the kernel hands over and gives it out packet by packet:
//!   a super-packet is cut into its segments, a checksum left to the device is
//!   finished. One read may stand for a whole row of segments.
//! * [`TunWriter`] queues the packets of a round and writes them when the round ends,
//!   joining consecutive packets of one flow into one super-packet: one write, and one
//!   trip through the stack, for the row. Packets of one flow keep their order; a
//!   packet that cannot be joined ends its flow's row and goes alone.
//!
//! Without offloads both are today's path: one read and one write per packet.

use crate::io::batch::{PacketInput, PacketOutput};
use crate::io::tun::Tun;
use shipworm_wire::coalescing::{Row, MAX_ROW_LEN};
use shipworm_wire::segmentation::{complete_checksum, SuperPacket};
use shipworm_wire::vnet_hdr::{self, VnetHdr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

/// Room for the largest read: a header and a 64 KiB super-packet.
const READ_BUF: usize = vnet_hdr::HEADER_LEN + MAX_ROW_LEN;
/// Room for one segment: a super-packet's segments are at most its own size.
const SEGMENT_BUF: usize = MAX_ROW_LEN;
/// Bytes of queued rows before the writer writes them all: room for 32 full rows.
const ARENA: usize = 32 * (vnet_hdr::HEADER_LEN + MAX_ROW_LEN);
/// Rows queued at most before the writer writes them all.
const MAX_ROWS: usize = 256;
/// How many of the newest rows a packet looks through for its flow's row.
const FLOW_LOOKBACK: usize = 8;

/// Reads the TUN device, cutting super-packets.
pub struct TunReader {
    buf: Box<[u8]>,
    seg: Box<[u8]>,
    /// Reads the kernel framed in a way we could not take (counted, never expected).
    refused: u64,
    /// Reads that carried a super-packet.
    super_packets: u64,
}

impl Default for TunReader {
    fn default() -> Self {
        TunReader {
            buf: vec![0; READ_BUF].into_boxed_slice(),
            seg: vec![0; SEGMENT_BUF].into_boxed_slice(),
            refused: 0,
            super_packets: 0,
        }
    }
}

impl TunReader {
    /// Read until the device is empty or at least `max` packets were handed to `f`;
    /// returns the packets handed.
    pub fn drain(&mut self, tun: &Tun, max: usize, mut f: impl FnMut(&[u8])) -> io::Result<usize> {
        let mut packets = 0;
        while packets < max {
            let Some(n) = tun.recv(&mut self.buf)? else { break };
            if !tun.has_vnet_header() {
                f(&self.buf[..n]);
                packets += 1;
                continue;
            }
            let Ok(hdr) = VnetHdr::parse(&self.buf[..n]) else {
                self.refused += 1;
                continue;
            };
            let packet = &mut self.buf[vnet_hdr::HEADER_LEN..n];
            if hdr.gso_type == vnet_hdr::gso::NONE {
                if complete_checksum(&hdr, packet).is_err() {
                    self.refused += 1;
                    continue;
                }
                f(packet);
                packets += 1;
                continue;
            }
            let Ok(sp) = SuperPacket::parse(&hdr, packet) else {
                self.refused += 1;
                continue;
            };
            for i in 0..sp.count() {
                // The buffer holds any segment of a packet that fitted the read buffer;
                // were it ever short, the segment is counted, not lost unseen.
                match sp.segment(i, &mut self.seg) {
                    Ok(len) => f(&self.seg[..len]),
                    Err(_) => self.refused += 1,
                }
            }
            packets += sp.count();
            self.super_packets += 1;
        }
        Ok(packets)
    }

    /// Reads the kernel framed in a way we could not take.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Reads that carried a super-packet.
    pub fn super_packets(&self) -> u64 {
        self.super_packets
    }
}

/// A queued row: where it lies in the arena and how far it may grow.
struct Slot {
    at: usize,
    room: usize,
    row: Row,
}

/// Queues packets for the TUN device and writes them, joined, with [`flush`](Self::flush).
pub struct TunWriter {
    arena: Box<[u8]>,
    /// The arena's first free byte.
    used: usize,
    rows: Vec<Slot>,
    /// Whether rows of more than one packet may be written (off once the kernel refused one).
    join: bool,
    /// Packets the device refused (a full queue), counted, as a router drops them.
    failed: u64,
    /// Packets written; super-packets written (for the figures).
    written: u64,
    joined_writes: u64,
}

impl Default for TunWriter {
    fn default() -> Self {
        TunWriter {
            arena: vec![0; ARENA].into_boxed_slice(),
            used: 0,
            rows: Vec::with_capacity(MAX_ROWS),
            join: true,
            failed: 0,
            written: 0,
            joined_writes: 0,
        }
    }
}

/// The part of two IPv6 packets that says which flow they belong to: the addresses and
/// the first four bytes after the header (ports, for TCP and UDP).
fn same_flow(a: &[u8], b: &[u8]) -> bool {
    a.len() >= 44 && b.len() >= 44 && a[8..44] == b[8..44]
}

impl TunWriter {
    /// Queue `packet` for `tun` (written at once on a device without offloads).
    pub fn push(&mut self, tun: &Tun, packet: &[u8]) {
        if !tun.has_vnet_header() {
            self.write(tun, packet, 1);
            return;
        }
        let head = vnet_hdr::HEADER_LEN;
        if self.join {
            // The newest row of this flow, if it is recent: join it, or else start the
            // flow's next row after it (never join an older one: that would reorder).
            for s in self.rows.iter_mut().rev().take(FLOW_LOOKBACK) {
                let region = &mut self.arena[s.at..s.at + s.room];
                if same_flow(&region[head..], packet) {
                    if s.row.append(region, packet) {
                        return;
                    }
                    break;
                }
            }
        }
        let need = head + packet.len();
        if self.rows.len() == MAX_ROWS || self.arena.len() - self.used < need {
            self.flush(tun);
        }
        if self.arena.len() - self.used < need {
            // Larger than the arena: never, with a 64 KiB packet at most; go alone.
            let mut one = vec![0u8; need];
            one[head..].copy_from_slice(packet);
            self.write(tun, &one, 1);
            return;
        }
        let at = self.used;
        // Room to grow for a row that may: a full row's, or what the arena has left.
        let room = (head + MAX_ROW_LEN).min(self.arena.len() - at);
        let Ok(row) = Row::start(&mut self.arena[at..at + room], packet) else {
            // `room` holds the packet (checked above): never; counted if it were.
            self.failed += 1;
            return;
        };
        let room = if self.join && row.is_open() { room } else { need };
        self.used += room;
        self.rows.push(Slot { at, room, row });
    }

    /// Write every queued row, in the order they were started.
    pub fn flush(&mut self, tun: &Tun) {
        let rows = std::mem::take(&mut self.rows);
        for s in &rows {
            let n = s.row.finish(&mut self.arena[s.at..s.at + s.room]);
            // Only a joined row can be refused as such.
            if self.write_at(tun, s.at, n, s.row.count()).is_err() {
                self.cut_and_write(tun, s.at, n);
            }
        }
        self.rows = rows;
        self.rows.clear();
        self.used = 0;
    }

    fn write_at(&mut self, tun: &Tun, at: usize, n: usize, count: usize) -> Result<(), ()> {
        let data = &self.arena[at..at + n];
        match tun.send(data) {
            Ok(()) => {
                self.written += count as u64;
                if count > 1 {
                    self.joined_writes += 1;
                }
                Ok(())
            }
            Err(e) if count > 1 && e.raw_os_error() == Some(libc::EINVAL) => Err(()),
            Err(_) => {
                self.failed += count as u64;
                Ok(())
            }
        }
    }

    /// A joined row the device refused: write its packets one by one, and join no more.
    fn cut_and_write(&mut self, tun: &Tun, at: usize, n: usize) {
        if self.join {
            self.join = false;
            tracing::warn!(
                "{}: the kernel refused a joined row of packets: one packet per write from now on",
                tun.name()
            );
        }
        let head = vnet_hdr::HEADER_LEN;
        let mut one = vec![0u8; SEGMENT_BUF + head];
        let Ok(hdr) = VnetHdr::parse(&self.arena[at..at + n]) else { return };
        let Ok(sp) = SuperPacket::parse(&hdr, &self.arena[at + head..at + n]) else { return };
        for i in 0..sp.count() {
            if let Ok(len) = sp.segment(i, &mut one[head..]) {
                match tun.send(&one[..head + len]) {
                    Ok(()) => self.written += 1,
                    Err(_) => self.failed += 1,
                }
            }
        }
    }

    fn write(&mut self, tun: &Tun, data: &[u8], count: u64) {
        match tun.send(data) {
            Ok(()) => self.written += count,
            Err(_) => self.failed += count,
        }
    }

    /// Packets the device refused.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// Packets written, and writes that carried a joined row.
    pub fn written(&self) -> (u64, u64) {
        (self.written, self.joined_writes)
    }
}

/// What a reader counted, for the reports.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadCounts {
    /// Reads the kernel framed in a way we could not take.
    pub refused: u64,
    /// Reads that carried a super-packet.
    pub super_packets: u64,
}

/// A TUN queue's read side as the loops see it: the device and its reader.
pub struct TunInput<'a> {
    pub tun: &'a Tun,
    pub reader: TunReader,
}

impl<'a> TunInput<'a> {
    pub fn new(tun: &'a Tun) -> Self {
        TunInput { tun, reader: TunReader::default() }
    }
}

impl TunInput<'_> {
    pub fn counts(&self) -> ReadCounts {
        ReadCounts { refused: self.reader.refused(), super_packets: self.reader.super_packets() }
    }
}

impl PacketInput for TunInput<'_> {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.tun.as_fd())
    }

    fn name(&self) -> &str {
        self.tun.name()
    }

    fn read(&mut self, max: usize, f: impl FnMut(&[u8])) -> io::Result<usize> {
        self.reader.drain(self.tun, max, f)
    }
}

/// A TUN queue's write side as the roles' outputs hold it: the device and its writer.
pub struct TunOutput<'a> {
    pub tun: &'a Tun,
    pub writer: TunWriter,
}

impl<'a> TunOutput<'a> {
    pub fn new(tun: &'a Tun) -> Self {
        TunOutput { tun, writer: TunWriter::default() }
    }
}

impl PacketOutput for TunOutput<'_> {
    fn push(&mut self, packet: &[u8]) {
        self.writer.push(self.tun, packet);
    }

    fn flush(&mut self) {
        self.writer.flush(self.tun);
    }

    fn failed(&self) -> u64 {
        self.writer.failed()
    }

    fn joined_writes(&self) -> u64 {
        self.writer.written().1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::netlink::Netlink;
    use crate::io::tun::Offloads;
    use shipworm_wire::checksum;
    use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
    use std::os::fd::AsRawFd;

    const HERE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const THERE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    /// Runs `f` on a thread in a network namespace of its own (the namespace is the
    /// thread's alone, and goes with it) holding TUN device `sw0` with HERE/64; THERE is
    /// the test, behind the device. None when not root.
    fn behind_a_tun<T: Send>(offload: bool, f: impl FnOnce(&Tun) -> T + Send) -> Option<T> {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: needs root (a network namespace and a TUN device)");
            return None;
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare a network namespace");
                let tun = Tun::create_queues("sw0", 1, offload).unwrap().pop().unwrap();
                let nl = Netlink::new().unwrap();
                let i = nl.link_index("sw0").unwrap();
                nl.set_link(i, true, 1280).unwrap();
                nl.add_address(i, HERE, 64).unwrap();
                // A device just up drops what it is given for a moment: wait until a
                // datagram gets through.
                let probe = UdpSocket::bind(SocketAddrV6::new(HERE, 0, 0, 0)).unwrap();
                probe.set_read_timeout(Some(std::time::Duration::from_millis(10))).unwrap();
                let ping = udp6(1, probe.local_addr().unwrap().port(), b"ready?");
                let mut b = [0u8; 16];
                let mut w = TunWriter::default();
                assert!(
                    (0..300).any(|_| {
                        w.push(&tun, &ping);
                        w.flush(&tun);
                        probe.recv(&mut b).is_ok()
                    }),
                    "the TUN device never passed a datagram"
                );
                Some(f(&tun))
            })
            .join()
            .unwrap()
        })
    }

    /// An IPv6 UDP datagram THERE:`sport` → HERE:`dport`, checksummed.
    fn udp6(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let l4 = 8 + payload.len();
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(l4 as u16).to_be_bytes());
        p.extend_from_slice(&[17, 64]);
        p.extend_from_slice(&THERE.octets());
        p.extend_from_slice(&HERE.octets());
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&dport.to_be_bytes());
        p.extend_from_slice(&(l4 as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        let c = checksum::finish(checksum::ipv6_pseudo_header(&THERE, &HERE, 17, l4 as u32) + checksum::sum(&p[40..]));
        p[46..48].copy_from_slice(&c.to_be_bytes());
        p
    }

    /// What `sock` receives within a second, until `want` datagrams came.
    fn receive(sock: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
        sock.set_read_timeout(Some(std::time::Duration::from_secs(1))).unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 2048];
        while got.len() < want {
            match sock.recv(&mut b) {
                Ok(n) => got.push(b[..n].to_vec()),
                Err(_) => break,
            }
        }
        got
    }

    fn payload(flow: u8, i: u8, len: usize) -> Vec<u8> {
        (0..len).map(|k| flow ^ i ^ k as u8).collect()
    }

    /// A UDP socket's segmented send into the device comes out as its datagrams, each
    /// whole with a checksum that verifies: from one super-packet with offloads, one by
    /// one without.
    fn segmented_send_reads_as_datagrams(offload: bool) {
        behind_a_tun(offload, |tun| {
            let sock = UdpSocket::bind(SocketAddrV6::new(HERE, 0, 0, 0)).unwrap();
            let seg: libc::c_int = 1000;
            // SAFETY: UDP_SEGMENT takes an int, passed by pointer with its size.
            let r = unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_UDP,
                    libc::UDP_SEGMENT,
                    (&seg as *const libc::c_int).cast(),
                    4,
                )
            };
            assert_eq!(r, 0);
            let data: Vec<u8> = (0..9500).map(|i| (i % 251) as u8).collect();
            sock.send_to(&data, SocketAddrV6::new(THERE, 9, 0, 0)).unwrap();
            let mut reader = TunReader::default();
            let mut got = Vec::new();
            for _ in 0..100 {
                reader.drain(tun, 64, |p| got.push(p.to_vec())).unwrap();
                if got.len() >= 10 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            // Router solicitations and the like may come too: keep the datagrams.
            got.retain(|p| p.len() > 48 && p[6] == 17 && p[43] == 9);
            assert_eq!(got.len(), 10, "ten datagrams of 1000 bytes or fewer");
            for (i, p) in got.iter().enumerate() {
                assert_eq!(&p[48..], &data[i * 1000..(i * 1000 + 1000).min(9500)], "datagram {i}");
                let sum =
                    checksum::ipv6_pseudo_header(&HERE, &THERE, 17, (p.len() - 40) as u32) + checksum::sum(&p[40..]);
                assert_eq!(checksum::fold(sum), 0xffff, "datagram {i}: checksum");
            }
            assert_eq!(reader.refused(), 0);
            if tun.offloads() == (Offloads::Segmentation { udp: true }) {
                assert_eq!(reader.super_packets(), 1, "one read for the ten");
            } else {
                assert_eq!(reader.super_packets(), 0);
            }
        });
    }

    #[test]
    fn a_segmented_send_reads_as_its_datagrams_with_offloads() {
        segmented_send_reads_as_datagrams(true);
    }

    #[test]
    fn a_segmented_send_reads_as_its_datagrams_without_offloads() {
        segmented_send_reads_as_datagrams(false);
    }

    /// Two interleaved flows and a packet that cannot join: the device gets one write
    /// per flow's row where it takes them, and each socket its datagrams in order.
    fn rows_write_as_datagrams(offload: bool) {
        behind_a_tun(offload, |tun| {
            let (a, b) = (
                UdpSocket::bind(SocketAddrV6::new(HERE, 0, 0, 0)).unwrap(),
                UdpSocket::bind(SocketAddrV6::new(HERE, 0, 0, 0)).unwrap(),
            );
            let port = |s: &UdpSocket| s.local_addr().unwrap().port();
            let mut w = TunWriter::default();
            let mut want_a = Vec::new();
            let mut want_b = Vec::new();
            for i in 0..20u8 {
                want_a.push(payload(1, i, 1200));
                w.push(tun, &udp6(7, port(&a), &want_a[usize::from(i)]));
                want_b.push(payload(2, i, 600));
                w.push(tun, &udp6(8, port(&b), &want_b[usize::from(i)]));
            }
            // A corrupted datagram cannot join, and the kernel drops it; the next one
            // of its flow starts a new row after it.
            let mut bad = udp6(7, port(&a), &payload(3, 0, 1200));
            bad[60] ^= 1;
            w.push(tun, &bad);
            want_a.push(payload(4, 0, 100));
            w.push(tun, &udp6(7, port(&a), &want_a[20]));
            w.flush(tun);
            assert_eq!(receive(&a, 21), want_a);
            assert_eq!(receive(&b, 20), want_b);
            let (written, joined) = w.written();
            assert_eq!((written, w.failed()), (42, 0));
            if tun.offloads() == (Offloads::Segmentation { udp: true }) {
                assert_eq!(joined, 2, "one super-packet per flow");
            } else if tun.has_vnet_header() {
                assert!(joined <= 2);
            } else {
                assert_eq!(joined, 0);
            }
        });
    }

    #[test]
    fn rows_write_as_their_datagrams_with_offloads() {
        rows_write_as_datagrams(true);
    }

    #[test]
    fn packets_write_one_by_one_without_offloads() {
        rows_write_as_datagrams(false);
    }
}
