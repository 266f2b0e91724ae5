//! Frames sent from a namespace's interface through a packet socket's transmit ring
//! (AF_PACKET, TPACKET_V2, with PACKET_QDISC_BYPASS: how netsniff-ng's trafgen sends):
//! the lab's generator on kernels that refuse an XDP test run in live-frame mode (seen:
//! EPERM on a locked-down 6.18). No route look-up, no checksum and no segmentation a
//! packet, as with live frames, but each frame costs the sending core a socket buffer
//! and the driver's transmit, which a live frame does not: the pace is kept here, in
//! userland, a burst at a time, and what the sending core cannot keep up with shows as
//! frames the run could not place (the run sent fewer than its rate asked), never as
//! the path's loss.
//!
//! A slot of the ring is lent to the kernel until the frame it holds is freed (its data
//! is referenced, not copied): a ring of [`SLOTS`] lets the receiving host hold that
//! many before the sender must wait for one.

use crate::error::{LabError, Result};
use crate::netns;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Slots in the ring, and each one's size: a full-size Ethernet frame after the slot's
/// header, a page holding two.
const SLOTS: usize = 8192;
const SLOT_SIZE: usize = 2048;
const BLOCK_SIZE: usize = 1 << 20;
/// Where a slot's frame starts: after `struct tpacket2_hdr`, aligned (TPACKET_ALIGN),
/// as the kernel reads a transmit slot without PACKET_TX_HAS_OFF.
const DATA_OFFSET: usize = 32;
/// The longest frame a slot holds.
pub const MAX_FRAME: usize = SLOT_SIZE - DATA_OFFSET;

/// A paced sender of whole frames through a packet socket's transmit ring on one
/// interface of one namespace.
pub struct PacketRing {
    socket: OwnedFd,
    ring: Ring,
    /// The slot the next frame goes in, and the first failure of a paced run.
    state: Mutex<State>,
}

struct State {
    next: usize,
    failed: Option<String>,
}

/// The ring's memory, shared with the kernel.
struct Ring {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only touched under `PacketRing::state`'s lock (one writer), and
// the kernel's side of each slot is its status word, read and written atomically.
unsafe impl Send for Ring {}
unsafe impl Sync for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `PacketRing::on`, of this length, no longer used.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl Ring {
    /// Slot `i`'s status word (the kernel's `tp_status`, the header's first field).
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: `i` < SLOTS, so the slot lies in the mapping; its first four bytes are
        // aligned (slots are SLOT_SIZE apart from a page) and only ever accessed
        // atomically, by us and by the kernel.
        unsafe { &*(self.base.add(i * SLOT_SIZE) as *const AtomicU32) }
    }

    /// Writes `frame` into slot `i` (which the kernel does not hold) and hands it over.
    fn fill(&self, i: usize, frame: &[u8]) {
        // SAFETY: slot `i` is ours (its status says available) and lies in the mapping;
        // the frame fits after the header (checked by `paced`).
        unsafe {
            let slot = self.base.add(i * SLOT_SIZE);
            std::ptr::copy_nonoverlapping(frame.as_ptr(), slot.add(DATA_OFFSET), frame.len());
            let header = slot.cast::<libc::tpacket2_hdr>();
            (*header).tp_len = frame.len() as u32;
            (*header).tp_snaplen = frame.len() as u32;
        }
        self.status(i).store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
    }
}

impl PacketRing {
    /// A sender on interface `dev` of namespace `ns`.
    pub fn on(ns: &str, dev: &str) -> Result<PacketRing> {
        let (ns, dev) = (ns.to_string(), dev.to_string());
        // The socket is made in the namespace (a thread enters it; the socket stays there).
        std::thread::spawn(move || -> Result<PacketRing> {
            netns::enter(&ns)?;
            open(&dev).map_err(|e| LabError::new(format!("a packet socket's transmit ring on {dev} in {ns}: {e}")))
        })
        .join()
        .map_err(|_| LabError::new("packet ring thread panicked".into()))?
    }

