//! `shipworm server`: the Teredo server daemon. Two UDP sockets (primary and
//! secondary address, port 3544), a raw IPv6 socket for the connectivity-test echoes it
//! relays natively (held by a process of its own, [`EchoLink`]), batched I/O, then root
//! is dropped. With `ServerRelay yes` it is a
//! relay too, from the primary address and port (RFC 4380 §5.4.3): a TUN interface
//! routes the Teredo prefix to it, and whatever goes native leaves through that.

use crate::cli;
use crate::cmd::bird_link::BirdLink;
use crate::cmd::echo_link::EchoLink;
use crate::config::server::{ServerOverrides, ServerSettings};
use crate::io::batch::{Backend, DatagramOutput, Linux, PacketOutput};
use crate::io::netlink::Netlink;
use crate::io::tun::Tun;
use crate::io::tun_batch::{TunInput, TunOutput};
use crate::io::udp_batch::{RecvBatch, SendBatch, SLOT};
use crate::runtime::bind;
use crate::runtime::config_reader::{self, ConfigReader};
use crate::runtime::counters::Counters;
use crate::runtime::logging;
use crate::runtime::pidfile::PidFile;
use crate::runtime::random::OsRandom;
use crate::runtime::report::IoErrors;
use crate::runtime::role_loop::{self, Inputs, Turned, Watched};
use crate::runtime::shell::{Confined, Reports, Shell};
use crate::runtime::status_socket;
use crate::runtime::syscalls::Role;
use crate::runtime::Failure;
use shipworm_proto::outcome::Outcome;
use shipworm_proto::relay::{RelayConfig, RelayStats};
use shipworm_proto::server::{Local, Server, ServerConfig, ServerStats};
use shipworm_proto::server_relay::ServerRelay;
use shipworm_proto::transmit::{Source, Transmit};
use shipworm_wire::teredo_addr::{TeredoAddr, TEREDO_PORT};
use socket2::Socket;
use std::net::SocketAddrV4;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Datagrams per system call.
const BATCH: usize = 32;
/// Batches read from one address per round at most (see `runtime::role_loop`).
const UDP_BATCHES_PER_ROUND: usize = 8;

/// `shipworm server`: load the file (command-line addresses and user win), then serve.
pub fn run(args: &cli::ServerArgs) -> Result<(), Failure> {
    logging::init("info");
    let over = ServerOverrides { bind: args.bind.clone(), bind2: args.bind2.clone(), user: args.daemon.user.clone() };
    let settings = crate::config::server::load(Some(&args.config), &over).map_err(|e| Failure::usage(e.to_string()))?;
    let _pid = PidFile::create(args.daemon.pidfile.as_deref())?;
    let same = crate::config::server::same_settings(&settings, over);
    let reader = config_reader::start(&args.config, settings.user.as_deref(), settings.system_call_filter, same)?;
    serve(&settings, args.daemon.pidfile.as_deref(), args.daemon.control.as_deref(), reader)
}

