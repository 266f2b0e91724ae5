//! Miredo's `miredo.conf` (client and relay roles), read unchanged, plus shipworm's own
//! directives in the same style. `RelayType` picks the role; directives of the other
//! role are accepted and ignored with a warning, as Miredo does.

use crate::config::directives::{self as config, ConfigError, ConfigFile, Directive, Host};
use crate::io::kernel_path::DataPath;
use crate::io::port_mapping::Protocols;
use crate::runtime::confinement::FilterMode;
use crate::runtime::reload::SameSettings;
use shipworm_wire::teredo_addr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The role a miredo.conf asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayType {
    /// `client` / `autoclient`: a Teredo client.
    Client,
    /// `relay` / `cone`: a relay with a public (or full-cone) address.
    Relay,
    /// `restricted`: a relay that also sends direct bubbles.
    Restricted,
    /// `host` (shipworm): a host-specific relay serving only this host.
    Host,
}

/// Directives this file format knows.
pub const DIRECTIVES: &[&str] = &[
    "RelayType",
    "InterfaceName",
    "InterfaceMTU",
    "BindAddress",
    "BindPort",
    "Prefix",
    "ServerAddress",
    "ServerAddress2",
    "SyslogFacility",
    // shipworm's own
    "User",
    "PeerCapacity",
    "PeersPerAddress",
    "QueueBytes",
    "RelayAddress",
    "RelayThreads",
    "BusyPoll",
    "TunOffload",
    "SystemCallFilter",
    "MetricsAddress",
    "BirdSocket",
    "BirdProtocol",
    "DrainTime",
    "DataPath",
    "DecapHook",
    "KernelForward",
    "FallbackServerAddress",
    "RefreshInterval",
    "SymmetricNatSupport",
    "OpeningBubbleTtl",
    "ServerLoadReduction",
    "Hairpinning",
    "PortMapping",
    "LocalDiscovery",
    "DefaultRouteMetric",
    "HookScript",
    "SecureQualification",
];

/// A parsed miredo.conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiredoConf {
    /// The role.
    pub role: RelayType,
    /// TUN interface name (Miredo's default: `miredo`).
    pub interface: String,
    /// Interface MTU (relays; clients take the server's).
    pub mtu: u16,
    /// Local IPv4 address to bind.
    pub bind_address: Ipv4Addr,
    /// Local UDP port (0: any).
    pub bind_port: u16,
    /// Teredo prefix (relays).
    pub prefix: u32,
    /// Teredo server (clients): an address, or a name the client resolves itself.
    pub server: Option<Host>,
    /// Secondary server address (clients; default server + 1).
    pub server2: Option<Host>,
    /// Servers to fail over to, in order (clients; `FallbackServerAddress`, repeatable).
    pub fallback_servers: Vec<Host>,
    /// Maintenance refresh interval in seconds (clients; RFC 6081 §5.1.1, default 30).
    pub refresh_interval: u64,
    /// Behind a symmetric NAT, keep the primary server's mapping (RFC 6081 §5.2).
    pub symmetric_nat_support: bool,
    /// TTL of a client's opening bubble (0: none).
    pub opening_bubble_ttl: u8,
    /// RFC 6081 §5.7 Server Load Reduction.
    pub server_load_reduction: bool,
    /// RFC 6081 §5.6 Hairpinning.
    pub hairpinning: bool,
    /// Ask the gateway for a port mapping: PCP, UPnP, both (in that order) or none.
    pub port_mapping: crate::io::port_mapping::Protocols,
    /// RFC 4380 §5.2.8 local discovery.
    pub local_discovery: bool,
    /// Metric of the client's default route (Miredo's 1029: native IPv6 wins).
    pub route_metric: u32,
    /// A script run on every address change with Miredo's client-hook variables.
    pub hook_script: Option<std::path::PathBuf>,
    /// Secure qualification credentials (clients).
    pub credentials: Option<shipworm_proto::secure::Credentials>,
    /// Syslog facility (accepted; logs go to stderr).
    pub syslog_facility: Option<String>,
    /// The user to run as after set-up.
    pub user: Option<String>,
    /// Most peers kept (relays).
    pub peer_capacity: usize,
    /// Bytes queued per waiting peer.
    pub queue_bytes: usize,
    /// Most peers embedding one IPv4 address (relays).
    pub peers_per_address: usize,
    /// Source of the relay's ICMPv6 errors (default: the host's first global IPv6 address).
    pub relay_address: Option<Ipv6Addr>,
    /// Relay worker threads (default: one per core).
    pub relay_threads: Option<usize>,
    /// Microseconds a relay worker keeps looking for packets after its last one before
    /// it sleeps (0: sleep at once).
    pub busy_poll_us: u64,
    /// Whether the TUN device takes and hands over super-packets and leaves checksums
    /// to us (virtio-net headers), when the kernel grants it.
    pub tun_offload: bool,
    /// What a system call off the seccomp allow-list does: stop the daemon, be logged, or
    /// nothing (no filter).
    pub system_call_filter: crate::runtime::confinement::FilterMode,
    /// Where Prometheus scrapes `/metrics` (`MetricsAddress`; none by default).
    pub metrics_address: Option<std::net::SocketAddr>,
    /// BIRD's control socket (`BirdSocket`, relays): the relay enables `bird_protocol`
    /// once it serves and disables it when asked to stop.
    pub bird_socket: Option<std::path::PathBuf>,
    /// The BIRD protocols that announce the Teredo prefix, and the relays' shared IPv4
    /// address if they have one (`BirdProtocol`, one to four names, default `teredo`).
    pub bird_protocols: Vec<String>,
    /// How long a stopping relay keeps forwarding after BIRD withdrew its announcement
    /// (`DrainTime`, seconds): the time routing takes to move the traffic elsewhere.
    pub drain_time: std::time::Duration,
    /// Where trusted peers' packets are moved (`DataPath`, relays).
    pub data_path: DataPath,
    /// The kernel data path decapsulates at tc ingress even where the driver has XDP
    /// (`DecapHook tc`).
    pub decap_tc: bool,
    /// The kernel data path forwards straight between interfaces, past the host's IPv6
    /// stack and its firewall (`KernelForward direct`), rather than through it.
    pub kernel_forward_direct: bool,
    /// Directives accepted but not used by this role.
    pub warnings: Vec<String>,
}

