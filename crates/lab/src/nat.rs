//! NAT boxes made with nftables, one kind per box.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// The first port a sequential NAT gives, and how many it cycles through.
const SEQUENTIAL_FIRST_PORT: u16 = 20000;
const SEQUENTIAL_PORTS: u16 = 1024;

/// The kinds of NAT the lab can build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NatKind {
    /// Static 1:1 snat/dnat: the mapping keeps the port and anyone may send in.
    FullCone,
    /// Static 1:1 mapping, but only hosts an internal endpoint (address and port) has
    /// sent to may send in to that endpoint, from any port: RFC 4787's address-dependent
    /// filtering. A dynamic nftables set of (endpoint, contacted address) filters the
    /// inbound; keying it on the address alone would let a host the client wrote to
    /// from one port reach every other port, and fool the Teredo cone test.
    AddressRestricted,
    /// `masquerade`: the mapping keeps the port while it is free (endpoint-independent
    /// mapping), and only the peer:port written to may answer.
    PortRestricted,
    /// `masquerade fully-random`: a new random port for every destination.
    Symmetric,
    /// Sequential port-symmetric (RFC 6081 §2): every new flow takes the next port of a
    /// counter the whole box shares (`snat` to `numgen inc`).
    SequentialSymmetric,
    /// Port-preserving symmetric (RFC 6081 §2): an endpoint's first flow keeps its port,
    /// flows to further destinations from the same endpoint get random ports (a dynamic
    /// set remembers which endpoints already have their port).
    PortPreservingSymmetric,
    /// Symmetric (random ports), with Debian's miniupnpd as UPnP IGD on the box.
    SymmetricUpnp,
    /// Symmetric (random ports), with Debian's miniupnpd answering PCP (RFC 6887) as
    /// well as UPnP.
    SymmetricPcp,
}

impl NatKind {
    /// Every kind, in the order the suite runs them.
    pub const ALL: [NatKind; 8] = [
        NatKind::FullCone,
        NatKind::AddressRestricted,
        NatKind::PortRestricted,
        NatKind::Symmetric,
        NatKind::SequentialSymmetric,
        NatKind::PortPreservingSymmetric,
        NatKind::SymmetricUpnp,
        NatKind::SymmetricPcp,
    ];
    /// The kinds RFC 4380 alone knows (cone, restricted, symmetric), which the suite
    /// runs against Miredo in every pairing.
    pub const RFC4380: [NatKind; 4] =
        [NatKind::FullCone, NatKind::AddressRestricted, NatKind::PortRestricted, NatKind::Symmetric];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            NatKind::FullCone => "full-cone",
            NatKind::AddressRestricted => "address-restricted",
            NatKind::PortRestricted => "port-restricted",
            NatKind::Symmetric => "symmetric",
            NatKind::SequentialSymmetric => "sequential",
            NatKind::PortPreservingSymmetric => "port-preserving",
            NatKind::SymmetricUpnp => "symmetric-upnp",
            NatKind::SymmetricPcp => "symmetric-pcp",
        }
    }

    /// Whether the box runs miniupnpd, and whether it answers PCP.
    pub fn igd(self) -> Option<bool> {
        match self {
            NatKind::SymmetricUpnp => Some(false),
            NatKind::SymmetricPcp => Some(true),
            _ => None,
        }
    }

    /// Whether a new destination gets a new mapping.
    pub fn is_symmetric(self) -> bool {
        matches!(
            self,
            NatKind::Symmetric
                | NatKind::SequentialSymmetric
                | NatKind::PortPreservingSymmetric
                | NatKind::SymmetricUpnp
                | NatKind::SymmetricPcp
        )
    }

    /// The nftables ruleset for a box whose public side is `wan` (interface `wan`) and
    /// whose first client is `client`. The cone kinds map that client 1:1; any other
    /// client behind the box is masqueraded.
    pub fn ruleset(self, wan: Ipv4Addr, client: Ipv4Addr) -> String {
        let one_to_one = format!(
            "  chain pre {{\n    type nat hook prerouting priority -100;\n    iifname \"wan\" ip daddr {wan} dnat to {client}\n  }}\n  \
             chain post {{\n    type nat hook postrouting priority 100;\n    oifname \"wan\" ip saddr {client} snat to {wan}\n    oifname \"wan\" masquerade\n  }}\n"
        );
        let body = match self {
            NatKind::FullCone => one_to_one,
            NatKind::AddressRestricted => format!(
                "  set contacted {{\n    type ipv4_addr . inet_service . ipv4_addr; flags dynamic, timeout; timeout 5m;\n  }}\n\
                 {one_to_one}  \
                 chain filter {{\n    type filter hook forward priority 0; policy accept;\n    \
                 oifname \"wan\" meta l4proto {{ tcp, udp }} update @contacted {{ ip saddr . th sport . ip daddr }}\n    \
                 iifname \"wan\" ct state established,related accept\n    \
                 iifname \"wan\" meta l4proto {{ tcp, udp }} ip daddr . th dport . ip saddr @contacted accept\n    \
                 iifname \"wan\" drop\n  }}\n"
            ),
            NatKind::PortRestricted => {
                "  chain post {\n    type nat hook postrouting priority 100;\n    oifname \"wan\" masquerade\n  }\n".to_string()
            }
            NatKind::Symmetric => "  chain post {\n    type nat hook postrouting priority 100;\n    oifname \"wan\" masquerade fully-random\n  }\n".to_string(),
            // UDP flows take ports 20000, 20001, … in the order they start; the rest is
            // masqueraded.
            // (The counter goes through a map: nftables would write `numgen`'s value into
            // the port in host byte order.)
            NatKind::SequentialSymmetric => {
                let ports: Vec<String> =
                    (0..SEQUENTIAL_PORTS).map(|i| format!("{i} : {}", SEQUENTIAL_FIRST_PORT + i)).collect();
                format!(
                    "  chain post {{\n    type nat hook postrouting priority 100;\n    \
                     oifname \"wan\" meta l4proto udp snat ip to {wan} : numgen inc mod {SEQUENTIAL_PORTS} map {{ {} }}\n    \
                     oifname \"wan\" masquerade\n  }}\n",
                    ports.join(", ")
                )
            }
            // Only what comes from the LAN is masqueraded: miniupnpd's own STUN check
            // must see the box's traffic leave unchanged. Its chains (the names it
            // expects) send mapped ports to their clients.
            NatKind::SymmetricUpnp | NatKind::SymmetricPcp => "  chain post {\n    type nat hook postrouting priority 100;\n    \
                 iifname \"lan\" oifname \"wan\" masquerade fully-random\n  }\n}\n\
                 table inet filter {\n  \
                 chain forward {\n    type filter hook forward priority 0; policy accept;\n    jump miniupnpd\n  }\n  \
                 chain miniupnpd {\n  }\n  \
                 chain prerouting {\n    type nat hook prerouting priority -100; policy accept;\n    jump prerouting_miniupnpd\n  }\n  \
                 chain postrouting {\n    type nat hook postrouting priority 90; policy accept;\n    jump postrouting_miniupnpd\n  }\n  \
                 chain prerouting_miniupnpd {\n  }\n  \
                 chain postrouting_miniupnpd {\n  }\n"
                .to_string(),
            NatKind::PortPreservingSymmetric => "  set mapped {\n    type ipv4_addr . inet_service; flags dynamic, timeout; timeout 5m;\n  }\n  \
                 chain post {\n    type nat hook postrouting priority 100;\n    \
                 oifname \"wan\" meta l4proto udp ip saddr . udp sport @mapped masquerade fully-random\n    \
                 oifname \"wan\" meta l4proto udp update @mapped { ip saddr . udp sport } masquerade\n    \
                 oifname \"wan\" masquerade\n  }\n"
                .to_string(),
        };
        format!("table ip lab_nat {{\n{body}}}\n")
    }
}