/// Serve until SIGTERM/SIGINT.
fn serve(
    settings: &ServerSettings,
    pidfile: Option<&std::path::Path>,
    control: Option<&std::path::Path>,
    reader: ConfigReader,
) -> Result<(), Failure> {
    let mut cfg = settings.proto.clone();
    let (primary, secondary) = bind_addresses(&cfg)?;
    // A pure server's echoes leave through the raw socket's holder; a relaying one's
    // through its interface.
    let echo_link = match settings.relay_interface {
        None => Some(EchoLink::start(&cfg, settings.user.as_deref(), settings.system_call_filter)?),
        Some(_) => None,
    };
    // BIRD's socket, connected now and handed to the BIRD link (as the relay's is):
    // servers run as anycast announce their addresses while they serve. Without BIRD
    // the server still serves.
    let mut bird = settings.bird_socket.as_deref().and_then(|path| {
        BirdLink::start(path, &settings.bird_protocols, settings.user.as_deref(), settings.system_call_filter)
            .map_err(|e| tracing::error!("not announcing through BIRD: {e}"))
            .ok()
    });
    let mut random = OsRandom::open()?;
    cfg.hash_keys = random.hash_keys();
    let relay_keys = random.hash_keys();
    let relay = settings.relay_interface.as_deref().map(|name| open_relay(name, &cfg, relay_keys)).transpose()?;
    let control_path = control.map(Into::into).unwrap_or_else(|| status_socket::default_path("server"));
    let shell = Shell::open(Role::Server, control_path, settings.metrics_address)?.reloading(reader);
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
    let datagrams = vec![RecvBatch::new(dup(&primary)?, BATCH, SLOT), RecvBatch::new(dup(&secondary)?, BATCH, SLOT)];
    let (machine, tun, interface) = match relay {
        Some((relay_cfg, tun)) => {
            let name = tun.name().to_string();
            tracing::info!("relaying too, from {}:{TEREDO_PORT}, on interface {name}", cfg.primary);
            (Machine::Both(Box::new(ServerRelay::new(cfg.clone(), relay_cfg))), Some(tun), Some(name))
        }
        None => (Machine::Server(Box::new(Server::new(cfg.clone()))), None, None),
    };
    // The link's own descriptor, once: polled while the link itself is borrowed to send.
    let link_answers = echo_link.as_ref().map(|l| l.as_fd().try_clone_to_owned()).transpose();
    let link_answers = link_answers.map_err(|e| Failure::runtime(format!("echo link: {e}")))?;
    let mut daemon: ServerDaemon<Linux<'_>> = ServerDaemon {
        machine,
        out: Output {
            echo_link,
            tun: tun.as_ref().map(TunOutput::new),
            batches: [SendBatch::new(primary, BATCH, SLOT), SendBatch::new(secondary, BATCH, SLOT)],
            native_errors: 0,
        },
        cfg,
        interface,
        start: Instant::now(),
    };
    shell.ready(&daemon);
    if let Some(b) = &mut bird {
        match b.enable() {
            Ok(said) => tracing::info!("announcing through BIRD: \"{said}\""),
            Err(e) => tracing::error!("not announced: {e}"),
        }
    }
    let mut inputs = Inputs { datagrams, packets: tun.as_ref().map(TunInput::new) };
    let drain_time = settings.drain_time;
    let mut around = ServerAround { shell: &shell, bird: bird.as_mut(), drain_time, link_answers, drain_until: None };
    role_loop::run(&mut daemon, &mut inputs, &mut around)?;
    shell.stopping(&daemon);
    shell.outcome()
}

/// What runs around the server's rounds: the shell (signals, status, chores), the
/// echo link's answers, and a stop's drain while BIRD withdraws the route.
struct ServerAround<'a> {
    shell: &'a Shell<Confined>,
    bird: Option<&'a mut BirdLink>,
    drain_time: Duration,
    /// The echo link's own descriptor: polled while the link itself is borrowed to send.
    link_answers: Option<std::os::fd::OwnedFd>,
    /// When the drain after a stop ends (BIRD withdrew the route).
    drain_until: Option<Instant>,
}

impl<B: Backend> role_loop::Around<ServerDaemon<B>> for ServerAround<'_> {
    /// A stop ends the loop, after its drain: with BIRD, withdraw first, then answer
    /// what routing still sends here.
    fn done(&mut self, _daemon: &mut ServerDaemon<B>) -> Result<bool, Failure> {
        if !self.shell.stop_requested() {
            return Ok(false);
        }
        let (bird, shell, drain) = (self.bird.as_deref_mut(), self.shell, self.drain_time);
        let until = *self.drain_until.get_or_insert_with(|| withdraw(bird, shell, drain));
        Ok(Instant::now() >= until || self.shell.stop_insisted())
    }

    fn wake_at(&mut self, _daemon: &ServerDaemon<B>) -> Option<Instant> {
        [Some(self.shell.next_wake()), self.drain_until].into_iter().flatten().min()
    }

    /// The status socket, signals, and the echo link's answers (refused, not sent),
    /// counted when they come; not polled once the link is gone (its closed end would
    /// wake every poll).
    fn watch<'a>(&'a self, daemon: &'a ServerDaemon<B>, fds: &mut Watched<'a>) {
        fds.extend([self.shell.status_fd(), self.shell.signal_fd()]);
        let link_gone = daemon.out.echo_link.as_ref().is_some_and(|l| l.gone);
        if let Some(fd) = self.link_answers.as_ref().filter(|_| !link_gone) {
            fds.push(fd.as_fd());
        }
    }

    fn woke(&mut self, daemon: &mut ServerDaemon<B>, readable: &[bool], any: bool) -> Result<(), Failure> {
        if any {
            self.shell.busy();
        }
        if readable.first() == Some(&true) {
            self.shell.serve_status(&*daemon);
        }
        if readable.get(2) == Some(&true) {
            if let Some(link) = &mut daemon.out.echo_link {
                link.take_answers();
            }
        }
        Ok(())
    }

    fn after_round(
        &mut self,
        daemon: &mut ServerDaemon<B>,
        _inputs: &Inputs<B::DatagramsIn, B::PacketsIn>,
        round: Turned,
    ) -> Result<(), Failure> {
        if round.timers {
            self.shell.busy();
        }
        self.shell.tick(&*daemon);
        Ok(())
    }
}

