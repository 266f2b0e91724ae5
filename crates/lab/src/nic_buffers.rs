//! Frames handed on in buffers such as a NIC's receive fills. A veth passes the sending
//! host's own buffer to the next namespace: as much room in front of the frame as the
//! sender's stack reserved for its Ethernet header (16 bytes), and after software
//! segmentation only the outer headers in the linear part. A NIC's driver instead fills
//! buffers of its own, with room in front (64 bytes and more) and at least the headers
//! linear. A relay that adds headers (encapsulation) must then, behind a veth, copy each
//! packet into a bigger buffer first, and one that reads past the outer headers
//! (decapsulation) must pull them in: work no relay host fed by a NIC does (only traffic
//! sent from another namespace of the same machine brings it), charged to the relay's
//! core in every figure.
//!
//! The switch's port towards a sending host runs an XDP program that passes every frame
//! on. A veth with an XDP program copies what it receives into buffers of its own (the
//! XDP headroom of 256 bytes in front, linear); the copy is the receiving port's work,
//! on the sending host's core (the traffic's, in the benchmark), as the NIC's DMA is on
//! no core of the relay host at all. Every path measured gets the same buffers.

use crate::error::{LabError, Result};
use crate::netns;
use std::os::fd::{FromRawFd, OwnedFd};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `struct bpf_insn`.
#[repr(C)]
struct Insn {
    code: u8,
    /// Destination register in the low four bits, source in the high four.
    regs: u8,
    off: i16,
    imm: i32,
}

/// `r0 = XDP_PASS; exit`.
static PASS: [Insn; 2] = [Insn { code: 0xb7, regs: 0, off: 0, imm: 2 }, Insn { code: 0x95, regs: 0, off: 0, imm: 0 }];

/// The head of `union bpf_attr` for BPF_PROG_LOAD (the rest stays zero).
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

/// The head of `union bpf_attr` for BPF_LINK_CREATE.
#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a zero-padded prefix of `union bpf_attr` for `cmd`, whose size
    // is passed with it; the kernel reads only that many bytes. A descriptor it returns
    // is ours alone.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>() as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Make interface `dev` of namespace `ns` (a veth) copy what it receives into buffers of
/// its own. Holds while the returned link is open.
pub(crate) fn receive_into_own_buffers(ns: &str, dev: &str) -> Result<OwnedFd> {
    let (ns, dev) = (ns.to_string(), dev.to_string());
    // The interface index is looked up, and the link made, in the namespace's own view.
    std::thread::spawn(move || -> Result<OwnedFd> {
        netns::enter(&ns)?;
        let name = std::ffi::CString::new(dev.clone()).map_err(|e| LabError::new(e.to_string()))?;
        // SAFETY: a NUL-terminated name, read only.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return crate::error::err(format!("{dev} in {ns}: {}", std::io::Error::last_os_error()));
        }
        let license = c"GPL";
        let mut load = ProgLoad {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: PASS.len() as u32,
            insns: PASS.as_ptr() as u64,
            license: license.as_ptr() as u64,
            ..ProgLoad::default()
        };
        load.prog_name[..8].copy_from_slice(b"nic_bufs");
        let prog = bpf(BPF_PROG_LOAD, &mut load)
            .map_err(|e| LabError::new(format!("load the lab's XDP pass program: {e} (needs root and BPF)")))?;
        use std::os::fd::AsRawFd;
        let mut link = LinkCreate {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: XDP_FLAGS_DRV_MODE,
        };
        bpf(BPF_LINK_CREATE, &mut link).map_err(|e| {
            LabError::new(format!("attach XDP to {dev} in {ns}: {e} (XDP links on a veth need Linux 5.9)"))
        })
    })
    .join()
    .map_err(|_| LabError::new("XDP attach thread panicked".into()))?
}
