//! `shipworm client`: the Teredo client daemon. A TUN interface whose address follows
//! the client state machine (through rtnetlink), the service socket and a probe socket
//! for NAT detection, a netlink watch for network changes, a status socket; root is
//! dropped down to CAP_NET_ADMIN once everything is open. Servers given by name get a
//! state machine once a name resolved (`server_names`); until then the daemon waits.

use crate::cli;
use crate::cmd::client_helper::{Helper, HelperSetup};
use crate::config::miredo::{MiredoConf, RelayType};
use crate::io::helper_protocol::Request;
use crate::io::netlink::{Netlink, NetworkWatch};
use crate::io::port_mapping::{Mapper, PortMapping};
use crate::io::random_ports::RandomPorts;
use crate::io::tun::Tun;
use crate::io::tun_batch::{TunReader, TunWriter};
use crate::io::udp_batch::{RecvBatch, SendBatch, SLOT};
use crate::runtime::bind;
use crate::runtime::confinement;
use crate::runtime::counters::Counters;
use crate::runtime::logging;
use crate::runtime::metrics::{self, Sample};
use crate::runtime::pidfile::PidFile;
use crate::runtime::privileges;
use crate::runtime::random::OsRandom;
use crate::runtime::report::{IoErrors, TunOffloadCounts};
use crate::runtime::server_names::{replace_now, ServerNames};
use crate::runtime::service_manager::ServiceManager;
use crate::runtime::signals::Signals;
use crate::runtime::status_socket::StatusListener;
use crate::runtime::syscalls::Role;
use crate::runtime::Failure;
use crate::runtime::{drain, wait};
use nix::poll::{PollFd, PollFlags};
use shipworm_proto::client::{Client, ClientConfig, ClientEvent, ClientStats, NatKind, ServerAddrs, Via, LINK_LOCAL};
use shipworm_proto::transmit::{Ports, Source, Transmit};
use shipworm_wire::teredo_addr::TeredoAddr;
use socket2::Socket;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::num::NonZeroU16;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

const BATCH: usize = 32;
/// UDP batches read from one socket per round at most (see `runtime::drain`).
const UDP_BATCHES_PER_ROUND: usize = 8;
const TICK: Duration = Duration::from_millis(100);

/// The client's output: the service socket's send batch and the TUN batch (flushed
/// when full and after each round), the probe socket for the NAT test (a datagram now
/// and then).
struct Out<'a> {
    batch: SendBatch,
    probe: &'a Socket,
    tun: &'a Tun,
    /// Datagrams the probe socket could not send.
    probe_errors: u64,
    tun_out: TunWriter,
    /// Random ports for peers behind symmetric NATs (RFC 6081 §5.4, §5.5).
    ports: RandomPorts,
}

impl Transmit for Out<'_> {
    fn send(&mut self, from: Source, to: SocketAddrV4, payload: &[u8], ttl: Option<u8>) {
        match (from, ttl) {
            (Source::Service, None) => self.batch.push(to, payload),
            (Source::Service, Some(ttl)) => self.batch.send_hop_limited(to, payload, ttl),
            (Source::Port(port), ttl) => self.ports.send(port.get(), to, payload, ttl),
            (Source::Probe, _) => {
                if self.probe.send_to(payload, &to.into()).is_err() {
                    self.probe_errors += 1;
                }
            }
            // A server's socket: the client has none. Never asked; counted if it were.
            (Source::Secondary, _) => {
                debug_assert!(from != Source::Secondary, "the client has no secondary address");
                self.probe_errors += 1;
            }
        }
    }
    fn deliver(&mut self, packet: &[u8]) {
        self.tun_out.push(self.tun, packet);
    }
}

impl Ports for Out<'_> {
    fn open_port(&mut self) -> Option<NonZeroU16> {
        self.ports.open().and_then(NonZeroU16::new)
    }
    fn close_port(&mut self, port: NonZeroU16) {
        self.ports.close(port.get());
    }
}