impl<B: Backend> role_loop::Role for ServerDaemon<B> {
    type Datagrams = B::DatagramsIn;
    type Packets = B::PacketsIn;
    const DATAGRAM_BATCHES: usize = UDP_BATCHES_PER_ROUND;
    const PACKETS: usize = BATCH * UDP_BATCHES_PER_ROUND;

    /// The relay part's: its bubbles are repeated and its peers expire on its timer.
    fn deadline(&self) -> Option<Instant> {
        self.machine.poll_timeout().map(|t| self.start + t)
    }

    /// Input 0 is the primary address's socket, 1 the secondary's.
    fn on_datagram(&mut self, now: Instant, input: usize, from: SocketAddrV4, data: &[u8]) {
        let local = if input == 0 { Local::Primary } else { Local::Secondary };
        let now = now.saturating_duration_since(self.start);
        logging::outcome(self.machine.on_udp(now, local, from, data, &mut self.out), "datagram", from);
    }

    fn on_packet(&mut self, now: Instant, packet: &[u8]) {
        let now = now.saturating_duration_since(self.start);
        logging::outcome(self.machine.on_tun(now, packet, &mut self.out), "packet", "the TUN");
    }

    fn on_deadline(&mut self, now: Instant) {
        self.machine.on_timer(now.saturating_duration_since(self.start), &mut self.out);
    }

    fn flush(&mut self) {
        self.out.flush();
    }

    /// A read the device refused ends the round's reading, not the server.
    fn packets_failed(&mut self, e: Failure) -> Result<(), Failure> {
        tracing::debug!("{}", e.message);
        Ok(())
    }
}

/// Tell BIRD to withdraw (when the server announces through it); the drain's end.
fn withdraw(bird: Option<&mut BirdLink>, shell: &Shell<Confined>, drain: Duration) -> Instant {
    let now = Instant::now();
    let Some(bird) = bird else { return now };
    shell.stopping_after(drain);
    match bird.disable() {
        Ok(said) => {
            tracing::info!(
                "stopping: BIRD says \"{said}\"; serving {} s more while routing moves the clients (DrainTime)",
                drain.as_secs()
            );
            now + drain
        }
        Err(e) => {
            tracing::warn!("stopping without a drain: {e}");
            now
        }
    }
}

/// The relay part's TUN interface, up with a link-local address and the route to the
/// Teredo prefix, and its settings from what the host has: its IPv4 addresses (never a
/// mapping; the routing-loop checks), its global IPv6 addresses (the source of ICMPv6
/// errors), its subnets' broadcast addresses.
fn open_relay(name: &str, cfg: &ServerConfig, hash_keys: (u64, u64)) -> Result<(RelayConfig, Tun), Failure> {
    let mut tuns = Tun::create_queues(name, 1, false).map_err(Failure::runtime)?;
    let tun = tuns.pop().ok_or_else(|| Failure::runtime("no TUN queue"))?;
    let nl = Netlink::new().map_err(Failure::runtime)?;
    let index = nl.link_index(tun.name()).map_err(Failure::runtime)?;
    crate::cmd::relay::bring_up(&nl, index, cfg.mtu, cfg.prefix)?;
    let subnets = nl.ipv4_subnets().map_err(Failure::runtime)?;
    let own_v6 = nl.global_ipv6_addresses().map_err(Failure::runtime)?;
    let mut own_ipv4: Vec<_> = subnets.iter().map(|&(a, _)| a).collect();
    own_ipv4.extend([cfg.primary, cfg.secondary]);
    let relay = RelayConfig {
        own_ipv4,
        local_broadcasts: crate::cmd::relay::directed_broadcasts(&subnets),
        icmp_source: own_v6.into_iter().find(|a| TeredoAddr::decode_with_prefix(a, cfg.prefix).is_none()),
        hash_keys,
        ..RelayConfig::default()
    };
    Ok((relay, tun))
}

