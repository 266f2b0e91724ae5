//! `BPF_PROG_TEST_RUN`: a program run once by the kernel on a buffer, returning its
//! verdict and the packet as it left it. The tests compare that with what the wire
//! crate builds and parses. And an XDP program run over and over in live-frame mode,
//! whose frames leave by a real interface: the lab's traffic generator.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

#[repr(C)]
#[derive(Default)]
struct TestAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// What one run gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRun {
    /// The program's verdict (XDP_PASS = 2, TC_ACT_OK = 0, TC_ACT_REDIRECT = 7 …).
    pub verdict: u32,
    /// The packet after the program.
    pub packet: Vec<u8>,
    /// Nanoseconds the kernel measured around the program's run.
    pub nanos: u32,
}

/// `struct __sk_buff` as far as a test run's context may set it: the interface the
/// frame arrives on (`ingress_ifindex`, `ifindex`), and a train's shape (`gso_segs`,
/// `gso_size`); everything else must stay zero.
#[repr(C)]
struct SkbContext {
    before: [u32; 9],
    ingress_ifindex: u32,
    ifindex: u32,
    middle: [u32; 30],
    gso_segs: u32,
    between: [u32; 2],
    gso_size: u32,
    after: [u32; 3],
}

const _: () = assert!(std::mem::size_of::<SkbContext>() == 192);

/// Runs `prog` on `packet`; a socket-buffer program as if it arrived on interface
/// `ifindex` (0: the loopback the kernel's test run picks), as a train of pieces of
/// `gso_size` bytes of payload (0: a single packet).
pub(crate) fn run(prog: BorrowedFd<'_>, packet: &[u8], ifindex: u32, gso_size: u32) -> io::Result<TestRun> {
    let mut out = vec![0u8; packet.len() + 256];
    let mut ctx = SkbContext {
        before: [0; 9],
        ingress_ifindex: ifindex,
        ifindex,
        middle: [0; 30],
        gso_segs: if gso_size == 0 { 0 } else { (packet.len() as u32).div_ceil(gso_size) },
        between: [0; 2],
        gso_size,
        after: [0; 3],
    };
    let with_ctx = ifindex != 0 || gso_size != 0;
    let mut attr = TestAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: packet.len() as u32,
        data_size_out: out.len() as u32,
        data_in: packet.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: 1,
        ctx_size_in: if with_ctx { std::mem::size_of::<SkbContext>() as u32 } else { 0 },
        ctx_in: if with_ctx { &mut ctx as *mut SkbContext as u64 } else { 0 },
        ..TestAttr::default()
    };
    // SAFETY: attr is a bpf_attr prefix of the size given; data_in and data_out point
    // to buffers of the sizes given, which the kernel reads and writes; ctx_in (if
    // given) to a context of the size given, which it reads.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_TEST_RUN, &mut attr as *mut TestAttr, std::mem::size_of::<TestAttr>())
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    out.truncate(attr.data_size_out as usize);
    Ok(TestRun { verdict: attr.retval, packet: out, nanos: attr.duration })
}

/// `struct xdp_md` as a test run's context may set it: where the frame is in its
/// buffer, and the interface it is run on.
#[repr(C)]
#[derive(Default)]
struct XdpContext {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

/// Runs XDP program `prog` `repeat` times on `frame` in live-frame mode (Linux 5.18)
/// as if received on interface `ifindex` of the calling thread's namespace: what it
/// transmits (XDP_TX) the kernel hands to that interface's driver, `batch` frames a
/// round (at most 256). Returns when the run is over, or with `Interrupted` when a
/// signal stopped it.
pub fn run_live(prog: BorrowedFd<'_>, frame: &[u8], ifindex: u32, repeat: u32, batch: u32) -> io::Result<()> {
    let mut ctx = XdpContext { data_end: frame.len() as u32, ingress_ifindex: ifindex, ..XdpContext::default() };
    let mut attr = TestAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_in: frame.as_ptr() as u64,
        repeat,
        ctx_size_in: std::mem::size_of::<XdpContext>() as u32,
        ctx_in: &mut ctx as *mut XdpContext as u64,
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        batch_size: batch,
        ..TestAttr::default()
    };
    // SAFETY: attr is a bpf_attr prefix of the size given; data_in points to a frame of
    // the size given and ctx_in to a context of the size given, which the kernel reads.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_TEST_RUN, &mut attr as *mut TestAttr, std::mem::size_of::<TestAttr>())
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
