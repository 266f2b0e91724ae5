//! Batched UDP I/O: many datagrams per system call with recvmmsg(2) and sendmmsg(2),
//! into buffers allocated once, rows of datagrams to one destination as one segmented
//! send (UDP_SEGMENT), and on receive rows the kernel coalesced (UDP_GRO) split again
//! into their datagrams. The packet path allocates nothing. Each batch owns its
//! socket (a duplicate descriptor where one socket both receives and sends), so a
//! caller cannot hand it the wrong one, and counts what the kernel refused.

use crate::io::batch::{DatagramInput, DatagramOutput, AHEAD};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Room for one Teredo datagram: a 1280-byte link MTU plus headers and trailers fits
/// with plenty to spare; a peer's larger MTU up to this still does.
pub const SLOT: usize = 4096;

/// Room for an IPv4 or IPv6 socket address.
type Storage = libc::sockaddr_in6;

fn storage_to_addr(sa: &Storage) -> SocketAddr {
    if i32::from(sa.sin6_family) == libc::AF_INET6 {
        SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(sa.sin6_addr.s6_addr), u16::from_be(sa.sin6_port), 0, 0))
    } else {
        // SAFETY: an AF_INET address was written here, and sockaddr_in fits in sockaddr_in6.
        let v4: &libc::sockaddr_in = unsafe { &*(sa as *const Storage).cast::<libc::sockaddr_in>() };
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr)), u16::from_be(v4.sin_port)))
    }
}

fn addr_to_storage(a: SocketAddr) -> (Storage, u32) {
    // SAFETY: plain old data; all-zero is a valid value.
    let mut st: Storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_in fits in sockaddr_in6 and has no invalid bit patterns.
            let v4: &mut libc::sockaddr_in = unsafe { &mut *(&mut st as *mut Storage).cast::<libc::sockaddr_in>() };
            v4.sin_family = libc::AF_INET as libc::sa_family_t;
            v4.sin_port = a.port().to_be();
            v4.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            (st, std::mem::size_of::<libc::sockaddr_in>() as u32)
        }
        SocketAddr::V6(a) => {
            st.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            st.sin6_port = a.port().to_be();
            st.sin6_addr.s6_addr = a.ip().octets();
            (st, std::mem::size_of::<Storage>() as u32)
        }
    }
}

/// The heap arrays a batch points into. The raw pointers in `iovs` and `hdrs` are set
/// by each call that hands them to the kernel (`recv`, the send side's layout), from its
/// own borrow: never kept across a move of the arrays.
struct Arrays {
    bufs: Box<[u8]>,
    addrs: Box<[Storage]>,
    iovs: Box<[libc::iovec]>,
    hdrs: Box<[libc::mmsghdr]>,
    slot: usize,
}

// SAFETY: the raw pointers only ever point into the boxed slices owned by the same value,
// and are set afresh before each use.
unsafe impl Send for Arrays {}

impl Arrays {
    /// The arrays, zeroed: the pointers in `iovs` and `hdrs` are set by each call that
    /// hands them to the kernel, from its own borrow of the arrays.
    fn new(n: usize, slot: usize) -> Arrays {
        let bufs = vec![0u8; n * slot].into_boxed_slice();
        // SAFETY: plain old data, zero is valid (null pointers, set before any use).
        let addrs: Box<[Storage]> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        let iovs: Box<[libc::iovec]> =
            (0..n).map(|_| libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }).collect();
        // SAFETY: plain old data, zero is valid (null pointers, set before any use).
        let hdrs = (0..n).map(|_| unsafe { std::mem::zeroed::<libc::mmsghdr>() }).collect();
        Arrays { bufs, addrs, iovs, hdrs, slot }
    }
}

/// Room for the UDP_GRO control message of one received row (an int, aligned).
const GRO_CMSG_WORDS: usize = 4;
/// Messages per call on a coalescing socket: each may hold a row of up to 64 datagrams.
const GRO_MESSAGES: usize = 16;
/// A coalescing socket's slot: the largest row the kernel builds.
const GRO_SLOT: usize = 65_536;