    /// Sends `frames` (Ethernet headers on) in turn, `run` frames of one before the
    /// next, at `rate` frames per second in bursts of `burst`, for `dur`; returns how
    /// many left. As [`crate::live_frames::LiveFrames::paced`].
    pub fn paced(&self, frames: &[Vec<u8>], run: u64, rate: u64, burst: u32, dur: Duration) -> std::io::Result<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = &state.failed {
            return Err(std::io::Error::other(e.clone()));
        }
        let invalid = |why: &str| Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string()));
        let result = if frames.is_empty() {
            invalid("no frame")
        } else if frames.iter().any(|f| f.len() < 14 || f.len() > MAX_FRAME) {
            invalid("a frame shorter than its Ethernet header or longer than a slot")
        } else {
            self.paced_run(&mut state, frames, run.max(1), rate.max(1), burst.max(1), dur)
        };
        if let Err(e) = &result {
            state.failed.get_or_insert_with(|| e.to_string());
        }
        result
    }

    /// The first failure of [`PacketRing::paced`] so far.
    pub fn failure(&self) -> Option<String> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).failed.clone()
    }

    fn paced_run(
        &self,
        state: &mut State,
        frames: &[Vec<u8>],
        run: u64,
        rate: u64,
        burst: u32,
        dur: Duration,
    ) -> std::io::Result<u64> {
        let gap = Duration::from_nanos(1_000_000_000 / rate).max(Duration::from_nanos(1));
        let start = Instant::now();
        let end = start + dur;
        // Frames asked for by the pace so far; those placed in the ring.
        let (mut due, mut placed) = (0u64, 0u64);
        let total = (dur.as_nanos() * u128::from(rate) / 1_000_000_000) as u64;
        while due < total {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let next = start + gap.saturating_mul(due.min(u64::from(u32::MAX)) as u32);
            if now < next {
                let left = next - now;
                // Sleep through long gaps; spin through short ones (a sleep overshoots by
                // tens of microseconds).
                if left > Duration::from_micros(200) {
                    std::thread::sleep(left - Duration::from_micros(100));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let want = u64::from(burst).min(total - due);
            let mut filled = 0;
            for _ in 0..want {
                let slot = state.next;
                if self.ring.status(slot).load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
                    // Every slot lent out: the sender is behind; these frames are not sent.
                    break;
                }
                let seq = placed + filled;
                self.ring.fill(slot, &frames[((seq / run) % frames.len() as u64) as usize]);
                state.next = (slot + 1) % SLOTS;
                filled += 1;
            }
            due += want;
            if filled > 0 {
                self.kick()?;
                placed += filled;
            }
        }
        // Frames still waiting in the ring (a kick the kernel left short) go now.
        self.kick()?;
        Ok(placed)
    }

    /// Asks the kernel to send every frame handed over, without waiting for them to be
    /// freed.
    fn kick(&self) -> std::io::Result<()> {
        loop {
            // SAFETY: no buffer: a send on a socket with a transmit ring sends the ring's
            // frames marked for sending.
            let r = unsafe { libc::send(self.socket.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
            if r >= 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The device's queue was full for a frame: it stays marked, for the next kick.
                Some(libc::EAGAIN | libc::ENOBUFS) => return Ok(()),
                _ => return Err(e),
            }
        }
    }
}

/// A packet socket bound to `dev` (of the calling thread's namespace) with a transmit
/// ring mapped.
fn open(dev: &str) -> std::io::Result<PacketRing> {
    let last = std::io::Error::last_os_error;
    let name = std::ffi::CString::new(dev).map_err(std::io::Error::other)?;
    // SAFETY: a NUL-terminated name, read only.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(last());
    }
    // Protocol 0: the socket receives nothing; it only sends.
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last());
    }
    // SAFETY: a descriptor just made, owned from here.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let set = |option: libc::c_int, value: &[u8]| -> std::io::Result<()> {
        // SAFETY: an option of the packet socket, its value of the size given.
        let r = unsafe {
            libc::setsockopt(fd, libc::SOL_PACKET, option, value.as_ptr().cast(), value.len() as libc::socklen_t)
        };
        if r < 0 {
            Err(last())
        } else {
            Ok(())
        }
    };
    set(libc::PACKET_VERSION, &(libc::tpacket_versions::TPACKET_V2 as libc::c_int).to_ne_bytes())?;
    // Straight to the driver, as a NIC's generator: no queueing discipline between.
    set(libc::PACKET_QDISC_BYPASS, &1i32.to_ne_bytes())?;
    let request = libc::tpacket_req {
        tp_block_size: BLOCK_SIZE as u32,
        tp_block_nr: (SLOTS * SLOT_SIZE / BLOCK_SIZE) as u32,
        tp_frame_size: SLOT_SIZE as u32,
        tp_frame_nr: SLOTS as u32,
    };
    // SAFETY: the request's bytes, a plain C struct.
    let bytes = unsafe {
        std::slice::from_raw_parts((&request as *const libc::tpacket_req).cast::<u8>(), size_of::<libc::tpacket_req>())
    };
    set(libc::PACKET_TX_RING, bytes)?;
    // SAFETY: all-zero is a valid sockaddr_ll; the fields that matter are set below.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: an address of the size given.
    let r = unsafe {
        libc::bind(fd, (&addr as *const libc::sockaddr_ll).cast(), size_of::<libc::sockaddr_ll>() as libc::socklen_t)
    };
    if r < 0 {
        return Err(last());
    }
    let len = SLOTS * SLOT_SIZE;
    // SAFETY: maps the ring the socket holds, of the size requested.
    let base =
        unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
    if base == libc::MAP_FAILED {
        return Err(last());
    }
    Ok(PacketRing { socket, ring: Ring { base: base.cast(), len }, state: Mutex::new(State { next: 0, failed: None }) })
}
