//! `shipworm server` settings: Miredo's `miredo-server.conf` directives, plus the new
//! ones in the same style, with command-line overrides.

use crate::config::directives::{self as config, ConfigError, ConfigFile, Directive};
use crate::runtime::reload::SameSettings;
use shipworm_proto::server::{ServerConfig, DEFAULT_MAX_FORWARDED_ICMPV6};
use shipworm_wire::ipv4_scope::non_global_reason;
use std::net::Ipv4Addr;
use std::path::Path;

/// Directives a server configuration may hold.
pub const DIRECTIVES: &[&str] = &[
    // Miredo's miredo-server.conf
    "ServerBindAddress",
    "ServerBindAddress2",
    "Prefix",
    "InterfaceMTU",
    "SyslogFacility",
    // shipworm's own
    "User",
    "MaxForwardedIcmpv6",
    "SecureQualification",
    "RetiredQualification",
    "SystemCallFilter",
    "MetricsAddress",
    "ServerRelay",
    "InterfaceName",
    "BirdSocket",
    "BirdProtocol",
    "DrainTime",
];

/// Everything the server daemon needs to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// Protocol settings.
    pub proto: ServerConfig,
    /// Accepted for compatibility; logs go to stderr (journald picks them up).
    pub syslog_facility: Option<String>,
    /// The user to become after binding.
    pub user: Option<String>,
    /// What a system call off the seccomp allow-list does.
    pub system_call_filter: crate::runtime::confinement::FilterMode,
    /// Where Prometheus scrapes `/metrics` (`MetricsAddress`; none by default).
    pub metrics_address: Option<std::net::SocketAddr>,
    /// `ServerRelay yes`: the server is a relay too (RFC 4380 §5.4.3), on a TUN
    /// interface of this name (`InterfaceName`, `teredo` by default).
    pub relay_interface: Option<String>,
    /// BIRD's control socket (`BirdSocket`): the server enables `bird_protocols` once it
    /// serves (the protocols announcing its two addresses, for servers run as anycast)
    /// and disables them first when it stops; its BIRD link disables them too if the
    /// server dies.
    pub bird_socket: Option<std::path::PathBuf>,
    /// `BirdProtocol`, one to four names (default `teredo_server`).
    pub bird_protocols: Vec<String>,
    /// How long the server goes on answering once it withdrew (`DrainTime`, seconds).
    pub drain_time: std::time::Duration,
}

/// Command-line values that override the file.
#[derive(Debug, Clone, Default)]
pub struct ServerOverrides {
    /// Primary address (Miredo's positional `server_name`).
    pub bind: Option<String>,
    /// Secondary address.
    pub bind2: Option<String>,
    /// User to run as.
    pub user: Option<String>,
}

/// Whether a file loads to the settings `running` (with the command line's overrides
/// `over` applied as at start-up): SIGHUP's judge.
pub fn same_settings(running: &ServerSettings, over: ServerOverrides) -> SameSettings {
    let running = running.clone();
    Box::new(move |f: &ConfigFile| Ok(from_file(f.clone(), &over)? == running))
}

/// Read `path` (if given) and apply the overrides.
pub fn load(path: Option<&Path>, over: &ServerOverrides) -> Result<ServerSettings, ConfigError> {
    let f = match path {
        Some(p) => ConfigFile::read(p)?,
        None => ConfigFile::parse(Path::new("<command line>"), "")?,
    };
    from_file(f, over)
}

/// The primary and secondary addresses (`ServerBindAddress`, `ServerBindAddress2`,
/// the command line's winning), in a server configuration.
fn addresses(
    f: &ConfigFile,
    over: &ServerOverrides,
    bind: Option<&Directive>,
    bind2: Option<&Directive>,
) -> Result<ServerConfig, ConfigError> {
    let cli = |what: &str, v: &str| -> Result<Ipv4Addr, ConfigError> {
        config::ipv4(v).and_then(config::global_unicast).map_err(|why| f.file_error(format!("{what} {v}: {why}")))
    };
    let primary = match (&over.bind, bind) {
        (Some(v), _) => cli("server address", v)?,
        (None, Some(d)) => f.value(d, |v| config::ipv4(v).and_then(config::global_unicast))?,
        (None, None) => {
            return Err(f.file_error("ServerBindAddress is required (the primary IPv4 address to serve on)"))
        }
    };
    let mut proto = ServerConfig::new(primary);
    match (&over.bind2, bind2) {
        (Some(v), _) => proto.secondary = cli("secondary address", v)?,
        (None, Some(d)) => proto.secondary = f.value(d, |v| config::ipv4(v).and_then(config::global_unicast))?,
        (None, None) => {
            if let Some(why) = non_global_reason(proto.secondary) {
                return Err(f.file_error(format!(
                    "the secondary address {} (primary + 1) is {why}; set ServerBindAddress2",
                    proto.secondary
                )));
            }
        }
    }
    if proto.secondary == proto.primary {
        return Err(f.file_error("the secondary address must differ from the primary"));
    }
    Ok(proto)
}