/// Receives up to `n` datagrams (or rows of them, on a coalescing socket) per call
/// from its socket.
pub struct RecvBatch {
    fd: OwnedFd,
    a: Arrays,
    filled: usize,
    /// Per message, room for the UDP_GRO control message (empty when not coalescing).
    ctrl: Box<[[u64; GRO_CMSG_WORDS]]>,
}

impl AsFd for RecvBatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl DatagramInput for RecvBatch {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    fn read<C: ?Sized>(
        &mut self,
        max_batches: usize,
        on: &mut C,
        ahead: impl Fn(&C, &[u8]),
        mut f: impl FnMut(&mut C, SocketAddrV4, &[u8]),
    ) -> io::Result<usize> {
        let mut total = 0;
        for _ in 0..max_batches {
            let n = self.recv()?;
            let mut coming = (0..n).flat_map(|i| self.datagrams(i));
            coming.by_ref().take(AHEAD).for_each(|d| ahead(on, d));
            for i in 0..n {
                let (from, _) = self.get(i);
                for data in self.datagrams(i) {
                    if let Some(next) = coming.next() {
                        ahead(on, next);
                    }
                    f(on, from, data);
                    total += 1;
                }
            }
            if n < self.capacity() {
                break;
            }
        }
        Ok(total)
    }
}

impl RecvBatch {
    /// A batch of `n` slots of `slot` bytes reading `socket`; larger datagrams are
    /// reported empty.
    pub fn new(socket: impl Into<OwnedFd>, n: usize, slot: usize) -> RecvBatch {
        RecvBatch { fd: socket.into(), a: Arrays::new(n, slot), filled: 0, ctrl: Box::new([]) }
    }

    /// A batch for a service socket: [`coalescing`](Self::coalescing) unless a kernel
    /// data path decapsulates its datagrams at tc ingress (`decap_at_tc`), which sees
    /// them after GRO: rows joined for the socket would reach the program whole, and go
    /// up to the daemon.
    pub fn for_service(socket: impl Into<OwnedFd>, n: usize, slot: usize, decap_at_tc: bool) -> RecvBatch {
        if decap_at_tc {
            RecvBatch::new(socket, n, slot)
        } else {
            RecvBatch::coalescing(socket, n, slot)
        }
    }

    /// A batch on `socket` that asks the kernel to coalesce consecutive datagrams of
    /// one sender into rows (UDP_GRO, Linux 5.0): one trip up the stack and one message
    /// for the row, which [`datagrams`](Self::datagrams) splits again. Without it (an
    /// older kernel) the batch is [`new`](Self::new)`(socket, n, slot)`.
    pub fn coalescing(socket: impl Into<OwnedFd>, n: usize, slot: usize) -> RecvBatch {
        let fd: OwnedFd = socket.into();
        let on: libc::c_int = 1;
        // SAFETY: UDP_GRO takes an int, passed by pointer with its size.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_GRO,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
        if r != 0 {
            tracing::debug!("UDP_GRO refused ({}): one datagram per message", io::Error::last_os_error());
            return RecvBatch::new(fd, n, slot);
        }
        let n = GRO_MESSAGES;
        RecvBatch { fd, a: Arrays::new(n, GRO_SLOT), filled: 0, ctrl: vec![[0; GRO_CMSG_WORDS]; n].into() }
    }

    /// Datagrams one call can return.
    pub fn capacity(&self) -> usize {
        self.a.hdrs.len()
    }

