//! `shipworm client`: the Teredo client daemon. A TUN interface whose address follows
//! the client state machine (set by a forked helper that keeps CAP_NET_ADMIN, through
//! rtnetlink), the service socket and a probe socket for NAT detection, random ports
//! for peers behind symmetric NATs, the local discovery socket, a netlink watch for
//! network changes; everything else is the shared shell (`runtime::shell`). Servers
//! given by name are looked up in the background (`server_names`); until one resolves
//! the state machine is in its resolving phase.

mod discovery;
mod interface;
mod kernel_intents;
mod output;
mod report;
mod rounds;

#[cfg(test)]
pub(crate) use report::counters;

use crate::cli;
use crate::cmd::client_helper::{Helper, HelperSetup};
use crate::config::miredo::{MiredoConf, RelayType};
use crate::io::kernel_path::{self, KernelDataPath};
use crate::io::netlink::{Netlink, NetworkWatch};
use crate::io::port_mapping::Mapper;
use crate::io::random_ports::RandomPorts;
use crate::io::tun::Tun;
use crate::io::tun_batch::{ReadCounts, TunInput, TunOutput};
use crate::io::udp_batch::{RecvBatch, SendBatch, SLOT};
use crate::runtime::bind;
use crate::runtime::config_reader::{self, ConfigReader};
use crate::runtime::logging;
use crate::runtime::pidfile::PidFile;
use crate::runtime::random::OsRandom;
use crate::runtime::role_loop::{self, Inputs};
use crate::runtime::server_names::{replace_now, ServerNames};
use crate::runtime::shell::{Confined, Shell};
use crate::runtime::syscalls::Role;
use crate::runtime::Failure;
use discovery::{local_address, Discovery};
use interface::Interface;
use output::Output;
use rounds::ClientAround;
use shipworm_proto::client::{
    Client, ClientConfig, ClientEvent, ClientState, NatKind, ServerAddrs, Via, LINK_LOCAL, SERVERS_CHANGED,
};
use shipworm_wire::teredo_addr::TeredoAddr;
use socket2::Socket;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::num::NonZeroU16;
use std::path::Path;
use std::time::{Duration, Instant};

const BATCH: usize = 32;
/// UDP batches read from one socket per round at most (see `runtime::role_loop`).
const UDP_BATCHES_PER_ROUND: usize = 8;
/// Peers the kernel data path holds at most (a client's few; the rest go through the
/// daemon).
const KERNEL_PEERS: usize = 4096;

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
    let same = crate::config::miredo::same_settings(&conf, args.server.clone(), args.daemon.user.clone());
    let reader = config_reader::start(&args.config, conf.user.as_deref(), conf.system_call_filter, same)?;
    serve(&conf, args.daemon.control.as_deref(), args.daemon.pidfile.as_deref(), reader)
}

/// What the client opens while it is root: its interface and the helper that keeps
/// configuring it, and its sockets.
struct Opened {
    tun: Tun,
    iface: Interface,
    service: Socket,
    probe: Socket,
    discovery: Option<Discovery>,
    watch: NetworkWatch,
}

/// Open the interface (with its link-local address, up, MTU 1280 until an RA says
/// otherwise), fork the helper, bind the sockets. Nothing here needs the network to be
/// up: the sockets bind to BindAddress (0.0.0.0 unless configured), and server names
/// are looked up later.
fn open(conf: &MiredoConf) -> Result<Opened, Failure> {
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
    let service =
        bind::udp(SocketAddrV4::new(conf.bind_address, conf.bind_port), false, "service", &bind::MIREDO_CONF)?;
    let probe = bind::udp(SocketAddrV4::new(conf.bind_address, 0), false, "probe", &bind::MIREDO_CONF)?;
    // Local discovery (RFC 4380 §5.2.8): announcements leave the service socket with
    // TTL 1 and come back to us on 224.0.0.253:3544, a port other clients may share.
    let _ = service.set_multicast_ttl_v4(1);
    let _ = service.set_multicast_loop_v4(false);
    let discovery = if conf.local_discovery { Discovery::open() } else { None };
    let watch = NetworkWatch::new().map_err(Failure::runtime)?;
    let name = tun.name().to_string();
    let iface = Interface { nl, helper, name, address: None, changed_at: None };
    Ok(Opened { tun, iface, service, probe, discovery, watch })
}

