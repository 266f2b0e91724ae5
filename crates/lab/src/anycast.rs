//! A routed core for anycast relays (RFC 4380 §5.4: every relay announces the Teredo
//! prefix, and routing takes each native host to the nearest one). The native host and
//! the server route 2001::/32 through a router (`rtr`); the router runs BIRD and learns
//! the prefix by BGP from the two relay hosts (`rly`, `rlyb`), each running BIRD beside
//! its relay, with BFD on every session. The router prefers relay A (a higher local
//! preference stands for "nearer"), so traffic starts there and moves to relay B when
//! A's announcement goes.
//!
//! The relays' BIRD configuration is the one docs/operations.md gives operators: the prefix is a
//! static route bound to the relay's interface (withdrawn by BIRD itself when the
//! interface goes with a dead relay, Miredo's included), and with shipworm it starts
//! disabled and is enabled by the relay once it serves and disabled first on a clean
//! stop (`BirdSocket`).

use crate::error::{err, Result};
use crate::{netns, Lab, RELAY_V4, RELAY_V6};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Relay B's IPv4 address.
pub const RELAY_B_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 11);
/// Relay B's native IPv6 address.
pub const RELAY_B_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x11);
/// The router's address on the public segment: the native side's next hop for 2001::/32.
pub const ROUTER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0xfe);
/// The router's IPv4 address on the public segment (a lab with a shared relay address).
pub const ROUTER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 253);
/// The relays' shared IPv4 service address (`LabSpec::anycast_v4`).
pub const RELAY_ANYCAST_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);

/// Where a server runs in a lab with anycast servers (`LabSpec::anycast_servers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerPlace {
    /// `srv` (192.0.2.41 of its own), preferred by the router.
    A,
    /// `srv2` (192.0.2.42, 2001:db8:1::22).
    B,
}

impl ServerPlace {
    /// The lab namespace (short name) of the server host.
    pub fn short(self) -> &'static str {
        match self {
            ServerPlace::A => "srv",
            ServerPlace::B => "srv2",
        }
    }

    /// The server daemon's name in the lab.
    pub fn daemon(self) -> &'static str {
        match self {
            ServerPlace::A => "server",
            ServerPlace::B => "server_2",
        }
    }

    /// The host's own IPv4 address (its BGP session's).
    pub fn v4(self) -> Ipv4Addr {
        match self {
            ServerPlace::A => Ipv4Addr::new(192, 0, 2, 41),
            ServerPlace::B => Ipv4Addr::new(192, 0, 2, 42),
        }
    }

    fn asn(self) -> u32 {
        match self {
            ServerPlace::A => 65020,
            ServerPlace::B => 65021,
        }
    }
}

/// The BIRD configuration of a server host: both server addresses, announced over an
/// IPv4 session with BFD while the server says it serves (the protocol starts disabled;
/// the server enables it, and it or its BIRD link disables it).
pub fn server_bird_config(place: ServerPlace) -> String {
    format!(
        "router id {v4};\nprotocol device {{ scan time 10; }}\n\
         protocol static teredo_server {{\n    disabled;  # until the server says it serves\n    ipv4;\n    \
         route {p}/32 blackhole;\n    route {s}/32 blackhole;\n}}\n\
         {BFD}\
         protocol bgp upstream4 {{\n    local {v4} as {asn};\n    neighbor {ROUTER_V4} as {ROUTER_AS};\n    bfd on;\n    {QUICK_CONNECT}\n    \
         ipv4 {{ import none; export where proto = \"teredo_server\"; }};\n}}\n",
        v4 = place.v4(),
        asn = place.asn(),
        p = crate::SERVER_V4,
        s = crate::SERVER2_V4,
    )
}
/// The router's autonomous system; relay A's is 65010, relay B's 65011.
pub const ROUTER_AS: u32 = 65000;

/// Where a relay runs: relay A is the lab's relay; relay B exists in a lab with a
/// routed core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Relay A (`rly`, 192.0.2.10, 2001:db8:1::10), preferred by the router.
    A,
    /// Relay B (`rlyb`, 192.0.2.11, 2001:db8:1::11).
    B,
}

