//! Batched UDP/IPv4 I/O: many datagrams per system call with recvmmsg(2) and
//! sendmmsg(2), into buffers allocated once. The packet path allocates nothing.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

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

/// The heap arrays a batch points into. Boxed slices never move when the owner does,
/// so the raw pointers in `hdrs` stay valid for the life of the batch.
struct Arrays {
    bufs: Box<[u8]>,
    addrs: Box<[Storage]>,
    iovs: Box<[libc::iovec]>,
    hdrs: Box<[libc::mmsghdr]>,
    slot: usize,
}

// SAFETY: the raw pointers only point into the boxed slices owned by the same value.
unsafe impl Send for Arrays {}

impl Arrays {
    fn new(n: usize, slot: usize) -> Arrays {
        let mut bufs = vec![0u8; n * slot].into_boxed_slice();
        // SAFETY: plain old data, zero is valid.
        let mut addrs: Box<[Storage]> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        let mut iovs: Box<[libc::iovec]> =
            (0..n).map(|i| libc::iovec { iov_base: bufs[i * slot..].as_mut_ptr().cast(), iov_len: slot }).collect();
        let hdrs = (0..n)
            .map(|i| {
                // SAFETY: plain old data, zero is valid.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = (&mut addrs[i] as *mut Storage).cast();
                h.msg_hdr.msg_namelen = std::mem::size_of::<Storage>() as u32;
                h.msg_hdr.msg_iov = &mut iovs[i];
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        Arrays { bufs, addrs, iovs, hdrs, slot }
    }
}

/// Receives up to `n` datagrams per call.
pub struct RecvBatch {
    a: Arrays,
    filled: usize,
}

impl RecvBatch {
    /// A batch of `n` slots of `slot` bytes; larger datagrams are reported empty.
    pub fn new(n: usize, slot: usize) -> RecvBatch {
        RecvBatch { a: Arrays::new(n, slot), filled: 0 }
    }

    /// Receive what is waiting, without blocking; returns how many datagrams (0 when
    /// nothing is waiting).
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        let n = self.a.hdrs.len();
        for i in 0..n {
            self.a.iovs[i].iov_len = self.a.slot;
            self.a.hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<Storage>() as u32;
            self.a.hdrs[i].msg_hdr.msg_flags = 0;
            self.a.hdrs[i].msg_len = 0;
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

    /// Datagram `i` of the last call, on a socket of either family.
    pub fn get_any(&self, i: usize) -> (SocketAddr, &[u8]) {
        let h = &self.a.hdrs[i];
        let from = storage_to_addr(&self.a.addrs[i]);
        if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            return (from, &[]);
        }
        let len = (h.msg_len as usize).min(self.a.slot);
        (from, &self.a.bufs[i * self.a.slot..i * self.a.slot + len])
    }
}

/// Queues datagrams and sends them with as few calls as possible.
pub struct SendBatch {
    a: Arrays,
    queued: usize,
}

impl SendBatch {
    /// A batch of `n` slots of `slot` bytes.
    pub fn new(n: usize, slot: usize) -> SendBatch {
        SendBatch { a: Arrays::new(n, slot), queued: 0 }
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
    /// on `fd` first if every slot is taken.
    pub fn push(&mut self, fd: BorrowedFd<'_>, to: SocketAddrV4, payload: &[u8]) {
        if self.is_full() {
            self.flush(fd);
        }
        let slot = self.slot_mut();
        let n = payload.len().min(slot.len());
        slot[..n].copy_from_slice(&payload[..n]);
        self.commit(n, to);
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

    /// Send everything queued. Datagrams the kernel refuses (e.g. no route) are
    /// skipped and counted as failed; returns (sent, failed).
    pub fn flush(&mut self, fd: BorrowedFd<'_>) -> (usize, usize) {
        let (mut at, mut failed) = (0, 0);
        while at < self.queued {
            // SAFETY: headers from `at` to `queued` point into arrays owned by `self.a`.
            let r =
                unsafe { libc::sendmmsg(fd.as_raw_fd(), self.a.hdrs[at..].as_mut_ptr(), (self.queued - at) as u32, 0) };
            if r > 0 {
                at += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // The first datagram failed: skip it and go on with the rest.
            tracing::debug!("sendmmsg: {e}");
            at += 1;
            failed += 1;
        }
        self.queued = 0;
        (at - failed, failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn batch_round_trip_on_loopback() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = match rx.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        let mut out = SendBatch::new(8, 2048);
        for i in 0..5u8 {
            let s = out.slot_mut();
            s[..3].copy_from_slice(&[i, i, i]);
            out.commit(3 + usize::from(i), to);
        }
        assert_eq!(out.flush(tx.as_fd()), (5, 0));
        let mut inb = RecvBatch::new(8, SLOT);
        let mut got = Vec::new();
        for _ in 0..100 {
            let n = inb.recv(rx.as_fd()).unwrap();
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
        let mut out = SendBatch::new(4, 2048);
        out.slot_mut()[..2].copy_from_slice(b"v6");
        out.commit_any(2, rx6.local_addr().unwrap());
        assert_eq!(out.flush(tx6.as_fd()), (1, 0));
        let mut inb = RecvBatch::new(4, SLOT);
        let mut n = 0;
        for _ in 0..100 {
            n = inb.recv(rx6.as_fd()).unwrap();
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
}