/// Read `path`; `server_arg` is Miredo's optional `SERVER_NAME` argument.
pub fn load(path: &Path, server_arg: Option<&str>) -> Result<MiredoConf, ConfigError> {
    from_file(ConfigFile::read(path)?, server_arg)
}

/// The settings of a file already split into directives.
pub fn from_file(mut f: ConfigFile, server_arg: Option<&str>) -> Result<MiredoConf, ConfigError> {
    f.refuse_unknown(DIRECTIVES)?;
    let mut c = MiredoConf::defaults(read_role(&mut f)?);
    for rule in RULES {
        read_rule(rule, &mut f, &mut c)?;
    }
    settle_server(&f, &mut c, server_arg)?;
    f.finish(DIRECTIVES)?;
    Ok(c)
}

/// Whether a file loads to the settings `running` (the daemon's, with the command
/// line's `SERVER_NAME` and `-u USER` applied as at start-up): SIGHUP's judge.
pub fn same_settings(running: &MiredoConf, server_arg: Option<String>, user: Option<String>) -> SameSettings {
    let mut running = running.clone();
    running.warnings.clear();
    Box::new(move |f: &ConfigFile| {
        let mut c = from_file(f.clone(), server_arg.as_deref())?;
        if user.is_some() {
            c.user.clone_from(&user);
        }
        // Warnings name lines, which move with any comment added above them.
        c.warnings.clear();
        Ok(c == running)
    })
}

impl MiredoConf {
    /// The settings of a file that names only its role: Miredo's defaults where Miredo
    /// has the directive, shipworm's own otherwise.
    fn defaults(role: RelayType) -> MiredoConf {
        MiredoConf {
            role,
            interface: "miredo".into(),
            mtu: 1280,
            bind_address: Ipv4Addr::UNSPECIFIED,
            bind_port: 0,
            prefix: teredo_addr::PREFIX,
            server: None,
            server2: None,
            fallback_servers: Vec::new(),
            refresh_interval: 30,
            symmetric_nat_support: true,
            opening_bubble_ttl: 2,
            server_load_reduction: true,
            hairpinning: true,
            port_mapping: Protocols::Pcp,
            local_discovery: true,
            route_metric: 1029,
            hook_script: None,
            credentials: None,
            syslog_facility: None,
            user: None,
            peer_capacity: 1 << 20,
            queue_bytes: 4096,
            peers_per_address: 4096,
            relay_address: None,
            relay_threads: None,
            busy_poll_us: 50,
            tun_offload: true,
            system_call_filter: FilterMode::Enforce,
            metrics_address: None,
            bird_socket: None,
            bird_protocols: vec!["teredo".into()],
            drain_time: Duration::from_secs(2),
            data_path: DataPath::Auto,
            decap_tc: false,
            kernel_forward_direct: false,
            warnings: Vec::new(),
        }
    }
}

/// `RelayType`, read before any other directive: the role decides which of them apply.
fn read_role(f: &mut ConfigFile) -> Result<RelayType, ConfigError> {
    let Some(d) = f.take("RelayType")? else {
        return Ok(RelayType::Client);
    };
    f.value(&d, |v| match v.to_ascii_lowercase().as_str() {
        "client" | "autoclient" => Ok(RelayType::Client),
        "relay" | "cone" => Ok(RelayType::Relay),
        "restricted" => Ok(RelayType::Restricted),
        "host" => Ok(RelayType::Host),
        _ => Err("expected client, autoclient, relay, cone, restricted or host".into()),
    })
}

/// The roles a directive is for. A directive for the other role is ignored with a
/// warning rather than refused, as Miredo does: a file written for Miredo loads
/// unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every role.
    Any,
    /// The relays: `relay` (`cone`), `restricted` and `host`.
    Relay,
    /// The client.
    Client,
}

