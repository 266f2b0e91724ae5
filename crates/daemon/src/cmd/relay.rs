//! `shipworm relay`: the Teredo relay and host-specific relay daemon. A TUN interface
//! routed for the Teredo prefix and one worker thread per core (`RelayThreads`), each
//! with its own UDP socket on the shared port (SO_REUSEPORT) and its own TUN queue
//! (IFF_MULTI_QUEUE): the kernel steers every flow to one worker, so a flow is not
//! reordered (but for the queue a bubble answer releases, sent by the worker that got
//! the answer), and workers share only the sharded peer table. Batched receive and send,
//! the relay's timers when due (worker 0, which every worker wakes when it brings the
//! next deadline forward); root is dropped once everything is set up.

use crate::cli;
use crate::cmd::bird_link::BirdLink;
use crate::config::miredo::{MiredoConf, RelayType};
use crate::io::batch::{DatagramOutput, PacketOutput};
use crate::io::kernel_path::{self, KernelDataPath, KernelPeerList, Switch};
use crate::io::netlink::{AddressChange, AddressWatch, Netlink};
use crate::io::route_watch::RouteWatch;
use crate::io::tun::Tun;
use crate::io::tun_batch::{ReadCounts, TunInput, TunOutput};
use crate::io::udp_batch::{RecvBatch, SendBatch, SLOT};
use crate::runtime::bind;
use crate::runtime::busy_poll::BusyPoll;
use crate::runtime::config_reader::{self, ConfigReader};
use crate::runtime::counters::Counters;
use crate::runtime::logging;
use crate::runtime::pidfile::PidFile;
use crate::runtime::random::OsRandom;
use crate::runtime::report::{IoErrors, TunOffloadCounts};
use crate::runtime::role_loop::{self, Around, Inputs, Turned, Watched};
use crate::runtime::shell::{Confined, Reports, Shell, PUBLISH_EVERY};
use crate::runtime::status_socket;
use crate::runtime::syscalls::Role;
use crate::runtime::wait;
use crate::runtime::Failure;
use shipworm_proto::relay::{
    KernelIntent, RelayConfig, RelayStats, RelayWorker, Served, SharedRelay, Source, Transmit,
};
use shipworm_wire::ipv6::Ipv6AddrExt;
use shipworm_wire::teredo_addr::TeredoAddr;
use socket2::Socket;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

mod kernel_intents;
mod worker;
use worker::worker;

/// Datagrams / packets per batch.
const BATCH: usize = 64;
/// UDP batches per round at most, so that a flood on one socket cannot hold a worker
/// away from its TUN queue, its timers and the stop flag.
const UDP_BATCHES_PER_ROUND: usize = 8;
/// Peer-table shards per worker: two workers meet on one shard's lock rarely.
const SHARDS_PER_WORKER: usize = 64;

/// The relay's output: UDP into a send batch, IPv6 packets into a TUN batch (each
/// flushed when full and after each side of a round).
struct Output<'a> {
    batch: SendBatch,
    tun: TunOutput<'a>,
    /// The kernel data path's peer list (`DataPath`), if it runs.
    kernel: Option<KernelPeerList>,
    /// What the relay wants of that list, carried out once its call returned
    /// (`kernel_intents`).
    intents: Vec<KernelIntent>,
}

impl Output<'_> {
    fn io_errors(&self, read: ReadCounts) -> IoErrors {
        IoErrors {
            udp_send: self.batch.failed(),
            tun_write: self.tun.failed(),
            tun_read: read.refused,
            ..IoErrors::default()
        }
    }

    fn offloads(&self, read: ReadCounts) -> TunOffloadCounts {
        TunOffloadCounts { super_packets_read: read.super_packets, joined_writes: self.tun.joined_writes() }
    }
}