    /// Receive what is waiting, without blocking; returns how many datagrams (0 when
    /// nothing is waiting).
    pub fn recv(&mut self) -> io::Result<usize> {
        let fd = self.fd.as_fd();
        let n = self.a.hdrs.len();
        let ctrl_len = if self.ctrl.is_empty() { 0 } else { std::mem::size_of::<[u64; GRO_CMSG_WORDS]>() };
        let slot = self.a.slot;
        for i in 0..n {
            // The pointers are taken afresh from this borrow of the arrays each call (as
            // the send side does), not kept from before the arrays last moved.
            self.a.iovs[i] = libc::iovec { iov_base: self.a.bufs[i * slot..].as_mut_ptr().cast(), iov_len: slot };
            let h = &mut self.a.hdrs[i];
            h.msg_hdr.msg_name = (&mut self.a.addrs[i] as *mut Storage).cast();
            h.msg_hdr.msg_namelen = std::mem::size_of::<Storage>() as u32;
            h.msg_hdr.msg_iov = &mut self.a.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_flags = 0;
            h.msg_hdr.msg_controllen = ctrl_len;
            if let Some(c) = self.ctrl.get_mut(i) {
                h.msg_hdr.msg_control = c.as_mut_ptr().cast();
            }
            h.msg_len = 0;
        }
        // SAFETY: every header points into arrays owned by `self.a`, sized as declared.
        let r = unsafe {
            libc::recvmmsg(fd.as_raw_fd(), self.a.hdrs.as_mut_ptr(), n as u32, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            self.filled = 0;
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        self.filled = r as usize;
        Ok(self.filled)
    }

    /// Datagram `i` of the last call: its source and payload. Truncated datagrams
    /// (larger than a slot) are reported with an empty payload.
    pub fn get(&self, i: usize) -> (SocketAddrV4, &[u8]) {
        let (from, data) = self.get_any(i);
        let from = match from {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(a) => SocketAddrV4::new(a.ip().to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED), a.port()),
        };
        (from, data)
    }

    /// The datagrams of message `i` of the last call: one, or on a coalescing socket
    /// the row the kernel joined, cut where the sender's datagrams ended (every one
    /// the size the kernel reports but the last).
    pub fn datagrams(&self, i: usize) -> impl Iterator<Item = &[u8]> {
        let data = self.payload(i);
        let size = self.segment_size(i).filter(|&s| s > 0 && s < data.len()).unwrap_or(data.len().max(1));
        // An empty payload (a zero-length datagram, or a truncated one) is one datagram.
        let empty = data.is_empty().then_some(data);
        data.chunks(size).chain(empty)
    }

    /// The segment size of a coalesced row (UDP_GRO control message), if message `i`
    /// is one.
    fn segment_size(&self, i: usize) -> Option<usize> {
        if self.ctrl.is_empty() {
            return None;
        }
        let h = &self.a.hdrs[i].msg_hdr;
        // SAFETY: the control buffer was handed to the kernel with its length, and the
        // CMSG macros walk only within msg_controllen of it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                    return Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>()) as usize);
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        None
    }

    /// Datagram `i` of the last call, on a socket of either family.
    pub fn get_any(&self, i: usize) -> (SocketAddr, &[u8]) {
        (storage_to_addr(&self.a.addrs[i]), self.payload(i))
    }

    /// Message `i`'s payload (empty if it was truncated).
    fn payload(&self, i: usize) -> &[u8] {
        let h = &self.a.hdrs[i];
        if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return &[];
        }
        let len = (h.msg_len as usize).min(self.a.slot);
        &self.a.bufs[i * self.a.slot..i * self.a.slot + len]
    }
}

/// Datagrams one segmented send carries at most (the kernel's UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;
/// Payload bytes one segmented send carries at most: an IPv4 datagram's 65 535 less
/// its headers, with room to spare.
const GSO_MAX_BYTES: usize = 65_000;
/// Datagrams longer than this go alone: the kernel refuses segments that would not fit
/// the path MTU unfragmented. A Teredo datagram holds an IPv6 packet of the 1280-byte
/// Teredo MTU, an origin indication and an authentication header at most, well under.
const GSO_MAX_SEGMENT: usize = 1400;

/// The UDP_SEGMENT control message of one segmented send.
#[repr(C)]
#[derive(Clone, Copy)]
struct SegmentCmsg {
    hdr: libc::cmsghdr,
    size: u16,
    _pad: [u8; 6],
}