/// The interface as configured (by the helper), kept in step with the state machine's
/// events.
struct Interface {
    /// Read only: the attached subnets.
    nl: Netlink,
    helper: Helper,
    name: String,
    address: Option<Ipv6Addr>,
    mtu: u32,
    changed_at: Option<Instant>,
}

impl Interface {
    /// Carry out an event. `Err(Failure)` only when the helper is gone.
    fn apply(&mut self, ev: ClientEvent) -> Result<(), Failure> {
        match ev {
            ClientEvent::Up { address, mtu, server, nat } => {
                if self.address != Some(address) {
                    if let Err(e) = self.helper.ask(Request::Up { address, mtu })? {
                        tracing::error!("configuring {}: {e}", self.name);
                        return Ok(());
                    }
                    self.address = Some(address);
                    self.mtu = mtu;
                    let mapped = TeredoAddr::decode(&address).map(|t| t.mapped.to_string()).unwrap_or_default();
                    let took = self
                        .changed_at
                        .take()
                        .map(|t| format!(", {:.0} ms after the network change", t.elapsed().as_secs_f64() * 1000.0));
                    tracing::info!(
                        "qualified: {address} on {} (server {server}, mapped {mapped}, NAT {}, MTU {mtu}){}",
                        self.name,
                        nat.as_str(),
                        took.unwrap_or_default()
                    );
                }
            }
            ClientEvent::Down(why) => {
                if self.address.take().is_some() {
                    if let Err(e) = self.helper.ask(Request::Down)? {
                        tracing::error!("configuring {}: {e}", self.name);
                    }
                }
                tracing::warn!("no Teredo connectivity: {why}");
            }
            ClientEvent::Nat(kind) => tracing::info!("NAT kind: {}", kind.as_str()),
        }
        Ok(())
    }
}