impl Mode {
    /// Why a directive for this mode is ignored when the file asks for `role`, if it is.
    fn ignored_by(self, role: RelayType) -> Option<&'static str> {
        match (self, role == RelayType::Client) {
            (Mode::Relay, true) => Some("is for relays; ignored in client mode"),
            (Mode::Client, false) => Some("is for clients; ignored in relay mode"),
            _ => None,
        }
    }
}

/// Stores the value of the directive `name` (spelled as in [`RULES`]; `d` has it as the
/// file wrote it) in the settings. One such function per group of settings.
type Apply = fn(name: &str, f: &ConfigFile, d: &Directive, c: &mut MiredoConf) -> Result<(), ConfigError>;

/// How one directive is read.
struct Rule {
    name: &'static str,
    mode: Mode,
    /// Each line adds to a list; otherwise a second line is an error.
    repeatable: bool,
    apply: Apply,
}

/// A directive given at most once.
const fn once(name: &'static str, mode: Mode, apply: Apply) -> Rule {
    Rule { name, mode, repeatable: false, apply }
}

/// A directive given any number of times.
const fn repeatable(name: &'static str, mode: Mode, apply: Apply) -> Rule {
    Rule { name, mode, repeatable: true, apply }
}

/// Every directive but `RelayType`, in the order they are read: of several bad lines,
/// the first one read here is the one reported, so the order is kept as it always was.
const RULES: &[Rule] = &[
    once("InterfaceName", Mode::Any, tunnel),
    once("BindAddress", Mode::Any, tunnel),
    once("BindPort", Mode::Any, tunnel),
    once("SyslogFacility", Mode::Any, daemon),
    once("User", Mode::Any, daemon),
    once("Prefix", Mode::Relay, tunnel),
    once("TunOffload", Mode::Any, daemon),
    once("SystemCallFilter", Mode::Any, daemon),
    once("MetricsAddress", Mode::Any, daemon),
    once("InterfaceMTU", Mode::Relay, tunnel),
    once("BirdSocket", Mode::Relay, relay_options),
    once("BirdProtocol", Mode::Relay, relay_options),
    once("DrainTime", Mode::Relay, relay_options),
    once("DataPath", Mode::Any, daemon),
    once("DecapHook", Mode::Relay, relay_options),
    once("KernelForward", Mode::Relay, relay_options),
    once("PeerCapacity", Mode::Relay, relay_limits),
    once("PeersPerAddress", Mode::Relay, relay_limits),
    once("QueueBytes", Mode::Relay, relay_limits),
    once("RelayAddress", Mode::Relay, tunnel),
    once("RelayThreads", Mode::Relay, relay_options),
    once("BusyPoll", Mode::Relay, relay_options),
    once("ServerAddress", Mode::Client, servers),
    once("ServerAddress2", Mode::Client, servers),
    once("RefreshInterval", Mode::Client, client_options),
    once("SymmetricNatSupport", Mode::Client, client_options),
    once("OpeningBubbleTtl", Mode::Client, client_options),
    once("ServerLoadReduction", Mode::Client, client_options),
    once("Hairpinning", Mode::Client, client_options),
    once("PortMapping", Mode::Client, client_options),
    once("LocalDiscovery", Mode::Client, client_options),
    once("DefaultRouteMetric", Mode::Client, client_host),
    once("HookScript", Mode::Client, client_host),
    once("SecureQualification", Mode::Client, servers),
    repeatable("FallbackServerAddress", Mode::Client, servers),
];

/// Read every line of one directive: store its value, or warn that this role ignores
/// it. A second line of a directive given once is refused even when the role ignores it.
fn read_rule(rule: &Rule, f: &mut ConfigFile, c: &mut MiredoConf) -> Result<(), ConfigError> {
    let lines = if rule.repeatable { f.take_all(rule.name) } else { f.take(rule.name)?.into_iter().collect() };
    for d in &lines {
        match rule.mode.ignored_by(c.role) {
            Some(why) => c.warnings.push(f.warning(d, format!("{} {why}", d.name))),
            None => (rule.apply)(rule.name, f, d, c)?,
        }
    }
    Ok(())
}

/// The tunnel's ends: the interface (name, MTU), the UDP socket (address, port), the
/// Teredo prefix, and the IPv6 address a relay sends its ICMPv6 errors from.
fn tunnel(name: &str, f: &ConfigFile, d: &Directive, c: &mut MiredoConf) -> Result<(), ConfigError> {
    match name {
        "InterfaceName" => c.interface = f.value(d, interface_name)?,
        "InterfaceMTU" => c.mtu = f.value(d, config::mtu)?,
        "BindAddress" => c.bind_address = f.value(d, config::ipv4)?,
        "BindPort" => c.bind_port = f.value(d, udp_port)?,
        "Prefix" => c.prefix = f.value(d, config::teredo_prefix)?,
        "RelayAddress" => c.relay_address = Some(f.value(d, ipv6_address)?),
        _ => unreachable!("{name} is not a tunnel directive"),
    }
    Ok(())
}