/// The state machine's settings from the file: the servers come from their names.
fn client_config(
    conf: &MiredoConf,
    servers: Vec<ServerAddrs>,
    service_port: u16,
    urandom: &mut OsRandom,
) -> ClientConfig {
    let mut cfg = ClientConfig::new(servers);
    cfg.hash_keys = urandom.hash_keys();
    cfg.queue_bytes = conf.queue_bytes;
    cfg.refresh = Duration::from_secs(conf.refresh_interval);
    cfg.symmetric_nat_support = conf.symmetric_nat_support;
    cfg.opening_bubble_ttl = conf.opening_bubble_ttl;
    cfg.server_load_reduction = conf.server_load_reduction;
    cfg.hairpinning = conf.hairpinning;
    cfg.service_port = NonZeroU16::new(service_port);
    cfg.local_discovery = conf.local_discovery;
    cfg.credentials = conf.credentials.clone();
    cfg
}

/// The kernel data path as `DataPath` asks for it, on interface `tun` for the service
/// port (`None`: the daemon moves every packet).
fn start_kernel_path(conf: &MiredoConf, tun: &str, service_port: u16) -> Result<Option<KernelDataPath>, Failure> {
    kernel_path::start(&kernel_path::Want {
        mode: conf.data_path,
        host_specific: false,
        client: true,
        tun,
        local: SocketAddrV4::new(conf.bind_address, service_port),
        peers: KERNEL_PEERS,
        prefix: conf.prefix,
        decap_tc: true,
        direct: false,
    })
    .map_err(Failure::runtime)
}

/// What the log says once the client serves.
fn log_serving(
    opened: &Opened,
    local: Option<SocketAddrV4>,
    names: &ServerNames,
    shell: &Shell<Confined>,
    kernel: Option<&KernelDataPath>,
) {
    let local = local.map_or_else(|| "?".into(), |a| a.to_string());
    let status = shell.control_path().display();
    tracing::info!(
        "Teredo client on {} (UDP {local}), server {}; status: {status}",
        opened.tun.name(),
        names.describe()
    );
    let helper = opened.iface.helper.pid();
    tracing::info!("interface helper: pid {helper} (keeps CAP_NET_ADMIN; this process keeps none)");
    if let Some(k) = kernel {
        tracing::info!("{}", k.describe());
    }
}

/// Run the client until SIGTERM/SIGINT.
fn serve(
    conf: &MiredoConf,
    control: Option<&Path>,
    pidfile: Option<&Path>,
    reader: ConfigReader,
) -> Result<(), Failure> {
    for w in &conf.warnings {
        tracing::warn!("{w}");
    }
    let primary = conf.server.clone().ok_or_else(|| Failure::usage("no Teredo server configured (ServerAddress)"))?;
    let mut opened = open(conf)?;
    let local = opened.service.local_addr().ok().and_then(|a| a.as_socket_ipv4());
    let service_port = local.map_or(0, |a| a.port());
    // Loading and attaching eBPF programs needs the privileges confinement drops.
    let kernel = start_kernel_path(conf, opened.tun.name(), service_port)?;
    let control_path = control
        .map(Path::to_path_buf)
        .unwrap_or_else(|| crate::runtime::status_socket::default_path(opened.tun.name()));
    let shell = Shell::open(Role::Client, control_path, conf.metrics_address)?
        .keeping_kernel_maps(kernel.is_some())
        .reloading(reader);
    let mut urandom = OsRandom::open()?;
    // After the drop: the resolver thread starts below and must hold neither root nor
    // the capabilities the main thread gave up (they are per thread).
    let shell = shell.confine(conf.user.as_deref(), conf.system_call_filter, pidfile)?;
    let started = Instant::now();
    let names = ServerNames::new(primary, conf.server2.clone(), conf.fallback_servers.clone(), started);
    let mut cfg = client_config(conf, names.servers(), service_port, &mut urandom);
    cfg.local_discovery = opened.discovery.is_some();
    cfg.kernel_path = kernel.is_some();
    let random_ports = cfg.random_ports;
    let mut client = Client::new(cfg, urandom.try_clone()?);
    client.set_attached_subnets(&opened.iface.attached_subnets());
    log_serving(&opened, local, &names, &shell, kernel.as_ref());
    let dup = |s: &Socket| s.try_clone().map_err(|e| Failure::runtime(format!("cannot duplicate a socket: {e}")));
    let mut d = ClientDaemon {
        client,
        names,
        mapping: Mapper::new(conf.port_mapping, service_port),
        out: Output {
            batch: SendBatch::new(dup(&opened.service)?, BATCH, SLOT),
            probe: &opened.probe,
            tun: TunOutput::new(&opened.tun),
            probe_errors: 0,
            ports: RandomPorts::new(conf.bind_address, random_ports),
            kernel: kernel.as_ref().map(|k| k.peers(started.elapsed())),
            intents: Vec::new(),
        },
        kernel: kernel.as_ref(),
        kernel_address: None,
        iface: opened.iface,
        discovery: opened.discovery.take(),
        watch: opened.watch,
        urandom,
        tun_read: ReadCounts::default(),
        buf: vec![0u8; SLOT],
        started,
        run_timers: true,
        last_state: ClientState::Offline,
        bind_address: conf.bind_address,
        service_port,
    };
    shell.ready(&d);
    let decap_at_tc = d.kernel.is_some_and(|k| k.decap == kernel_path::DecapHook::Tc);
    let mut inputs = Inputs {
        datagrams: vec![
            // Rows for the socket only where XDP decapsulates on every interface: tc
            // ingress, after GRO, cannot take a row of a trusted peer's datagrams out
            // of the tunnel (it sends the row up to the daemon whole).
            RecvBatch::for_service(dup(&opened.service)?, BATCH, SLOT, decap_at_tc),
            RecvBatch::new(dup(&opened.probe)?, BATCH, SLOT),
        ],
        packets: Some(TunInput::new(&opened.tun)),
    };
    let result = role_loop::run(&mut d, &mut inputs, &mut ClientAround::new(&shell));
    // What the TUN's reader counted, for the exit report, whatever ended the loop.
    d.tun_read = inputs.packets.as_ref().map(TunInput::counts).unwrap_or_default();
    shell.stopping(&d);
    d.mapping.release_all();
    result.and_then(|()| shell.outcome())
}

