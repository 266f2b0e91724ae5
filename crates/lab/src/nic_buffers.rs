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
use crate::xdp::{bpf, load_xdp, Insn};
use std::os::fd::OwnedFd;

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `r0 = XDP_PASS; exit`.
static PASS: [Insn; 2] = [Insn { code: 0xb7, regs: 0, off: 0, imm: 2 }, Insn { code: 0x95, regs: 0, off: 0, imm: 0 }];

/// The head of `union bpf_attr` for BPF_LINK_CREATE.
#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
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
        let prog = load_xdp(&PASS, b"nic_bufs")
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