/// How the daemon runs, whatever its role: its syslog facility, the user it becomes,
/// the TUN device's offloads, its system call filter and where it serves metrics.
fn daemon(name: &str, f: &ConfigFile, d: &Directive, c: &mut MiredoConf) -> Result<(), ConfigError> {
    match name {
        "SyslogFacility" => c.syslog_facility = Some(f.value(d, config::syslog_facility)?),
        "User" => c.user = Some(d.value.clone()),
        "TunOffload" => c.tun_offload = f.value(d, config::yes_no)?,
        "SystemCallFilter" => c.system_call_filter = f.value(d, config::filter_mode)?,
        "MetricsAddress" => c.metrics_address = Some(f.value(d, config::listen_address)?),
        "DataPath" => c.data_path = f.value(d, DataPath::parse)?,
        _ => unreachable!("{name} is not a daemon directive"),
    }
    Ok(())
}

/// Whom a client qualifies with: its server (and the server's second address), the
/// servers it fails over to in order, and its secure qualification credentials.
fn servers(name: &str, f: &ConfigFile, d: &Directive, c: &mut MiredoConf) -> Result<(), ConfigError> {
    match name {
        "ServerAddress" => c.server = Some(f.value(d, server)?),
        "ServerAddress2" => c.server2 = Some(f.value(d, server)?),
        "FallbackServerAddress" => c.fallback_servers.push(f.value(d, server)?),
        // The secret never reaches an error message: errors go to logs and terminals.
        "SecureQualification" => c.credentials = Some(f.secret_value(d, config::credentials)?),
        _ => unreachable!("{name} is not a server directive"),
    }
    Ok(())
}

/// How a client meets NATs and peers: how often it refreshes its mapping, the RFC 6081
/// extensions (symmetric NAT support, server load reduction, hairpinning), its opening
/// bubbles, port mapping on the gateway and local discovery.
fn client_options(name: &str, f: &ConfigFile, d: &Directive, c: &mut MiredoConf) -> Result<(), ConfigError> {
    match name {
        "RefreshInterval" => c.refresh_interval = f.value(d, |v| config::number_in(v, 5..=3600, "seconds"))? as u64,
        "SymmetricNatSupport" => c.symmetric_nat_support = f.value(d, config::yes_no)?,
        "OpeningBubbleTtl" => c.opening_bubble_ttl = f.value(d, opening_bubble_ttl)?,
        "ServerLoadReduction" => c.server_load_reduction = f.value(d, config::yes_no)?,
        "Hairpinning" => c.hairpinning = f.value(d, config::yes_no)?,
        "PortMapping" => c.port_mapping = f.value(d, port_mapping)?,
        "LocalDiscovery" => c.local_discovery = f.value(d, config::yes_no)?,
        _ => unreachable!("{name} is not a client option"),
    }
    Ok(())
}

/// How a client fits in its host: the metric of its default route, and the script it
/// runs on every address change.
fn client_host(name: &str, f: &ConfigFile, d: &Directive, c: &mut MiredoConf) -> Result<(), ConfigError> {
    match name {
        "DefaultRouteMetric" => c.route_metric = f.value(d, route_metric)?,
        "HookScript" => c.hook_script = Some(f.value(d, hook_script)?),
        _ => unreachable!("{name} is not a client host directive"),
    }
    Ok(())
}

/// How a relay runs: the BIRD protocol that announces its prefix and the time it keeps
/// forwarding once that is withdrawn, its worker threads and how long they poll.
fn relay_options(name: &str, f: &ConfigFile, d: &Directive, c: &mut MiredoConf) -> Result<(), ConfigError> {
    let within = |range, unit| f.value(d, |v| config::number_in(v, range, unit));
    match name {
        "BirdSocket" => c.bird_socket = Some(f.value(d, config::bird_socket)?),
        "BirdProtocol" => c.bird_protocols = f.value(d, config::bird_protocols)?,
        "DrainTime" => c.drain_time = Duration::from_secs(within(0..=600, "seconds")? as u64),
        "RelayThreads" => c.relay_threads = Some(within(1..=256, "worker threads")?),
        "BusyPoll" => c.busy_poll_us = within(0..=10_000, "microseconds")? as u64,
        "DecapHook" => c.decap_tc = f.value(d, |v| config::either(v, "auto", "tc"))?,
        "KernelForward" => c.kernel_forward_direct = f.value(d, |v| config::either(v, "stack", "direct"))?,
        _ => unreachable!("{name} is not a relay option"),
    }
    Ok(())
}

/// A relay's limits, which bound its memory: the peers it keeps, in all and per
/// embedded IPv4 address, and the bytes it queues for each peer.
fn relay_limits(name: &str, f: &ConfigFile, d: &Directive, c: &mut MiredoConf) -> Result<(), ConfigError> {
    let within = |range, unit| f.value(d, |v| config::number_in(v, range, unit));
    match name {
        "PeerCapacity" => c.peer_capacity = within(16..=100_000_000, "peers")?,
        "PeersPerAddress" => c.peers_per_address = within(1..=100_000_000, "peers")?,
        "QueueBytes" => c.queue_bytes = within(1280..=1_048_576, "bytes")?,
        _ => unreachable!("{name} is not a relay limit"),
    }
    Ok(())
}

