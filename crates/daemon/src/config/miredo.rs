//! Miredo's `miredo.conf` (client and relay roles), read unchanged, plus shipworm's own
//! directives in the same style. `RelayType` picks the role; directives of the other
//! role are accepted and ignored with a warning, as Miredo does.

use crate::config::directives::{self as config, ConfigError, ConfigFile, Host};
use shipworm_wire::ipv4_scope::non_global_reason;
use shipworm_wire::teredo_addr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

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
    /// The BIRD protocol that announces the Teredo prefix (`BirdProtocol`, default `teredo`).
    pub bird_protocol: String,
    /// How long a stopping relay keeps forwarding after BIRD withdrew its announcement
    /// (`DrainTime`, seconds): the time routing takes to move the traffic elsewhere.
    pub drain_time: std::time::Duration,
    /// Directives accepted but not used by this role.
    pub warnings: Vec<String>,
}

/// Read `path`; `server_arg` is Miredo's optional `SERVER_NAME` argument.
pub fn load(path: &Path, server_arg: Option<&str>) -> Result<MiredoConf, ConfigError> {
    let mut f = ConfigFile::read(path)?;
    let role = match f.take("RelayType")? {
        None => RelayType::Client,
        Some(d) => f.value(&d, |v| match v.to_ascii_lowercase().as_str() {
            "client" | "autoclient" => Ok(RelayType::Client),
            "relay" | "cone" => Ok(RelayType::Relay),
            "restricted" => Ok(RelayType::Restricted),
            "host" => Ok(RelayType::Host),
            _ => Err("expected client, autoclient, relay, cone, restricted or host".into()),
        })?,
    };
    let relay = role != RelayType::Client;
    let mut warnings = Vec::new();
    let mut c = MiredoConf {
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
        port_mapping: crate::io::port_mapping::Protocols::Pcp,
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
        system_call_filter: crate::runtime::confinement::FilterMode::Enforce,
        metrics_address: None,
        bird_socket: None,
        bird_protocol: "teredo".into(),
        drain_time: std::time::Duration::from_secs(2),
        warnings: Vec::new(),
    };
    if let Some(d) = f.take("InterfaceName")? {
        c.interface = f.value(&d, |v| {
            if v.is_empty() || v.len() > 15 || v.contains(['/', ' ']) {
                Err("an interface name has 1 to 15 characters, no '/' or spaces".into())
            } else {
                Ok(v.to_string())
            }
        })?;
    }
    if let Some(d) = f.take("BindAddress")? {
        c.bind_address = f.value(&d, config::ipv4)?;
    }
    if let Some(d) = f.take("BindPort")? {
        c.bind_port = f.value(&d, |v| v.parse::<u16>().map_err(|_| "expected a UDP port, 0 to 65535".to_string()))?;
    }
    if let Some(d) = f.take("SyslogFacility")? {
        c.syslog_facility = Some(f.value(&d, config::syslog_facility)?);
    }
    c.user = f.take("User")?.map(|d| d.value);
    let mut role_only = |d: &config::Directive, for_relay: bool| -> bool {
        if for_relay != relay {
            warnings.push(format!(
                "{}:{}: {} is for {}s; ignored in {} mode",
                path.display(),
                d.line,
                d.name,
                if for_relay { "relay" } else { "client" },
                if relay { "relay" } else { "client" }
            ));
            return false;
        }
        true
    };
    let global = |a: Ipv4Addr| match non_global_reason(a) {
        None => Ok(a),
        Some(why) => Err(format!("a Teredo server needs a global unicast address, this is {why}")),
    };
    if let Some(d) = f.take("Prefix")? {
        if role_only(&d, true) {
            c.prefix = f.value(&d, config::teredo_prefix)?;
        }
    }
    if let Some(d) = f.take("TunOffload")? {
        c.tun_offload = f.value(&d, config::yes_no)?;
    }
    if let Some(d) = f.take("SystemCallFilter")? {
        c.system_call_filter = f.value(&d, config::filter_mode)?;
    }
    if let Some(d) = f.take("MetricsAddress")? {
        c.metrics_address = Some(f.value(&d, config::listen_address)?);
    }
    if let Some(d) = f.take("InterfaceMTU")? {
        if role_only(&d, true) {
            c.mtu = f.value(&d, config::mtu)?;
        }
    }
    if let Some(d) = f.take("BirdSocket")? {
        if role_only(&d, true) {
            c.bird_socket = Some(f.value(&d, |v| {
                if v.starts_with('/') {
                    Ok(std::path::PathBuf::from(v))
                } else {
                    Err("expected the absolute path of BIRD's control socket (e.g. /run/bird/bird.ctl)".into())
                }
            })?);
        }
    }
    if let Some(d) = f.take("BirdProtocol")? {
        if role_only(&d, true) {
            c.bird_protocol = f.value(&d, |v| {
                if crate::io::bird::is_protocol_name(v) {
                    Ok(v.to_string())
                } else {
                    Err("expected a BIRD protocol name (letters, digits, '_', not starting with a digit)".into())
                }
            })?;
        }
    }
    if let Some(d) = f.take("DrainTime")? {
        if role_only(&d, true) {
            c.drain_time = f.value(&d, |v| match config::number(v)? {
                n @ 0..=600 => Ok(std::time::Duration::from_secs(n as u64)),
                _ => Err("expected 0 to 600 seconds".into()),
            })?;
        }
    }
    for (name, for_relay) in [
        ("PeerCapacity", true),
        ("PeersPerAddress", true),
        ("QueueBytes", true),
        ("RelayAddress", true),
        ("RelayThreads", true),
        ("BusyPoll", true),
    ] {
        if let Some(d) = f.take(name)? {
            if !role_only(&d, for_relay) {
                continue;
            }
            match name {
                "PeerCapacity" => {
                    c.peer_capacity = f.value(&d, |v| match config::number(v)? {
                        n @ 16..=100_000_000 => Ok(n),
                        _ => Err("expected 16 to 100000000 peers".into()),
                    })?
                }
                "PeersPerAddress" => {
                    c.peers_per_address = f.value(&d, |v| match config::number(v)? {
                        n @ 1..=100_000_000 => Ok(n),
                        _ => Err("expected 1 to 100000000 peers".into()),
                    })?
                }
                "QueueBytes" => {
                    c.queue_bytes = f.value(&d, |v| match config::number(v)? {
                        n @ 1280..=1_048_576 => Ok(n),
                        _ => Err("expected 1280 to 1048576 bytes".into()),
                    })?
                }
                "BusyPoll" => {
                    c.busy_poll_us = f.value(&d, |v| match config::number(v)? {
                        n @ 0..=10_000 => Ok(n as u64),
                        _ => Err("expected 0 to 10000 microseconds".into()),
                    })?
                }
                "RelayThreads" => {
                    c.relay_threads = Some(f.value(&d, |v| match config::number(v)? {
                        n @ 1..=256 => Ok(n),
                        _ => Err("expected 1 to 256 worker threads".into()),
                    })?)
                }
                _ => {
                    c.relay_address = Some(
                        f.value(&d, |v| v.parse::<Ipv6Addr>().map_err(|_| "expected an IPv6 address".to_string()))?,
                    )
                }
            }
        }
    }
    if let Some(d) = f.take("ServerAddress")? {
        if role_only(&d, false) {
            c.server = Some(f.value(&d, |v| config::server_host(v, global))?);
        }
    }
    if let Some(d) = f.take("ServerAddress2")? {
        if role_only(&d, false) {
            c.server2 = Some(f.value(&d, |v| config::server_host(v, global))?);
        }
    }
    if let Some(d) = f.take("RefreshInterval")? {
        if role_only(&d, false) {
            c.refresh_interval = f.value(&d, |v| match config::number(v)? {
                n @ 5..=3600 => Ok(n as u64),
                _ => Err("expected 5 to 3600 seconds".into()),
            })?;
        }
    }
    if let Some(d) = f.take("SymmetricNatSupport")? {
        if role_only(&d, false) {
            c.symmetric_nat_support = f.value(&d, config::yes_no)?;
        }
    }
    if let Some(d) = f.take("OpeningBubbleTtl")? {
        if role_only(&d, false) {
            c.opening_bubble_ttl = f.value(&d, |v| match config::number(v)? {
                n @ 0..=255 => Ok(n as u8),
                _ => Err("expected a TTL from 0 (no opening bubble) to 255".into()),
            })?;
        }
    }
    if let Some(d) = f.take("ServerLoadReduction")? {
        if role_only(&d, false) {
            c.server_load_reduction = f.value(&d, config::yes_no)?;
        }
    }
    if let Some(d) = f.take("Hairpinning")? {
        if role_only(&d, false) {
            c.hairpinning = f.value(&d, config::yes_no)?;
        }
    }
    if let Some(d) = f.take("PortMapping")? {
        if role_only(&d, false) {
            use crate::io::port_mapping::Protocols;
            c.port_mapping = f.value(&d, |v| match v.to_ascii_lowercase().as_str() {
                "auto" | "yes" | "on" => Ok(Protocols::Auto),
                "pcp" => Ok(Protocols::Pcp),
                "upnp" => Ok(Protocols::Upnp),
                "off" | "no" | "none" => Ok(Protocols::Off),
                _ => Err("expected auto, pcp, upnp or off".into()),
            })?;
        }
    }
    if let Some(d) = f.take("LocalDiscovery")? {
        if role_only(&d, false) {
            c.local_discovery = f.value(&d, config::yes_no)?;
        }
    }
    if let Some(d) = f.take("DefaultRouteMetric")? {
        if role_only(&d, false) {
            c.route_metric = f.value(&d, |v| match v.parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err("expected a route metric from 1 to 4294967295".into()),
            })?;
        }
    }
    if let Some(d) = f.take("HookScript")? {
        if role_only(&d, false) {
            c.hook_script = Some(f.value(&d, |v| {
                let p = std::path::PathBuf::from(v);
                if p.is_absolute() {
                    Ok(p)
                } else {
                    Err("give an absolute path".into())
                }
            })?);
        }
    }
    if let Some(d) = f.take("SecureQualification")? {
        if role_only(&d, false) {
            c.credentials = Some(f.secret_value(&d, config::credentials)?);
        }
    }
    for d in f.take_all("FallbackServerAddress") {
        if role_only(&d, false) {
            c.fallback_servers.push(f.value(&d, |v| config::server_host(v, global))?);
        }
    }
    if let Some(s) = server_arg {
        c.server = Some(config::server_host(s, global).map_err(|why| f.file_error(format!("server {s}: {why}")))?);
    }
    if role == RelayType::Client && c.server.is_none() {
        return Err(f.file_error("ServerAddress is required in client mode (the Teredo server to qualify with)"));
    }
    f.finish(DIRECTIVES)?;
    c.warnings = warnings;
    Ok(c)
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
    fn a_relay_names_its_bird_socket_protocol_and_drain_time() {
        let c =
            load_text("RelayType relay\nBirdSocket /run/bird/bird.ctl\nBirdProtocol teredo_v6\nDrainTime 5\n").unwrap();
        assert_eq!(c.bird_socket.as_deref(), Some(Path::new("/run/bird/bird.ctl")));
        assert_eq!((c.bird_protocol.as_str(), c.drain_time.as_secs()), ("teredo_v6", 5));
        let d = load_text("RelayType relay\n").unwrap();
        assert_eq!((d.bird_socket, d.bird_protocol.as_str(), d.drain_time.as_secs()), (None, "teredo", 2));
        assert!(load_text("RelayType relay\nBirdSocket bird.ctl\n").unwrap_err().contains("absolute path"));
        assert!(load_text("RelayType relay\nBirdProtocol 1x\n").unwrap_err().contains("BIRD protocol name"));
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
}
