//! A TUN device (IFF_TUN | IFF_NO_PI): whole IPv6 packets in and out, non-blocking.
//! The interface disappears, with its addresses and routes, when the device closes.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
/// Refuse to attach to an interface that exists already (`i16` view of 0x8000).
const IFF_TUN_EXCL: libc::c_short = 0x8000u16 as libc::c_short;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open TUN device.
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Create (or attach to) the TUN interface `name`.
    pub fn create(name: &str) -> Result<Tun, String> {
        Self::open(name, IFF_TUN | IFF_NO_PI)
    }

    /// Create the TUN interface `name` with `queues` queues (one per worker thread):
    /// the kernel hands each flow's packets to one queue, so a flow is never reordered.
    /// One queue is a plain TUN device.
    pub fn create_queues(name: &str, queues: usize) -> Result<Vec<Tun>, String> {
        if queues <= 1 {
            return Ok(vec![Self::create(name)?]);
        }
        // The first queue creates the interface, exclusively: a second daemon must not
        // quietly add its queues to ours and take a share of our flows.
        let flags = IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE;
        let mut all = vec![Self::open(name, flags | IFF_TUN_EXCL)?];
        let name = all[0].name.clone();
        for _ in 1..queues {
            all.push(Self::open(&name, flags)?);
        }
        Ok(all)
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
        Ok(Tun { file, name })
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