/// Whether sends may carry several datagrams with UDP segmentation offload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gso {
    On,
    /// A segmented send was refused; the run goes again one datagram at a time, and
    /// if that works, segmentation was at fault.
    Doubted,
    Off,
}

/// Queues datagrams and sends them with as few calls as possible. Datagrams queued in
/// a row to the same destination with the same length (the last of a row may be
/// shorter) leave as one segmented send (UDP_SEGMENT, Linux 4.18): the stack is walked
/// once for the row, and the receiver still gets one datagram each. A kernel or route
/// that refuses segmentation turns it off for the batch, with a warning.
pub struct SendBatch {
    fd: OwnedFd,
    a: Arrays,
    queued: usize,
    /// The messages of one sendmmsg call: rows of slots.
    msgs: Box<[libc::mmsghdr]>,
    /// Datagrams in each of `msgs`.
    segs: Box<[usize]>,
    cmsgs: Box<[SegmentCmsg]>,
    gso: Gso,
    /// Slots before this one go one datagram a send (a refused row, in this flush).
    alone_until: usize,
    /// Datagrams the kernel refused since the batch was made.
    failed: u64,
}

impl AsFd for SendBatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl DatagramOutput for SendBatch {
    fn push(&mut self, to: SocketAddrV4, payload: &[u8]) {
        SendBatch::push(self, to, payload);
    }

    fn flush(&mut self) {
        if !self.is_empty() {
            SendBatch::flush(self);
        }
    }

    fn failed(&self) -> u64 {
        SendBatch::failed(self)
    }
}

impl SendBatch {
    /// A batch of `n` slots of `slot` bytes sending on `socket`, segmenting rows.
    pub fn new(socket: impl Into<OwnedFd>, n: usize, slot: usize) -> SendBatch {
        // SAFETY: plain old data, zero is valid.
        let msgs = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        // SAFETY: as above.
        let cmsgs = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        SendBatch {
            fd: socket.into(),
            a: Arrays::new(n, slot),
            queued: 0,
            msgs,
            segs: vec![0; n].into_boxed_slice(),
            cmsgs,
            gso: Gso::On,
            alone_until: 0,
            failed: 0,
        }
    }

    /// Whether every slot is taken: flush before queueing more.
    pub fn is_full(&self) -> bool {
        self.queued == self.a.hdrs.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queued == 0
    }

    /// The next free slot, to build a datagram in place. Call [`commit`](Self::commit)
    /// with its length and destination afterwards. Panics if full: check first.
    pub fn slot_mut(&mut self) -> &mut [u8] {
        assert!(!self.is_full(), "send batch full");
        let s = self.a.slot;
        &mut self.a.bufs[self.queued * s..(self.queued + 1) * s]
    }

    /// Copy `payload` into the next slot and queue it to `to`, sending what is queued
    /// first if every slot is taken.
    pub fn push(&mut self, to: SocketAddrV4, payload: &[u8]) {
        if payload.len() > self.a.slot {
            // Never cut a datagram short: refused, and counted with the kernel's refusals.
            self.failed += 1;
            return;
        }
        if self.is_full() {
            self.flush();
        }
        self.slot_mut()[..payload.len()].copy_from_slice(payload);
        self.commit(payload.len(), to);
    }

    /// Queue the datagram built in the current slot.
    pub fn commit(&mut self, len: usize, to: SocketAddrV4) {
        self.commit_any(len, SocketAddr::V4(to));
    }

    /// Queue the datagram built in the current slot, to an address of either family.
    pub fn commit_any(&mut self, len: usize, to: SocketAddr) {
        let i = self.queued;
        let (st, namelen) = addr_to_storage(to);
        self.a.addrs[i] = st;
        self.a.iovs[i].iov_len = len.min(self.a.slot);
        self.a.hdrs[i].msg_hdr.msg_namelen = namelen;
        self.queued += 1;
    }