/// The secure qualification keys (`SecureQualification`, `RetiredQualification`): an
/// identifier listed twice, in either, is refused.
fn keys(
    f: &ConfigFile,
    proto: &mut ServerConfig,
    secure: &[Directive],
    retired: &[Directive],
) -> Result<(), ConfigError> {
    for (d, is_retired) in secure.iter().map(|d| (d, false)).chain(retired.iter().map(|d| (d, true))) {
        let c = f.secret_value(d, config::credentials)?;
        if proto.clients.iter().chain(&proto.retired).any(|x| x.client_id == c.client_id) {
            return Err(f.error(d, format!("client {} is listed twice", String::from_utf8_lossy(&c.client_id))));
        }
        if is_retired {
            proto.retired.push(c);
        } else {
            proto.clients.push(c);
        }
    }
    Ok(())
}

/// The settings of a file already split into directives, with the overrides.
pub fn from_file(mut f: ConfigFile, over: &ServerOverrides) -> Result<ServerSettings, ConfigError> {
    f.refuse_unknown(DIRECTIVES)?;
    let bind = f.take("ServerBindAddress")?;
    let bind2 = f.take("ServerBindAddress2")?;
    let prefix = f.take("Prefix")?;
    let mtu = f.take("InterfaceMTU")?;
    let facility = f.take("SyslogFacility")?;
    let user = f.take("User")?;
    let max_icmp = f.take("MaxForwardedIcmpv6")?;
    let secure = f.take_all("SecureQualification");
    let retired = f.take_all("RetiredQualification");
    let filter = f.take("SystemCallFilter")?;
    let metrics = f.take("MetricsAddress")?;
    let relays = f.take("ServerRelay")?;
    let interface = f.take("InterfaceName")?;
    let bird_socket = f.take("BirdSocket")?;
    let bird_protocol = f.take("BirdProtocol")?;
    let drain = f.take("DrainTime")?;

    let mut proto = addresses(&f, over, bind.as_ref(), bind2.as_ref())?;
    if let Some(d) = &prefix {
        proto.prefix = f.value(d, config::teredo_prefix)?;
    }
    if let Some(d) = &mtu {
        proto.mtu = u32::from(f.value(d, config::mtu)?);
    }
    if let Some(d) = &max_icmp {
        proto.max_forwarded_icmpv6 = f.value(d, |v| config::number_in(v, 8..=65535, "bytes"))?;
    } else {
        proto.max_forwarded_icmpv6 = DEFAULT_MAX_FORWARDED_ICMPV6;
    }
    keys(&f, &mut proto, &secure, &retired)?;
    let syslog_facility = facility.as_ref().map(|d| f.value(d, config::syslog_facility)).transpose()?;
    let user = over.user.clone().or_else(|| user.map(|d| d.value));
    let system_call_filter = filter
        .as_ref()
        .map(|d| f.value(d, config::filter_mode))
        .transpose()?
        .unwrap_or(crate::runtime::confinement::FilterMode::Enforce);
    let metrics_address = metrics.as_ref().map(|d| f.value(d, config::listen_address)).transpose()?;
    let relays = relays.as_ref().map(|d| f.value(d, config::yes_no)).transpose()?.unwrap_or(false);
    let relay_interface = match (relays, interface) {
        (true, name) => Some(name.map_or_else(|| "teredo".to_string(), |d| d.value)),
        (false, Some(d)) => return Err(f.error(&d, "InterfaceName names the relay's interface: set ServerRelay yes")),
        (false, None) => None,
    };
    let bird_socket = bird_socket.as_ref().map(|d| f.value(d, config::bird_socket)).transpose()?;
    let bird_protocols = bird_protocol
        .as_ref()
        .map(|d| f.value(d, config::bird_protocols))
        .transpose()?
        .unwrap_or_else(|| vec!["teredo_server".to_string()]);
    let drain_time = drain.as_ref().map(|d| f.value(d, |v| config::number_in(v, 0..=600, "seconds"))).transpose()?;
    let drain_time = std::time::Duration::from_secs(drain_time.map_or(2, |s| s as u64));
    f.finish(DIRECTIVES)?;
    Ok(ServerSettings {
        proto,
        syslog_facility,
        user,
        system_call_filter,
        metrics_address,
        relay_interface,
        bird_socket,
        bird_protocols,
        drain_time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<ServerSettings, String> {
        let dir = std::env::temp_dir().join(format!("shipworm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{:x}.conf", text.len() * 31 + text.bytes().map(usize::from).sum::<usize>()));
        std::fs::write(&p, text).unwrap();
        let r = load(Some(&p), &ServerOverrides::default()).map_err(|e| e.reason);
        let _ = std::fs::remove_file(&p);
        r
    }

    #[test]
    fn debian_default_file_works_unchanged() {
        let s = load_text(
            "# Please refer to the miredo-server.conf(5) manpage for details.\n\
             # Server primary IPv4 address.\n\
             # Miredo will open UDP port 3544 on this IPv4 address and the next one.\n\
             ServerBindAddress 192.0.2.221\n",
        )
        .unwrap();
        assert_eq!(s.proto.primary, Ipv4Addr::new(192, 0, 2, 221));
        assert_eq!(s.proto.secondary, Ipv4Addr::new(192, 0, 2, 222));
        assert_eq!(s.proto.prefix, 0x2001_0000);
        assert_eq!(s.proto.mtu, 1280);
    }

    #[test]
    fn every_miredo_directive() {
        let s = load_text(
            "serverbindaddress 198.51.100.10\nServerBindAddress2 198.51.100.20\nPREFIX 3ffe:831f::\n\
             InterfaceMTU 1400\nSyslogFacility local3\nUser teredo\nMaxForwardedIcmpv6 88\n\
             SecureQualification alice 0123456789\nSecureQualification bob 9876543210\n",
        )
        .unwrap();
        assert_eq!(s.proto.secondary, Ipv4Addr::new(198, 51, 100, 20));
        assert_eq!(s.proto.prefix, 0x3ffe_831f);
        assert_eq!((s.proto.mtu, s.proto.max_forwarded_icmpv6), (1400, 88));
        assert_eq!(s.syslog_facility.as_deref(), Some("local3"));
        assert_eq!(s.user.as_deref(), Some("teredo"));
        assert_eq!(s.proto.clients.len(), 2);
        assert_eq!(s.proto.clients[1].client_id, b"bob");
    }

    #[test]
    fn bad_files_say_why() {
        assert!(load_text("Prefix 2001:0::\n").unwrap_err().contains("ServerBindAddress is required"));
        assert!(load_text("ServerBindAddress 10.0.0.1\n").unwrap_err().contains("private"));
        assert!(load_text("ServerBindAddress 192.0.2.1\nRelayType client\n")
            .unwrap_err()
            .contains("unknown directive RelayType"));
        assert!(load_text("ServerBindAddress 192.0.2.1\nInterfaceMTU 9\n").unwrap_err().contains("1280"));
        assert!(load_text("ServerBindAddress 223.255.255.255\n").unwrap_err().contains("ServerBindAddress2"));
    }

    #[test]
    fn server_relay_is_off_unless_asked() {
        assert_eq!(load_text("ServerBindAddress 192.0.2.1\n").unwrap().relay_interface, None);
        let s = load_text("ServerBindAddress 192.0.2.1\nServerRelay yes\n").unwrap();
        assert_eq!(s.relay_interface.as_deref(), Some("teredo"));
        let s = load_text("ServerBindAddress 192.0.2.1\nServerRelay yes\nInterfaceName tsrv\n").unwrap();
        assert_eq!(s.relay_interface.as_deref(), Some("tsrv"));
        let e = load_text("ServerBindAddress 192.0.2.1\nInterfaceName tsrv\n").unwrap_err();
        assert!(e.contains("ServerRelay yes"), "{e}");
    }

    #[test]
    fn an_anycast_server_names_its_bird_socket_protocols_and_drain_time() {
        let s = load_text(
            "ServerBindAddress 192.0.2.1\nBirdSocket /run/bird/bird.ctl\nBirdProtocol server_a server_b\nDrainTime 5\n",
        )
        .unwrap();
        assert_eq!(s.bird_socket.as_deref(), Some(Path::new("/run/bird/bird.ctl")));
        assert_eq!(s.bird_protocols, vec!["server_a".to_string(), "server_b".to_string()]);
        assert_eq!(s.drain_time.as_secs(), 5);
        let d = load_text("ServerBindAddress 192.0.2.1\n").unwrap();
        assert_eq!((d.bird_socket, d.bird_protocols, d.drain_time.as_secs()), (None, vec!["teredo_server".into()], 2));
        assert!(load_text("ServerBindAddress 192.0.2.1\nBirdSocket bird.ctl\n").unwrap_err().contains("absolute path"));
        assert!(load_text("ServerBindAddress 192.0.2.1\nDrainTime 601\n").is_err());
    }

    #[test]
    fn a_retired_key_is_kept_apart_and_an_identifier_is_current_or_retired() {
        let s = load_text(
            "ServerBindAddress 192.0.2.1\nSecureQualification alice 0123456789\nRetiredQualification bob 9876543210\n",
        )
        .unwrap();
        assert_eq!((s.proto.clients.len(), s.proto.retired.len()), (1, 1));
        assert_eq!(s.proto.retired[0].client_id, b"bob");
        let e = load_text(
            "ServerBindAddress 192.0.2.1\nSecureQualification alice 0123456789\nRetiredQualification alice 9876543210\n",
        )
        .unwrap_err();
        assert!(e.contains("alice is listed twice") && !e.contains("9876543210"), "{e}");
    }

    #[test]
    fn a_bad_secret_line_never_shows_the_secret() {
        // Too short a secret, and a third word: the errors name the client, not the secret.
        for line in ["SecureQualification alice s3cr3t", "SecureQualification alice s3cr3t-but-long extra"] {
            let e = load_text(&format!("ServerBindAddress 192.0.2.1\n{line}\n")).unwrap_err();
            assert!(e.contains("alice"), "{e}");
            assert!(!e.contains("s3cr3t"), "the secret leaked: {e}");
        }
    }
}
