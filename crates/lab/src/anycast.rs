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
pub fn router_bird_config(shared_v4: bool) -> String {
    let neighbour4 = |p: Place, pref: u32| {
        format!(
            "protocol bgp relay_{name}4 {{\n    local {ROUTER_V4} as {ROUTER_AS};\n    neighbor {v4} as {asn};\n    bfd on;\n    {QUICK_CONNECT}\n    \
             ipv4 {{ import filter {{ if net != {RELAY_ANYCAST_V4}/32 then reject; bgp_local_pref = {pref}; accept; }}; export none; }};\n}}\n",
            name = if p == Place::A { "a" } else { "b" },
            v4 = p.v4(),
            asn = p.asn(),
        )
    };
    let v4 = if shared_v4 {
        format!(
            "protocol kernel kernel4 {{ ipv4 {{ import none; export all; }}; }}\n{}{}",
            neighbour4(Place::A, 200),
            neighbour4(Place::B, 100)
        )
    } else {
        String::new()
    };
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
    pub(crate) fn build_anycast_core(&mut self, shared_v4: bool) -> Result<()> {
        let rlyb = self.host(Place::B.short(), 6)?;
        Self::addr(&rlyb, &format!("{RELAY_B_V4}/24"), "eth0")?;
        Self::addr(&rlyb, &format!("{RELAY_B_V6}/64"), "eth0")?;
        netns::exec(&rlyb, &["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])?;
        let rtr = self.host("rtr", 7)?;
        Self::addr(&rtr, &format!("{ROUTER_V6}/64"), "eth0")?;
        netns::exec(&rtr, &["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])?;
        if shared_v4 {
            self.share_relay_address(&rtr)?;
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

    /// The relays' shared IPv4 address: on each relay host's loopback (answering no
    /// ARP for it on the segment, so that only routing picks a relay), announced by
    /// BGP to the router (`rtr`), which the core routes it through. The router
    /// forwards out of the interface the packets came in by: it sends no redirects.
    fn share_relay_address(&mut self, rtr: &str) -> Result<()> {
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
        )?;
        for place in [Place::A, Place::B] {
            let ns = self.ns(place.short());
            netns::exec(&ns, &["sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2"])?;
            Self::addr(&ns, &format!("{RELAY_ANYCAST_V4}/32"), "lo")?;
        }
        let core = self.ns("core");
        netns::ip(&["-n", &core, "route", "add", &format!("{RELAY_ANYCAST_V4}/32"), "via", &ROUTER_V4.to_string()])?;
        self.relay_anycast_v4 = Some(RELAY_ANYCAST_V4);
        Ok(())
    }

    /// Start the router's BIRD; its control socket.
    pub fn start_router_bird(&mut self) -> Result<PathBuf> {
        let shared = self.relay_anycast_v4.is_some();
        self.start_bird("rtr", &router_bird_config(shared))
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