impl Place {
    /// The lab namespace (short name) of the relay host.
    pub fn short(self) -> &'static str {
        match self {
            Place::A => "rly",
            Place::B => "rlyb",
        }
    }

    /// The relay daemon's name in the lab (its log, pid file and control socket).
    pub fn daemon(self) -> &'static str {
        match self {
            Place::A => "relay",
            Place::B => "relay_b",
        }
    }

    /// The relay host's IPv4 address (the relay binds it).
    pub fn v4(self) -> Ipv4Addr {
        match self {
            Place::A => RELAY_V4,
            Place::B => RELAY_B_V4,
        }
    }

    /// The relay host's native IPv6 address (its BGP session's and the router's next hop).
    pub fn v6(self) -> Ipv6Addr {
        match self {
            Place::A => RELAY_V6,
            Place::B => RELAY_B_V6,
        }
    }

    fn asn(self) -> u32 {
        match self {
            Place::A => 65010,
            Place::B => 65011,
        }
    }
}

/// How the relay at a place ties the announcement to its health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// The route is bound to the relay's interface only (Miredo: no health hook).
    Interface,
    /// Bound to the interface, and also enabled by the relay once it serves and disabled
    /// first on a clean stop, through BIRD's control socket (shipworm's `BirdSocket`).
    InterfaceAndControl,
}

/// BFD: a session is down after three missed 50-ms hellos.
const BFD: &str =
    "protocol bfd {\n    interface \"eth0\" { min rx interval 50 ms; min tx interval 50 ms; multiplier 3; };\n}\n";

/// A lab's BGP sessions come up within a second or two: BIRD's defaults wait 5 s
/// before the first attempt and 120 s between attempts.
const QUICK_CONNECT: &str = "connect delay time 1; connect retry time 2; error wait time 1, 10;";

/// The BIRD configuration of a relay host at `place`: the Teredo prefix bound to the
/// relay's interface, announced to the upstream router over BGP with BFD; with
/// `shared_v4`, the relays' shared IPv4 address too, bound to the same interface, over
/// an IPv4 session.
pub fn relay_bird_config(place: Place, health: Health, shared_v4: bool) -> String {
    let disabled = match health {
        Health::Interface => "",
        Health::InterfaceAndControl => "    disabled;  # until the relay says it serves\n",
    };
    let v4 = if shared_v4 {
        format!(
            "# The relays' shared IPv4 address, bound to the relay's interface: gone with it.\n\
             protocol static teredo4 {{\n{disabled}    ipv4;\n    route {RELAY_ANYCAST_V4}/32 via \"teredo\";\n}}\n\
             protocol bgp upstream4 {{\n    local {v4} as {asn};\n    neighbor {ROUTER_V4} as {ROUTER_AS};\n    bfd on;\n    {QUICK_CONNECT}\n    \
             ipv4 {{ import none; export where proto = \"teredo4\"; }};\n}}\n",
            v4 = place.v4(),
            asn = place.asn(),
        )
    } else {
        String::new()
    };
    v4 + &format!(
        "router id {id};\n\
         protocol device {{ scan time 10; }}\n\
         # The Teredo prefix, bound to the relay's interface: gone with it.\n\
         protocol static teredo {{\n{disabled}    ipv6;\n    route 2001::/32 via \"teredo\";\n}}\n\
         {BFD}\
         protocol bgp upstream {{\n    local {v6} as {asn};\n    neighbor {ROUTER_V6} as {ROUTER_AS};\n    bfd on;\n    {QUICK_CONNECT}\n    \
         ipv6 {{ import none; export where proto = \"teredo\"; }};\n}}\n",
        id = place.v4(),
        v6 = place.v6(),
        asn = place.asn(),
    )
}