/// What serves: a pure server, or a server that relays too.
enum Machine {
    Server(Box<Server>),
    Both(Box<ServerRelay>),
}

impl Machine {
    fn server(&self) -> &Server {
        match self {
            Machine::Server(s) => s,
            Machine::Both(b) => b.server(),
        }
    }

    fn on_udp(
        &mut self,
        now: std::time::Duration,
        local: Local,
        from: SocketAddrV4,
        d: &[u8],
        tx: &mut impl Transmit,
    ) -> Outcome {
        match self {
            Machine::Server(s) => s.on_udp(now, local, from, d, tx),
            Machine::Both(b) => b.on_udp(now, local, from, d, tx),
        }
    }

    fn on_tun(&mut self, now: std::time::Duration, packet: &[u8], tx: &mut impl Transmit) -> Outcome {
        match self {
            // No TUN without the relay part.
            Machine::Server(_) => Err(shipworm_proto::DropReason::NotServed),
            Machine::Both(b) => b.on_tun(now, packet, tx),
        }
    }

    fn on_timer(&mut self, now: std::time::Duration, tx: &mut impl Transmit) {
        if let Machine::Both(b) = self {
            b.on_timer(now, tx);
        }
    }

    /// The next deadline: the relay part's (a server alone has none).
    fn poll_timeout(&self) -> Option<std::time::Duration> {
        match self {
            Machine::Server(s) => s.poll_timeout(),
            Machine::Both(b) => b.poll_timeout(),
        }
    }
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
struct ServerDaemon<B: Backend> {
    machine: Machine,
    out: Output<B>,
    cfg: ServerConfig,
    /// The relay part's interface, when the server relays.
    interface: Option<String>,
    start: Instant,
}

impl<B: Backend> Reports for ServerDaemon<B> {
    fn counters(&self) -> Counters {
        let relay = match &self.machine {
            Machine::Both(b) => Some((b.relay().stats(), b.relay().peer_count(), b.relay().pending_len())),
            Machine::Server(_) => None,
        };
        counters(self.machine.server().stats(), relay, &self.out.io_errors())
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
            "prefix": format!("{}/64", self.machine.server().client_prefix()),
            "relay_interface": self.interface,
            "mtu": cfg.mtu,
            "secure_qualification": cfg.secure(),
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
/// through the raw socket's holder.
struct Output<B: Backend> {
    /// A pure server's way to native IPv6 (a relaying one has its interface).
    echo_link: Option<EchoLink>,
    /// The relay part's interface: when the server relays, everything native leaves
    /// through it (written to it, the kernel forwards it as a router), batched as the
    /// other roles' (it counts what the device refused).
    tun: Option<B::PacketsOut>,
    /// The primary address's batch, then the secondary's.
    batches: [B::DatagramsOut; 2],
    /// Native packets with no way out (never: the server has its link or its interface).
    native_errors: u64,
}

impl<B: Backend> Output<B> {
    fn flush(&mut self) {
        if let Some(t) = &mut self.tun {
            t.flush();
        }
        self.batches.iter_mut().for_each(DatagramOutput::flush);
    }

    fn io_errors(&self) -> IoErrors {
        IoErrors {
            udp_send: self.batches.iter().map(DatagramOutput::failed).sum(),
            raw_send: self.native_errors + self.echo_link.as_ref().map_or(0, |l| l.failed),
            raw_refused: self.echo_link.as_ref().map_or(0, |l| l.refused),
            tun_write: self.tun.as_ref().map_or(0, PacketOutput::failed),
            ..IoErrors::default()
        }
    }
}

impl<B: Backend> Transmit for Output<B> {
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
        match &mut self.tun {
            Some(t) => t.push(packet),
            None => match &mut self.echo_link {
                // Counted by the link when it does not go.
                Some(link) => {
                    link.send(packet);
                }
                None => self.native_errors += 1,
            },
        }
    }
}

/// The server's counters: every view of them (`/metrics`, the status JSON, the log
/// line) is made from this one table.
pub(crate) fn counters(s: &ServerStats, relay: Option<(&RelayStats, usize, usize)>, io: &IoErrors) -> Counters {
    const FORWARDED: &str = "Bubbles and echoes forwarded, to Teredo clients (UDP) or native IPv6.";
    const BYTES: &str = "Bytes of the IPv6 packets forwarded, to Teredo clients (UDP) or native IPv6.";
    const RELAYED: &str = "Packets the relay part forwarded, by direction (a server that relays).";
    const RELAYED_BYTES: &str = "IPv6 bytes the relay part forwarded, by direction (a server that relays).";
    let mut t = Counters::new("server");
    t.counter("router_advertisements", "Router advertisements sent.", s.advertisements);
    // One label name for a direction in every role's metrics: `direction`.
    t.counter("forwarded", FORWARDED, s.forwarded_udp).label("direction", "to_teredo");
    t.counter("forwarded", FORWARDED, s.forwarded_native).label("direction", "to_ipv6");
    t.counter("bytes", BYTES, s.forwarded_udp_bytes).label("direction", "to_teredo");
    t.counter("bytes", BYTES, s.forwarded_native_bytes).label("direction", "to_ipv6");
    let mut drops = s.drops.clone();
    if let Some((r, peers, waiting)) = relay {
        t = t.with_tun();
        t.counter("relayed", RELAYED, r.to_teredo).label("direction", "to_teredo");
        t.counter("relayed", RELAYED, r.to_ipv6).label("direction", "to_ipv6");
        t.counter("relayed_bytes", RELAYED_BYTES, r.to_teredo_bytes).label("direction", "to_teredo");
        t.counter("relayed_bytes", RELAYED_BYTES, r.to_ipv6_bytes).label("direction", "to_ipv6");
        t.counter("relay_bubbles", "Bubbles the relay part sent to new peers.", r.bubbles);
        t.counter(
            "relay_bubbles_withheld",
            "Bubbles the relay part withheld: 4 of the kind in 300 s unanswered (RFC 4380 §5.2.6).",
            r.bubbles_withheld,
        );
        t.counter("relay_icmpv6_errors", "ICMPv6 errors the relay part sent.", r.icmp_errors);
        t.gauge("relay_peers", "Peers in the relay part's table.", peers as u64);
        t.gauge("relay_waiting_peers", "Peers waiting for the relay part's bubble's answer.", waiting as u64);
        for (reason, n) in r.drops.nonzero() {
            drops.count_n(reason, n as usize);
        }
    }
    t.drops(&drops);
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
        let t = counters(&s, None, &IoErrors { udp_send: 6, raw_send: 7, ..Default::default() });
        assert_views_agree(&t);
        let j = t.json();
        assert_eq!(j["io_errors"]["raw_send"], 7, "raw-socket failures are raw_send, not tun_write: {j}");
        assert!(j["io_errors"].get("tun_write").is_none());
        assert_eq!(j["forwarded"]["to_ipv6"], 3);
        assert!(j.get("relayed").is_none(), "a pure server has no relay rows: {j}");
    }