impl Transmit for Output<'_> {
    fn send(&mut self, from: Source, to: SocketAddrV4, payload: &[u8], ttl: Option<u8>) {
        // The relay has its service socket only, and sends with its TTL.
        debug_assert!(from == Source::Service && ttl.is_none(), "the relay sends from its service socket");
        self.batch.push(to, payload);
    }
    fn deliver(&mut self, packet: &[u8]) {
        self.tun.push(packet);
    }
    fn kernel(&mut self, intent: KernelIntent) {
        if self.kernel.is_some() {
            self.intents.push(intent);
        }
    }
}

/// One worker's own I/O.
struct WorkerIo {
    sock: Socket,
    tun: Tun,
}

/// What every worker thread shares besides the relay state.
struct WorkerShared<'a> {
    relay: &'a SharedRelay,
    /// The daemon's shell: worker 0 runs its chores (watchdog, status, metrics,
    /// SIGUSR1) and answers `shipworm status`; every worker watches it for a stop.
    shell: &'a Shell<Confined>,
    interface: &'a str,
    workers: usize,
    /// Set by a worker that failed: the others stop too.
    halt: &'a AtomicBool,
    started: Instant,
    /// Each worker's wake-up (read end, write end): worker 0's when another brought
    /// the relay's next deadline before the one it sleeps until (a new waiting peer's
    /// bubble); everyone's when a stop or a failure begins ([`WorkerShared::wake_all`]).
    wakes: Vec<(UnixStream, UnixStream)>,
    /// The route watch's wake-up (its read end is the watch's), written with the
    /// workers'.
    wake_routes: UnixStream,
    /// A stop was seen, and everyone woken for it.
    stop_seen: AtomicBool,
    /// What worker 0 sleeps until, in nanoseconds since `started` (0: awake).
    asleep_until: AtomicU64,
    /// Each worker's counters, published within a `PUBLISH_EVERY` of a change and on
    /// exit.
    published: &'a [Mutex<(RelayStats, IoErrors, TunOffloadCounts)>],
    /// How long a worker keeps polling without sleeping after its last packet.
    busy_poll: Duration,
    /// BIRD, told to withdraw the announcement when a stop is asked (`BirdSocket`).
    bird: Option<Mutex<BirdLink>>,
    /// How long the workers go on forwarding once BIRD withdrew (`DrainTime`).
    drain_time: Duration,
    /// When the drain ends: set by the first worker to see the stop.
    drain_until: OnceLock<Instant>,
    /// The kernel data path (`DataPath`), if it runs.
    kernel: Option<&'a KernelDataPath>,
    /// One lock per part of the peers: the kernel's entry for a client is written by
    /// one worker at a time (`kernel_intents`).
    kernel_writers: Box<[Mutex<()>]>,
}

