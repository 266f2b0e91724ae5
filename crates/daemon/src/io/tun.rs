//! A TUN device (IFF_TUN | IFF_NO_PI): IPv6 packets in and out, non-blocking. The
//! interface disappears, with its addresses and routes, when the device closes.
//!
//! With offloads (`IFF_VNET_HDR` and `TUNSETOFFLOAD`), every packet comes and goes
//! behind a virtio-net header, and the kernel may hand over a super-packet for a row
//! of TCP or UDP segments, or a packet whose checksum is left to us, as to a NIC with
//! those offloads; it also takes such rows from us. `io::tun_batch` cuts and joins.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
/// Every packet behind a virtio-net header.
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUNSETVNETLE: libc::c_ulong = 0x4004_54dc;
/// TUNSETOFFLOAD flags: we finish checksums; we take TCP super-packets over IPv6 (with
/// ECN); we take UDP super-packets (Linux 6.2, which grants them for both families
/// together or not at all; only IPv6 is routed to us).
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO6: libc::c_uint = 0x04;
const TUN_F_TSO_ECN: libc::c_uint = 0x08;
const TUN_F_USO4: libc::c_uint = 0x20;
const TUN_F_USO6: libc::c_uint = 0x40;
/// Refuse to attach to an interface that exists already (`i16` view of 0x8000).
const IFF_TUN_EXCL: libc::c_short = 0x8000u16 as libc::c_short;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// What the device and the daemon agreed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offloads {
    /// Plain packets, one per read and write (offloads off, or refused).
    None,
    /// Virtio-net headers: checksums left to us, TCP super-packets, and with `udp`
    /// UDP super-packets too.
    Segmentation {
        /// UDP super-packets (USO, Linux 6.2) as well as TCP.
        udp: bool,
    },
}

impl std::fmt::Display for Offloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Offloads::None => "no offloads",
            Offloads::Segmentation { udp: true } => "checksum, TCP and UDP segmentation offloads",
            Offloads::Segmentation { udp: false } => "checksum and TCP segmentation offloads",
        })
    }
}

/// An open TUN device.
pub struct Tun {
    file: File,
    name: String,
    /// Every packet framed by a virtio-net header (IFF_VNET_HDR).
    vnet: bool,
    offloads: Offloads,
}

impl Tun {
    /// Create the TUN interface `name` with `queues` queues (one per worker thread):
    /// the kernel hands each flow's packets to one queue, so a flow is never reordered.
    /// One queue is a plain TUN device. With `offload`, the queues take the offloads the
    /// kernel grants (see [`Offloads`]); a kernel that grants none gives plain queues.
    pub fn create_queues(name: &str, queues: usize, offload: bool) -> Result<Vec<Tun>, String> {
        let mut flags = IFF_TUN | IFF_NO_PI;
        if queues > 1 {
            flags |= IFF_MULTI_QUEUE;
        }
        if offload {
            flags |= IFF_VNET_HDR;
        }
        // The first queue creates the interface, exclusively: a second daemon must not
        // quietly add its queues to ours and take a share of our flows.
        let first_flags = if queues > 1 { flags | IFF_TUN_EXCL } else { flags };
        let mut all = vec![Self::open(name, first_flags)?];
        let name = all[0].name.clone();
        for _ in 1..queues {
            all.push(Self::open(&name, flags)?);
        }
        if offload {
            let granted = all[0].negotiate_offloads();
            for t in &mut all[1..] {
                // The offloads belong to the interface: every queue sees the same.
                t.offloads = granted;
            }
        }
        Ok(all)
    }

    /// Ask for segmentation offloads, UDP's too, then TCP's alone; with neither, the
    /// headers stay (they were chosen at creation) but every packet comes plain.
    fn negotiate_offloads(&mut self) -> Offloads {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.file);
        // SAFETY: TUNSETVNETLE reads an int through the pointer.
        let little_endian = cfg!(target_endian = "little") || unsafe { libc::ioctl(fd, TUNSETVNETLE as _, &1i32) } == 0;
        let tcp = TUN_F_CSUM | TUN_F_TSO6 | TUN_F_TSO_ECN;
        if little_endian {
            for (flags, udp) in [(tcp | TUN_F_USO4 | TUN_F_USO6, true), (tcp, false)] {
                // SAFETY: TUNSETOFFLOAD takes the flags by value.
                if unsafe { libc::ioctl(fd, TUNSETOFFLOAD as _, flags as libc::c_ulong) } == 0 {
                    self.offloads = Offloads::Segmentation { udp };
                    return self.offloads;
                }
            }
        }
        tracing::warn!("{}: the kernel refused TUN offloads: one packet per read and write", self.name);
        Offloads::None
    }

    /// What this device and the kernel agreed on.
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// Whether every packet is framed by a virtio-net header.
    pub fn has_vnet_header(&self) -> bool {
        self.vnet
    }

    fn open(name: &str, flags: libc::c_short) -> Result<Tun, String> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ', '\0']) {
            return Err(format!("invalid interface name {name:?} (1 to 15 characters, no '/' or spaces)"));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => {
                    "/dev/net/tun is missing: load the tun module (modprobe tun) or give the container the device"
                        .to_string()
                }
                io::ErrorKind::PermissionDenied => {
                    "cannot open /dev/net/tun: permission denied (run as root or grant CAP_NET_ADMIN)".to_string()
                }
                _ => format!("cannot open /dev/net/tun: {e}"),
            })?;
        let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags, _pad: [0; 22] };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes an ifreq, which `req` is, for this fd.
        let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&file), TUNSETIFF as _, &mut req) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) => format!("cannot create TUN interface {name}: needs CAP_NET_ADMIN (run as root)"),
                Some(libc::EBUSY) => {
                    format!("cannot create TUN interface {name}: it exists and is in use (another Teredo daemon?)")
                }
                Some(libc::EINVAL) => format!(
                    "cannot create TUN interface {name}: an interface of that name exists with other settings \
                     (a persistent single-queue device? remove it, or set RelayThreads 1)"
                ),
                _ => format!("cannot create TUN interface {name}: {e}"),
            });
        }
        let end = req.name.iter().position(|&b| b == 0).unwrap_or(libc::IFNAMSIZ);
        let name = String::from_utf8_lossy(&req.name[..end]).into_owned();
        Ok(Tun { file, name, vnet: flags & IFF_VNET_HDR != 0, offloads: Offloads::None })
    }

    /// The interface name the kernel gave.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Read one packet; `Ok(None)` when none is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match (&self.file).read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Write one packet. A full queue refuses it (WouldBlock): the packet is dropped, as
    /// a router would, and the caller counts it with the other refusals.
    pub fn send(&self, packet: &[u8]) -> io::Result<()> {
        (&self.file).write(packet).map(drop)
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}
