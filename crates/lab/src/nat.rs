//! NAT boxes made with nftables, one kind per box.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// The kinds of NAT the lab can build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NatKind {
    /// Static 1:1 snat/dnat: the mapping keeps the port and anyone may send in.
    FullCone,
    /// `masquerade`: the mapping keeps the port while it is free (endpoint-independent
    /// mapping), and only the peer:port written to may answer.
    PortRestricted,
    /// `masquerade fully-random`: a new random port for every destination.
    Symmetric,
}

impl NatKind {
    /// Every kind, in the order the suite runs them.
    pub const ALL: [NatKind; 3] = [
        NatKind::FullCone,
        NatKind::PortRestricted,
        NatKind::Symmetric,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            NatKind::FullCone => "full-cone",
            NatKind::PortRestricted => "port-restricted",
            NatKind::Symmetric => "symmetric",
        }
    }

    /// The nftables ruleset for a box whose public side is `wan` (interface `wan`) and
    /// whose first client is `client`.
    pub fn ruleset(self, wan: Ipv4Addr, client: Ipv4Addr) -> String {
        let post = match self {
            NatKind::FullCone => format!("oifname \"wan\" ip saddr {client} snat to {wan}"),
            NatKind::PortRestricted => "oifname \"wan\" masquerade".to_string(),
            NatKind::Symmetric => "oifname \"wan\" masquerade fully-random".to_string(),
        };
        let pre = match self {
            NatKind::FullCone => format!("\n  chain pre {{\n    type nat hook prerouting priority -100;\n    iifname \"wan\" ip daddr {wan} dnat to {client}\n  }}"),
            _ => String::new(),
        };
        format!("table ip lab_nat {{{pre}\n  chain post {{\n    type nat hook postrouting priority 100;\n    {post}\n  }}\n}}\n")
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
            "address-restricted" => {
                Err("address-restricted cone NAT cannot be made with nftables' NAT alone; use full-cone, port-restricted or symmetric".into())
            }
            _ => Err(format!("unknown NAT kind {s} (full-cone, port-restricted, symmetric)")),
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
        assert!(NatKind::Symmetric
            .ruleset(w, c)
            .contains("masquerade fully-random"));
        assert!(!NatKind::PortRestricted.ruleset(w, c).contains("prerouting"));
        assert_eq!("symmetric".parse::<NatKind>().unwrap(), NatKind::Symmetric);
        assert!("address-restricted".parse::<NatKind>().is_err());
    }
}
