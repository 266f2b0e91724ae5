//! # shipworm-lab
//!
//! A little Internet made of network namespaces, for `shipworm-lab` and the end-to-end
//! suite. One "public" segment (a bridge in a `core` namespace, 192.0.2.0/24 and
//! 2001:db8:1::/64) joins:
//!
//! * a Teredo server with two consecutive addresses (192.0.2.1 and .2) and native IPv6;
//! * a relay (192.0.2.10, 2001:db8:1::10) that the native side routes 2001::/32 to —
//!   or, in a lab with a routed core, two relays announcing it by BGP to a router the
//!   native side routes it through ([`anycast`]);
//! * a native IPv6 host (2001:db8:1::100);
//! * NAT boxes (192.0.2.21, .22, …) built with nftables, each with a private
//!   10.k.0.0/24 behind it and clients on it.
//!
//! The NAT boxes are not on the bridge: each has its own link to the `core` namespace,
//! which routes between them and the public segment (answering ARP for them by proxy),
//! so that, as on the Internet, a router stands between two NATs and between a NAT and
//! the servers. A packet whose TTL runs out there has passed its own NAT and never
//! reaches the other one, which is what a client's opening bubble relies on.
//!
//! The lab builds its network with `ip` and `nft`, as an administrator would: it is
//! the test bench, not the daemon (which configures itself through rtnetlink).
//! Namespace names are unique per run; everything is removed when the [`Lab`] is
//! dropped, on panic, and on Ctrl-C.

pub mod anycast;
pub mod bird;
pub mod error;
pub mod frame_sender;
pub mod igd;
pub mod live_frames;
pub mod names;
pub mod nat;
pub mod nat_probe;
pub mod netns;
mod nic_buffers;
pub mod packet_ring;
pub mod peers;
pub mod scenario;
pub mod scripted_peer;
pub mod sixtofour;
pub mod stun;
pub mod traffic;
mod xdp;

pub use error::{LabError, Result};
pub use nat::NatKind;
pub use peers::Impl;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Server primary address.
pub const SERVER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// Server secondary address.
pub const SERVER2_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// Server native IPv6 address.
pub const SERVER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
/// Relay IPv4 address.
pub const RELAY_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// Relay native IPv6 address.
pub const RELAY_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
/// The native IPv6 host.
pub const HOST6_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x100);
/// A second address of the native host: a correspondent the client has never met,
/// for a cold first contact after the first one warmed the relay.
pub const HOST6_B_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x101);
/// The benchmark's traffic generator (emulated Teredo clients use its ports).
pub const GEN_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 50);
/// The generator's address for the native reference path.
pub const GEN_NATIVE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 0x50);
/// The native host's address reached through the relay host's kernel (reference path
/// and Teredo traffic alike).
pub const SINK_NATIVE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x100);
/// The core router's address on the public segment.
pub const CORE_ROUTER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 254);
/// The second Teredo server (failover), primary address; its secondary is .6.
pub const SERVER_B_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 5);

/// A client host behind a NAT.
#[derive(Debug, Clone)]
pub struct ClientHost {
    /// Its namespace.
    pub ns: String,
    /// The NAT in front of it.
    pub nat: NatKind,
    /// Its private address.
    pub lan: Ipv4Addr,
    /// The NAT's public address.
    pub nat_public: Ipv4Addr,
}

/// What to build: NAT boxes, each with a number of clients.
#[derive(Debug, Clone)]
pub struct LabSpec {
    /// One entry per NAT box.
    pub nats: Vec<(NatKind, usize)>,
    /// A second server host (192.0.2.5 and .6), for failover.
    pub second_server: bool,
    /// A traffic generator host (`gen`, 192.0.2.50, 2001:db8:1::50) and routes that
    /// send native traffic between it and the native host through the relay host's
    /// kernel: the benchmark's reference path.
    pub generator: bool,
    /// A routed core for anycast relays: a second relay host (`rlyb`, 192.0.2.11,
    /// 2001:db8:1::11) and a router (`rtr`, 2001:db8:1::fe) that the native host and the
    /// server route 2001::/32 through, and that learns the relays' announcements of it
    /// by BGP (see [`anycast`]).
    pub anycast: bool,
    /// With `anycast`: the relays share an IPv4 service address too (192.0.2.100, on
    /// each relay host's loopback), announced by BGP beside the prefix; the core routes
    /// it through the router, so clients reach whichever relay routing prefers.
    pub anycast_v4: bool,
    /// With `anycast`: two server hosts (`srv`, 192.0.2.41, and `srv2`, 192.0.2.42,
    /// 2001:db8:1::22) both serve the server addresses 192.0.2.1 and .2 (on their
    /// loopbacks), announced by BGP while the server says it serves; the core and the
    /// relay hosts route them through the router, which prefers `srv`.
    pub anycast_servers: bool,
    /// The first NAT box's link to the core has this IPv4 MTU, and neither the box nor
    /// the core sends "fragmentation needed" (ICMP type 3 code 4) through: a narrow path
    /// whose routers' PMTU messages a firewall filters.
    pub narrow_wan: Option<u32>,
    /// Which hosts' interfaces sum transport checksums in software ([`SoftwareSums`]).
    pub software_sums: SoftwareSums,
    /// A 6to4 site on the public segment: a host (`h64`, 192.0.2.60, 2002:c000:23c::1)
    /// that reaches IPv6 through a 6to4 relay router (`r64`, 192.0.2.70,
    /// 2001:db8:1::70), which the relay, the server and the native host route
    /// 2002::/16 through (see [`sixtofour`]).
    pub sixtofour: bool,
}

