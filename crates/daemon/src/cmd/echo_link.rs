//! The raw IPv6 socket a pure server sends its connectivity-test echoes through, held by
//! a small process of its own (`shipworm-echo`), so that the server holds no raw socket
//! once confined. An `IPPROTO_RAW` socket sends any IPv6 packet, header included: a
//! server subverted through a datagram could otherwise spoof any source (router
//! advertisements on its LAN, TCP resets). The holder is forked during set-up with the
//! socket and one end of a socket pair, drops root and every capability, confines
//! itself, and sends a packet only if [`is_connectivity_test_echo`] says the server may
//! (the rule the server's state machine already follows). For each packet it does not
//! send it answers one byte: refused, or the kernel's refusal. It ignores stop signals
//! and ends when the server's end closes.

use crate::runtime::confinement::FilterMode;
use crate::runtime::Failure;
use nix::unistd::{fork, ForkResult};
use shipworm_proto::server::{is_connectivity_test_echo, ServerConfig};
use shipworm_wire::ipv6::Ipv6Packet;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::mem::MaybeUninit;
use std::net::SocketAddrV6;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

/// The holder's answers, one byte each, for a packet it did not send.
const REFUSED: u8 = b'R';
const SEND_FAILED: u8 = b'E';
/// Longer than any packet the rule passes (40 bytes of header and the forwarding cap),
/// so a longer request arrives cut short and fails the rule's length check.
const REQUEST_MAX: usize = 4096;

/// The server's end of the link to the holder.
pub struct EchoLink {
    sock: Socket,
    /// Packets the holder refused: not echoes the server may send. Zero unless the
    /// server is wrong or subverted.
    pub refused: u64,
    /// Packets the kernel would not send, or that never reached the holder.
    pub failed: u64,
    /// The holder is gone (its end closed): nothing more to read, every send fails.
    pub gone: bool,
}

impl EchoLink {
    /// Open the raw socket, then fork the holder, which runs as `user`, confined with
    /// `filter`. Call during set-up: as root, before any thread starts.
    pub fn start(cfg: &ServerConfig, user: Option<&str>, filter: FilterMode) -> Result<EchoLink, Failure> {
        let raw = open_raw_ipv6()?;
        let (ours, theirs) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None)
            .map_err(|e| Failure::runtime(format!("echo link socketpair: {e}")))?;
        // SAFETY: the server has started no thread yet (the caller's promise); the child
        // runs only this module's code and exits without returning.
        match unsafe { fork() } {
            Ok(ForkResult::Parent { .. }) => {
                drop((theirs, raw));
                ours.set_nonblocking(true).map_err(|e| Failure::runtime(format!("echo link: {e}")))?;
                Ok(EchoLink { sock: ours, refused: 0, failed: 0, gone: false })
            }
            Ok(ForkResult::Child) => {
                drop(ours);
                let code = match holder_main(&theirs, &raw, cfg, user, filter) {
                    Ok(()) => 0,
                    Err(e) => {
                        tracing::error!("echo link: {e}");
                        1
                    }
                };
                std::process::exit(code)
            }
            Err(e) => Err(Failure::runtime(format!("cannot start the echo link: {e}"))),
        }
    }

    /// Hand `packet` to the holder; whether it was taken (a full queue or a gone holder
    /// counts as failed).
    pub fn send(&mut self, packet: &[u8]) -> bool {
        let taken = self.sock.send(packet).is_ok();
        if !taken {
            self.failed += 1;
        }
        taken
    }

    /// Count the holder's answers waiting (call when its end is readable). A closed
    /// end means the holder is gone: said once, and the link is not polled again.
    pub fn take_answers(&mut self) {
        let mut buf = [MaybeUninit::<u8>::uninit(); 16];
        loop {
            match self.sock.recv(&mut buf) {
                Ok(n) if n > 0 => {
                    // SAFETY: recv initialised the first n ≥ 1 bytes.
                    match unsafe { buf[0].assume_init() } {
                        REFUSED => {
                            self.refused += 1;
                            // Once, then counted only: the count is the alarm.
                            if self.refused == 1 {
                                tracing::warn!(
                                    "the echo link refused a packet the server built: not a connectivity-test echo \
                                     (io_errors raw_refused counts them)"
                                );
                            }
                        }
                        _ => self.failed += 1,
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                _ => {
                    self.gone = true;
                    tracing::error!("the echo link is gone: connectivity-test echoes can no longer leave");
                    return;
                }
            }
        }
    }
}

impl AsFd for EchoLink {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

fn open_raw_ipv6() -> Result<Socket, Failure> {
    // IPPROTO_RAW over IPv6 sends whole packets, header included: the echo keeps the
    // client's Teredo source address.
    let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW))).map_err(|e| {
        let hint = if e.raw_os_error() == Some(libc::EPERM) {
            "; run as root or grant CAP_NET_RAW (it is dropped once the socket is open)"
        } else {
            ""
        };
        Failure::runtime(format!("cannot open the raw IPv6 socket for connectivity-test echoes: {e}{hint}"))
    })?;
    Ok(s)
}

