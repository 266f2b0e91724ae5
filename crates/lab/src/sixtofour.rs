//! A 6to4 site beside the Teredo lab (RFC 3056, RFC 3068): a host whose only IPv6 is
//! its 6to4 address, and the 6to4 relay router that joins 2002::/16 to the native
//! segment. Both tunnel IPv6 in IPv4 (protocol 41) over the public segment, as a home
//! router with 6to4 and an ISP's relay do. The relay's unicast address stands in for
//! the 6to4 anycast one (192.88.99.1 is outside the documentation ranges).
//!
//! ```text
//! h64 (192.0.2.60, 2002:c000:23c::1) ─ proto 41 ─ r64 (192.0.2.70, 2001:db8:1::70) ─ native segment
//! ```
//!
//! The tunnel end is [`Sit`], a small userland stand-in for Linux's `sit` device in
//! 6to4 mode: a TUN interface and a raw protocol-41 socket. Kernels built without
//! `CONFIG_IPV6_SIT` (this lab's CI kernel among them) have no `sit`, and what the
//! Teredo nodes see is the same either way: IPv6 from 2002::/16 arriving natively
//! through a 6to4 relay router.

use crate::error::{LabError, Result};
use crate::{netns, Lab, HOST6_V6, RELAY_V6, SERVER_V6};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// The 6to4 host's IPv4 address.
pub const HOST_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 60);
/// Its 6to4 address: 2002:<192.0.2.60>::1.
pub const HOST_V6: Ipv6Addr = Ipv6Addr::new(0x2002, 0xc000, 0x023c, 0, 0, 0, 0, 1);
/// The 6to4 relay router's IPv4 address.
pub const RELAY_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 70);
/// Its address on the native segment.
pub const RELAY_NATIVE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x70);

/// IPv6 in IPv4 (RFC 4213 §3.5).
const PROTO_IPV6: i32 = 41;
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// One 6to4 tunnel end, `tun6to4`, in a namespace: IPv6 to 2002:V4ADDR::/48 goes to
/// V4ADDR, anything else to the configured relay router (none: dropped); protocol-41
/// packets in are checked as RFC 3056 §5.3 asks (a 6to4 source must embed the outer
/// IPv4 source) and handed to the stack. Stops when dropped.
pub(crate) struct Sit {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sit {
    /// Make `tun6to4` in `ns`, tunnelling from `local`, with `addr`/16 on it, up.
    fn start(ns: &str, local: Ipv4Addr, addr: Ipv6Addr, relay_router: Option<Ipv4Addr>) -> Result<Sit> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let at = ns.to_string();
        let thread = std::thread::spawn(move || {
            let opened = netns::enter(&at).and_then(|()| Ok((open_tun("tun6to4")?, raw_socket(local)?)));
            match opened {
                Ok((tun, raw)) => {
                    let _ = ready_tx.send(Ok(()));
                    forward(&tun, &raw, relay_router, &halt);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        });
        ready_rx.recv().map_err(|_| LabError::new("the 6to4 tunnel thread ended".into()))??;
        let sit = Sit { stop, thread: Some(thread) };
        netns::ip(&["-n", ns, "link", "set", "tun6to4", "mtu", "1480", "up"])?;
        Lab::addr(ns, &format!("{addr}/16"), "tun6to4")?;
        // Packet by packet, as a router forwards: GRO would hand the raw socket
        // coalesced protocol-41 super-packets.
        netns::exec(ns, &["ethtool", "-K", "eth0", "gro", "off"])?;
        Ok(sit)
    }
}

impl Drop for Sit {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn open_tun(name: &str) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|e| LabError::new(format!("/dev/net/tun: {e}")))?;
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: IFF_TUN | IFF_NO_PI, _pad: [0; 22] };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes an ifreq, which `req` is, for this fd.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req) };
    if r < 0 {
        return Err(LabError::new(format!("TUNSETIFF {name}: {}", std::io::Error::last_os_error())));
    }
    Ok(file)
}

fn raw_socket(local: Ipv4Addr) -> Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(PROTO_IPV6)))
        .map_err(|e| LabError::new(format!("raw protocol-41 socket: {e}")))?;
    s.bind(&SockAddr::from(SocketAddrV4::new(local, 0))).map_err(|e| LabError::new(format!("bind {local}: {e}")))?;
    Ok(s)
}