/// Hosts whose interface sums transport checksums in software, as a NIC without
/// checksum offload (every other lab interface hands a sum still to be taken on to the
/// next host as it is, as veths do, where a NIC would finish it on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SoftwareSums {
    /// None: the lab's default.
    #[default]
    None,
    /// The relay host `rly` (its `eth0`; not an anycast lab's second relay): a sum
    /// still to be taken is taken on its way out.
    Relay,
    /// Every client host's `eth0` (not a link a client moved to): their datagrams
    /// arrive with finished sums, as from a real wire.
    Clients,
}

impl LabSpec {
    /// NAT boxes with clients, one server.
    pub fn nats(nats: Vec<(NatKind, usize)>) -> LabSpec {
        LabSpec {
            nats,
            second_server: false,
            generator: false,
            anycast: false,
            anycast_v4: false,
            anycast_servers: false,
            narrow_wan: None,
            software_sums: SoftwareSums::None,
            sixtofour: false,
        }
    }
}

/// A built lab. Dropping it stops its processes and removes its namespaces.
pub struct Lab {
    prefix: String,
    dir: PathBuf,
    keep: bool,
    /// Running daemons (server, relay, clients).
    pub(crate) peers: Vec<peers::Peer>,
    /// The clients, in the order of the spec.
    pub clients: Vec<ClientHost>,
    /// The STUN server miniupnpd boxes check their address with, once one runs.
    pub(crate) stun: Option<stun::StunResponder>,
    /// The 6to4 site's tunnel ends, when it has one.
    pub(crate) tunnels: Vec<sixtofour::Sit>,
    /// Environment the daemons started from now on get (a service manager's, say).
    pub(crate) daemon_env: Vec<(String, String)>,
    /// The relays' shared IPv4 service address, when they have one.
    pub(crate) relay_anycast_v4: Option<Ipv4Addr>,
    /// XDP links that make switch ports fill buffers of their own ([`nic_buffers`]);
    /// closed with the lab, even a kept one (only benchmarks use them).
    nic_buffers: Vec<std::os::fd::OwnedFd>,
    /// The server addresses are served by two hosts, as anycast.
    pub(crate) anycast_servers: bool,
}

static RUNS: AtomicUsize = AtomicUsize::new(0);

impl Lab {
    /// Build the topology of `spec`. Needs root.
    pub fn build(spec: &LabSpec) -> Result<Lab> {
        netns::preflight()?;
        netns::install_interrupt_cleanup();
        netns::remove_stale()?;
        let k = RUNS.fetch_add(1, Ordering::Relaxed);
        let prefix = netns::run_prefix(k);
        let dir = std::env::temp_dir().join(format!("shipworm-lab-{}-{k}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| LabError::new(format!("{}: {e}", dir.display())))?;
        let mut lab = Lab {
            prefix,
            dir,
            keep: false,
            peers: Vec::new(),
            clients: Vec::new(),
            stun: None,
            tunnels: Vec::new(),
            daemon_env: Vec::new(),
            relay_anycast_v4: None,
            anycast_servers: false,
            nic_buffers: Vec::new(),
        };
        lab.build_core(spec.second_server)?;
        if spec.anycast {
            lab.build_anycast_core(spec.anycast_v4, spec.anycast_servers)?;
        }
        if spec.generator {
            lab.build_generator()?;
        }
        if spec.sixtofour {
            lab.build_sixtofour()?;
        }
        for (i, &(kind, clients)) in spec.nats.iter().enumerate() {
            lab.build_nat(i + 1, kind, clients)?;
        }
        if let Some(mtu) = spec.narrow_wan.filter(|_| !spec.nats.is_empty()) {
            lab.narrow_wan(1, mtu)?;
        }
        let software = match spec.software_sums {
            SoftwareSums::None => vec![],
            SoftwareSums::Relay => vec![lab.ns("rly")],
            SoftwareSums::Clients => lab.clients.iter().map(|c| c.ns.clone()).collect(),
        };
        for ns in software {
            Self::sums_in_software(&ns)?;
        }
        Ok(lab)
    }

    /// The full name of the lab namespace `short` (`srv`, `rly`, `h6`, `nat1`, `c1a`…).
    pub fn ns(&self, short: &str) -> String {
        format!("{}{short}", self.prefix)
    }

    /// Where configuration files and logs go.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Give the daemons started from now on `key=value` in their environment, as a
    /// service manager would (systemd's NOTIFY_SOCKET, WATCHDOG_USEC).
    pub fn set_daemon_env(&mut self, key: &str, value: &str) {
        self.daemon_env.retain(|(k, _)| k != key);
        self.daemon_env.push((key.to_string(), value.to_string()));
    }

    /// Leave everything running when dropped (`shipworm-lab --keep`).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Every namespace of this lab.
    pub fn namespaces(&self) -> Vec<String> {
        netns::ip(&["netns", "list"])
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&self.prefix))
            .map(str::to_string)
            .collect()
    }