impl fmt::Display for NatKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for NatKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "full-cone" | "cone" => Ok(NatKind::FullCone),
            "port-restricted" | "restricted" => Ok(NatKind::PortRestricted),
            "symmetric" => Ok(NatKind::Symmetric),
            "address-restricted" => Ok(NatKind::AddressRestricted),
            "sequential" | "sequential-symmetric" => Ok(NatKind::SequentialSymmetric),
            "port-preserving" | "port-preserving-symmetric" => Ok(NatKind::PortPreservingSymmetric),
            "symmetric-upnp" => Ok(NatKind::SymmetricUpnp),
            "symmetric-pcp" => Ok(NatKind::SymmetricPcp),
            _ => Err(format!(
                "unknown NAT kind {s} (full-cone, address-restricted, port-restricted, symmetric, sequential, port-preserving, symmetric-upnp, symmetric-pcp)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rulesets() {
        let w = Ipv4Addr::new(192, 0, 2, 21);
        let c = Ipv4Addr::new(10, 1, 0, 2);
        let cone = NatKind::FullCone.ruleset(w, c);
        assert!(cone.contains("dnat to 10.1.0.2") && cone.contains("snat to 192.0.2.21"));
        assert!(NatKind::Symmetric.ruleset(w, c).contains("masquerade fully-random"));
        assert!(!NatKind::PortRestricted.ruleset(w, c).contains("prerouting"));
        assert!(NatKind::AddressRestricted.ruleset(w, c).contains("ip daddr . th dport . ip saddr @contacted accept"));
        assert_eq!("symmetric".parse::<NatKind>().unwrap(), NatKind::Symmetric);
        assert!("bogus".parse::<NatKind>().is_err());
        assert!(NatKind::SequentialSymmetric.ruleset(w, c).contains("numgen inc"));
        assert!(NatKind::PortPreservingSymmetric.ruleset(w, c).contains("update @mapped"));
        for k in NatKind::ALL {
            assert_eq!(k.name().parse::<NatKind>(), Ok(k));
        }
    }
}
