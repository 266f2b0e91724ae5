//! Command-line definitions.

use clap::{Args, Parser, Subcommand};

/// `shipworm --version`: the version, whether the kernel data path is built in, and how
/// optimised the build is (which the benchmark reads).
#[cfg(feature = "kernel-path")]
pub(crate) const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nkernel data path: built in (eBPF programs; DataPath auto uses them)\nbuild: opt-level ",
    env!("SHIPWORM_OPT_LEVEL")
);
#[cfg(not(feature = "kernel-path"))]
pub(crate) const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nkernel data path: not built in (built with --no-default-features: every packet goes through the daemon)",
    "\nbuild: opt-level ",
    env!("SHIPWORM_OPT_LEVEL")
);

/// shipworm — IPv6 for hosts behind IPv4 NATs, tunnelled over UDP (Teredo, RFC 4380,
/// 5991, 6081). One binary for every role.
#[derive(Debug, Parser)]
#[command(name = "shipworm", version, long_version = LONG_VERSION, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decode a Teredo address, or encode one from its parts.
    ///
    /// Decode: `shipworm address 2001:0:303:303:8000:e148:fefe:fefe`.
    /// Encode: `shipworm address --server 3.3.3.3 --mapped 1.1.1.1:7863 --cone`.
    Address(AddressArgs),

    /// Run a Teredo server (RFC 4380 §5.3) on two consecutive public IPv4 addresses.
    ///
    /// Reads Miredo's miredo-server.conf format unchanged. Needs root (or CAP_NET_RAW)
    /// to open its raw IPv6 socket (held by a small process, shipworm-echo, that sends
    /// only connectivity-test echoes), then runs as an unprivileged user. With
    /// `ServerRelay yes` it relays too (RFC 4380 §5.4.3), on a TUN interface it makes
    /// (CAP_NET_ADMIN, /dev/net/tun).
    Server(ServerArgs),

    /// Run a Teredo relay (RFC 4380 §5.4) or host-specific relay (§5.5).
    ///
    /// Reads Miredo's miredo.conf format unchanged, with `RelayType relay`, `cone`,
    /// `restricted` or `host`. Needs root to create its TUN interface, then drops it.
    /// With `DataPath kernel` or `auto` (the default), trusted clients' packets are
    /// moved by eBPF programs it loads at start (XDP or tc ingress, tc egress), every
    /// decision staying in the relay; `DataPath user` moves every packet itself.
    /// `KernelForward direct` has the programs send those packets out of their routes
    /// themselves, past the host's IPv6 stack and its firewall (default `stack`: the
    /// host forwards them).
    Relay(RelayArgs),

    /// Run a Teredo client (RFC 4380 §5.2, RFC 5991): IPv6 from behind an IPv4 NAT.
    ///
    /// Reads Miredo's miredo.conf format unchanged (RelayType client, the default).
    /// Needs root to create its interface; then only its interface helper keeps
    /// CAP_NET_ADMIN, the client none. With `DataPath kernel` or `auto` (the default),
    /// trusted peers' packets are moved by eBPF programs it loads at start (tc ingress
    /// of its Ethernet interfaces, into the Teredo interface; tc egress of the Teredo
    /// interface), every decision staying in the client; `DataPath user` moves every
    /// packet itself.
    Client(ClientArgs),

    /// Show what a running client is doing: state, address, NAT kind, server, peers,
    /// counters.
    Status(StatusArgs),

    /// Check a configuration file without starting anything: prints what it means, or
    /// one line naming the file, line and reason (exit status 2).
    CheckConfig(CheckConfigArgs),
}

/// Arguments of `shipworm server`, Miredo's options included.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Configuration file (miredo-server.conf format).
    #[arg(short = 'c', long = "config", value_name = "FILE", default_value = "/etc/miredo/miredo-server.conf")]
    pub config: std::path::PathBuf,

    /// Primary IPv4 address, overriding ServerBindAddress (as miredo-server's
    /// `server_name` argument).
    #[arg(value_name = "SERVER_ADDRESS")]
    pub bind: Option<String>,

    /// Secondary IPv4 address, overriding ServerBindAddress2.
    #[arg(long, value_name = "IPV4")]
    pub bind2: Option<String>,

    /// What every daemon accepts.
    #[command(flatten)]
    pub daemon: DaemonFlags,
}