/// The helper's end of the socket is readable only when it closed (it speaks only when
/// asked).
fn fds_helper_gone(iface: &Interface) -> bool {
    let mut fd = [PollFd::new(iface.helper.as_fd(), PollFlags::POLLIN)];
    nix::poll::poll(&mut fd, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

/// The client's counters: every view of them (`/metrics`, the status JSON, the log
/// line) is made from this one table.
pub(crate) fn counters(
    st: &ClientStats,
    peers: usize,
    first_contacts_waiting: usize,
    io: &IoErrors,
    tun: &TunOffloadCounts,
) -> Counters {
    const PACKETS: &str = "Packets sent to Teredo peers and delivered to this host.";
    const BYTES: &str = "IPv6 bytes sent to Teredo peers and delivered to this host.";
    let mut t = Counters::new("client");
    t.counter("router_solicitations", "Router solicitations sent.", st.solicitations);
    t.counter("router_advertisements", "Router advertisements accepted.", st.advertisements);
    t.counter("address_changes", "Addresses configured or changed (qualifications, handoffs).", st.addresses);
    t.counter("packets", PACKETS, st.sent).label("direction", "to_peers");
    t.counter("packets", PACKETS, st.delivered).label("direction", "to_host");
    t.counter("bytes", BYTES, st.sent_bytes).label("direction", "to_peers");
    t.counter("bytes", BYTES, st.delivered_bytes).label("direction", "to_host");
    t.counter("bubbles", "Bubbles sent.", st.bubbles);
    t.counter("echoes", "Connectivity-test echoes sent.", st.echoes);
    t.counter("first_contacts", "Native hosts that spoke first, tested.", st.first_contacts);
    t.counter(
        "first_contact_delivered",
        "Packets of native hosts that spoke first, delivered once their test passed.",
        st.first_contact_delivered,
    );
    t.counter(
        "silent_retests",
        "Native hosts tested again after falling silent while sent to (their relay may have gone).",
        st.silent_retests,
    );
    t.counter(
        "peer_solicitations",
        "Server Load Reduction: silent peers asked directly (RFC 6081 §5.7).",
        st.peer_solicitations,
    );
    t.counter("peer_advertisements", "Server Load Reduction: peers' solicitations answered.", st.peer_advertisements);
    t.counter("echo_tests", "Echo Tests run to predict a sequential NAT's port (RFC 6081 §5.5).", st.echo_tests);
    t.gauge("peers", "Peers in the client's list.", peers as u64);
    t.gauge(
        "first_contacts_waiting",
        "Native hosts that spoke first, waiting for their test.",
        first_contacts_waiting as u64,
    );
    t.drops(&st.drops);
    t.io_errors(io);
    t.tun_offloads(tun);
    t
}

/// The counters of this client (a client still resolving its servers' names counts
/// only what its sockets and TUN did).
fn client_counters(client: Option<&Client<OsRandom>>, out: &Out<'_>, tun_in: &TunReader) -> Counters {
    let io = IoErrors {
        udp_send: out.batch.failed() + out.probe_errors + out.ports.failures,
        tun_write: out.tun_out.failed(),
        tun_read: tun_in.refused(),
        raw_send: 0,
    };
    let tun = TunOffloadCounts { super_packets_read: tun_in.super_packets(), joined_writes: out.tun_out.written().1 };
    match client {
        Some(c) => {
            let s = c.status();
            counters(c.stats(), s.peers, s.first_contacts, &io, &tun)
        }
        None => counters(&ClientStats::default(), 0, 0, &io, &tun),
    }
}

/// The samples for Prometheus: the role, the state, and the counters.
fn samples(c: &Client<OsRandom>, out: &Out<'_>, tun_in: &TunReader) -> Vec<Sample> {
    let s = c.status();
    let mut v = vec![
        Sample::gauge("shipworm_info", "The daemon's role and version (always 1).", 1)
            .with("role", "client")
            .with("version", env!("CARGO_PKG_VERSION")),
        Sample::gauge(
            "shipworm_client_qualified",
            "1 while the client holds a Teredo address.",
            u64::from(s.state == "qualified"),
        ),
        Sample::gauge("shipworm_client_nat", "The NAT kind as probed (the sample of value 1).", 1)
            .with("kind", s.nat.as_str()),
    ];
    v.extend(client_counters(Some(c), out, tun_in).samples());
    v
}

/// The line `systemctl status` shows: the client's state and, once qualified, its
/// address.
fn service_status(client: Option<&Client<OsRandom>>, names: &ServerNames) -> String {
    let Some(c) = client else { return format!("resolving {}", names.describe()) };
    let s = c.status();
    match (s.state, s.address, s.server) {
        ("qualified", Some(a), Some(server)) => format!("qualified: {a} (server {server}, NAT {})", s.nat.as_str()),
        (state, _, Some(server)) => format!("{state} (server {server})"),
        (state, _, None) => state.to_string(),
    }
}

fn status_json(
    client: Option<&Client<OsRandom>>,
    names: &ServerNames,
    iface: &str,
    out: &Out<'_>,
    tun_in: &TunReader,
    mapping: Option<&PortMapping>,
) -> String {
    let counters = client_counters(client, out, tun_in).json();
    let offloads = out.tun.offloads().to_string();
    let Some(c) = client else {
        // Nothing resolved yet: no state machine to ask, the same shape all the same.
        let waiting: Vec<&str> = names.failing().iter().map(|(n, _)| n.as_str()).collect();
        return serde_json::json!({
            "role": "client",
            "interface": iface,
            "state": "resolving",
            "waiting_for": waiting,
            "server_names": names.json(),
            "address": null,
            "decoded": null,
            "server": null,
            "mapped": null,
            "nat": "unknown",
            "mtu": 1280,
            "peers": 0,
            "tun_offloads": offloads,
            "counters": counters,
        })
        .to_string();
    };
    let s = c.status();
    let decoded = s.address.and_then(|a| TeredoAddr::decode(&a)).map(|t| {
        serde_json::json!({"server": t.server.to_string(), "mapped": t.mapped.to_string(), "random_bits": t.flags.random_bits()})
    });
    serde_json::json!({
        "role": "client",
        "interface": iface,
        "state": s.state,
        "server_names": names.json(),
        "address": s.address.map(|a| a.to_string()),
        "decoded": decoded,
        "server": s.server.map(|a| a.to_string()),
        "mapped": s.mapped.map(|a| a.to_string()),
        "nat": s.nat.as_str(),
        "nat_behaviour": {
            "kind": s.nat.as_str(),
            "port_preserving": s.port_preserving,
            "port_prediction": s.port_prediction,
        },
        "extensions": s.extensions,
        "random_ports": {"open": s.random_ports, "peers_through_them": s.random_port_peers},
        "port_mapping": mapping.map(|m| {
            let mut j = m.json();
            j["embedded_in_address"] = s.mapped_inbound.into();
            j
        }),
        "mtu": s.mtu,
        "peers": s.peers,
        "tun_offloads": offloads,
        "counters": counters,
    })
    .to_string()
}

/// A client state machine for `servers`, with the settings of `template` (the hash
/// keys among them, drawn once per run) and randomness from `urandom`.
fn new_client(
    template: &ClientConfig,
    servers: Vec<ServerAddrs>,
    urandom: &OsRandom,
    mapping: Option<&PortMapping>,
) -> Result<Client<OsRandom>, Failure> {
    let rng = urandom.try_clone()?;
    let mut cfg = template.clone();
    cfg.servers = servers;
    let mut c = Client::new(cfg, rng);
    c.set_port_mapping(mapping.map(|m| m.external));
    Ok(c)
}

/// The IPv4 subnets the host is attached to, for the client's CVE-2006-6264 check
/// (none, with a warning, if they cannot be listed).
fn attached_subnets(nl: &Netlink) -> Vec<(std::net::Ipv4Addr, u8)> {
    nl.ipv4_subnets().unwrap_or_else(|e| {
        tracing::warn!("cannot list the host's IPv4 subnets ({e}): peers on them are not told apart");
        Vec::new()
    })
}

/// The local discovery socket, bound to the group address 224.0.0.253:3544 itself so
/// that only group traffic reaches it (a unicast "announcement" is not one, RFC 4380
/// §5.2.8), shared with other Teredo clients on the host (SO_REUSEADDR). The group is
/// joined on qualification, on the link the local address is on: the network need not
/// be up at start. `None`, with a warning, if it cannot be had.
fn discovery_socket() -> Option<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Type};
    let group = shipworm_proto::local_discovery::GROUP;
    let made = (|| -> std::io::Result<std::net::UdpSocket> {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.bind(&group.into())?;
        s.set_nonblocking(true)?;
        // Joined on the default route's link now if there is one (so we hear the
        // others from the first announcement on), on the local address's link when
        // qualified.
        let _ = s.join_multicast_v4(group.ip(), &Ipv4Addr::UNSPECIFIED);
        Ok(s.into())
    })();
    made.map_err(|e| tracing::warn!("no local discovery (224.0.0.253:3544): {e}")).ok()
}