/// The checks that span the file and the command line: Miredo's `SERVER_NAME` argument
/// wins over `ServerAddress`, and a client needs a server from one or the other.
fn settle_server(f: &ConfigFile, c: &mut MiredoConf, server_arg: Option<&str>) -> Result<(), ConfigError> {
    if let Some(s) = server_arg {
        c.server = Some(server(s).map_err(|why| f.file_error(format!("server {s}: {why}")))?);
    }
    if c.role == RelayType::Client && c.server.is_none() {
        return Err(f.file_error("ServerAddress is required in client mode (the Teredo server to qualify with)"));
    }
    Ok(())
}

/// A Teredo server: a global unicast IPv4 address, or a host name the client resolves.
fn server(value: &str) -> Result<Host, String> {
    config::server_host(value, config::global_unicast)
}

/// An interface name: at most 15 bytes, the kernel's limit (`IFNAMSIZ` less the NUL).
fn interface_name(value: &str) -> Result<String, String> {
    if value.is_empty() || value.len() > 15 || value.contains(['/', ' ']) {
        Err("an interface name has 1 to 15 characters, no '/' or spaces".into())
    } else {
        Ok(value.to_string())
    }
}

/// A UDP port; 0 lets the kernel pick one.
fn udp_port(value: &str) -> Result<u16, String> {
    value.parse().map_err(|_| "expected a UDP port, 0 to 65535".into())
}

/// An IPv6 address (`RelayAddress`).
fn ipv6_address(value: &str) -> Result<Ipv6Addr, String> {
    value.parse().map_err(|_| "expected an IPv6 address".into())
}

/// The TTL of a client's opening bubble; 0 sends none.
fn opening_bubble_ttl(value: &str) -> Result<u8, String> {
    match config::number(value)? {
        n @ 0..=255 => Ok(n as u8),
        _ => Err("expected a TTL from 0 (no opening bubble) to 255".into()),
    }
}

/// Which port mapping protocols a client tries on its gateway.
fn port_mapping(value: &str) -> Result<Protocols, String> {
    match value.to_ascii_lowercase().as_str() {
        "auto" | "yes" | "on" => Ok(Protocols::Auto),
        "pcp" => Ok(Protocols::Pcp),
        "upnp" => Ok(Protocols::Upnp),
        "off" | "no" | "none" => Ok(Protocols::Off),
        _ => Err("expected auto, pcp, upnp or off".into()),
    }
}

/// A route metric from 1 (the kernel would take 0 for its own default, 1024).
fn route_metric(value: &str) -> Result<u32, String> {
    match value.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a route metric from 1 to 4294967295".into()),
    }
}