/// The client at work: its state machine and everything around it.
struct ClientDaemon<'a> {
    client: Client<OsRandom>,
    names: ServerNames,
    /// The port mapping asked of the NAT (PCP or UPnP), behind a symmetric NAT.
    mapping: Mapper,
    out: Output<'a>,
    iface: Interface,
    discovery: Option<Discovery>,
    watch: NetworkWatch,
    urandom: OsRandom,
    /// What the TUN's reader counted, as of the last round (for the reports).
    tun_read: ReadCounts,
    buf: Vec<u8>,
    started: Instant,
    /// Run the timers at the next round whatever their deadlines (the servers changed:
    /// qualify at once).
    run_timers: bool,
    /// The state at the last run of the timers.
    last_state: ClientState,
    bind_address: Ipv4Addr,
    service_port: u16,
    /// The kernel data path, if it runs.
    kernel: Option<&'a KernelDataPath>,
    /// The address its programs were last given.
    kernel_address: Option<Ipv6Addr>,
}

impl ClientDaemon<'_> {
    /// When the timers next have something to do: the state machine's deadline, the
    /// names' lookups, the port mapping's renewal (`None`: nothing until I/O).
    fn timers_due(&self) -> Option<Instant> {
        let proto = self.client.poll_timeout().map(|d| self.started + d);
        [proto, self.names.next_due(), self.mapping.next_due()].into_iter().flatten().min()
    }

    /// The network changed: the old gateway's mapping means nothing on the new network
    /// (the next qualification asks for a new one), and from the new network a name may
    /// point elsewhere, or resolve at last.
    fn on_network_change(&mut self) {
        tracing::info!("network changed: qualifying again");
        self.iface.changed_at = Some(Instant::now());
        self.mapping.forget();
        self.client.set_port_mapping(None);
        let subnets = self.iface.attached_subnets();
        self.client.set_attached_subnets(&subnets);
        if let Some(k) = self.kernel.filter(|_| self.bind_address.is_unspecified()) {
            // Where the service socket, bound to no address, now receives.
            let local: Vec<Ipv4Addr> = subnets.iter().map(|&(a, _)| a).filter(|a| !a.is_loopback()).collect();
            if let Err(e) = k.switch().set_local(&local) {
                tracing::warn!("kernel data path: cannot list the new addresses ({e})");
            }
        }
        self.client.on_network_change(self.started.elapsed(), &mut self.out);
        self.out.carry_out(&mut self.client, self.started.elapsed());
        self.names.resolve_all(Instant::now());
    }

    /// What came on the discovery socket and on the random ports the wait found
    /// readable, a batch's worth each (the service and probe sockets and the TUN are
    /// the loop's inputs).
    fn read_others(&mut self, discovery: bool, ports: &[NonZeroU16]) {
        let now = self.started.elapsed();
        let (client, out) = (&mut self.client, &mut self.out);
        if let Some(d) = self.discovery.as_ref().filter(|_| discovery) {
            for _ in 0..BATCH {
                let Some((n, from)) = d.recv(&mut self.buf) else { break };
                let data = &self.buf[..n];
                let outcome = out.decide(client, now, |c, out| c.on_udp(now, Via::Discovery, from, data, out));
                logging::outcome(outcome, "announcement", from);
            }
        }
        for &port in ports {
            for _ in 0..BATCH {
                let Some((n, from)) = out.ports.recv(port.get(), &mut self.buf) else { break };
                let data = &self.buf[..n];
                let outcome = out.decide(client, now, |c, out| c.on_udp(now, Via::Port(port), from, data, out));
                logging::outcome(outcome, "datagram", from);
            }
        }
    }

    /// When due: the state machine's timers, the names' lookups, the port mapping, and
    /// a new server list when the names' answers changed.
    fn timers(&mut self) {
        self.run_timers = false;
        self.client.on_timer(self.started.elapsed(), &mut self.out);
        self.out.carry_out(&mut self.client, self.started.elapsed());
        self.names.tick(Instant::now());
        if let Some(changed) = self.mapping.poll() {
            self.client.set_port_mapping(changed);
        }
        let st = self.client.status();
        if st.state == ClientState::Offline && self.last_state != ClientState::Offline {
            // Qualification failed with every server: look the names up again before
            // the next try.
            self.names.resolve_all(Instant::now());
        }
        self.last_state = st.state;
        let want = self.names.servers();
        let qualified_with = st.server.filter(|_| st.state == ClientState::Qualified);
        if replace_now(self.client.servers(), &want, qualified_with) {
            tracing::info!("Teredo servers: {}", list(&want));
            // The mapping pointed at the old first server.
            self.mapping.forget();
            self.client.set_servers(want);
            // Qualify at once: the timers again at the next round.
            self.run_timers = true;
        }
    }

    /// The state machine's events, carried out on the interface; a new address also
    /// moves the discovery group and may ask the gateway for a port mapping.
    fn follow_events(&mut self) -> Result<(), Failure> {
        while let Some(ev) = self.client.poll_event() {
            match ev {
                ClientEvent::Up { server, address, nat, .. } => self.on_up(server, address, nat),
                // The names were just looked up: that is why the servers changed.
                ClientEvent::Down(SERVERS_CHANGED) => {}
                // Lost the server: maybe its name points elsewhere now.
                ClientEvent::Down(_) => self.names.resolve_all(Instant::now()),
                ClientEvent::Nat(_) | ClientEvent::KeyRetired { .. } => {}
            }
            self.iface.apply(ev)?;
        }
        if let Some(k) = self.kernel.filter(|_| self.kernel_address != self.iface.address) {
            // Only packets to and from the address the interface has move in the
            // kernel: none while it has none.
            self.kernel_address = self.iface.address;
            match k.switch().set_address(self.kernel_address) {
                Ok(()) => self.client.set_kernel_address(self.kernel_address),
                Err(e) => {
                    tracing::error!("kernel data path: cannot set the address ({e}); turned off");
                    let _ = k.switch().turn_off();
                }
            }
        }
        Ok(())
    }

    /// Qualified (again): where peers behind the same NAT find us (hairpinning) is the
    /// address the route to the server leaves from, found again after each change; the
    /// discovery group follows it. Behind a symmetric NAT, the port the server saw is
    /// asked to open to anyone, if the gateway speaks PCP (or UPnP).
    fn on_up(&mut self, server: Ipv4Addr, address: Ipv6Addr, nat: NatKind) {
        let here = local_address(self.bind_address, self.service_port, server);
        self.client.set_local_address(here);
        if let Some(d) = &mut self.discovery {
            d.join_on(here.map(|a| *a.ip()), socket2::SockRef::from(&self.out.batch));
        }
        if let (Some(t), true) = (TeredoAddr::decode(&address), nat == NatKind::Symmetric) {
            let mut nonce = [0u8; 12];
            shipworm_proto::transmit::Random::fill(&mut self.urandom, &mut nonce);
            if self.mapping.want(t.mapped, nonce) {
                self.client.set_port_mapping(None);
            }
        }
    }
}

fn list(servers: &[ServerAddrs]) -> String {
    let l: Vec<String> = servers.iter().map(|s| s.primary.to_string()).collect();
    l.join(", ")
}