/// The service socket's address on its own network: the bound address, or else the
/// one the kernel would send from towards `server` (a connected socket that sends
/// nothing).
fn local_address(bound: Ipv4Addr, port: u16, server: Ipv4Addr) -> Option<SocketAddrV4> {
    if !bound.is_unspecified() {
        return Some(SocketAddrV4::new(bound, port));
    }
    let probe = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    probe.connect((server, shipworm_wire::teredo_addr::TEREDO_PORT)).ok()?;
    match probe.local_addr().ok()? {
        std::net::SocketAddr::V4(a) => Some(SocketAddrV4::new(*a.ip(), port)),
        std::net::SocketAddr::V6(_) => None,
    }
}

fn list(servers: &[ServerAddrs]) -> String {
    let l: Vec<String> = servers.iter().map(|s| s.primary.to_string()).collect();
    l.join(", ")
}

/// `shipworm client`: load the file (refusing a relay's), then run.
pub fn run(args: &cli::ClientArgs) -> Result<(), Failure> {
    logging::init("info");
    let mut conf =
        crate::config::miredo::load(&args.config, args.server.as_deref()).map_err(|e| Failure::usage(e.to_string()))?;
    if conf.role != RelayType::Client {
        return Err(Failure::usage(format!(
            "{}: RelayType is {:?}: this file configures a relay; run shipworm relay",
            args.config.display(),
            conf.role
        )));
    }
    if args.daemon.user.is_some() {
        conf.user = args.daemon.user.clone();
    }
    let _pid = PidFile::create(args.daemon.pidfile.as_deref())?;
    serve(&conf, args.daemon.control.as_deref(), args.daemon.pidfile.as_deref())
}