    /// Whether slots `i` and `j` go to the same address.
    fn same_destination(&self, i: usize, j: usize) -> bool {
        let (x, y) = (&self.a.addrs[i], &self.a.addrs[j]);
        // An IPv4 address lies in the family, port and flow-information fields, the
        // rest zero (`addr_to_storage`), so comparing every field fits both families.
        x.sin6_family == y.sin6_family
            && x.sin6_port == y.sin6_port
            && x.sin6_flowinfo == y.sin6_flowinfo
            && x.sin6_addr.s6_addr == y.sin6_addr.s6_addr
            && x.sin6_scope_id == y.sin6_scope_id
    }

    /// How many slots from `at` make one row: same destination, same length (the last
    /// may be shorter), within the kernel's limits.
    fn row_at(&self, at: usize) -> usize {
        let len = self.a.iovs[at].iov_len;
        if self.gso == Gso::Off || at < self.alone_until || len == 0 || len > GSO_MAX_SEGMENT {
            return 1;
        }
        let mut k = 1;
        while at + k < self.queued && k < GSO_MAX_SEGMENTS && (k + 1) * len <= GSO_MAX_BYTES {
            let next = self.a.iovs[at + k].iov_len;
            if next == 0 || next > len || !self.same_destination(at, at + k) {
                break;
            }
            k += 1;
            if next < len {
                break;
            }
        }
        k
    }

    /// Lay out the messages of one sendmmsg call from slot `at`; returns how many.
    fn plan(&mut self, mut at: usize) -> usize {
        // The slots' addresses, from this borrow of the arrays (see `Arrays`).
        let slot = self.a.slot;
        for j in at..self.queued {
            self.a.iovs[j].iov_base = self.a.bufs[j * slot..].as_mut_ptr().cast();
        }
        let mut m = 0;
        while at < self.queued {
            let k = self.row_at(at);
            let h = &mut self.msgs[m].msg_hdr;
            h.msg_name = (&mut self.a.addrs[at] as *mut Storage).cast();
            h.msg_namelen = self.a.hdrs[at].msg_hdr.msg_namelen;
            h.msg_iov = &mut self.a.iovs[at];
            h.msg_iovlen = k;
            if k > 1 {
                let c = &mut self.cmsgs[m];
                // SAFETY: CMSG_LEN is arithmetic on its argument.
                c.hdr.cmsg_len = unsafe { libc::CMSG_LEN(2) } as usize;
                c.hdr.cmsg_level = libc::SOL_UDP;
                c.hdr.cmsg_type = libc::UDP_SEGMENT;
                c.size = self.a.iovs[at].iov_len as u16;
                h.msg_control = (c as *mut SegmentCmsg).cast();
                // SAFETY: as above.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
            self.segs[m] = k;
            m += 1;
            at += k;
        }
        m
    }

    /// Send `payload` to `to` now with the IPv4 TTL set to `ttl` for this datagram
    /// alone, after whatever is queued (which leaves with the socket's own TTL). Rare
    /// (a client's opening bubble), so two setsockopt calls are cheaper than a control
    /// message on every send. A refusal is counted as [`failed`](Self::failed).
    pub fn send_hop_limited(&mut self, to: SocketAddrV4, payload: &[u8], ttl: u8) {
        self.flush();
        let sock = socket2::SockRef::from(&self.fd);
        let sent = sock.ttl().and_then(|usual| {
            sock.set_ttl(u32::from(ttl))?;
            let r = sock.send_to(payload, &to.into());
            sock.set_ttl(usual)?;
            r
        });
        if sent.is_err() {
            self.failed += 1;
        }
    }

    /// Datagrams the kernel refused (no route, a full buffer…) since the batch was made.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// Send everything queued. Datagrams the kernel refuses (e.g. no route) are
    /// skipped and counted as failed ([`failed`](Self::failed)); returns (sent,
    /// failed) in datagrams, for this flush.
    pub fn flush(&mut self) -> (usize, usize) {
        let fd = self.fd.as_raw_fd();
        let (mut at, mut sent, mut failed) = (0, 0, 0);
        self.alone_until = 0;
        while at < self.queued {
            let m = self.plan(at);
            // SAFETY: the first `m` messages point into arrays owned by `self`.
            let r = unsafe { libc::sendmmsg(fd, self.msgs.as_mut_ptr(), m as u32, 0) };
            if r > 0 {
                if self.gso == Gso::Doubted {
                    // The refused row's first datagram went alone: segmentation was at fault.
                    self.gso = Gso::Off;
                    tracing::warn!(
                        "UDP segmentation offload refused (a kernel before 4.18, or a route without checksum offload): one datagram per send from now on"
                    );
                }
                for &k in &self.segs[..r as usize] {
                    at += k;
                    sent += k;
                }
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if self.segs[0] > 1 && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT)) {
                // Try the row one datagram at a time before blaming segmentation.
                self.gso = Gso::Doubted;
                self.alone_until = at + self.segs[0];
                continue;
            }
            if self.gso == Gso::Doubted {
                // The datagram fails alone too: its destination, not segmentation.
                self.gso = Gso::On;
            }
            // The first message failed: skip it and go on with the rest.
            tracing::debug!("sendmmsg: {e}");
            at += self.segs[0];
            failed += self.segs[0];
        }
        self.queued = 0;
        self.failed += failed as u64;
        (sent, failed)
    }