impl WorkerShared<'_> {
    /// Serving: announce through BIRD, if it is used (a drain before may have left the
    /// protocol disabled).
    fn announce(&self) {
        let Some(bird) = &self.bird else { return };
        match bird.lock().unwrap_or_else(std::sync::PoisonError::into_inner).enable() {
            Ok(said) => tracing::info!("announcing through BIRD: \"{said}\""),
            Err(e) => tracing::warn!("{e}: the prefix may not be announced"),
        }
    }

    /// A host-specific relay serves the host's addresses as they are now: what the
    /// kernel said came or went since the last look (never those of `prefix`, the
    /// relay's own Teredo ones).
    fn follow_addresses(&self, watch: &mut AddressWatch, prefix: u32) {
        let changes = watch.changes();
        if changes.is_empty() {
            return;
        }
        let mut served = self.relay.served();
        let mut relisted = false;
        for c in changes {
            match c {
                AddressChange::Relisted => {
                    relisted = true;
                    served.clear();
                }
                AddressChange::Added(a)
                    if a.is_forwardable()
                        && TeredoAddr::decode_with_prefix(&a, prefix).is_none()
                        && !served.contains(&a) =>
                {
                    if !relisted {
                        tracing::info!("serving {a}, a new address of this host");
                    }
                    served.push(a);
                }
                AddressChange::Removed(a) if served.contains(&a) => {
                    tracing::info!("no longer serving {a}, gone from this host");
                    served.retain(|x| *x != a);
                }
                _ => {}
            }
        }
        if relisted {
            tracing::info!(
                "address notifications were lost (the kernel's buffer overran): the host's addresses listed \
                 again, {} served",
                served.len()
            );
        }
        if !self.relay.set_served(&served) {
            tracing::warn!(
                "this host has {} global addresses; a host-specific relay serves the first {}",
                served.len(),
                shipworm_proto::relay::HOST_ADDRESSES_CAP
            );
        }
    }

    /// Whether the workers go on: until a stop is asked or a worker failed; with BIRD,
    /// a stop first withdraws the announcement and the workers forward what routing
    /// still sends here for the drain time.
    fn running(&self) -> bool {
        if self.halt.load(Ordering::Relaxed) {
            // Whoever set it (a worker, the route watch) may not have woken the others.
            self.wake_all();
            return false;
        }
        if !self.shell.stop_requested() {
            return true;
        }
        let Some(bird) = &self.bird else {
            self.wake_all();
            return false;
        };
        let until = *self.drain_until.get_or_init(|| self.withdraw(bird));
        // Everyone wakes to the drain's end (in their deadlines from now on), and again
        // when it is cut short.
        if !self.stop_seen.swap(true, Ordering::Relaxed) {
            self.wake_all();
        }
        let on = Instant::now() < until && !self.shell.stop_insisted();
        if !on {
            self.wake_all();
        }
        on
    }

    /// Wake worker `i` (its poll returns; it looks at the flags and deadlines).
    fn wake(&self, i: usize) {
        let _ = std::io::Write::write(&mut &self.wakes[i].1, &[1]);
    }

    /// Wake every worker and the route watch: a stop or a failure began.
    fn wake_all(&self) {
        for i in 0..self.wakes.len() {
            self.wake(i);
        }
        let _ = std::io::Write::write(&mut &self.wake_routes, &[1]);
    }

    /// Tell BIRD to withdraw; the drain's end.
    fn withdraw(&self, bird: &Mutex<BirdLink>) -> Instant {
        self.shell.stopping_after(self.drain_time);
        match bird.lock().unwrap_or_else(std::sync::PoisonError::into_inner).disable() {
            Ok(said) => {
                tracing::info!(
                    "stopping: BIRD says \"{said}\"; forwarding {} s more while routing moves the traffic (DrainTime)",
                    self.drain_time.as_secs()
                );
                Instant::now() + self.drain_time
            }
            Err(e) => {
                tracing::warn!("stopping without a drain: {e}");
                Instant::now()
            }
        }
    }

    /// Counters over all workers, as last published.
    fn totals(&self) -> (RelayStats, IoErrors, TunOffloadCounts) {
        let (mut sum, mut io, mut tun) = (RelayStats::default(), IoErrors::default(), TunOffloadCounts::default());
        for p in self.published {
            let p = p.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            sum.add(&p.0);
            io.add(&p.1);
            tun.add(&p.2);
        }
        (sum, io, tun)
    }
}

impl Reports for WorkerShared<'_> {
    /// The relay's counters over all workers (packets and bytes per worker), as last
    /// published.
    fn counters(&self) -> Counters {
        let each: Vec<RelayStats> = self
            .published
            .iter()
            .map(|p| p.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0.clone())
            .collect();
        let (s, io, tun) = self.totals();
        let kernel = self.kernel.map(|k| (k.counters(), k.refused.load(Ordering::Relaxed)));
        relay_counters(&each, &s, &io, &tun, self.relay.peer_count(), self.relay.pending_len(), kernel.as_ref())
    }

    /// The status document: what serves, and the counters.
    fn status_json(&self) -> String {
        serde_json::json!({
            "role": "relay",
            "interface": self.interface,
            "state": "serving",
            "uptime_s": self.started.elapsed().as_secs(),
            "workers": self.workers,
            "data_path": crate::runtime::report::data_path_json(self.kernel),
            "peers": self.relay.peer_count(),
            "waiting_peers": self.relay.pending_len(),
            "counters": self.counters().json(),
        })
        .to_string()
    }

    fn service_status(&self) -> String {
        let peers = self.relay.peer_count();
        format!("relaying for {peers} peer{}", if peers == 1 { "" } else { "s" })
    }
}