    pub(crate) fn host(&self, short: &str, veth: usize) -> Result<String> {
        let ns = self.ns(short);
        netns::add(&ns)?;
        let core = self.ns("core");
        let port = format!("p{veth}");
        netns::ip(&["link", "add", &port, "netns", &core, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
        netns::ip(&["-n", &core, "link", "set", &port, "master", "br0", "up"])?;
        netns::ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        Self::like_a_nic(&ns, "eth0")?;
        Self::like_a_nic(&core, &port)?;
        Ok(ns)
    }

    /// Host `ns`'s interface finishes transport checksums in software, as a NIC
    /// without checksum offload: what leaves it carries finished sums.
    fn sums_in_software(ns: &str) -> Result<()> {
        netns::exec(ns, &["ethtool", "-K", "eth0", "tx-checksumming", "off"]).map(drop)
    }

    /// Every lab interface behaves like a NIC. It hands the wire one datagram per frame,
    /// as a NIC does (cutting in software or in hardware): a veth would pass a segmented
    /// send (UDP_SEGMENT, or a kernel data path's train of encapsulated TCP segments)
    /// to the next namespace whole, so the receiver, the NAT or the generator would do
    /// the sender's segmenting (or, a socket, take the train as one datagram), and a
    /// relay's rate would count work its host never did. And it coalesces what it
    /// receives (GRO), as NIC drivers do: a veth does not unless asked, and the kernel
    /// paths every daemon runs on would be those of no real host. Checksums it leaves
    /// to the next host as veths do (a sum still to be taken goes on so): the daemons'
    /// datagrams reach the relay as a local sender's would ([`SoftwareSums`] changes
    /// that per host).
    fn like_a_nic(ns: &str, dev: &str) -> Result<()> {
        let off = ["tx-udp-segmentation", "tx-udp_tnl-segmentation", "tx-udp_tnl-csum-segmentation"];
        let args: Vec<&str> =
            ["-K", dev].into_iter().chain(off.iter().flat_map(|f| [*f, "off"])).chain(["gro", "on"]).collect();
        netns::exec(ns, &[&["ethtool"][..], &args].concat()).map(drop).map_err(|e| {
            LabError::new(format!("{e} (ethtool, Debian package `ethtool`, sets the lab's interfaces' offloads; scripts/test.sh installs it)"))
        })
    }

    /// The bridges of namespace `ns` forward frames as a switch does, past the
    /// namespace's IP firewall. Where the host has `br_netfilter` loaded (container
    /// hosts do), every namespace's bridges would otherwise send each frame they
    /// bridge through its iptables/nftables hooks and conntrack (the module's default
    /// in every new namespace): work that depends on the machine, on the core every
    /// frame crosses, counted in every figure. The NAT boxes' rules judge what they
    /// route, not what they bridge, so nothing else changes.
    fn bridge_like_a_switch(ns: &str) -> Result<()> {
        let off = "test -d /proc/sys/net/bridge || exit 0; \
                   sysctl -qw net.bridge.bridge-nf-call-iptables=0 net.bridge.bridge-nf-call-ip6tables=0 \
                   net.bridge.bridge-nf-call-arptables=0";
        netns::exec(ns, &["sh", "-c", off]).map(drop)
    }

    pub(crate) fn addr(ns: &str, cidr: &str, dev: &str) -> Result<()> {
        let mut args = vec!["-n", ns, "addr", "add", cidr, "dev", dev];
        if cidr.contains(':') {
            args.push("nodad");
        }
        netns::ip(&args).map(drop)
    }

    fn build_core(&mut self, second_server: bool) -> Result<()> {
        let core = self.ns("core");
        netns::add(&core)?;
        netns::ip(&["-n", &core, "link", "add", "br0", "type", "bridge"])?;
        Self::bridge_like_a_switch(&core)?;
        netns::ip(&["-n", &core, "link", "set", "br0", "up"])?;
        // The router between the public segment and the NAT boxes' links.
        Self::addr(&core, &format!("{CORE_ROUTER_V4}/24"), "br0")?;
        // Proxy ARP answers at once (the kernel's default delays each answer by up to 0.8 s).
        netns::exec(
            &core,
            &[
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
                "net.ipv4.conf.br0.proxy_arp=1",
                "net.ipv4.neigh.br0.proxy_delay=0",
            ],
        )?;

        let srv = self.host("srv", 1)?;
        Self::addr(&srv, &format!("{SERVER_V4}/24"), "eth0")?;
        Self::addr(&srv, &format!("{SERVER2_V4}/24"), "eth0")?;
        Self::addr(&srv, &format!("{SERVER_V6}/64"), "eth0")?;
        netns::ip(&["-n", &srv, "-6", "route", "add", "2001::/32", "via", &RELAY_V6.to_string()])?;

        let rly = self.host("rly", 2)?;
        Self::addr(&rly, &format!("{RELAY_V4}/24"), "eth0")?;
        Self::addr(&rly, &format!("{RELAY_V6}/64"), "eth0")?;
        netns::sysctl(&rly, &["net.ipv6.conf.all.forwarding=1"])?;

        let h6 = self.host("h6", 3)?;
        Self::addr(&h6, &format!("{HOST6_V6}/64"), "eth0")?;
        Self::addr(&h6, &format!("{HOST6_B_V6}/64"), "eth0")?;
        netns::ip(&["-n", &h6, "-6", "route", "add", "2001::/32", "via", &RELAY_V6.to_string()])?;
        // Warm the native segment (neighbour caches, router state) so that first contacts
        // measured later show Teredo, not the lab waking up.
        for (from, to) in [(&h6, RELAY_V6), (&srv, RELAY_V6), (&srv, HOST6_V6), (&rly, HOST6_V6)] {
            let _ = netns::exec(from, &["ping", "-6", "-n", "-c", "1", "-W", "2", &to.to_string()]);
        }
        if second_server {
            let srv = self.host("srvb", 4)?;
            Self::addr(&srv, &format!("{SERVER_B_V4}/24"), "eth0")?;
            Self::addr(&srv, "192.0.2.6/24", "eth0")?;
            Self::addr(&srv, "2001:db8:1::2/64", "eth0")?;
            netns::ip(&["-n", &srv, "-6", "route", "add", "2001::/32", "via", &RELAY_V6.to_string()])?;
        }
        Ok(())
    }

    /// Make the server host the relay too: the native side routes 2001::/32 to the
    /// server (2001:db8:1::1) instead of the relay host, the server forwards IPv6, and
    /// its own route to the relay host goes, so a server started with `ServerRelay
    /// yes` can route the prefix to its interface.
    pub fn route_teredo_through_server(&self) -> Result<()> {
        let (srv, h6) = (self.ns("srv"), self.ns("h6"));
        netns::ip(&["-n", &srv, "-6", "route", "del", "2001::/32"])?;
        netns::sysctl(&srv, &["net.ipv6.conf.all.forwarding=1"])?;
        netns::ip(&["-n", &h6, "-6", "route", "replace", "2001::/32", "via", &SERVER_V6.to_string()])?;
        Ok(())
    }

    /// Lose `percent` % of client `c`'s outgoing UDP datagrams (to its servers, relay and
    /// peers), at random, as a lossy radio link would; 0 stops the loss. An nftables
    /// rule in the client's namespace (`numgen random`: no netem needed).
    pub fn lose_uplink(&self, c: usize, percent: u32) -> Result<()> {
        let ns = &self.clients[c].ns;
        let _ = netns::exec_input(ns, &["nft", "-f", "-"], Some("delete table inet lab_loss\n"));
        if percent == 0 {
            return Ok(());
        }
        let rules = format!(
            "table inet lab_loss {{\n  chain outbound {{ type filter hook output priority 0; meta l4proto udp numgen random mod 100 < {percent} drop; }}\n}}\n"
        );
        netns::exec_input(ns, &["nft", "-f", "-"], Some(&rules)).map(drop)
    }

    /// NAT box `i`'s link to the core narrowed to `mtu`, "fragmentation needed" dropped
    /// wherever it would be sent (the box's and the core's output, and forwarded).
    fn narrow_wan(&self, i: usize, mtu: u32) -> Result<()> {
        let (nat, core) = (self.ns(&format!("nat{i}")), self.ns("core"));
        let mtu = mtu.to_string();
        let port = format!("p{}", 10 + i);
        netns::ip(&["-n", &core, "link", "set", &port, "mtu", &mtu])?;
        netns::ip(&["-n", &nat, "link", "set", "wan", "mtu", &mtu])?;
        // A router that forwards packet by packet: no GRO to merge datagrams into a
        // super-packet the kernel would cut to the narrow MTU whatever their DF bit.
        for (ns, dev) in [(&core, port.as_str()), (&nat, "wan"), (&nat, "lan")] {
            netns::exec(ns, &["ethtool", "-K", dev, "gro", "off"])?;
        }
        let filter = "table ip lab_pmtu_filter {
  chain outbound { type filter hook output priority 0; icmp type destination-unreachable icmp code frag-needed drop; }
  chain forwarded { type filter hook forward priority 0; icmp type destination-unreachable icmp code frag-needed drop; }
}
";
        for ns in [&nat, &core] {
            netns::exec_input(ns, &["nft", "-f", "-"], Some(filter))?;
        }
        Ok(())
    }

    fn build_nat(&mut self, i: usize, kind: NatKind, clients: usize) -> Result<()> {
        let wan = Ipv4Addr::new(192, 0, 2, 20 + i as u8);
        let nat = self.ns(&format!("nat{i}"));
        netns::add(&nat)?;
        let core = self.ns("core");
        let port = format!("p{}", 10 + i);
        netns::ip(&["link", "add", &port, "netns", &core, "type", "veth", "peer", "name", "wan", "netns", &nat])?;
        // Routed, not bridged: the box keeps its /24 and the core answers its ARP for
        // the rest of the segment (and the segment's for it).
        netns::ip(&["-n", &core, "link", "set", &port, "up"])?;
        Self::like_a_nic(&core, &port)?;
        Self::like_a_nic(&nat, "wan")?;
        netns::exec(
            &core,
            &[
                "sysctl",
                "-qw",
                &format!("net.ipv4.conf.{port}.proxy_arp=1"),
                &format!("net.ipv4.neigh.{port}.proxy_delay=0"),
            ],
        )?;
        netns::ip(&[
            "-n",
            &core,
            "route",
            "add",
            &format!("{wan}/32"),
            "dev",
            &port,
            "src",
            &CORE_ROUTER_V4.to_string(),
        ])?;
        netns::ip(&["-n", &nat, "link", "set", "wan", "up"])?;
        Self::addr(&nat, &format!("{wan}/24"), "wan")?;
        netns::ip(&["-n", &nat, "link", "add", "lan", "type", "bridge"])?;
        Self::bridge_like_a_switch(&nat)?;
        netns::ip(&["-n", &nat, "link", "set", "lan", "up"])?;
        Self::addr(&nat, &format!("10.{i}.0.1/24"), "lan")?;
        netns::sysctl(&nat, &["net.ipv4.ip_forward=1"])?;
        let first = Ipv4Addr::new(10, i as u8, 0, 2);
        netns::exec_input(&nat, &["nft", "-f", "-"], Some(&kind.ruleset(wan, first)))?;
        if let Some(pcp) = kind.igd() {
            self.start_igd(i, pcp)?;
        }
        for j in 0..clients {
            let ns = self.ns(&format!("c{i}{}", (b'a' + j as u8) as char));
            netns::add(&ns)?;
            let port = format!("l{j}");
            netns::ip(&["link", "add", &port, "netns", &nat, "type", "veth", "peer", "name", "eth0", "netns", &ns])?;
            netns::ip(&["-n", &nat, "link", "set", &port, "master", "lan", "up"])?;
            netns::ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            Self::like_a_nic(&ns, "eth0")?;
            Self::like_a_nic(&nat, &port)?;
            let lan = Ipv4Addr::new(10, i as u8, 0, 2 + j as u8);
            Self::addr(&ns, &format!("{lan}/24"), "eth0")?;
            netns::ip(&["-n", &ns, "route", "add", "default", "via", &format!("10.{i}.0.1")])?;
            self.clients.push(ClientHost { ns, nat: kind, lan, nat_public: wan });
        }
        Ok(())
    }

    fn build_generator(&mut self) -> Result<()> {
        let gen = self.host("gen", 5)?;
        // The generator's datagrams leave with their checksums finished, as a NIC puts
        // them on the wire: a veth would hand the relay host sums still to be taken,
        // which no host receives from a real wire, and which a relay's kernel path
        // leaves to its daemon (a local sender's). The relay host's GRO checks them in
        // software (a NIC would in hardware), for every implementation alike.
        Self::sums_in_software(&gen)?;
        let (rly, h6) = (self.ns("rly"), self.ns("h6"));
        Self::addr(&gen, &format!("{GEN_V4}/24"), "eth0")?;
        Self::addr(&gen, "2001:db8:1::50/64", "eth0")?;
        Self::addr(&gen, &format!("{GEN_NATIVE_V6}/128"), "eth0")?;
        Self::addr(&h6, &format!("{SINK_NATIVE_V6}/128"), "eth0")?;
        // Native reference path: gen ⇄ relay host (kernel forwarding) ⇄ native host.
        netns::ip(&["-n", &gen, "-6", "route", "add", "2001:db8:2::/64", "via", &RELAY_V6.to_string()])?;
        netns::ip(&["-n", &h6, "-6", "route", "add", "2001:db8:3::/64", "via", &RELAY_V6.to_string()])?;
        netns::ip(&["-n", &rly, "-6", "route", "add", &format!("{SINK_NATIVE_V6}/128"), "via", &HOST6_V6.to_string()])?;
        netns::ip(&["-n", &rly, "-6", "route", "add", &format!("{GEN_NATIVE_V6}/128"), "via", "2001:db8:1::50"])?;
        // Redirects would teach the hosts the direct path and skip the relay host.
        for ns in [&gen, &rly, &h6] {
            netns::exec(
                ns,
                &["sysctl", "-qw", "net.ipv6.conf.all.accept_redirects=0", "net.ipv6.conf.default.accept_redirects=0"],
            )?;
        }
        netns::sysctl(&rly, &["net.ipv6.conf.all.send_redirects=0"]).ok();
        // The relay host gets what the generator and the native host send in buffers such
        // as a NIC's receive fills (room in front, headers linear), not theirs.
        let core = self.ns("core");
        for port in ["p3", "p5"] {
            self.nic_buffers.push(nic_buffers::receive_into_own_buffers(&core, port)?);
        }
        for to in [SINK_NATIVE_V6, HOST6_V6] {
            let _ = netns::exec(&gen, &["ping", "-6", "-n", "-c", "1", "-W", "2", &to.to_string()]);
        }
        Ok(())
    }

    /// Give `client` a second, unused link into NAT box `nat` (1-based), for a handoff.
    pub fn add_spare_link(&mut self, client: usize, nat: usize) -> Result<()> {
        let ns = self.clients[client].ns.clone();
        let natns = self.ns(&format!("nat{nat}"));
        let port = format!("s{client}");
        netns::ip(&["link", "add", &port, "netns", &natns, "type", "veth", "peer", "name", "eth1", "netns", &ns])?;
        netns::ip(&["-n", &natns, "link", "set", &port, "master", "lan", "up"])?;
        Self::like_a_nic(&ns, "eth1")?;
        Self::like_a_nic(&natns, &port)?;
        Ok(())
    }

    /// Move `client` from its NAT to NAT box `nat` (1-based): the old link goes down
    /// and loses its address, the spare link comes up with an address and default
    /// route behind the new NAT — what a phone sees when it changes networks.
    pub fn move_client(&mut self, client: usize, nat: usize) -> Result<()> {
        let ns = self.clients[client].ns.clone();
        netns::ip(&["-n", &ns, "link", "set", "eth0", "down"])?;
        netns::ip(&["-n", &ns, "addr", "flush", "dev", "eth0"])?;
        netns::ip(&["-n", &ns, "link", "set", "eth1", "up"])?;
        let lan = Ipv4Addr::new(10, nat as u8, 0, 100 + client as u8);
        Self::addr(&ns, &format!("{lan}/24"), "eth1")?;
        netns::ip(&["-n", &ns, "route", "replace", "default", "via", &format!("10.{nat}.0.1")])?;
        self.clients[client].lan = lan;
        self.clients[client].nat_public = Ipv4Addr::new(192, 0, 2, 20 + nat as u8);
        Ok(())
    }

    /// Stop the daemon started as `name` (`server`, `server_b`, `relay`, `client0`…).
    pub fn stop_peer(&mut self, name: &str) {
        for p in self.peers.iter_mut().filter(|p| p.name == name) {
            p.stop();
        }
    }

    /// Stop the daemons and remove every namespace now (also done on drop).
    pub fn teardown(&mut self) {
        for p in &mut self.peers {
            p.stop();
        }
        self.peers.clear();
        self.nic_buffers.clear();
        for ns in self.namespaces() {
            netns::del(&ns);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.keep {
            // Leave the daemons running; `shipworm-lab --cleanup` removes them later.
            for p in &mut self.peers {
                p.detach();
            }
        } else {
            self.teardown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Namespaces removed however the test ends.
    struct Namespaces(Vec<String>);

    impl Drop for Namespaces {
        fn drop(&mut self) {
            for ns in &self.0 {
                netns::del(ns);
            }
        }
    }

    #[test]
    fn a_lab_bridge_forwards_frames_its_hosts_firewall_would_drop() {
        // Namespaces need root; without br_netfilter loaded a bridge is a switch anyway.
        if unsafe { libc::geteuid() } != 0 || !std::path::Path::new("/proc/sys/net/bridge").exists() {
            return;
        }
        let p = netns::run_prefix(90);
        let names = Namespaces(["sw", "a", "b"].iter().map(|n| format!("{p}{n}")).collect());
        let [sw, a, b] = [&names.0[0], &names.0[1], &names.0[2]];
        for ns in &names.0 {
            netns::add(ns).unwrap();
        }
        netns::ip(&["-n", sw, "link", "add", "br0", "type", "bridge"]).unwrap();
        Lab::bridge_like_a_switch(sw).unwrap();
        netns::ip(&["-n", sw, "link", "set", "br0", "up"]).unwrap();
        for (host, port, v4, v6) in
            [(a, "pa", "10.9.0.1/24", "2001:db8:9::1/64"), (b, "pb", "10.9.0.2/24", "2001:db8:9::2/64")]
        {
            netns::ip(&["link", "add", port, "netns", sw, "type", "veth", "peer", "name", "eth0", "netns", host])
                .unwrap();
            netns::ip(&["-n", sw, "link", "set", port, "master", "br0", "up"]).unwrap();
            netns::ip(&["-n", host, "link", "set", "eth0", "up"]).unwrap();
            Lab::addr(host, v4, "eth0").unwrap();
            Lab::addr(host, v6, "eth0").unwrap();
        }
        // The switch's host drops everything it would forward or take in.
        let wall = "table inet wall {\n  chain forwarded { type filter hook forward priority 0; policy drop; }\n  \
                    chain arriving { type filter hook prerouting priority 0; policy drop; }\n}\n";
        netns::exec_input(sw, &["nft", "-f", "-"], Some(wall)).unwrap();
        for to in ["10.9.0.2", "2001:db8:9::2"] {
            let ping = netns::exec(a, &["ping", "-c", "1", "-W", "2", to]);
            assert!(ping.is_ok(), "a frame to {to} across the lab's bridge met the bridge host's firewall: {ping:?}");
        }
    }

    /// Hosts a and b of test `k`, their `eth0`s a veth's two ends, with `addrs`.
    fn two_hosts(k: usize, addrs: [&str; 2]) -> Namespaces {
        let p = netns::run_prefix(k);
        let names = Namespaces(["a", "b"].iter().map(|n| format!("{p}{n}")).collect());
        for ns in &names.0 {
            netns::add(ns).unwrap();
        }
        let [a, b] = [&names.0[0], &names.0[1]];
        netns::ip(&["link", "add", "eth0", "netns", a, "type", "veth", "peer", "name", "eth0", "netns", b]).unwrap();
        for (host, addr) in [a, b].into_iter().zip(addrs) {
            netns::ip(&["-n", host, "link", "set", "eth0", "up"]).unwrap();
            Lab::addr(host, addr, "eth0").unwrap();
        }
        names
    }

    /// A switch port that fills buffers of its own passes every frame on, and stops
    /// when its link is dropped (a lab torn down leaves nothing attached).
    #[test]
    fn a_port_filling_its_own_buffers_passes_every_frame_until_dropped() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let names = two_hosts(91, ["2001:db8:9::1/64", "2001:db8:9::2/64"]);
        let [a, b] = [&names.0[0], &names.0[1]];
        let link = nic_buffers::receive_into_own_buffers(b, "eth0").unwrap();
        let shown = netns::ip(&["-n", b, "link", "show", "dev", "eth0"]).unwrap();
        assert!(shown.contains("xdp"), "no XDP program on the port: {shown}");
        // Small and full-size frames.
        for size in ["56", "1400"] {
            let ping = netns::exec(a, &["ping", "-6", "-c", "3", "-i", "0.01", "-W", "2", "-s", size, "2001:db8:9::2"]);
            assert!(ping.is_ok(), "{size}-byte pings did not cross the port: {ping:?}");
        }
        drop(link);
        let shown = netns::ip(&["-n", b, "link", "show", "dev", "eth0"]).unwrap();
        assert!(!shown.contains("xdp"), "the program stayed after its link was dropped: {shown}");
    }

    /// Frames sent live from one host reach sockets on the next, every one, each stream
    /// its own turns, never faster than the pace; no socket on the sender. Where the
    /// kernel refuses live frames, says so and checks nothing (the transmit ring's case
    /// below is what the bench then uses).
    #[test]
    fn live_frames_reach_the_next_host_each_one_at_their_pace() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let names = two_hosts(92, ["10.9.0.1/24", "10.9.0.2/24"]);
        frames_reach_the_next_host(&names, |a| match live_frames::LiveFrames::unless_refused(a, "eth0").unwrap() {
            Ok(live) => Some(frame_sender::FrameSender::Live(live)),
            Err(why) => {
                println!("skipped: {why}");
                None
            }
        });
    }

    /// The same through a packet socket's transmit ring, the generator where the kernel
    /// refuses live frames.
    #[test]
    fn frames_from_a_transmit_ring_reach_the_next_host_each_one_at_their_pace() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let names = two_hosts(93, ["10.9.0.1/24", "10.9.0.2/24"]);
        frames_reach_the_next_host(&names, |a| {
            Some(frame_sender::FrameSender::Ring {
                ring: packet_ring::PacketRing::on(a, "eth0").unwrap(),
                mac: live_frames::mac_of(a, "eth0").unwrap(),
                why: "asked for".into(),
            })
        });
    }

    fn frames_reach_the_next_host(names: &Namespaces, sender: impl Fn(&str) -> Option<frame_sender::FrameSender>) {
        use shipworm_wire::ipv4::Ipv4Repr;
        use shipworm_wire::udp::UdpRepr;
        let [a, b] = [&names.0[0], &names.0[1]];
        let _napi = nic_buffers::receive_into_own_buffers(b, "eth0").unwrap();
        let b_owned = b.clone();
        let rx = std::thread::spawn(move || {
            netns::enter(&b_owned).unwrap();
            [9998, 9999].map(|port| {
                let s = std::net::UdpSocket::bind(("10.9.0.2", port)).unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_millis(300))).unwrap();
                // Each frame arrives in a page of its own: room for all of them.
                let size: libc::c_int = 8 << 20;
                use std::os::fd::AsRawFd;
                // SAFETY: an int option on our own socket, read by the kernel.
                let r = unsafe {
                    libc::setsockopt(
                        s.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_RCVBUFFORCE,
                        &size as *const libc::c_int as *const libc::c_void,
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    )
                };
                assert_eq!(r, 0);
                s
            })
        })
        .join()
        .unwrap();
        let Some(frames) = sender(a) else { return };
        let (src, dst) = (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2));
        let to_b = live_frames::mac_of(b, "eth0").unwrap();
        // Two streams, to two ports; a Teredo datagram's length of headers differs.
        let streams: Vec<Vec<u8>> = [9998u16, 9999]
            .iter()
            .map(|&port| {
                let mut frame = vec![0u8; 14 + 20 + 8 + 100];
                frame[..6].copy_from_slice(&to_b);
                frame[6..12].copy_from_slice(&frames.mac());
                frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                Ipv4Repr { src_addr: src, dst_addr: dst, protocol: 17, payload_len: 108, ttl: 64 }
                    .emit(&mut frame[14..])
                    .unwrap();
                frame[42..].fill(0x5a);
                UdpRepr { src_port: 1234, dst_port: port, payload_len: 100 }
                    .emit(&src, &dst, &mut frame[34..])
                    .unwrap();
                frame
            })
            .collect();
        // 20,000 frames a second for 50 ms, in bursts of 40, turns of 30: at most 1,000
        // (25 bursts), whatever the machine.
        let dur = std::time::Duration::from_millis(50);
        let sent = frames.paced(&streams, 30, 20_000, 40, dur).unwrap();
        assert!(sent > 0 && sent <= 1_000, "{sent} frames sent");
        // A second trial on the same sender (the first one's run stopped).
        let again = frames.paced(&streams, 30, 20_000, 40, dur).unwrap();
        let mut buf = [0u8; 256];
        let mut got = [0u64; 2];
        for (k, s) in rx.iter().enumerate() {
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                assert_eq!((n, from), (100, "10.9.0.1:1234".parse().unwrap()));
                got[k] += 1;
            }
        }
        assert_eq!(got[0] + got[1], sent + again, "every frame sent arrived: {got:?}");
        // Turns of 30: neither stream is more than a turn a trial ahead of the other.
        assert!(got[0].abs_diff(got[1]) <= 60, "{got:?}");
        // Frames it cannot send as given are refused, not sent wrong: for live frames,
        // frames that differ past their headers; for the ring, a frame past a slot.
        let odd = match &frames {
            frame_sender::FrameSender::Live(_) => {
                let mut odd = streams.clone();
                odd[1][100] ^= 1;
                odd
            }
            frame_sender::FrameSender::Ring { .. } => vec![vec![0u8; packet_ring::MAX_FRAME + 1]],
        };
        assert!(frames.failure().is_none());
        assert!(frames.paced(&odd, 30, 20_000, 40, dur).is_err());
        // And the sender keeps saying so, for the trials' figures to be thrown away.
        assert!(frames.failure().is_some_and(|e| e.contains("past their headers") || e.contains("longer than a slot")));
    }
}