fn holder_main(
    sock: &Socket,
    raw: &Socket,
    cfg: &ServerConfig,
    user: Option<&str>,
    filter: FilterMode,
) -> Result<(), String> {
    crate::runtime::holder::enter(c"shipworm-echo", &[sock.as_raw_fd(), raw.as_raw_fd()], user, filter)?;
    serve(sock, cfg, |packet, dst| raw.send_to(packet, &SockAddr::from(SocketAddrV6::new(dst, 0, 0, 0))).is_ok());
    Ok(())
}

/// Take requests from `sock` until it closes: send each packet the rule passes with
/// `send_to` (to its destination), answer for each one not sent.
fn serve(sock: &Socket, cfg: &ServerConfig, mut send_to: impl FnMut(&[u8], std::net::Ipv6Addr) -> bool) {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); REQUEST_MAX];
    loop {
        let n = match sock.recv(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        // SAFETY: recv initialised the first n bytes.
        let packet: &[u8] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
        let answer = if !is_connectivity_test_echo(cfg, packet) {
            Some(REFUSED)
        } else {
            let dst = Ipv6Packet::new_unchecked(packet).dst_addr();
            (!send_to(packet, dst)).then_some(SEND_FAILED)
        };
        if let Some(a) = answer {
            if sock.send(&[a]).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shipworm_proto::server::Server;
    use shipworm_proto::transmit::Recorder;
    use shipworm_wire::icmpv6::Icmpv6Repr;
    use shipworm_wire::ipv6::Ipv6Repr;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn echo_from_a_client(cfg: &ServerConfig) -> Vec<u8> {
        let (src, dst) = ("2001:0:4136:e378:0:63bf:3fff:fdd2".parse().unwrap(), "2001:db8::1".parse().unwrap());
        let icmp = Icmpv6Repr::EchoRequest { ident: 1, seq_no: 1, data: b"abc" };
        let mut d = vec![0u8; 40 + icmp.buffer_len()];
        Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: icmp.buffer_len(), hop_limit: 64 }
            .emit(&mut d)
            .unwrap();
        icmp.emit(&src, &dst, &mut d[40..]).unwrap();
        // What the server makes of it is what the link carries.
        let mut s = Server::new(cfg.clone());
        let mut w = Recorder::default();
        s.on_udp(
            Duration::ZERO,
            shipworm_proto::server::Local::Primary,
            "192.0.2.45:40000".parse().unwrap(),
            &d,
            &mut w,
        )
        .unwrap();
        w.delivered.pop().expect("the server sends the echo natively")
    }

    /// #40, 11: through a real link (a socket pair and the holder's loop on a thread),
    /// the server's echo goes out and a router advertisement does not: the holder
    /// answers it refused, and the server's end counts it.
    #[test]
    fn the_holder_sends_the_servers_echo_and_refuses_anything_else() {
        let cfg = ServerConfig::new(Ipv4Addr::new(65, 54, 227, 120));
        let echo = echo_from_a_client(&cfg);
        let mut ra = echo.clone();
        ra[40] = 134;
        ra[7] = 255;
        let (ours, theirs) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
        let (sent_tx, sent_rx) = std::sync::mpsc::channel();
        let holder_cfg = cfg.clone();
        let holder = std::thread::spawn(move || {
            serve(&theirs, &holder_cfg, |p, dst| {
                sent_tx.send((p.to_vec(), dst)).unwrap();
                true
            })
        });
        ours.set_nonblocking(true).unwrap();
        let mut link = EchoLink { sock: ours, refused: 0, failed: 0, gone: false };
        assert!(link.send(&echo) && link.send(&ra) && link.send(&[0u8; 5000]));
        let (p, dst) = sent_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!((p, dst), (echo.clone(), "2001:db8::1".parse().unwrap()));
        // The holder answers the advertisement and the oversized request as refused.
        let t0 = std::time::Instant::now();
        while link.refused < 2 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
            link.take_answers();
        }
        assert_eq!((link.refused, link.failed), (2, 0));
        assert!(sent_rx.try_recv().is_err(), "only the echo went out");
        drop(link);
        holder.join().unwrap();
    }
}