/// Arguments of `shipworm relay`, Miredo's options included.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Configuration file (miredo.conf format).
    #[arg(short = 'c', long = "config", value_name = "FILE", default_value = "/etc/miredo/miredo.conf")]
    pub config: std::path::PathBuf,

    /// What every daemon accepts.
    #[command(flatten)]
    pub daemon: DaemonFlags,
}

/// Arguments of `shipworm client`, Miredo's options included.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// Configuration file (miredo.conf format).
    #[arg(short = 'c', long = "config", value_name = "FILE", default_value = "/etc/miredo/miredo.conf")]
    pub config: std::path::PathBuf,

    /// The Teredo server, overriding ServerAddress (as miredo's SERVER_NAME).
    #[arg(value_name = "SERVER_NAME")]
    pub server: Option<String>,

    /// What every daemon accepts.
    #[command(flatten)]
    pub daemon: DaemonFlags,
}

/// The options every daemon (server, relay, client) accepts, Miredo's included.
#[derive(Debug, Args)]
pub struct DaemonFlags {
    /// The user to run as once set up (default: shipworm, else nobody).
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: Option<String>,

    /// Write the process id to this file (removed on a clean stop).
    #[arg(short = 'p', long, value_name = "FILE")]
    pub pidfile: Option<std::path::PathBuf>,

    /// Stay in the foreground (always the case; accepted for Miredo compatibility).
    #[arg(short = 'f', long)]
    pub foreground: bool,

    /// The status socket `shipworm status` reads (default: /run/shipworm/IFACE.sock for
    /// a client or relay, /run/shipworm/server.sock for a server).
    #[arg(long, value_name = "PATH")]
    pub control: Option<std::path::PathBuf>,
}

/// Arguments of `shipworm status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The daemon's status socket (default: the only one in /run/shipworm).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<std::path::PathBuf>,

    /// Print the JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Which role a configuration file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// miredo-server.conf.
    Server,
    /// miredo.conf (client or relay, as its RelayType says).
    Miredo,
}

/// Arguments of `shipworm check-config`.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The file to check.
    #[arg(value_name = "FILE")]
    pub file: std::path::PathBuf,

    /// The role the file configures (default: told by its directives, e.g.
    /// ServerBindAddress makes a server file, RelayType or ServerAddress a miredo.conf).
    #[arg(long, value_enum)]
    pub role: Option<Role>,
}

/// Arguments of `shipworm address`.
#[derive(Debug, Args)]
pub struct AddressArgs {
    /// The Teredo IPv6 address to decode.
    #[arg(value_name = "ADDRESS", conflicts_with_all = ["server", "mapped", "cone", "random_bits"], required_unless_present_all = ["server", "mapped"])]
    pub address: Option<String>,

    /// Encode: the Teredo server's IPv4 address.
    #[arg(long, value_name = "IPV4", requires = "mapped")]
    pub server: Option<String>,

    /// Encode: the client's mapped (NAT-external) IPv4 address and port.
    #[arg(long, value_name = "IPV4:PORT", requires = "server")]
    pub mapped: Option<String>,

    /// Encode: set the cone flag (deprecated by RFC 5991; only old clients set it).
    #[arg(long)]
    pub cone: bool,

    /// Encode: the 12 RFC 5991 random bits, 0–4095 (decimal or 0x hex), or `random`.
    /// Without it the bits are zero, as an RFC 4380 client would form the address.
    #[arg(long, value_name = "N")]
    pub random_bits: Option<String>,

    /// The Teredo prefix (a /32). Decoding accepts 2001:0::/32 and the old 3ffe:831f::/32
    /// unless this names another; encoding uses 2001:0::/32 unless this is given.
    #[arg(long, value_name = "PREFIX")]
    pub prefix: Option<String>,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}