/// The relay's table of counters: `each` worker's stats, their sum `s`, and the
/// kernel data path's counters and refused updates if it runs.
pub(crate) fn relay_counters(
    each: &[RelayStats],
    s: &RelayStats,
    io: &IoErrors,
    tun: &TunOffloadCounts,
    peers: usize,
    waiting: usize,
    kernel: Option<&([u64; shipworm_kernel_path::COUNTERS], u64)>,
) -> Counters {
    use shipworm_kernel_path::Counter;
    const PACKETS: &str = "Packets the relay forwarded, by direction and worker (\"kernel\": its kernel data path; a train of segments counts once).";
    const BYTES: &str = "IPv6 bytes the relay forwarded, by direction and worker (\"kernel\": its kernel data path).";
    let mut t = Counters::new("relay");
    for (name, help, bytes) in [("packets", PACKETS, false), ("bytes", BYTES, true)] {
        for direction in ["to_teredo", "to_ipv6"] {
            for (i, w) in each.iter().enumerate() {
                let n = match (direction, bytes) {
                    ("to_teredo", false) => w.to_teredo,
                    ("to_teredo", true) => w.to_teredo_bytes,
                    (_, false) => w.to_ipv6,
                    (_, true) => w.to_ipv6_bytes,
                };
                t.counter(name, help, n).label("direction", direction).label("worker", i.to_string());
            }
            if let Some((k, _)) = kernel {
                let which = match (direction, bytes) {
                    ("to_teredo", false) => Counter::EncapForwarded,
                    ("to_teredo", true) => Counter::EncapBytes,
                    (_, false) => Counter::DecapForwarded,
                    (_, true) => Counter::DecapBytes,
                };
                t.counter(name, help, k[which as usize]).label("direction", direction).label("worker", "kernel");
            }
        }
    }
    if let Some((k, refused)) = kernel {
        crate::runtime::report::kernel_rows(&mut t, k, *refused);
    }
    t.counter("bubbles", "Bubbles sent to new peers.", s.bubbles);
    t.counter(
        "bubbles_withheld",
        "Bubbles withheld: the peer had its 4 of the kind in 300 s without answering (RFC 4380 §5.2.6).",
        s.bubbles_withheld,
    );
    t.counter("unreachable_peers", "Peers given up, their bubbles unanswered.", s.unreachable_peers);
    t.counter("icmpv6_errors", "ICMPv6 errors sent.", s.icmp_errors);
    t.counter(
        "cookies_sent",
        "Cookie bubbles sent to clients whose first packet the client-first budget refused.",
        s.cookies_sent,
    );
    t.counter("cookies_proved", "Clients entered by echoing their cookie.", s.cookies_proved);
    t.gauge("peers", "Peers in the table.", peers as u64);
    t.gauge("waiting_peers", "Peers waiting for a bubble's answer.", waiting as u64);
    t.drops(&s.drops);
    t.io_errors(io);
    t.tun_offloads(tun);
    t
}

