//! `shipworm server`: the Teredo server daemon. Two UDP sockets (primary and
//! secondary address, port 3544), a raw IPv6 socket for the connectivity-test echoes it
//! relays natively, batched I/O, then root is dropped.

use crate::cli;
use crate::config::server::{ServerOverrides, ServerSettings};
use crate::io::udp_batch::{RecvBatch, SendBatch, SLOT};
use crate::runtime::bind;
use crate::runtime::counters::Counters;
use crate::runtime::logging;
use crate::runtime::pidfile::PidFile;
use crate::runtime::random::OsRandom;
use crate::runtime::report::IoErrors;
use crate::runtime::shell::{Reports, Shell};
use crate::runtime::status_socket;
use crate::runtime::syscalls::Role;
use crate::runtime::Failure;
use crate::runtime::{drain, wait};
use nix::poll::{PollFd, PollFlags};
use shipworm_proto::server::{Local, Server, ServerConfig, ServerStats};
use shipworm_proto::transmit::{Source, Transmit};
use shipworm_wire::ipv6::Ipv6Packet;
use shipworm_wire::teredo_addr::{TeredoAddr, TEREDO_PORT};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{SocketAddrV4, SocketAddrV6};
use std::os::fd::AsFd;

/// Datagrams per system call.
const BATCH: usize = 32;
/// Batches read from one address per round at most (see `runtime::drain`).
const UDP_BATCHES_PER_ROUND: usize = 8;

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
    s.set_nonblocking(true).map_err(|e| Failure::runtime(format!("{e}")))?;
    Ok(s)
}

/// `shipworm server`: load the file (command-line addresses and user win), then serve.
pub fn run(args: &cli::ServerArgs) -> Result<(), Failure> {
    logging::init("info");
    let over = ServerOverrides { bind: args.bind.clone(), bind2: args.bind2.clone(), user: args.daemon.user.clone() };
    let settings = crate::config::server::load(Some(&args.config), &over).map_err(|e| Failure::usage(e.to_string()))?;
    let _pid = PidFile::create(args.daemon.pidfile.as_deref())?;
    serve(&settings, args.daemon.pidfile.as_deref(), args.daemon.control.as_deref())
}

/// Serve until SIGTERM/SIGINT.
fn serve(
    settings: &ServerSettings,
    pidfile: Option<&std::path::Path>,
    control: Option<&std::path::Path>,
) -> Result<(), Failure> {
    let mut cfg = settings.proto.clone();
    let (primary, secondary) = bind_addresses(&cfg)?;
    let raw = open_raw_ipv6()?;
    cfg.hash_keys = OsRandom::open()?.hash_keys();
    let control_path = control.map(Into::into).unwrap_or_else(|| status_socket::default_path("server"));
    let shell = Shell::open(Role::Server, control_path, settings.metrics_address)?;
    let shell = shell.confine(settings.user.as_deref(), settings.system_call_filter, pidfile)?;
    tracing::info!(
        "Teredo server on {}:{p} and {}:{p}, advertising {}/64, MTU {}",
        cfg.primary,
        cfg.secondary,
        TeredoAddr::client_prefix(cfg.prefix, cfg.primary),
        cfg.mtu,
        p = TEREDO_PORT
    );
    let dup = |s: &Socket| s.try_clone().map_err(|e| Failure::runtime(format!("cannot duplicate a socket: {e}")));
    let mut rx = [
        (Local::Primary, RecvBatch::new(dup(&primary)?, BATCH, SLOT)),
        (Local::Secondary, RecvBatch::new(dup(&secondary)?, BATCH, SLOT)),
    ];
    let mut daemon = ServerDaemon {
        server: Server::new(cfg.clone()),
        out: Output {
            raw: &raw,
            batches: [SendBatch::new(primary, BATCH, SLOT), SendBatch::new(secondary, BATCH, SLOT)],
            native_errors: 0,
        },
        cfg,
        start: std::time::Instant::now(),
    };
    shell.ready(&daemon);
    while !shell.stop_requested() {
        shell.tick(&daemon);
        let mut fds = [
            PollFd::new(rx[0].1.as_fd(), PollFlags::POLLIN),
            PollFd::new(rx[1].1.as_fd(), PollFlags::POLLIN),
            PollFd::new(shell.status_fd(), PollFlags::POLLIN),
        ];
        if !wait::readable(&mut fds, std::time::Duration::from_millis(500))? {
            continue;
        }
        if fds[2].revents().is_some_and(|r| r.contains(PollFlags::POLLIN)) {
            shell.serve_status(&daemon);
        }
        for (local, batch) in &mut rx {
            let now = daemon.start.elapsed();
            drain::udp(batch, UDP_BATCHES_PER_ROUND, |from, data| {
                logging::outcome(daemon.server.on_udp(now, *local, from, data, &mut daemon.out), "datagram", from);
            })?;
            daemon.out.flush();
        }
    }
    shell.stopping(&daemon);
    Ok(())
}

/// The primary and secondary addresses' sockets.
fn bind_addresses(cfg: &ServerConfig) -> Result<(Socket, Socket), Failure> {
    let in_use = "another Teredo server (miredo-server?) is running";
    let primary = bind::udp(
        SocketAddrV4::new(cfg.primary, TEREDO_PORT),
        false,
        "primary",
        &bind::Directives { address: "ServerBindAddress", in_use },
    )?;
    let secondary = bind::udp(
        SocketAddrV4::new(cfg.secondary, TEREDO_PORT),
        false,
        "secondary",
        &bind::Directives { address: "ServerBindAddress2, by default the primary + 1", in_use },
    )?;
    Ok((primary, secondary))
}