/// The router's BIRD configuration: both relays as BGP neighbours with BFD, taking only
/// the Teredo prefix from them (and with `shared_v4` their shared IPv4 address, over
/// IPv4 sessions), relay A preferred, the best routes exported to the router's kernel.
pub fn router_bird_config(shared_v4: bool, anycast_servers: bool) -> String {
    let server4 = |p: ServerPlace, pref: u32| {
        format!(
            "protocol bgp server_{name}4 {{\n    local {ROUTER_V4} as {ROUTER_AS};\n    neighbor {v4} as {asn};\n    bfd on;\n    {QUICK_CONNECT}\n    \
             ipv4 {{ import filter {{ if net != {a}/32 && net != {b}/32 then reject; bgp_local_pref = {pref}; accept; }}; export none; }};\n}}\n",
            name = if p == ServerPlace::A { "a" } else { "b" },
            v4 = p.v4(),
            asn = p.asn(),
            a = crate::SERVER_V4,
            b = crate::SERVER2_V4,
        )
    };
    let servers = if anycast_servers {
        format!("{}{}", server4(ServerPlace::A, 200), server4(ServerPlace::B, 100))
    } else {
        String::new()
    };
    let neighbour4 = |p: Place, pref: u32| {
        format!(
            "protocol bgp relay_{name}4 {{\n    local {ROUTER_V4} as {ROUTER_AS};\n    neighbor {v4} as {asn};\n    bfd on;\n    {QUICK_CONNECT}\n    \
             ipv4 {{ import filter {{ if net != {RELAY_ANYCAST_V4}/32 then reject; bgp_local_pref = {pref}; accept; }}; export none; }};\n}}\n",
            name = if p == Place::A { "a" } else { "b" },
            v4 = p.v4(),
            asn = p.asn(),
        )
    };
    let mut v4 =
        if shared_v4 { format!("{}{}", neighbour4(Place::A, 200), neighbour4(Place::B, 100)) } else { String::new() };
    if shared_v4 || anycast_servers {
        v4 = format!("protocol kernel kernel4 {{ ipv4 {{ import none; export all; }}; }}\n{v4}{servers}");
    }
    let neighbour = |p: Place, pref: u32| {
        format!(
            "protocol bgp relay_{name} {{\n    local {ROUTER_V6} as {ROUTER_AS};\n    neighbor {v6} as {asn};\n    bfd on;\n    {QUICK_CONNECT}\n    \
             ipv6 {{ import filter {{ if net != 2001::/32 then reject; bgp_local_pref = {pref}; accept; }}; export none; }};\n}}\n",
            name = if p == Place::A { "a" } else { "b" },
            v6 = p.v6(),
            asn = p.asn(),
        )
    };
    format!(
        "router id 192.0.2.253;\nprotocol device {{ scan time 10; }}\n\
         protocol kernel {{ ipv6 {{ import none; export all; }}; }}\n{BFD}{}{}{v4}",
        neighbour(Place::A, 200),
        neighbour(Place::B, 100)
    )
}

impl Lab {
    /// The routed core's hosts: relay B's and the router's, the native host and the
    /// server routing 2001::/32 through the router.
    pub(crate) fn build_anycast_core(&mut self, shared_v4: bool, anycast_servers: bool) -> Result<()> {
        let rlyb = self.host(Place::B.short(), 6)?;
        Self::addr(&rlyb, &format!("{RELAY_B_V4}/24"), "eth0")?;
        Self::addr(&rlyb, &format!("{RELAY_B_V6}/64"), "eth0")?;
        netns::sysctl(&rlyb, &["net.ipv6.conf.all.forwarding=1"])?;
        let rtr = self.host("rtr", 7)?;
        Self::addr(&rtr, &format!("{ROUTER_V6}/64"), "eth0")?;
        netns::sysctl(&rtr, &["net.ipv6.conf.all.forwarding=1"])?;
        if shared_v4 || anycast_servers {
            Self::router_v4(&rtr)?;
        }
        if shared_v4 {
            self.share_relay_address()?;
        }
        if anycast_servers {
            self.share_server_addresses()?;
        }
        let (h6, srv) = (self.ns("h6"), self.ns("srv"));
        let (via, host) = (ROUTER_V6.to_string(), crate::HOST6_V6.to_string());
        // The native host talks to Teredo clients from its first address (not whichever
        // of its two the kernel picks), so that its traffic and the client's to it are
        // one peer's.
        netns::ip(&["-n", &h6, "-6", "route", "replace", "2001::/32", "via", &via, "src", &host])?;
        netns::ip(&["-n", &srv, "-6", "route", "replace", "2001::/32", "via", &via])?;
        for ns in [&h6, &srv] {
            // The router forwards out of the interface the packet came in by: its
            // redirects would teach the hosts the relay's address and skip routing.
            netns::exec(
                ns,
                &["sysctl", "-qw", "net.ipv6.conf.all.accept_redirects=0", "net.ipv6.conf.eth0.accept_redirects=0"],
            )?;
        }
        for (from, to) in [(&h6, ROUTER_V6), (&rtr, RELAY_V6), (&rtr, RELAY_B_V6), (&rlyb, crate::HOST6_V6)] {
            let _ = netns::exec(from, &["ping", "-6", "-n", "-c", "1", "-W", "2", &to.to_string()]);
        }
        Ok(())
    }