/// `shipworm relay`: load the file (refusing a client's), then serve.
pub fn run(args: &cli::RelayArgs) -> Result<(), Failure> {
    logging::init("info");
    let mut conf = crate::config::miredo::load(&args.config, None).map_err(|e| Failure::usage(e.to_string()))?;
    if conf.role == RelayType::Client {
        return Err(Failure::usage(format!(
            "{}: RelayType is client: this file configures a Teredo client, not a relay",
            args.config.display()
        )));
    }
    if args.daemon.user.is_some() {
        conf.user = args.daemon.user.clone();
    }
    let _pid = PidFile::create(args.daemon.pidfile.as_deref())?;
    let same = crate::config::miredo::same_settings(&conf, None, args.daemon.user.clone());
    let reader = config_reader::start(&args.config, conf.user.as_deref(), conf.system_call_filter, same)?;
    serve(&conf, args.daemon.pidfile.as_deref(), args.daemon.control.as_deref(), reader)
}

/// The interface as the relay set it up: its queues, one per worker, and the host's
/// own global addresses (the served range of a host-specific relay, and the source of
/// ICMPv6 errors).
struct Interface {
    tuns: Vec<Tun>,
    name: String,
    own: Vec<Ipv6Addr>,
    /// Each attached subnet's directed broadcast (none for /31 and /32).
    local_broadcasts: Vec<Ipv4Addr>,
    /// The host's IPv4 addresses.
    own_ipv4: Vec<Ipv4Addr>,
}

/// Make the TUN interface (a queue per worker), bring it up with its link-local
/// address and the route to the Teredo prefix, and read the host's addresses.
fn open_interface(conf: &MiredoConf, workers: usize) -> Result<Interface, Failure> {
    let tuns = Tun::create_queues(&conf.interface, workers, conf.tun_offload).map_err(Failure::runtime)?;
    let name = tuns[0].name().to_string();
    let nl = Netlink::new().map_err(Failure::runtime)?;
    let index = nl.link_index(&name).map_err(Failure::runtime)?;
    bring_up(&nl, index, conf.mtu.into(), conf.prefix)?;
    let own = nl
        .global_ipv6_addresses()
        .map_err(Failure::runtime)?
        .into_iter()
        .filter(|a| TeredoAddr::decode_with_prefix(a, conf.prefix).is_none())
        .collect();
    let subnets = nl.ipv4_subnets().map_err(Failure::runtime)?;
    let local_broadcasts = directed_broadcasts(&subnets);
    let own_ipv4 = subnets.iter().map(|&(a, _)| a).collect();
    Ok(Interface { tuns, name, own, local_broadcasts, own_ipv4 })
}

/// A relay's interface up, with its link-local address and the route to the Teredo
/// prefix `prefix` (its first 32 bits).
pub(crate) fn bring_up(nl: &Netlink, index: u32, mtu: u32, prefix: u32) -> Result<(), Failure> {
    nl.set_link(index, true, mtu).map_err(Failure::runtime)?;
    nl.add_address(index, Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xffff, 0xffff, 0xffff), 64).map_err(Failure::runtime)?;
    let route = TeredoAddr::client_prefix(prefix, Ipv4Addr::UNSPECIFIED);
    nl.add_route(index, route, 32, None).map_err(Failure::runtime)
}

/// The directed-broadcast address of each attached subnet, `(address, prefix length)`
/// as netlink lists them (none for /31 and /32, which have none).
pub(crate) fn directed_broadcasts(subnets: &[(Ipv4Addr, u8)]) -> Vec<Ipv4Addr> {
    subnets
        .iter()
        .filter(|&&(_, len)| len <= 30)
        .map(|&(a, len)| Ipv4Addr::from(u32::from(a) | (u32::MAX >> len)))
        .collect()
}

/// A UDP socket per worker on one port: the first picks it (BindPort 0: any), the
/// others share it.
fn bind_sockets(conf: &MiredoConf, workers: usize) -> Result<(Vec<Socket>, SocketAddrV4), Failure> {
    let first =
        bind::udp(SocketAddrV4::new(conf.bind_address, conf.bind_port), workers > 1, "service", &bind::MIREDO_CONF)?;
    let local = first
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket_ipv4())
        .ok_or_else(|| Failure::runtime("cannot read the UDP socket's own address"))?;
    let mut socks = vec![first];
    for _ in 1..workers {
        socks.push(bind::udp(SocketAddrV4::new(conf.bind_address, local.port()), true, "service", &bind::MIREDO_CONF)?);
    }
    Ok((socks, local))
}