    /// Whether rows still leave as segmented sends (false once the kernel refused one).
    #[cfg(test)]
    fn segmenting(&self) -> bool {
        self.gso != Gso::Off
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// [`DatagramInput::read`] with a closure for each side.
    fn read(batch: &mut RecvBatch, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        batch.read(max, &mut (), |_, _| {}, |_, _, d| f(d)).unwrap()
    }

    #[test]
    fn a_flood_is_read_a_bounded_number_of_batches_at_a_time() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..40u8 {
            tx.send_to(&[i], rx.local_addr().unwrap()).unwrap();
        }
        let mut batch = RecvBatch::new(rx, 8, 64);
        let mut seen = Vec::new();
        assert_eq!(read(&mut batch, 2, |d| seen.push(d[0])), 16, "two batches of eight, no more");
        assert_eq!(read(&mut batch, 100, |d| seen.push(d[0])), 24, "the rest, then a short batch ends it");
        assert_eq!(seen, (0..40).collect::<Vec<u8>>());
    }

    #[test]
    fn each_datagram_is_shown_ahead_a_fixed_distance_before_it_is_handled() {
        let (tx, rx) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
        rx.set_nonblocking(true).unwrap();
        let sent = (AHEAD + 12) as u8;
        for i in 0..sent {
            tx.send_to(&[i], rx.local_addr().unwrap()).unwrap();
        }
        let shown = std::cell::RefCell::new(Vec::new());
        let mut handled = Vec::new();
        let mut batch = RecvBatch::new(rx, 64, 64);
        batch
            .read(10, &mut handled, |h: &Vec<u8>, d| shown.borrow_mut().push((h.len(), d[0])), |h, _, d| h.push(d[0]))
            .unwrap();
        assert_eq!(handled, (0..sent).collect::<Vec<u8>>());
        let shown = shown.into_inner();
        assert_eq!(shown.len(), usize::from(sent), "every datagram shown ahead");
        for (handled_before, i) in shown {
            // Shown AHEAD handlings before its own (all at once for the first ones).
            assert_eq!(handled_before, usize::from(i).saturating_sub(AHEAD), "datagram {i}");
        }
    }