/// The client's hook script, by absolute path.
fn hook_script(value: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(value);
    if p.is_absolute() {
        Ok(p)
    } else {
        Err("give an absolute path".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<MiredoConf, String> {
        // A file per call: tests run in parallel, and texts of one length would collide.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("shipworm-miredo-{}-{k}.conf", std::process::id()));
        std::fs::write(&p, text).unwrap();
        let r = load(&p, None).map_err(|e| e.reason);
        let _ = std::fs::remove_file(&p);
        r
    }

    #[test]
    fn debian_default_client_file_works_unchanged() {
        let c = load_text(
            "# Please refer to the miredo.conf(5) man page for details.\nInterfaceName\tteredo\n\n\
             # Pick a Teredo server:\n#ServerAddress\tteredo.ipv6.microsoft.com\nServerAddress\t192.0.2.1\n\
             # Some firewall/NAT setups require a specific UDP port number:\n#BindPort\t3545\n",
        )
        .unwrap();
        assert_eq!(
            (c.role, c.interface.as_str(), c.server),
            (RelayType::Client, "teredo", Some(Host::Addr(Ipv4Addr::new(192, 0, 2, 1))))
        );
    }

    #[test]
    fn relay_file() {
        let c = load_text(
            "RelayType cone\nInterfaceName teredo\nBindAddress 192.0.2.10\nBindPort 3545\nPrefix 2001:0::\nInterfaceMTU 1280\nServerAddress 192.0.2.1\n",
        )
        .unwrap();
        assert_eq!((c.role, c.bind_port, c.server), (RelayType::Relay, 3545, None));
        assert_eq!(c.warnings.len(), 1, "ServerAddress ignored with a warning");
        assert_eq!(load_text("RelayType restricted\n").unwrap().role, RelayType::Restricted);
        assert_eq!(load_text("relaytype HOST\n").unwrap().role, RelayType::Host);
        assert_eq!(load_text("RelayType relay\nRelayThreads 4\n").unwrap().relay_threads, Some(4));
        assert!(load_text("RelayType relay\nRelayThreads 0\n").unwrap_err().contains("1 to 256 worker threads"));
        assert_eq!(load_text("RelayType relay\nBusyPoll 0\n").unwrap().busy_poll_us, 0);
        assert!(load_text("RelayType relay\n").unwrap().tun_offload, "on by default");
        assert_eq!(load_text("RelayType relay\n").unwrap().peers_per_address, 4096);
        assert_eq!(load_text("RelayType relay\nPeersPerAddress 64\n").unwrap().peers_per_address, 64);
        assert!(load_text("RelayType relay\nPeersPerAddress 0\n").unwrap_err().contains("1 to 100000000"));
        assert!(!load_text("RelayType relay\nTunOffload no\n").unwrap().tun_offload);
        assert!(!load_text("ServerAddress 192.0.2.1\ntunoffload off\n").unwrap().tun_offload);
        use crate::runtime::confinement::FilterMode;
        assert_eq!(load_text("RelayType relay\n").unwrap().system_call_filter, FilterMode::Enforce, "on by default");
        assert_eq!(load_text("RelayType relay\nSystemCallFilter log\n").unwrap().system_call_filter, FilterMode::Log);
        let e = load_text("ServerAddress 192.0.2.1\nSystemCallFilter maybe\n").unwrap_err().to_string();
        assert!(
            e.ends_with(":2: SystemCallFilter maybe: expected yes, log or no") || e.contains("expected yes, log or no"),
            "{e}"
        );
        assert!(load_text("RelayType relay\nBusyPoll 20000\n").unwrap_err().contains("0 to 10000 microseconds"));
    }

    #[test]
    fn a_relay_and_a_client_choose_their_data_path() {
        let c = load_text("RelayType relay\nDataPath KERNEL\nDecapHook tc\n").unwrap();
        assert_eq!((c.data_path, c.decap_tc), (DataPath::Kernel, true));
        let d = load_text("RelayType relay\n").unwrap();
        assert_eq!((d.data_path, d.decap_tc), (DataPath::Auto, false));
        assert_eq!(load_text("RelayType relay\ndatapath user\n").unwrap().data_path, DataPath::User);
        let bad = load_text("RelayType relay\nDataPath fast\n").unwrap_err();
        assert!(bad.contains("DataPath fast: expected kernel, user or auto"), "{bad}");
        assert!(load_text("RelayType relay\nDecapHook xdp\n").unwrap_err().contains("expected auto or tc"));
        // Through the host's forwarding unless told otherwise.
        assert!(!d.kernel_forward_direct);
        assert!(load_text("RelayType relay\nkernelforward DIRECT\n").unwrap().kernel_forward_direct);
        assert!(!load_text("RelayType relay\nKernelForward stack\n").unwrap().kernel_forward_direct);
        let bad = load_text("RelayType relay\nKernelForward fast\n").unwrap_err();
        assert!(bad.contains("KernelForward fast: expected stack or direct"), "{bad}");
        // A client has one too; it decapsulates in XDP where the driver has it, handing on
        // at tc ingress always, and DecapHook is not its.
        let client = load_text("RelayType client\nServerAddress 192.0.2.1\nDataPath user\nDecapHook tc\n").unwrap();
        assert_eq!(client.data_path, DataPath::User);
        assert!(client.warnings.iter().any(|w| w.contains("DecapHook is for relays")), "{:?}", client.warnings);
        let client = load_text("RelayType client\nServerAddress 192.0.2.1\nKernelForward direct\n").unwrap();
        assert!(client.warnings.iter().any(|w| w.contains("KernelForward is for relays")), "{:?}", client.warnings);
        assert!(!client.warnings.iter().any(|w| w.contains("DataPath")), "{:?}", client.warnings);
    }

    #[test]
    fn a_relay_names_its_bird_socket_protocol_and_drain_time() {
        let c =
            load_text("RelayType relay\nBirdSocket /run/bird/bird.ctl\nBirdProtocol teredo_v6\nDrainTime 5\n").unwrap();
        assert_eq!(c.bird_socket.as_deref(), Some(Path::new("/run/bird/bird.ctl")));
        assert_eq!((c.bird_protocols.clone(), c.drain_time.as_secs()), (vec!["teredo_v6".to_string()], 5));
        let d = load_text("RelayType relay\n").unwrap();
        assert_eq!((d.bird_socket, d.bird_protocols, d.drain_time.as_secs()), (None, vec!["teredo".to_string()], 2));
        let two = load_text("RelayType relay\nBirdProtocol teredo  teredo4\n").unwrap();
        assert_eq!(two.bird_protocols, vec!["teredo".to_string(), "teredo4".to_string()]);
        assert!(load_text("RelayType relay\nBirdProtocol a b c d e\n").unwrap_err().contains("one to four"));
        assert!(load_text("RelayType relay\nBirdSocket bird.ctl\n").unwrap_err().contains("absolute path"));
        assert!(load_text("RelayType relay\nBirdProtocol 1x\n").unwrap_err().contains("BIRD protocol names"));
        assert!(load_text("RelayType relay\nDrainTime 601\n").unwrap_err().contains("0 to 600 seconds"));
        // A client has no announcement to withdraw.
        let client = load_text("ServerAddress 192.0.2.1\nBirdSocket /run/bird/bird.ctl\n").unwrap();
        assert_eq!(client.bird_socket, None);
        assert!(client.warnings.iter().any(|w| w.contains("BirdSocket is for relays")), "{:?}", client.warnings);
        assert_eq!(load_text("RelayType autoclient\nServerAddress 192.0.2.1\n").unwrap().role, RelayType::Client);
        let sns = |v: &str| load_text(&format!("ServerAddress 192.0.2.1\nSymmetricNatSupport {v}\n"));
        assert!(load_text("ServerAddress 192.0.2.1\n").unwrap().symmetric_nat_support, "on by default");
        assert!(!sns("no").unwrap().symmetric_nat_support);
        assert!(sns("Yes").unwrap().symmetric_nat_support);
        assert!(sns("maybe").unwrap_err().contains("expected yes or no"));
        let ttl = |v: &str| load_text(&format!("ServerAddress 192.0.2.1\nOpeningBubbleTtl {v}\n"));
        assert_eq!(load_text("ServerAddress 192.0.2.1\n").unwrap().opening_bubble_ttl, 2, "2 by default");
        assert_eq!(ttl("0").unwrap().opening_bubble_ttl, 0);
        assert_eq!(ttl("3").unwrap().opening_bubble_ttl, 3);
        assert!(ttl("256").unwrap_err().contains("expected a TTL"));
        let slr = load_text("ServerAddress 192.0.2.1\nserverloadreduction off\n").unwrap();
        assert!(!slr.server_load_reduction);
        assert!(slr.hairpinning, "on by default");
        assert!(!load_text("ServerAddress 192.0.2.1\nHairpinning no\n").unwrap().hairpinning);
        use crate::io::port_mapping::Protocols;
        assert_eq!(slr.port_mapping, Protocols::Pcp, "PCP by default; UPnP when asked");
        let pm = |v: &str| load_text(&format!("ServerAddress 192.0.2.1\nPortMapping {v}\n"));
        assert_eq!(pm("off").unwrap().port_mapping, Protocols::Off);
        assert_eq!(pm("UPnP").unwrap().port_mapping, Protocols::Upnp);
        assert!(pm("natpmp").unwrap_err().contains("expected auto, pcp, upnp or off"));
        assert!(slr.local_discovery, "on by default");
        assert!(!load_text("ServerAddress 192.0.2.1\nLocalDiscovery no\n").unwrap().local_discovery);
    }

    #[test]
    fn bad_files_say_why() {
        assert!(load_text("RelayType bridge\n").unwrap_err().contains("expected client"));
        assert!(load_text("RelayType client\n").unwrap_err().contains("ServerAddress is required"));
        assert!(load_text("RelayType relay\nBindPort 70000\n").unwrap_err().contains("UDP port"));
        assert!(load_text("RelayType relay\nFoo bar\n").unwrap_err().contains("unknown directive Foo"));
        assert!(load_text("ServerAddress 10.0.0.1\n").unwrap_err().contains("private"));
        assert!(load_text("RelayType relay\nInterfaceName a/b\n").unwrap_err().contains("interface name"));
    }

    #[test]
    fn servers_may_be_names() {
        let c = load_text(
            "ServerAddress teredo.example.net\nServerAddress2 teredo2.example.net\n\
             FallbackServerAddress 192.0.2.5\nFallbackServerAddress teredo.example.org.\n",
        )
        .unwrap();
        assert_eq!(c.server, Some(Host::Name("teredo.example.net".into())));
        assert_eq!(c.server2, Some(Host::Name("teredo2.example.net".into())));
        assert_eq!(
            c.fallback_servers,
            [Host::Addr(Ipv4Addr::new(192, 0, 2, 5)), Host::Name("teredo.example.org.".into())]
        );
        // A name that never resolves is a matter for the daemon, not for the file.
        assert!(load_text("ServerAddress does-not-exist.invalid\n").is_ok());
    }

    #[test]
    fn impossible_names_say_where_and_why() {
        let p = std::env::temp_dir().join(format!("shipworm-miredo-names-{}.conf", std::process::id()));
        std::fs::write(&p, "InterfaceName teredo\nServerAddress teredo_server.example\n").unwrap();
        let e = load(&p, None).unwrap_err().to_string();
        let _ = std::fs::remove_file(&p);
        assert_eq!(
            e,
            format!(
                "{}:2: ServerAddress teredo_server.example: '_' in label \"teredo_server\": a host name has only letters, digits, hyphens and dots",
                p.display()
            )
        );
        assert!(load_text("ServerAddress 1.2.3\n").unwrap_err().contains("ServerAddress 1.2.3: not an IPv4 address"));
        assert!(load_text("ServerAddress 192.0.2.1\nServerAddress2 -x.example\n").unwrap_err().contains("hyphen"));
        assert!(load_text("ServerAddress 192.0.2.1\nFallbackServerAddress 10.0.0.1\n")
            .unwrap_err()
            .contains("private"));
        assert!(load_text("ServerAddress 2001:db8::1\n").unwrap_err().contains("not an IPv4 address"));
    }

    /// Load `text` from a file of its own, and give back that file's name for the
    /// messages that carry it.
    fn load_named(text: &str) -> (String, Result<MiredoConf, String>) {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("shipworm-miredo-named-{}-{k}.conf", std::process::id()));
        std::fs::write(&p, text).unwrap();
        let r = load(&p, None).map_err(|e| e.to_string());
        let _ = std::fs::remove_file(&p);
        (p.display().to_string(), r)
    }

    #[test]
    fn every_directive_reaches_its_setting() {
        let c = load_text(
            "InterfaceName teredo0\nBindAddress 192.0.2.10\nBindPort 3545\nSyslogFacility local3\nUser teredo\n\
             TunOffload no\nSystemCallFilter log\nMetricsAddress 127.0.0.1:9544\nServerAddress 192.0.2.1\n\
             ServerAddress2 192.0.2.2\nFallbackServerAddress 198.51.100.1\nRefreshInterval 60\n\
             SymmetricNatSupport no\nOpeningBubbleTtl 4\nServerLoadReduction no\nHairpinning no\nPortMapping upnp\n\
             LocalDiscovery no\nDefaultRouteMetric 100\nHookScript /usr/local/sbin/teredo hook\n\
             SecureQualification alice 0123456789\n",
        )
        .unwrap();
        assert_eq!(
            (c.interface.as_str(), c.bind_address, c.bind_port),
            ("teredo0", Ipv4Addr::new(192, 0, 2, 10), 3545)
        );
        assert_eq!((c.syslog_facility.as_deref(), c.user.as_deref()), (Some("local3"), Some("teredo")));
        assert_eq!((c.tun_offload, c.system_call_filter), (false, FilterMode::Log));
        assert_eq!(c.metrics_address, Some("127.0.0.1:9544".parse().unwrap()));
        assert_eq!(c.server2, Some(Host::Addr(Ipv4Addr::new(192, 0, 2, 2))));
        assert_eq!(c.fallback_servers, [Host::Addr(Ipv4Addr::new(198, 51, 100, 1))]);
        assert_eq!((c.refresh_interval, c.symmetric_nat_support, c.opening_bubble_ttl), (60, false, 4));
        assert_eq!((c.server_load_reduction, c.hairpinning, c.local_discovery), (false, false, false));
        assert_eq!((c.port_mapping, c.route_metric), (Protocols::Upnp, 100));
        assert_eq!(c.hook_script.as_deref(), Some(Path::new("/usr/local/sbin/teredo hook")));
        assert_eq!(c.credentials.map(|k| k.client_id), Some(b"alice".to_vec()));
        assert_eq!(c.warnings, Vec::<String>::new());

        let r = load_text(
            "RelayType restricted\nPrefix 3ffe:831f::\nInterfaceMTU 1400\nBirdSocket /run/bird/bird.ctl\n\
             BirdProtocol teredo6\nDrainTime 10\nPeerCapacity 1000\nPeersPerAddress 8\nQueueBytes 8192\n\
             RelayAddress 2001:db8::1\nRelayThreads 2\nBusyPoll 100\n",
        )
        .unwrap();
        assert_eq!((r.role, r.prefix, r.mtu), (RelayType::Restricted, 0x3ffe_831f, 1400));
        assert_eq!(r.bird_socket.as_deref(), Some(Path::new("/run/bird/bird.ctl")));
        assert_eq!((r.bird_protocols.clone(), r.drain_time.as_secs()), (vec!["teredo6".to_string()], 10));
        assert_eq!((r.peer_capacity, r.peers_per_address, r.queue_bytes), (1000, 8, 8192));
        assert_eq!(r.relay_address, Some("2001:db8::1".parse().unwrap()));
        assert_eq!((r.relay_threads, r.busy_poll_us), (Some(2), 100));
        assert_eq!(r.warnings, Vec::<String>::new());

        // `unknown directive` lists the known ones: every directive read is among them.
        let mut read: Vec<&str> = RULES.iter().map(|r| r.name).chain(["RelayType"]).collect();
        let mut known = DIRECTIVES.to_vec();
        read.sort_unstable();
        known.sort_unstable();
        assert_eq!(read, known);
    }

    #[test]
    fn the_other_roles_directives_are_warned_about_and_ignored_but_not_twice() {
        // Ignored means unread: a bad value draws the warning, not an error.
        let (p, c) = load_named("ServerAddress 192.0.2.1\nprefix fe80::\nDrainTime 9999\n");
        assert_eq!(
            c.unwrap().warnings,
            [
                format!("{p}:2: prefix is for relays; ignored in client mode"),
                format!("{p}:3: DrainTime is for relays; ignored in client mode")
            ]
        );
        let (p, r) =
            load_named("RelayType host\nServerAddress 10.0.0.1\nFallbackServerAddress a\nFallbackServerAddress b\n");
        let r = r.unwrap();
        assert_eq!((r.server, r.fallback_servers), (None, vec![]));
        assert_eq!(
            r.warnings,
            [
                format!("{p}:2: ServerAddress is for clients; ignored in relay mode"),
                format!("{p}:3: FallbackServerAddress is for clients; ignored in relay mode"),
                format!("{p}:4: FallbackServerAddress is for clients; ignored in relay mode")
            ]
        );
        // A directive given twice is an error, for either role.
        let (p, e) = load_named("ServerAddress 192.0.2.1\nHairpinning no\nhairpinning yes\n");
        assert_eq!(e.unwrap_err(), format!("{p}:3: hairpinning given twice (first on line 2)"));
        let (p, e) = load_named("RelayType relay\nHairpinning no\nHairpinning no\n");
        assert_eq!(e.unwrap_err(), format!("{p}:3: Hairpinning given twice (first on line 2)"));
    }
}