/// BIRD's control socket, connected now (once confined the relay opens nothing) and
/// handed to a process of its own that takes enable and disable only ([`BirdLink`]):
/// the relay keeps no connection to BIRD. Without BIRD the relay still serves; its
/// announcement then follows its interface.
fn connect_bird(conf: &MiredoConf) -> Option<Mutex<BirdLink>> {
    let path = conf.bird_socket.as_deref()?;
    match BirdLink::start(path, &conf.bird_protocols, conf.user.as_deref(), conf.system_call_filter) {
        Ok(b) => Some(Mutex::new(b)),
        Err(e) => {
            tracing::warn!("{e}; the prefix's announcement follows the interface only, with no drain on stop");
            None
        }
    }
}

/// The state machine's settings from the file and what the host has.
fn relay_config(conf: &MiredoConf, iface: &Interface, hash_keys: (u64, u64)) -> RelayConfig {
    RelayConfig {
        prefix: conf.prefix,
        served: match conf.role {
            // The host's Internet addresses: not its site's own (unique-local), which a
            // tunnel from outside must not reach.
            RelayType::Host => Served::Only(iface.own.iter().copied().filter(|a| a.is_forwardable()).collect()),
            _ => Served::AnyGlobal,
        },
        direct_bubbles: conf.role == RelayType::Restricted,
        capacity: conf.peer_capacity,
        queue_bytes: conf.queue_bytes,
        per_address: conf.peers_per_address,
        icmp_source: conf.relay_address.or_else(|| iface.own.first().copied()),
        hash_keys,
        local_broadcasts: iface.local_broadcasts.clone(),
        own_ipv4: iface.own_ipv4.clone(),
        ..RelayConfig::default()
    }
}

/// The kernel data path as `DataPath` asks for it, on interface `tun` for the service
/// socket at `local` (`None`: the daemon moves every packet).
fn start_kernel_path(conf: &MiredoConf, tun: &str, local: SocketAddrV4) -> Result<Option<KernelDataPath>, Failure> {
    kernel_path::start(&kernel_path::Want {
        mode: conf.data_path,
        host_specific: conf.role == RelayType::Host,
        client: false,
        tun,
        local,
        peers: conf.peer_capacity,
        prefix: conf.prefix,
        decap_tc: conf.decap_tc,
        direct: conf.kernel_forward_direct,
    })
    .map_err(Failure::runtime)
}

/// A socket pair to wake a sleeping thread with, both ends non-blocking.
fn wake_pair() -> Result<(UnixStream, UnixStream), Failure> {
    UnixStream::pair()
        .and_then(|(a, b)| {
            a.set_nonblocking(true)?;
            b.set_nonblocking(true)?;
            Ok((a, b))
        })
        .map_err(|e| Failure::runtime(format!("cannot make a wake-up socket: {e}")))
}

/// What the log says once the relay serves.
fn serving_line(
    conf: &MiredoConf,
    interface: &str,
    local: SocketAddrV4,
    workers: usize,
    shards: usize,
    offloads: &impl std::fmt::Display,
) -> String {
    let prefix = TeredoAddr::client_prefix(conf.prefix, Ipv4Addr::UNSPECIFIED);
    let role = match conf.role {
        RelayType::Host => "host-specific relay",
        RelayType::Restricted => "relay (restricted)",
        _ => "relay",
    };
    format!(
        "Teredo {role} on {interface} (UDP {local}), routing {prefix}/32, MTU {}, up to {} peers, {workers} worker{} ({shards} shards), {offloads}",
        conf.mtu,
        conf.peer_capacity,
        if workers == 1 { "" } else { "s" },
    )
}