/// Run the client until SIGTERM/SIGINT.
fn serve(conf: &MiredoConf, control: Option<&Path>, pidfile: Option<&Path>) -> Result<(), Failure> {
    for w in &conf.warnings {
        tracing::warn!("{w}");
    }
    let primary = conf.server.clone().ok_or_else(|| Failure::usage("no Teredo server configured (ServerAddress)"))?;

    // Nothing here needs the network to be up: the sockets bind to BindAddress
    // (0.0.0.0 unless configured), and server names are looked up later.
    let tun = Tun::create_queues(&conf.interface, 1, conf.tun_offload)
        .map_err(Failure::runtime)?
        .pop()
        .expect("one queue asked, one given");
    tracing::info!("{}: {}", tun.name(), tun.offloads());
    // Before any thread or network socket: the helper is a fork of this process.
    let helper = Helper::start(HelperSetup {
        interface: tun.name().to_string(),
        prefix: conf.prefix,
        metric: conf.route_metric,
        hook: conf.hook_script.clone(),
        user: conf.user.clone(),
        filter: conf.system_call_filter,
    })?;
    let nl = Netlink::new().map_err(Failure::runtime)?;
    let index = nl.link_index(tun.name()).map_err(Failure::runtime)?;
    nl.set_link(index, true, 1280).map_err(Failure::runtime)?;
    nl.add_address(index, LINK_LOCAL, 64).map_err(Failure::runtime)?;
    let sock = bind::udp(SocketAddrV4::new(conf.bind_address, conf.bind_port), false, "service", &bind::MIREDO_CONF)?;
    let service_port = sock.local_addr().ok().and_then(|a| a.as_socket_ipv4()).map_or(0, |a| a.port());
    let probe = bind::udp(SocketAddrV4::new(conf.bind_address, 0), false, "probe", &bind::MIREDO_CONF)?;
    // Local discovery (RFC 4380 §5.2.8): announcements leave the service socket with
    // TTL 1 and come back to us on 224.0.0.253:3544, a port other clients may share.
    let _ = sock.set_multicast_ttl_v4(1);
    let _ = sock.set_multicast_loop_v4(false);
    let discovery = if conf.local_discovery { discovery_socket() } else { None };
    let mut watch = NetworkWatch::new().map_err(Failure::runtime)?;
    let control_path =
        control.map(Path::to_path_buf).unwrap_or_else(|| crate::runtime::status_socket::default_path(tun.name()));
    let status = StatusListener::bind(&control_path)?;
    let metrics_listener = conf.metrics_address.map(metrics::bind).transpose()?;
    let mut urandom = OsRandom::open()?;
    let mut manager = ServiceManager::from_env();
    let signals = Signals::install().map_err(|e| Failure::runtime(format!("cannot install signal handlers: {e}")))?;
    privileges::drop_root(conf.user.as_deref()).map_err(Failure::runtime)?;
    confinement::confine(
        Role::Client,
        conf.system_call_filter,
        &[confinement::removable(pidfile), vec![control_path.clone()]].concat(),
    )
    .map_err(Failure::runtime)?;

    // After the drop: the resolver thread starts here and must not hold root (nor the
    // capabilities the main thread gave up, which are per thread).
    let board = metrics::start(metrics_listener)?;
    let started = Instant::now();
    let mut names = ServerNames::new(primary, conf.server2.clone(), conf.fallback_servers.clone(), started);

    let mut template = ClientConfig::new(Vec::new());
    template.hash_keys = urandom.hash_keys();
    template.queue_bytes = conf.queue_bytes;
    template.refresh = Duration::from_secs(conf.refresh_interval);
    template.symmetric_nat_support = conf.symmetric_nat_support;
    template.opening_bubble_ttl = conf.opening_bubble_ttl;
    template.server_load_reduction = conf.server_load_reduction;
    template.hairpinning = conf.hairpinning;
    template.service_port = service_port;
    template.local_discovery = discovery.is_some();
    template.credentials = conf.credentials.clone();
    // The state machine needs a server: none until a name resolved.
    let mut servers = names.servers();
    let mut mapping = Mapper::new(conf.port_mapping, service_port);
    let mut client =
        if servers.is_empty() { None } else { Some(new_client(&template, servers.clone(), &urandom, None)?) };
    let mut last_state = "offline";
    let local = sock.local_addr().ok().and_then(|a| a.as_socket_ipv4());
    tracing::info!(
        "Teredo client on {} (UDP {}), server {}; status: {}",
        tun.name(),
        local.map_or_else(|| "?".into(), |a| a.to_string()),
        names.describe(),
        control_path.display()
    );
    tracing::info!("interface helper: pid {} (keeps CAP_NET_ADMIN; this process keeps none)", helper.pid());
    manager.ready(&service_status(client.as_ref(), &names));
    let mut iface = Interface { nl, helper, name: tun.name().to_string(), address: None, mtu: 1280, changed_at: None };
    if let Some(c) = client.as_mut() {
        c.set_attached_subnets(&attached_subnets(&iface.nl));
    }
    let dup = |s: &Socket| s.try_clone().map_err(|e| Failure::runtime(format!("cannot duplicate a socket: {e}")));
    let mut rx_service = RecvBatch::coalescing(dup(&sock)?, BATCH, SLOT);
    let mut rx_probe = RecvBatch::new(dup(&probe)?, BATCH, SLOT);
    let mut out = Out {
        batch: SendBatch::new(sock, BATCH, SLOT),
        probe: &probe,
        tun: &tun,
        probe_errors: 0,
        tun_out: TunWriter::default(),
        ports: RandomPorts::new(conf.bind_address, template.random_ports),
    };
    let mut buf = vec![0u8; SLOT];
    let mut tun_in = TunReader::default();
    let mut next_tick = started;
    let mut published = started;
    // The address the discovery group is joined on.
    let mut joined: Option<Ipv4Addr> = None;

    while !signals.stop_requested() {
        let wait = next_tick.saturating_duration_since(Instant::now());
        let mut fds = [
            PollFd::new(rx_service.as_fd(), PollFlags::POLLIN),
            PollFd::new(rx_probe.as_fd(), PollFlags::POLLIN),
            PollFd::new(tun.as_fd(), PollFlags::POLLIN),
            PollFd::new(watch.as_fd(), PollFlags::POLLIN),
            PollFd::new(status.as_fd(), PollFlags::POLLIN),
            PollFd::new(discovery.as_ref().map_or(status.as_fd(), |d| d.as_fd()), PollFlags::POLLIN),
            PollFd::new(iface.helper.as_fd(), PollFlags::POLLIN),
        ];
        // Random ports (rare: peers behind symmetric NATs) join the poll only when open,
        // so the common round allocates nothing.
        let discovery_ready;
        let ready: Vec<u16> = if out.ports.is_empty() {
            wait::readable(&mut fds, wait)?;
            discovery_ready = fds[5].revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
            Vec::new()
        } else {
            let ports: Vec<u16> = out.ports.fds().map(|(p, _)| p).collect();
            let fixed = fds.len();
            let mut all: Vec<PollFd> = fds.into_iter().collect();
            all.extend(out.ports.fds().map(|(_, fd)| PollFd::new(fd, PollFlags::POLLIN)));
            wait::readable(&mut all, wait)?;
            let readable = |f: &PollFd| f.revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
            discovery_ready = readable(&all[5]);
            ports.iter().zip(&all[fixed..]).filter(|(_, f)| readable(f)).map(|(&p, _)| p).collect()
        };
        let now = started.elapsed();
        if fds_helper_gone(&iface) {
            return Err(Failure::runtime(format!(
                "the interface helper (pid {}) stopped: stopping too (a supervisor restarts the client)",
                iface.helper.pid()
            )));
        }
        if watch.changed() {
            tracing::info!("network changed: qualifying again");
            iface.changed_at = Some(Instant::now());
            // The old gateway's mapping means nothing on the new network; the next
            // qualification asks for a new one.
            mapping.forget();
            if let Some(c) = client.as_mut() {
                c.set_port_mapping(None);
                c.set_attached_subnets(&attached_subnets(&iface.nl));
                c.on_network_change(now, &mut out);
            }
            // From the new network a name may point elsewhere, or resolve at last.
            names.resolve_all(Instant::now());
        }
        // Read even without a state machine (the data is dropped), or poll would not
        // wait.
        for (via, rx) in [(Via::Service, &mut rx_service), (Via::Probe, &mut rx_probe)] {
            drain::udp(rx, UDP_BATCHES_PER_ROUND, |from, data| {
                if let Some(c) = client.as_mut() {
                    c.on_udp(now, via, from, data, &mut out);
                }
            })?;
        }
        // Local discovery bubbles, a batch's worth at most per round.
        if let Some(d) = discovery.as_ref().filter(|_| discovery_ready) {
            for _ in 0..BATCH {
                let Ok((n, std::net::SocketAddr::V4(from))) = d.recv_from(&mut buf) else { break };
                if let Some(c) = client.as_mut() {
                    c.on_udp(now, Via::Discovery, from, &buf[..n], &mut out);
                }
            }
        }
        // A random port's datagrams, a batch's worth at most per round.
        for port in ready.into_iter().filter_map(NonZeroU16::new) {
            for _ in 0..BATCH {
                let Some((n, from)) = out.ports.recv(port.get(), &mut buf) else { break };
                if let Some(c) = client.as_mut() {
                    c.on_udp(now, Via::Port(port), from, &buf[..n], &mut out);
                }
            }
        }
        out.tun_out.flush(&tun);
        drain::tun(&tun, &mut tun_in, BATCH, |packet| {
            if let Some(c) = client.as_mut() {
                c.on_tun(now, packet, &mut out);
            }
        })?;
        if Instant::now() >= next_tick {
            if let Some(c) = client.as_mut() {
                c.on_timer(started.elapsed(), &mut out);
            }
            names.tick(Instant::now());
            if let Some(changed) = mapping.poll() {
                if let Some(c) = client.as_mut() {
                    c.set_port_mapping(changed);
                }
            }
            let state = client.as_ref().map(|c| c.status());
            if let Some(st) = &state {
                if st.state == "offline" && last_state != "offline" {
                    // Qualification failed with every server: look the names up again
                    // before the next try.
                    names.resolve_all(Instant::now());
                }
                last_state = st.state;
            }
            let want = names.servers();
            let qualified_with = state.filter(|st| st.state == "qualified").and_then(|st| st.server);
            if replace_now(&servers, &want, qualified_with) {
                if iface.address.is_some() {
                    // The address came from the old state machine's qualification.
                    iface.apply(ClientEvent::Down("the Teredo servers' addresses changed"))?;
                }
                tracing::info!("Teredo servers: {}", list(&want));
                // The old state machine's random ports die with it, and the mapping
                // pointed at the old first server.
                out.ports.close_all();
                mapping.forget();
                client = Some(new_client(&template, want.clone(), &urandom, None)?);
                if let Some(c) = client.as_mut() {
                    c.set_attached_subnets(&attached_subnets(&iface.nl));
                }
                servers = want;
                last_state = "offline";
                // Qualify at once, not a tick later.
                next_tick = Instant::now();
            } else {
                next_tick = Instant::now() + TICK;
            }
        }
        out.tun_out.flush(&tun);
        if !out.batch.is_empty() {
            out.batch.flush();
        }
        if let Some(c) = client.as_mut() {
            while let Some(ev) = c.poll_event() {
                if let ClientEvent::Up { server, address, nat, .. } = ev {
                    // Where peers behind the same NAT find us (hairpinning): the address
                    // the route to the server leaves from, found again after each change.
                    c.set_local_address(local_address(conf.bind_address, service_port, server));
                    // The group, on the link our local address is on: joined again only
                    // when that address changed (refreshes come here too); announcements
                    // leave from that interface.
                    let here = local_address(conf.bind_address, service_port, server).map(|a| *a.ip());
                    if let (Some(d), true) = (&discovery, here != joined) {
                        let group = *shipworm_proto::local_discovery::GROUP.ip();
                        if let Some(old) = joined.take() {
                            let _ = d.leave_multicast_v4(&group, &old);
                        }
                        if let Some(ip) = here {
                            match d.join_multicast_v4(&group, &ip) {
                                // Already a member there (the join at start).
                                Ok(()) => joined = Some(ip),
                                Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => joined = Some(ip),
                                Err(e) => tracing::warn!("local discovery: cannot join {group} on {ip}: {e}"),
                            }
                            let _ = socket2::SockRef::from(&out.batch).set_multicast_if_v4(&ip);
                        }
                    }
                    // Behind a symmetric NAT, the port the server saw opened to anyone,
                    // if the gateway speaks PCP.
                    if let (Some(t), true) = (TeredoAddr::decode(&address), nat == NatKind::Symmetric) {
                        let mut nonce = [0u8; 12];
                        shipworm_proto::transmit::Random::fill(&mut urandom, &mut nonce);
                        if mapping.want(t.mapped, nonce) {
                            c.set_port_mapping(None);
                        }
                    }
                }
                if matches!(ev, ClientEvent::Down(_)) {
                    // Lost the server: maybe its name points elsewhere now.
                    names.resolve_all(Instant::now());
                }
                iface.apply(ev)?;
            }
        }
        manager.tick(Instant::now());
        manager.status(&service_status(client.as_ref(), &names));
        if let (Some(b), Some(c)) = (&board, client.as_ref()) {
            if published.elapsed() >= Duration::from_millis(250) {
                b.publish(samples(c, &out, &tun_in));
                published = Instant::now();
            }
        }
        if signals.take_report_request() {
            tracing::info!("counters: {}", client_counters(client.as_ref(), &out, &tun_in).log_line());
            tracing::info!(
                "status: {}",
                status_json(client.as_ref(), &names, &iface.name, &out, &tun_in, mapping.held())
            );
        }
        status.serve(|| status_json(client.as_ref(), &names, &iface.name, &out, &tun_in, mapping.held()));
    }
    manager.stopping();
    tracing::info!("counters: {}", client_counters(client.as_ref(), &out, &tun_in).log_line());
    tracing::info!("stopping: {}", status_json(client.as_ref(), &names, &iface.name, &out, &tun_in, mapping.held()));
    mapping.release_all();
    Ok(())
}

