//! The routing-loop checks of RFC 6324 §3.3 for a node that tunnels IPv6 (a Teredo
//! relay or server). An attacker who can send IPv6 packets can make two tunnel routers
//! of different kinds pass a packet between them until its hop limit runs out: for a
//! Teredo relay next to a 6to4 relay, a packet to `2002:<relay's IPv4>::` leaves the
//! relay natively, is tunnelled by the 6to4 relay back to the relay's IPv4 address, and
//! so on. The RFC's static check needs nothing but the node's own IPv4 addresses: a
//! packet leaving a tunnel whose IPv6 destination, or entering one whose IPv6 source,
//! embeds one of them (in any automatic tunnel's format: 6to4, ISATAP) is dropped.
//! 6rd addresses cannot be recognised and private IPv4 addresses are ambiguous in
//! scope (they may be another site's), so the RFC leaves both out, and so does this.

use shipworm_wire::ipv6::Ipv6AddrExt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Whether `addr` embeds one of `own` in a 6to4 or ISATAP form, as RFC 6324 §3.3's
/// source check (into a tunnel) and destination check (out of one) ask.
pub fn embeds_own_ipv4(addr: &Ipv6Addr, own: &[Ipv4Addr]) -> bool {
    addr.tunnel_ipv4().into_iter().flatten().any(|v4| !v4.is_private() && own.contains(&v4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_own_public_addresses_loop() {
        let own = [Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(10, 0, 0, 5)];
        let loops = |a: &str| embeds_own_ipv4(&a.parse().unwrap(), &own);
        assert!(loops("2002:c000:20a::1"));
        assert!(loops("2001:db8:5::200:5efe:c000:20a"));
        // Another 6to4 site, and a private address that may be anyone's.
        assert!(!loops("2002:c000:20b::1"));
        assert!(!loops("2001:db8:5::200:5efe:a00:5"));
        assert!(!loops("2002:a00:5::1"));
        assert!(!loops("2001:db8::1"));
    }
}
