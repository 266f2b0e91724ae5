//! `shipworm relay`: the Teredo relay and host-specific relay daemon. A TUN interface
//! routed for the Teredo prefix, one UDP socket, batched receive and send, timers every
//! 250 ms; root is dropped once everything is set up.

use crate::miredo_config::{MiredoConf, RelayType};
use crate::netlink::Netlink;
use crate::privileges;
use crate::signals::Signals;
use crate::tun::Tun;
use crate::udp_batch::{RecvBatch, SendBatch, SLOT};
use crate::Failure;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use shipworm_proto::relay::{Relay, RelayConfig, Served, Transmit};
use shipworm_wire::teredo_addr::TeredoAddr;
use socket2::{Domain, Protocol, Socket, Type};
use std::io::Read;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Datagrams / packets per batch.
const BATCH: usize = 64;
/// Timer period.
const TICK: Duration = Duration::from_millis(250);

/// The relay's output: UDP into a send batch (flushed when full and after each
/// round), IPv6 packets straight to the TUN.
struct Out<'a> {
    sock: &'a Socket,
    tun: &'a Tun,
    batch: SendBatch,
    tun_errors: u64,
}

impl Transmit for Out<'_> {
    fn udp(&mut self, to: SocketAddrV4, payload: &[u8]) {
        self.batch.push(self.sock.as_fd(), to, payload);
    }
    fn tun(&mut self, packet: &[u8]) {
        if self.tun.send(packet).is_err() {
            self.tun_errors += 1;
        }
    }
}

fn random_keys() -> (u64, u64) {
    let mut b = [0u8; 16];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_err() {
        // Still unpredictable enough to an outsider: time and pid.
        let t = Instant::now().elapsed().as_nanos() as u64 ^ u64::from(std::process::id()) << 32;
        b[..8].copy_from_slice(&t.to_le_bytes());
    }
    (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..].try_into().unwrap()))
}

fn bind_udp(addr: SocketAddrV4) -> Result<Socket, Failure> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| Failure::runtime(format!("cannot create a UDP socket: {e}")))?;
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s.set_nonblocking(true).map_err(|e| Failure::runtime(e.to_string()))?;
    s.bind(&addr.into()).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::EADDRNOTAVAIL) => format!("; {} is not an address of this host (BindAddress)", addr.ip()),
            Some(libc::EADDRINUSE) => "; another program (miredo?) uses that port (BindPort)".into(),
            _ => String::new(),
        };
        Failure::runtime(format!("cannot bind {addr}: {e}{hint}"))
    })?;
    Ok(s)
}