/// Move packets both ways until `stop`, waking at least every 100 ms to look at it.
fn forward(mut tun: &File, raw: &Socket, relay_router: Option<Ipv4Addr>, stop: &AtomicBool) {
    let mut buf = vec![0u8; 65536];
    let mut raw_buf = vec![MaybeUninit::<u8>::uninit(); 65536];
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [
            libc::pollfd { fd: tun.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: raw.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, 100) } <= 0 {
            continue;
        }
        if fds[0].revents & libc::POLLIN != 0 {
            if let Ok(n) = tun.read(&mut buf) {
                let packet = &buf[..n];
                if let Some(to) = next_hop(packet, relay_router) {
                    let _ = raw.send_to(packet, &SockAddr::from(SocketAddrV4::new(to, 0)));
                }
            }
        }
        if fds[1].revents & libc::POLLIN != 0 {
            if let Ok(n) = raw.recv(&mut raw_buf) {
                // SAFETY: recv initialised the first `n` bytes.
                let got: Vec<u8> = raw_buf[..n].iter().map(|b| unsafe { b.assume_init() }).collect();
                if let Some(inner) = decapsulate(&got) {
                    let _ = tun.write(inner);
                }
            }
        }
    }
}

/// Where an IPv6 packet from the stack goes: the IPv4 address its 6to4 destination
/// embeds, or the relay router for any other destination.
fn next_hop(packet: &[u8], relay_router: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
    let dst = packet.get(24..40)?;
    if packet[0] >> 4 != 6 {
        return None;
    }
    if dst[..2] == [0x20, 0x02] {
        Some(Ipv4Addr::new(dst[2], dst[3], dst[4], dst[5]))
    } else {
        relay_router
    }
}

/// The IPv6 packet inside a received IPv4 one, when it passes RFC 3056 §5.3's check.
fn decapsulate(packet: &[u8]) -> Option<&[u8]> {
    let ihl = usize::from(*packet.first()? & 0x0f) * 4;
    let header = packet.get(..20).filter(|_| ihl >= 20)?;
    let outer_src = Ipv4Addr::new(header[12], header[13], header[14], header[15]);
    let inner = packet.get(ihl..)?;
    let src = inner.get(8..24)?;
    if inner[0] >> 4 != 6 {
        return None;
    }
    let spoofed = src[..2] == [0x20, 0x02] && Ipv4Addr::new(src[2], src[3], src[4], src[5]) != outer_src;
    (!spoofed).then_some(inner)
}

impl Lab {
    pub(crate) fn build_sixtofour(&mut self) -> Result<()> {
        let r64 = self.host("r64", 8)?;
        Lab::addr(&r64, &format!("{RELAY_V4}/24"), "eth0")?;
        Lab::addr(&r64, &format!("{RELAY_NATIVE_V6}/64"), "eth0")?;
        let router_end = Sit::start(&r64, RELAY_V4, Ipv6Addr::new(0x2002, 0xc000, 0x0246, 0, 0, 0, 0, 1), None)?;
        self.tunnels.push(router_end);
        netns::sysctl(&r64, &["net.ipv6.conf.all.forwarding=1"])?;
        netns::ip(&["-n", &r64, "-6", "route", "add", "2001::/32", "via", &RELAY_V6.to_string()])?;

        let h64 = self.host("h64", 9)?;
        Lab::addr(&h64, &format!("{HOST_V4}/24"), "eth0")?;
        let host_end = Sit::start(&h64, HOST_V4, HOST_V6, Some(RELAY_V4))?;
        self.tunnels.push(host_end);
        // Everything not 6to4 goes to the relay router, tunnelled to its IPv4 address.
        netns::ip(&["-n", &h64, "-6", "route", "add", "::/0", "dev", "tun6to4"])?;

        // The native side reaches 2002::/16 through the 6to4 relay router.
        for short in ["rly", "srv", "h6"] {
            let ns = self.ns(short);
            netns::ip(&["-n", &ns, "-6", "route", "add", "2002::/16", "via", &RELAY_NATIVE_V6.to_string()])?;
        }
        // Warm the path (neighbour caches on both sides of the relay router).
        for (from, to) in [(&h64, HOST6_V6), (&h64, SERVER_V6)] {
            let _ = netns::exec(from, &["ping", "-6", "-n", "-c", "1", "-W", "2", &to.to_string()]);
        }
        Ok(())
    }
}