    /// The router as an IPv4 router on the public segment. It forwards out of the
    /// interface the packets came in by: it sends no redirects.
    fn router_v4(rtr: &str) -> Result<()> {
        Self::addr(rtr, &format!("{ROUTER_V4}/24"), "eth0")?;
        netns::exec(
            rtr,
            &[
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
                "net.ipv4.conf.all.send_redirects=0",
                "net.ipv4.conf.eth0.send_redirects=0",
            ],
        )
        .map(drop)
    }

    /// `addresses` on the loopback of each host in `hosts` (which answer no ARP for
    /// them on the segment, so that only routing picks a host), and routed through the
    /// router from the core (the NAT boxes' side) and from `via_router` (hosts on the
    /// segment that send to them).
    fn anycast_addresses(&self, hosts: &[&str], addresses: &[Ipv4Addr], via_router: &[&str]) -> Result<()> {
        for host in hosts {
            let ns = self.ns(host);
            netns::sysctl(&ns, &["net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2"])?;
            for a in addresses {
                Self::addr(&ns, &format!("{a}/32"), "lo")?;
            }
        }
        for from in std::iter::once(&"core").chain(via_router) {
            let ns = self.ns(from);
            for a in addresses {
                netns::ip(&["-n", &ns, "route", "replace", &format!("{a}/32"), "via", &ROUTER_V4.to_string()])?;
            }
        }
        Ok(())
    }

    /// The relays' shared IPv4 address: on each relay host's loopback, announced by BGP
    /// to the router, which the core routes it through.
    fn share_relay_address(&mut self) -> Result<()> {
        self.anycast_addresses(&[Place::A.short(), Place::B.short()], &[RELAY_ANYCAST_V4], &[])?;
        self.relay_anycast_v4 = Some(RELAY_ANYCAST_V4);
        Ok(())
    }

    /// The server addresses on two server hosts: `srv` gives them up for an address of
    /// its own, `srv2` joins (with a native IPv6 address, routing the Teredo prefix
    /// through the router as `srv` does); both serve .1 and .2 from their loopbacks,
    /// and the core and the relay hosts route them through the router.
    fn share_server_addresses(&mut self) -> Result<()> {
        let srv = self.ns(ServerPlace::A.short());
        netns::ip(&["-n", &srv, "-4", "addr", "flush", "dev", "eth0"])?;
        Self::addr(&srv, &format!("{}/24", ServerPlace::A.v4()), "eth0")?;
        let srv2 = self.host(ServerPlace::B.short(), 8)?;
        Self::addr(&srv2, &format!("{}/24", ServerPlace::B.v4()), "eth0")?;
        Self::addr(&srv2, "2001:db8:1::22/64", "eth0")?;
        netns::ip(&["-n", &srv2, "-6", "route", "replace", "2001::/32", "via", &ROUTER_V6.to_string()])?;
        netns::exec(
            &srv2,
            &["sysctl", "-qw", "net.ipv6.conf.all.accept_redirects=0", "net.ipv6.conf.eth0.accept_redirects=0"],
        )?;
        self.anycast_addresses(
            &[ServerPlace::A.short(), ServerPlace::B.short()],
            &[crate::SERVER_V4, crate::SERVER2_V4],
            &[Place::A.short(), Place::B.short()],
        )?;
        let _ = netns::exec(&srv2, &["ping", "-n", "-c", "1", "-W", "2", &ROUTER_V4.to_string()]);
        self.anycast_servers = true;
        Ok(())
    }