/// Run the relay until SIGTERM/SIGINT.
pub fn run(conf: &MiredoConf) -> Result<(), Failure> {
    for w in &conf.warnings {
        tracing::warn!("{w}");
    }
    let tun = Tun::create(&conf.interface).map_err(Failure::runtime)?;
    let nl = Netlink::new().map_err(Failure::runtime)?;
    let index = nl.link_index(tun.name()).map_err(Failure::runtime)?;
    let prefix = TeredoAddr::client_prefix(conf.prefix, Ipv4Addr::UNSPECIFIED);
    nl.set_link(index, true, conf.mtu.into()).map_err(Failure::runtime)?;
    nl.add_address(index, Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xffff, 0xffff, 0xffff), 64).map_err(Failure::runtime)?;
    nl.add_route(index, prefix, 32, None).map_err(Failure::runtime)?;
    // The host's own global addresses: the served range of a host-specific relay, and
    // the source of ICMPv6 errors.
    let own: Vec<Ipv6Addr> = nl
        .global_ipv6_addresses()
        .map_err(Failure::runtime)?
        .into_iter()
        .filter(|a| TeredoAddr::decode_with_prefix(a, conf.prefix).is_none())
        .collect();
    let served = match conf.role {
        RelayType::Host => Served::Only(own.clone()),
        _ => Served::AnyGlobal,
    };
    let sock = bind_udp(SocketAddrV4::new(conf.bind_address, conf.bind_port))?;
    let local = sock.local_addr().ok().and_then(|a| a.as_socket_ipv4());
    let signals = Signals::install().map_err(|e| Failure::runtime(format!("cannot install signal handlers: {e}")))?;
    privileges::drop_root(conf.user.as_deref().unwrap_or(privileges::DEFAULT_USER)).map_err(Failure::runtime)?;

    let cfg = RelayConfig {
        prefix: conf.prefix,
        served,
        direct_bubbles: conf.role == RelayType::Restricted,
        capacity: conf.peer_capacity,
        queue_bytes: conf.queue_bytes,
        icmp_source: conf.relay_address.or_else(|| own.first().copied()),
        hash_keys: random_keys(),
        ..RelayConfig::default()
    };
    tracing::info!(
        "Teredo {} on {} (UDP {}), routing {prefix}/32, MTU {}, up to {} peers",
        match conf.role {
            RelayType::Host => "host-specific relay",
            RelayType::Restricted => "relay (restricted)",
            _ => "relay",
        },
        tun.name(),
        local.map_or_else(|| "?".into(), |a| a.to_string()),
        conf.mtu,
        conf.peer_capacity,
    );
    if cfg.icmp_source.is_none() {
        tracing::warn!("no global IPv6 address on this host: no ICMPv6 errors will be sent (set RelayAddress)");
    }
    let mut relay = Relay::new(cfg);
    let started = Instant::now();
    let mut rx = RecvBatch::new(BATCH, SLOT);
    let mut out = Out { sock: &sock, tun: &tun, batch: SendBatch::new(BATCH, SLOT), tun_errors: 0 };
    let mut buf = vec![0u8; SLOT];
    let mut next_tick = started + TICK;

    while !signals.stop_requested() {
        if signals.take_report_request() {
            report(&relay, "counters");
        }
        let wait = next_tick.saturating_duration_since(Instant::now());
        let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN), PollFd::new(tun.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::try_from(wait.as_millis() as i32 + 1).unwrap_or(PollTimeout::MAX)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Failure::runtime(format!("poll: {e}"))),
        }
        let now = started.elapsed();
        // UDP side, a batch at a time.
        loop {
            let n = rx.recv(sock.as_fd()).map_err(|e| Failure::runtime(format!("receive: {e}")))?;
            for i in 0..n {
                let (from, data) = rx.get(i);
                relay.on_udp(now, from, data, &mut out);
            }
            if n < BATCH {
                break;
            }
        }
        // TUN side: up to a batch of packets per round, so neither side starves.
        for _ in 0..BATCH {
            match tun.recv(&mut buf) {
                Ok(Some(n)) => {
                    relay.on_tun(now, &buf[..n], &mut out);
                }
                Ok(None) => break,
                Err(e) => return Err(Failure::runtime(format!("read {}: {e}", tun.name()))),
            }
        }
        if Instant::now() >= next_tick {
            relay.on_timer(started.elapsed(), &mut out);
            next_tick += TICK;
        }
        if !out.batch.is_empty() {
            out.batch.flush(sock.as_fd());
        }
    }
    report(&relay, "stopping");
    Ok(())
}

fn report(relay: &Relay, what: &str) {
    let s = relay.stats();
    let drops: Vec<String> = s.drops.nonzero().map(|(r, n)| format!("{}={n}", r.as_str())).collect();
    tracing::info!(
        "{what}: {} peers, {} to Teredo, {} to IPv6, {} bubbles, {} unreachable peers, {} ICMPv6 errors, {} dropped{}{}",
        relay.peers().len(),
        s.to_teredo,
        s.to_native,
        s.bubbles,
        s.unreachable_peers,
        s.icmp_errors,
        s.drops.total(),
        if drops.is_empty() { "" } else { ": " },
        drops.join(" ")
    );
}