#[cfg(test)]
mod counters_tests {
    use super::*;
    use crate::runtime::counters::tests::assert_views_agree;
    use shipworm_proto::DropReason;

    #[test]
    fn the_clients_metrics_status_and_log_line_list_the_same_counters() {
        let mut st = ClientStats {
            solicitations: 1,
            advertisements: 2,
            addresses: 3,
            sent: 4,
            delivered: 5,
            ..Default::default()
        };
        (st.sent_bytes, st.delivered_bytes, st.bubbles, st.echoes, st.first_contacts) = (6, 7, 8, 9, 10);
        (st.first_contact_delivered, st.silent_retests, st.peer_solicitations) = (11, 12, 13);
        (st.peer_advertisements, st.echo_tests) = (14, 15);
        st.drops.count(DropReason::QueueFull);
        let io = IoErrors { udp_send: 16, tun_write: 17, tun_read: 18, raw_send: 0 };
        let tun = TunOffloadCounts { super_packets_read: 19, joined_writes: 20 };
        let t = counters(&st, 21, 22, &io, &tun);
        assert_views_agree(&t);
        let j = t.json();
        assert_eq!((j["packets"]["to_peers"].as_u64(), j["silent_retests"].as_u64()), (Some(4), Some(12)));
        assert_eq!(j["dropped"]["queue_full"], 1);
    }
}