    #[test]
    fn a_relaying_servers_views_agree_and_drops_add_up() {
        let mut s = ServerStats::default();
        s.drops.count(DropReason::RateLimited);
        let mut r = RelayStats { to_teredo: 2, to_ipv6: 3, bubbles: 4, ..Default::default() };
        r.drops.count(DropReason::RateLimited);
        r.drops.count(DropReason::NoPeerEntry);
        let t = counters(&s, Some((&r, 5, 1)), &IoErrors { tun_write: 8, ..Default::default() });
        assert_views_agree(&t);
        let j = t.json();
        assert_eq!(j["relayed"]["to_ipv6"], 3);
        assert_eq!(j["relay_peers"], 5);
        assert_eq!(j["dropped"]["rate_limited"], 2, "one drop row per reason: {j}");
        assert_eq!(j["io_errors"]["tun_write"], 8);
    }
}

#[cfg(test)]
mod in_memory {
    //! The server's whole loop (`role_loop`) over the in-memory backend: a server and a
    //! server that relays, driven as the daemon drives them, without root or sockets.
    use super::*;
    use crate::io::memory::{DatagramsIn, DatagramsOut, Memory, PacketsIn, PacketsOut};
    use shipworm_proto::DropReason;
    use shipworm_wire::icmpv6::Icmpv6Repr;
    use shipworm_wire::ipv6::Ipv6Repr;
    use shipworm_wire::teredo_addr::{Flags, RS_SOURCE_CONE, RS_SOURCE_RESTRICTED};
    use shipworm_wire::teredo_packet::{emit_bubble, TeredoHeaderRepr, TeredoPacket};
    use std::net::{Ipv4Addr, Ipv6Addr};

