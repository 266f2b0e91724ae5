//! Which IPv4 addresses may appear as a Teredo mapped or server address.
//!
//! RFC 4380 §5.2.4 lists the ranges that are not global unicast; we add the shared
//! address space (RFC 6598, 100.64.0.0/10) and the reserved 240.0.0.0/4. The
//! documentation ranges (RFC 5737) count as global on purpose: the test labs use them.
//! Directed-broadcast addresses of attached subnets depend on the host, so the daemon
//! checks those separately.

use core::net::Ipv4Addr;

/// Ranges that are never a usable Teredo mapped or server address, with the reason.
pub const NON_GLOBAL: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, "\"this network\" (0.0.0.0/8)"),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private (10.0.0.0/8)"),
    (Ipv4Addr::new(100, 64, 0, 0), 10, "shared address space (100.64.0.0/10)"),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback (127.0.0.0/8)"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link-local (169.254.0.0/16)"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private (172.16.0.0/12)"),
    (Ipv4Addr::new(192, 88, 99, 0), 24, "6to4 relay anycast (192.88.99.0/24)"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private (192.168.0.0/16)"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast (224.0.0.0/4)"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved or broadcast (240.0.0.0/4)"),
];

/// Why `addr` is not global unicast, or `None` when it is.
pub fn non_global_reason(addr: Ipv4Addr) -> Option<&'static str> {
    let a = u32::from(addr);
    NON_GLOBAL.iter().find_map(|&(net, len, why)| {
        let mask = u32::MAX << (32 - u32::from(len));
        (a & mask == u32::from(net)).then_some(why)
    })
}

/// The RFC 4380 §5.2.4 test (extended as the module says): may `addr` be embedded in a
/// Teredo address or receive Teredo traffic?
#[inline]
pub fn is_global_unicast(addr: Ipv4Addr) -> bool {
    non_global_reason(addr).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4380_ranges_are_not_global() {
        for a in [
            "0.1.2.3",
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.254",
            "192.168.1.1",
            "169.254.3.4",
            "192.88.99.1",
            "224.0.0.253",
            "239.255.255.255",
            "255.255.255.255",
            "240.0.0.1",
            "100.64.0.1",
            "100.127.255.255",
        ] {
            assert!(!is_global_unicast(a.parse().unwrap()), "{a} must not be global");
        }
    }

    #[test]
    fn public_and_documentation_ranges_are_global() {
        for a in [
            "1.1.1.1",
            "3.3.3.3",
            "65.54.227.120",
            "192.0.2.45",
            "198.51.100.7",
            "203.0.113.9",
            "172.32.0.1",
            "100.128.0.1",
            "192.88.98.1",
            "223.255.255.255",
        ] {
            assert!(is_global_unicast(a.parse().unwrap()), "{a} must be global");
        }
        assert_eq!(non_global_reason("10.0.0.5".parse().unwrap()), Some("private (10.0.0.0/8)"));
    }
}