/// Serve until SIGTERM/SIGINT (and, with BIRD, the drain after it).
fn serve(
    conf: &MiredoConf,
    pidfile: Option<&std::path::Path>,
    control: Option<&std::path::Path>,
    reader: ConfigReader,
) -> Result<(), Failure> {
    for w in &conf.warnings {
        tracing::warn!("{w}");
    }
    let workers =
        conf.relay_threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).clamp(1, 256);
    // Subscribed before the addresses are listed, so that none comes between.
    let addresses = match conf.role {
        RelayType::Host => Some((AddressWatch::new().map_err(Failure::runtime)?, conf.prefix)),
        _ => None,
    };
    let mut iface = open_interface(conf, workers)?;
    let offloads = iface.tuns[0].offloads();
    let (socks, local) = bind_sockets(conf, workers)?;
    // Loading and attaching eBPF programs needs the privileges confinement drops.
    let mut kernel = start_kernel_path(conf, &iface.name, local)?;
    let control_path = control.map(Into::into).unwrap_or_else(|| status_socket::default_path(&iface.name));
    // Made before the confinement, which makes no more sockets: worker 0's wake-up
    // by the others, and the route watch's by the workers' end.
    let wakes = (0..workers).map(|_| wake_pair()).collect::<Result<Vec<_>, _>>()?;
    let (wake_routes, routes_woken) = wake_pair()?;
    let shell = Shell::open(Role::Relay, control_path, conf.metrics_address)?
        .keeping_kernel_maps(kernel.is_some())
        .reloading(reader);
    let hash_keys = OsRandom::open()?.hash_keys();
    let bird = connect_bird(conf);
    // Before any thread starts: capabilities are per thread.
    let shell = shell.confine(conf.user.as_deref(), conf.system_call_filter, pidfile)?;
    let mut cfg = relay_config(conf, &iface, hash_keys);
    cfg.kernel_path = kernel.is_some();
    let relay = SharedRelay::new(cfg.clone(), if workers == 1 { 1 } else { workers * SHARDS_PER_WORKER });
    tracing::info!("{}", serving_line(conf, &iface.name, local, workers, relay.shards(), &offloads));
    if let Some(k) = &kernel {
        tracing::info!("{}", k.describe());
    }
    if cfg.icmp_source.is_none() {
        tracing::warn!("no global IPv6 address on this host: no ICMPv6 errors will be sent (set RelayAddress)");
    }
    let routes = kernel.as_mut().and_then(|k| k.routes.take().map(|(w, tun)| (w, tun, k.switch())));
    let routes = routes.map(|(mut w, tun, s)| {
        w.stopped_by(routes_woken);
        (w, tun, s)
    });
    let halt = AtomicBool::new(false);
    let published: Vec<Mutex<(RelayStats, IoErrors, TunOffloadCounts)>> =
        (0..workers).map(|_| Mutex::default()).collect();
    let shared = WorkerShared {
        relay: &relay,
        shell: &shell,
        interface: &iface.name,
        workers,
        halt: &halt,
        wakes,
        wake_routes,
        stop_seen: AtomicBool::new(false),
        asleep_until: AtomicU64::new(0),
        started: Instant::now(),
        published: &published,
        busy_poll: Duration::from_micros(conf.busy_poll_us),
        bird,
        drain_time: conf.drain_time,
        drain_until: OnceLock::new(),
        kernel: kernel.as_ref(),
        kernel_writers: (0..relay.shards()).map(|_| Mutex::new(())).collect(),
    };
    let ios: Vec<WorkerIo> =
        socks.into_iter().zip(std::mem::take(&mut iface.tuns)).map(|(sock, tun)| WorkerIo { sock, tun }).collect();
    shell.ready(&shared);
    shared.announce();
    let result = run_workers(&shared, ios, routes, addresses);
    shell.stopping(&shared);
    result.and_then(|()| shell.outcome())
}