    #[test]
    fn batch_round_trip_on_loopback() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = match rx.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        let mut out = SendBatch::new(tx.try_clone().unwrap(), 8, 2048);
        for i in 0..5u8 {
            let s = out.slot_mut();
            s[..3].copy_from_slice(&[i, i, i]);
            out.commit(3 + usize::from(i), to);
        }
        assert_eq!(out.flush(), (5, 0));
        let mut inb = RecvBatch::new(rx.try_clone().unwrap(), 8, SLOT);
        let mut got = Vec::new();
        for _ in 0..100 {
            let n = inb.recv().unwrap();
            for i in 0..n {
                let (from, d) = inb.get(i);
                assert_eq!(from.port(), tx.local_addr().unwrap().port());
                got.push(d.to_vec());
            }
            if got.len() == 5 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(got.len(), 5);
        // The same over IPv6.
        let rx6 = UdpSocket::bind("[::1]:0").unwrap();
        let tx6 = UdpSocket::bind("[::1]:0").unwrap();
        let mut out = SendBatch::new(tx6.try_clone().unwrap(), 4, 2048);
        out.slot_mut()[..2].copy_from_slice(b"v6");
        out.commit_any(2, rx6.local_addr().unwrap());
        assert_eq!(out.flush(), (1, 0));
        let mut inb = RecvBatch::new(rx6.try_clone().unwrap(), 4, SLOT);
        let mut n = 0;
        for _ in 0..100 {
            n = inb.recv().unwrap();
            if n > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(n, 1);
        assert_eq!(inb.get_any(0), (tx6.local_addr().unwrap(), &b"v6"[..]));
        for (i, d) in got.iter().enumerate() {
            assert_eq!(d.len(), 3 + i);
            assert_eq!(d[0] as usize, i);
        }
    }

    /// Reads until `want` datagrams came from `rx` (or two seconds passed).
    fn read_all(rx: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
        let mut inb = RecvBatch::new(rx.try_clone().unwrap(), 64, SLOT);
        let mut got = Vec::new();
        for _ in 0..400 {
            let n = inb.recv().unwrap();
            got.extend((0..n).map(|i| inb.get_any(i).1.to_vec()));
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        got
    }

    /// Queues `len`-byte datagrams numbered from `first` to `to`.
    fn queue(out: &mut SendBatch, to: std::net::SocketAddr, first: u8, count: u8, len: usize) {
        for i in first..first + count {
            out.slot_mut()[..len].fill(i);
            out.commit_any(len, to);
        }
    }

    #[test]
    fn rows_to_one_destination_leave_as_one_segmented_send_and_arrive_as_datagrams() {
        let (rx, other) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (to, elsewhere) = (rx.local_addr().unwrap(), other.local_addr().unwrap());
        let mut out = SendBatch::new(tx.try_clone().unwrap(), 64, SLOT);
        // A row of 20 equal datagrams ending in a shorter one, one elsewhere, then a
        // row of 3 that a longer datagram breaks.
        queue(&mut out, to, 0, 20, 100);
        queue(&mut out, to, 20, 1, 40);
        queue(&mut out, elsewhere, 21, 1, 100);
        queue(&mut out, to, 22, 3, 60);
        queue(&mut out, to, 25, 1, 61);
        assert_eq!(out.plan(0), 4, "rows: 21 (20 + the shorter), 1 elsewhere, 3, then the longer alone");
        assert_eq!(&out.segs[..4], &[21, 1, 3, 1]);
        assert_eq!(out.flush(), (26, 0));
        assert!(out.segmenting(), "loopback takes segmented sends");
        let got = read_all(&rx, 25);
        let lens: Vec<(u8, usize)> = got.iter().map(|d| (d[0], d.len())).collect();
        let mut want: Vec<(u8, usize)> = (0..20).map(|i| (i, 100)).collect();
        want.extend([(20, 40), (22, 60), (23, 60), (24, 60), (25, 61)]);
        assert_eq!(lens, want, "one datagram per segment, in order, each whole");
        assert!(got.iter().all(|d| d.iter().all(|&b| b == d[0])));
        assert_eq!(read_all(&other, 1), vec![vec![21u8; 100]]);
        // Datagrams too long to segment go alone.
        queue(&mut out, to, 30, 2, GSO_MAX_SEGMENT + 1);
        assert_eq!(out.plan(0), 2);
        assert_eq!(out.flush(), (2, 0));
        assert_eq!(read_all(&rx, 2).len(), 2);
    }

    #[test]
    fn a_coalescing_socket_gets_rows_and_splits_them_into_the_datagrams_sent() {
        let (rx, tx) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
        let to = rx.local_addr().unwrap();
        // Before anything is sent: the kernel splits rows queued before it is asked.
        let mut inb = RecvBatch::coalescing(rx.try_clone().unwrap(), 64, SLOT);
        let mut out = SendBatch::new(tx.try_clone().unwrap(), 64, SLOT);
        // Two rows (30 of 1000 bytes and a shorter last; 10 of 200), then a datagram alone.
        queue(&mut out, to, 0, 30, 1000);
        queue(&mut out, to, 30, 1, 10);
        queue(&mut out, to, 31, 10, 200);
        queue(&mut out, to, 41, 1, 1300);
        assert_eq!(out.flush(), (42, 0));
        let (mut got, mut messages) = (Vec::new(), 0);
        for _ in 0..400 {
            let n = inb.recv().unwrap();
            messages += n;
            for i in 0..n {
                got.extend(inb.datagrams(i).map(<[u8]>::to_vec));
            }
            if got.len() >= 42 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let lens: Vec<(u8, usize)> = got.iter().map(|d| (d[0], d.len())).collect();
        let mut want: Vec<(u8, usize)> = (0..30).map(|i| (i, 1000)).collect();
        want.push((30, 10));
        want.extend((31..41).map(|i| (i, 200)));
        want.push((41, 1300));
        assert_eq!(lens, want, "every datagram whole and in order");
        assert!(got.iter().all(|d| d.iter().all(|&b| b == d[0])));
        // Loopback hands a segmented send to a coalescing socket as one row.
        assert_eq!(messages, 3, "a message per row and one for the datagram alone");
        // A zero-length datagram is still one.
        tx.send_to(&[], to).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(inb.recv().unwrap(), 1);
        assert_eq!(inb.datagrams(0).map(<[u8]>::len).collect::<Vec<usize>>(), vec![0]);
    }

    #[test]
    fn a_socket_that_refuses_segmentation_still_gets_every_datagram_out() {
        // Without UDP checksums the kernel refuses segmented sends (EINVAL), as an old
        // kernel or a route without checksum offload would.
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let one: libc::c_int = 1;
        // SAFETY: SO_NO_CHECK takes an int, passed by pointer with its size.
        let r = unsafe {
            libc::setsockopt(
                tx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NO_CHECK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
        assert_eq!(r, 0);
        let to = rx.local_addr().unwrap();
        let mut out = SendBatch::new(tx.try_clone().unwrap(), 16, SLOT);
        queue(&mut out, to, 0, 10, 80);
        assert_eq!(out.flush(), (10, 0));
        assert!(!out.segmenting(), "refused once, segmentation stays off");
        queue(&mut out, to, 10, 5, 80);
        assert_eq!(out.plan(0), 5, "one datagram per message from now on");
        assert_eq!(out.flush(), (5, 0));
        let got = read_all(&rx, 15);
        assert_eq!(got.iter().map(|d| d[0]).collect::<Vec<_>>(), (0..15).collect::<Vec<u8>>());
    }

    #[test]
    fn a_destination_that_fails_alone_does_not_turn_segmentation_off() {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        // Port 0 is refused whatever the send (EINVAL).
        let bad: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut out = SendBatch::new(tx.try_clone().unwrap(), 16, SLOT);
        queue(&mut out, bad, 0, 4, 80);
        queue(&mut out, rx.local_addr().unwrap(), 4, 4, 80);
        assert_eq!(out.flush(), (4, 4));
        assert_eq!(out.failed(), 4, "refused datagrams are counted for the daemon's report");
        // A payload larger than a slot is refused whole, never cut short.
        out.push(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9), &[0u8; SLOT + 1]);
        assert!(out.is_empty());
        assert_eq!(out.failed(), 5);
        assert!(out.segmenting());
        assert_eq!(read_all(&rx, 4).len(), 4);
    }
}
