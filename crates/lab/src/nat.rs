//! NAT boxes made with nftables, one kind per box.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

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
}

impl NatKind {
    /// Every kind, in the order the suite runs them.
    pub const ALL: [NatKind; 4] =
        [NatKind::FullCone, NatKind::AddressRestricted, NatKind::PortRestricted, NatKind::Symmetric];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            NatKind::FullCone => "full-cone",
            NatKind::AddressRestricted => "address-restricted",
            NatKind::PortRestricted => "port-restricted",
            NatKind::Symmetric => "symmetric",
        }
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
            _ => Err(format!("unknown NAT kind {s} (full-cone, address-restricted, port-restricted, symmetric)")),
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
    }
}