    const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 5), 40000);
    const OTHER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 9), 50000);
    const NATIVE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 6);

    fn daemon(machine: Machine, relays: bool) -> ServerDaemon<Memory> {
        ServerDaemon {
            machine,
            out: Output {
                echo_link: None,
                tun: relays.then(PacketsOut::default),
                batches: [DatagramsOut::default(), DatagramsOut::default()],
                native_errors: 0,
            },
            cfg: ServerConfig::new(PRIMARY),
            interface: None,
            start: Instant::now(),
        }
    }

    fn inputs(
        primary: Vec<(SocketAddrV4, Vec<u8>)>,
        secondary: Vec<(SocketAddrV4, Vec<u8>)>,
    ) -> Inputs<DatagramsIn, PacketsIn> {
        let side = |q: Vec<_>| DatagramsIn { queue: q.into(), batches: 0 };
        Inputs { datagrams: vec![side(primary), side(secondary)], packets: Some(PacketsIn::default()) }
    }

    fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, hop: u8, icmp: &Icmpv6Repr) -> Vec<u8> {
        let n = icmp.buffer_len();
        let mut b = vec![0u8; 40 + n];
        Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: n, hop_limit: hop }
            .emit(&mut b)
            .unwrap();
        icmp.emit(&src, &dst, &mut b[40..]).unwrap();
        b
    }

    /// A solicitation; with the cone flag, the client asks for the answer from the
    /// other address (RFC 4380 §5.2.1).
    fn rs(cone: bool) -> Vec<u8> {
        let mut b = vec![0u8; 100];
        let at = TeredoHeaderRepr { auth: None, origin: None }.emit(&mut b).unwrap();
        b.truncate(at);
        let src = if cone { RS_SOURCE_CONE } else { RS_SOURCE_RESTRICTED };
        b.extend(ipv6(src, "ff02::2".parse().unwrap(), 255, &Icmpv6Repr::RouterSolicit));
        b
    }

    /// The ICMPv6 type of what a datagram carries, and its origin indication.
    fn carried(d: &[u8]) -> (u8, Option<SocketAddrV4>) {
        let p = TeredoPacket::parse(d).expect("a Teredo packet");
        (p.ipv6.payload().first().copied().unwrap_or(0), p.origin)
    }

    #[test]
    fn the_loop_answers_each_solicitation_from_the_address_it_asks_for() {
        let mut d = daemon(Machine::Server(Box::new(Server::new(ServerConfig::new(PRIMARY)))), false);
        let mut inputs = inputs(vec![(CLIENT, rs(false))], vec![(OTHER, rs(false))]);
        role_loop::round(&mut d, &mut inputs).unwrap();
        let [primary, secondary] = &mut d.out.batches;
        assert_eq!(primary.sent.len(), 1, "one advertisement from the primary address");
        assert_eq!(secondary.sent.len(), 1, "one from the secondary");
        assert_eq!(primary.sent[0].0, CLIENT);
        assert_eq!(secondary.sent[0].0, OTHER);
        // Router advertisements (134), each naming the mapping it answers.
        assert_eq!(carried(&primary.sent[0].1), (134, Some(CLIENT)));
        assert_eq!(carried(&secondary.sent[0].1), (134, Some(OTHER)));
        // The cone test: to the primary, answered from the secondary.
        primary.sent.clear();
        secondary.sent.clear();
        inputs.datagrams[0].queue.push_back((CLIENT, rs(true)));
        role_loop::round(&mut d, &mut inputs).unwrap();
        assert_eq!(d.out.batches[0].sent.len(), 0);
        assert_eq!(d.out.batches[1].sent.iter().map(|s| s.0).collect::<Vec<_>>(), [CLIENT]);
        assert_eq!(d.machine.server().stats().advertisements, 3);
    }

    #[test]
    fn a_flood_of_solicitations_is_answered_at_its_sources_rate_and_the_rest_counted() {
        let cfg = ServerConfig::new(PRIMARY);
        let burst = cfg.solicitations_per_address.1 as usize;
        let mut d = daemon(Machine::Server(Box::new(Server::new(cfg))), false);
        let mut inputs = inputs(vec![(CLIENT, rs(false)); 500], Vec::new());
        let mut handled = 0;
        while !inputs.datagrams[0].queue.is_empty() {
            handled += role_loop::round(&mut d, &mut inputs).unwrap().handled;
        }
        assert_eq!(handled, 500);
        let answered = d.out.batches[0].sent.len();
        assert!(answered <= burst + 1, "{answered} advertisements for one address's flood (burst {burst})");
        let drops = d.machine.server().stats().drops.get(DropReason::RateLimited);
        assert_eq!(
            answered as u64 + drops,
            500,
            "each solicitation answered or counted: {answered} answered, {:?}",
            d.machine.server().stats().drops
        );
    }

    #[test]
    fn a_server_that_relays_holds_a_native_packet_until_its_client_answers_the_bubble() {
        let relay = RelayConfig { hash_keys: (1, 2), ..RelayConfig::default() };
        let both = ServerRelay::new(ServerConfig::new(PRIMARY), relay);
        let mut d = daemon(Machine::Both(Box::new(both)), true);
        let client = TeredoAddr {
            prefix: shipworm_wire::teredo_addr::PREFIX,
            server: PRIMARY,
            flags: Flags::default(),
            mapped: CLIENT,
        }
        .to_ipv6();
        let echo = Icmpv6Repr::EchoRequest { ident: 7, seq_no: 1, data: b"through the loop" };
        let mut inputs = inputs(Vec::new(), Vec::new());
        inputs.packets.as_mut().unwrap().queue.push_back(ipv6(NATIVE, client, 64, &echo));
        role_loop::round(&mut d, &mut inputs).unwrap();
        let sent = std::mem::take(&mut d.out.batches[0].sent);
        assert!(!sent.is_empty(), "the client is bubbled");
        assert!(
            sent.iter().all(|(to, b)| *to == CLIENT && TeredoPacket::parse(b).unwrap().is_bubble()),
            "bubbles only, to the client's mapping, while it has not answered: {sent:?}"
        );
        // The client answers the bubble to its source, from the mapping its address embeds.
        let bubble = TeredoPacket::parse(&sent[0].1).unwrap();
        let mut answer = vec![0u8; 40];
        emit_bubble(&client, &bubble.ipv6.src_addr(), 0, &mut answer).unwrap();
        inputs.datagrams[0].queue.push_back((CLIENT, answer));
        role_loop::round(&mut d, &mut inputs).unwrap();
        let data: Vec<_> =
            d.out.batches[0].sent.iter().filter(|(_, b)| !TeredoPacket::parse(b).unwrap().is_bubble()).collect();
        assert_eq!(data.len(), 1, "the held packet, once: {:?}", d.out.batches[0].sent);
        assert_eq!(data[0].0, CLIENT);
        assert_eq!(TeredoPacket::parse(&data[0].1).unwrap().ipv6.src_addr(), NATIVE);
        assert!(d.out.tun.as_ref().unwrap().written.is_empty(), "nothing went native");
    }
}