/// Worker 0 on this thread, the others on threads of their own; a worker that cannot
/// start stops the rest. The first failure is the result. A direct relay's route
/// verdicts are kept to the host's routing by one more thread while they run.
fn run_workers(
    shared: &WorkerShared<'_>,
    ios: Vec<WorkerIo>,
    routes: Option<(RouteWatch, u32, Switch)>,
    addresses: Option<(AddressWatch, u32)>,
) -> Result<(), Failure> {
    let workers_done = AtomicBool::new(false);
    let results: Vec<Result<(), Failure>> = std::thread::scope(|s| {
        let mut watching = None;
        if let Some((mut watch, tun, switch)) = routes {
            let done = &workers_done;
            let follow = move || {
                let r = kernel_path::follow_routes(&mut watch, &switch, tun, done, shared.halt);
                // A halt of its own (the verdicts could not be voided): the workers,
                // asleep until their next deadline, hear of it now.
                if shared.halt.load(Ordering::Relaxed) {
                    shared.wake_all();
                }
                r
            };
            match std::thread::Builder::new().name("routes".into()).spawn_scoped(s, follow) {
                Ok(h) => watching = Some(h),
                Err(e) => {
                    shared.halt.store(true, Ordering::Relaxed);
                    shared.wake_all();
                    return vec![Err(Failure::runtime(format!("cannot start the route watch's thread: {e}")))];
                }
            }
        }
        let mut ios = ios.into_iter().enumerate();
        let (_, io0) = ios.next().expect("at least one worker");
        let mut results = Vec::new();
        let mut others = Vec::new();
        for (i, io) in ios {
            match std::thread::Builder::new()
                .name(format!("relay-{i}"))
                .spawn_scoped(s, move || worker(shared, i, &io, None))
            {
                Ok(h) => others.push(h),
                Err(e) => {
                    shared.halt.store(true, Ordering::Relaxed);
                    shared.wake_all();
                    results.push(Err(Failure::runtime(format!("cannot start worker thread {i}: {e}"))));
                    break;
                }
            }
        }
        results.push(worker(shared, 0, &io0, addresses));
        results
            .extend(others.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Failure::runtime("worker panicked")))));
        workers_done.store(true, Ordering::Relaxed);
        shared.wake_all();
        if let Some(h) = watching {
            let watched = h.join().unwrap_or_else(|_| Err("the route watch's thread panicked".into()));
            results.push(watched.map_err(Failure::runtime));
        }
        results
    });
    results.into_iter().collect()
}

#[cfg(test)]
mod counters_tests {
    use super::*;
    use crate::runtime::counters::tests::assert_views_agree;
    use shipworm_proto::DropReason;

    #[test]
    fn the_relays_metrics_status_and_log_line_list_the_same_counters() {
        let w0 = RelayStats { to_teredo: 1, to_ipv6: 2, to_teredo_bytes: 3, to_ipv6_bytes: 4, ..Default::default() };
        let w1 = RelayStats {
            to_teredo: 5,
            to_ipv6: 6,
            to_teredo_bytes: 7,
            to_ipv6_bytes: 8,
            bubbles: 9,
            ..Default::default()
        };
        let mut sum = w0.clone();
        sum.add(&w1);
        sum.icmp_errors = 10;
        sum.drops.count(DropReason::LoopGuard);
        let io = IoErrors { udp_send: 11, tun_write: 12, tun_read: 13, ..IoErrors::default() };
        let tun = TunOffloadCounts { super_packets_read: 14, joined_writes: 15 };
        let t = relay_counters(&[w0, w1], &sum, &io, &tun, 16, 17, None);
        assert_views_agree(&t);
        let j = t.json();
        assert_eq!(j["packets"]["to_ipv6"]["1"], 6, "the IPv6 side is to_ipv6 in every view: {j}");
        assert_eq!(j["dropped"]["loop_guard"], 1);
    }
}