    /// Start the router's BIRD; its control socket.
    pub fn start_router_bird(&mut self) -> Result<PathBuf> {
        let shared = self.relay_anycast_v4.is_some();
        self.start_bird("rtr", &router_bird_config(shared, self.anycast_servers))
    }

    /// Start BIRD on the server host at `place`; its control socket.
    pub fn start_server_bird(&mut self, place: ServerPlace) -> Result<PathBuf> {
        self.start_bird(place.short(), &server_bird_config(place))
    }

    /// Start a server at `place` (a lab with anycast servers), serving 192.0.2.1 and
    /// .2, with `extra` configuration lines.
    pub fn start_server_at(&mut self, place: ServerPlace, imp: &crate::Impl, extra: &str) -> Result<()> {
        self.start_server_on(place.daemon(), place.short(), crate::SERVER_V4, imp, extra)
    }

    /// Where the router sends the server's primary address now, if anywhere.
    pub fn anycast_server(&self) -> Option<ServerPlace> {
        let out =
            netns::exec(&self.ns("rtr"), &["ip", "-4", "route", "show", &format!("{}/32", crate::SERVER_V4)]).ok()?;
        [ServerPlace::A, ServerPlace::B].into_iter().find(|p| out.contains(&format!("via {} ", p.v4())))
    }

    /// Start BIRD on the relay host at `place`; its control socket.
    pub fn start_relay_bird(&mut self, place: Place, health: Health) -> Result<PathBuf> {
        let shared = self.relay_anycast_v4.is_some();
        self.start_bird(place.short(), &relay_bird_config(place, health, shared))
    }

    /// Where the router sends the relays' shared IPv4 address now, if anywhere.
    pub fn anycast_relay_v4(&self) -> Option<Place> {
        let out =
            netns::exec(&self.ns("rtr"), &["ip", "-4", "route", "show", &format!("{RELAY_ANYCAST_V4}/32")]).ok()?;
        [Place::A, Place::B].into_iter().find(|p| out.contains(&format!("via {} ", p.v4())))
    }

    /// Where the router sends 2001::/32 now: the relay it routes through, if any.
    pub fn anycast_relay(&self) -> Option<Place> {
        let out = netns::exec(&self.ns("rtr"), &["ip", "-6", "route", "show", "2001::/32"]).ok()?;
        [Place::A, Place::B].into_iter().find(|p| out.contains(&format!("via {} ", p.v6())))
    }

    /// Wait until the router routes 2001::/32 through `place` and its BIRD knows a route
    /// through each of `standby` too (the alternatives it fails over to).
    pub fn wait_anycast(
        &mut self,
        rtr_ctl: &std::path::Path,
        place: Place,
        standby: &[Place],
        within: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let known = crate::bird::birdc(rtr_ctl, &["show", "route", "2001::/32"]).unwrap_or_default();
            let v4 = self.relay_anycast_v4.is_none() || {
                let known4 = crate::bird::birdc(rtr_ctl, &["show", "route", "table", "master4"]).unwrap_or_default();
                self.anycast_relay_v4() == Some(place)
                    && standby.iter().all(|p| known4.contains(&format!("via {} ", p.v4())))
            };
            if v4
                && self.anycast_relay() == Some(place)
                && standby.iter().all(|p| known.contains(&format!("via {} ", p.v6())))
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let known = crate::bird::birdc(rtr_ctl, &["show", "protocols"]).unwrap_or_default();
        err(format!(
            "the router did not route 2001::/32 through relay {place:?} (and know {standby:?}) within {within:?}:\n{known}\n{}",
            self.log_tail("bird-rtr", 10)
        ))
    }
}