/// The server at work: its state machine, its output, what it serves.
struct ServerDaemon<'a> {
    server: Server,
    out: Output<'a>,
    cfg: ServerConfig,
    start: std::time::Instant,
}

impl Reports for ServerDaemon<'_> {
    fn counters(&self) -> Counters {
        counters(self.server.stats(), &self.out.io_errors())
    }

    /// The status document: addresses served, and the counters.
    fn status_json(&self) -> String {
        let cfg = &self.cfg;
        serde_json::json!({
            "role": "server",
            "state": "serving",
            "uptime_s": self.start.elapsed().as_secs(),
            "primary": format!("{}:{TEREDO_PORT}", cfg.primary),
            "secondary": format!("{}:{TEREDO_PORT}", cfg.secondary),
            "prefix": format!("{}/64", self.server.client_prefix()),
            "mtu": cfg.mtu,
            "secure_qualification": !cfg.clients.is_empty(),
            "counters": self.counters().json(),
        })
        .to_string()
    }

    fn service_status(&self) -> String {
        format!("serving on {} and {}", self.cfg.primary, self.cfg.secondary)
    }
}

/// The server's output: answers and forwards from either address in a send batch
/// each (flushed when full and after each batch received), echoes to native IPv6
/// through the raw socket.
struct Output<'a> {
    raw: &'a Socket,
    /// The primary address's batch, then the secondary's.
    batches: [SendBatch; 2],
    /// Echoes the raw socket could not send.
    native_errors: u64,
}

impl Output<'_> {
    fn flush(&mut self) {
        for b in &mut self.batches {
            if !b.is_empty() {
                b.flush();
            }
        }
    }

    fn io_errors(&self) -> IoErrors {
        IoErrors {
            udp_send: self.batches.iter().map(SendBatch::failed).sum(),
            raw_send: self.native_errors,
            ..IoErrors::default()
        }
    }
}

impl Transmit for Output<'_> {
    fn send(&mut self, from: Source, to: SocketAddrV4, payload: &[u8], ttl: Option<u8>) {
        // The server answers from either address, with the sockets' TTL.
        debug_assert!(ttl.is_none(), "the server sends with its sockets' TTL");
        match from {
            Source::Secondary => self.batches[1].push(to, payload),
            Source::Service => self.batches[0].push(to, payload),
            // A client's socket: the server has none. Never asked; counted if it were.
            Source::Probe | Source::Port(_) => {
                debug_assert!(false, "the server has no {from:?} socket");
                self.native_errors += 1;
            }
        }
    }
    fn deliver(&mut self, packet: &[u8]) {
        if !send_native(self.raw, packet) {
            self.native_errors += 1;
        }
    }
}

/// Send `packet` to its destination through the raw socket; whether it went.
fn send_native(raw: &Socket, packet: &[u8]) -> bool {
    // The server built this packet; a view is still the one way to read a header.
    let Ok(ip) = Ipv6Packet::new_checked(packet) else { return false };
    let d = ip.dst_addr();
    let dst = SockAddr::from(SocketAddrV6::new(d, 0, 0, 0));
    match raw.send_to(packet, &dst) {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!("native send to {d}: {e}");
            false
        }
    }
}

/// The server's counters: every view of them (`/metrics`, the status JSON, the log
/// line) is made from this one table.
pub(crate) fn counters(s: &ServerStats, io: &IoErrors) -> Counters {
    const FORWARDED: &str = "Bubbles and echoes forwarded, to Teredo clients (UDP) or native IPv6.";
    const BYTES: &str = "Bytes of the IPv6 packets forwarded, to Teredo clients (UDP) or native IPv6.";
    let mut t = Counters::new("server");
    t.counter("router_advertisements", "Router advertisements sent.", s.advertisements);
    t.counter("forwarded", FORWARDED, s.forwarded_udp).label("to", "teredo");
    t.counter("forwarded", FORWARDED, s.forwarded_native).label("to", "ipv6");
    t.counter("bytes", BYTES, s.forwarded_udp_bytes).label("to", "teredo");
    t.counter("bytes", BYTES, s.forwarded_native_bytes).label("to", "ipv6");
    t.drops(&s.drops);
    t.io_errors(io);
    t
}

#[cfg(test)]
mod counters_tests {
    use super::*;
    use crate::runtime::counters::tests::assert_views_agree;
    use shipworm_proto::DropReason;

    #[test]
    fn the_servers_metrics_status_and_log_line_list_the_same_counters() {
        let mut s = ServerStats {
            advertisements: 1,
            forwarded_udp: 2,
            forwarded_native: 3,
            forwarded_udp_bytes: 4,
            forwarded_native_bytes: 5,
            ..Default::default()
        };
        s.drops.count(DropReason::RateLimited);
        let t = counters(&s, &IoErrors { udp_send: 6, raw_send: 7, ..Default::default() });
        assert_views_agree(&t);
        let j = t.json();
        assert_eq!(j["io_errors"]["raw_send"], 7, "raw-socket failures are raw_send, not tun_write: {j}");
        assert!(j["io_errors"].get("tun_write").is_none());
        assert_eq!(j["forwarded"]["ipv6"], 3);
    }
}
