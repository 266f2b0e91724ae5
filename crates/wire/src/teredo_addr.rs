//! The Teredo IPv6 address (RFC 4380 §4, flags updated by RFC 5991).
//!
//! ```text
//! | prefix (32) | server IPv4 (32) | flags (16) | ~port (16) | ~mapped IPv4 (32) |
//! ```
//! Flags, bit 0 first: `C R A A A A U G A A A A A A A A` — C cone (deprecated by
//! RFC 5991), R reserved, U and G zero (modified EUI-64), A twelve random bits.

use crate::{read_ipv4, read_u16, read_u32, write_u16, write_u32};
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

mod field {
    use crate::field::*;

    pub const PREFIX: Field = 0..4;
    pub const SERVER: Field = 4..8;
    pub const FLAGS: Field = 8..10;
    pub const PORT: Field = 10..12;
    pub const CLIENT_ADDR: Field = 12..16;
}

/// The Teredo UDP port servers listen on.
pub const TEREDO_PORT: u16 = 3544;
/// The global Teredo prefix 2001:0::/32, as its first 32 bits.
pub const PREFIX: u32 = 0x2001_0000;
/// The pre-RFC experimental prefix 3ffe:831f::/32 (old Microsoft servers).
pub const PREFIX_EXPERIMENTAL: u32 = 0x3ffe_831f;

/// RS source used for restricted (C=0) qualification by Windows Vista+ and Miredo.
pub const RS_SOURCE_RESTRICTED: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xffff, 0xffff, 0xffff);
/// RS source used by Windows XP for cone (C=1) qualification ("TEREDO" in ASCII).
pub const RS_SOURCE_CONE: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x8000, 0x5445, 0x5245, 0x444f);
/// RS source used by Windows XP for restricted qualification.
pub const RS_SOURCE_RESTRICTED_XP: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0x5445, 0x5245, 0x444f);

/// The 16-bit flags field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    /// C: the client was behind a cone NAT when it qualified (deprecated, RFC 5991).
    pub const CONE: u16 = 0x8000;
    /// R: reserved, sent as zero and ignored.
    pub const RESERVED: u16 = 0x4000;
    /// U: universal/local bit; must be zero.
    pub const UNIVERSAL: u16 = 0x0200;
    /// G: individual/group bit; must be zero.
    pub const GROUP: u16 = 0x0100;
    /// The twelve random bits of RFC 5991.
    pub const RANDOM_MASK: u16 = 0x3cff;

    /// Flags with the cone bit as given and the 12-bit random value `random` spread
    /// over the A bits (its high nibble goes to bits 2–5, its low byte to bits 8–15).
    pub const fn new(cone: bool, random: u16) -> Flags {
        let c = if cone { Self::CONE } else { 0 };
        Flags(c | ((random & 0x0f00) << 2) | (random & 0x00ff))
    }
    /// The cone bit.
    pub const fn cone(self) -> bool {
        self.0 & Self::CONE != 0
    }
    /// The 12 random bits gathered into one value (0..=0xfff).
    pub const fn random_bits(self) -> u16 {
        ((self.0 >> 2) & 0x0f00) | (self.0 & 0x00ff)
    }
    /// U or G set: not a valid modified EUI-64 interface identifier.
    pub const fn has_ug_bits(self) -> bool {
        self.0 & (Self::UNIVERSAL | Self::GROUP) != 0
    }
    /// How the flags conform to the RFCs, as an address decoder reports it.
    pub const fn conformance(self) -> Conformance {
        if self.has_ug_bits() {
            Conformance::Invalid
        } else if self.0 & Self::RESERVED != 0 {
            Conformance::ReservedBitSet
        } else if self.random_bits() == 0 {
            Conformance::Rfc4380
        } else if self.cone() {
            Conformance::Rfc5991WithCone
        } else {
            Conformance::Rfc5991
        }
    }
}

/// What the flags say about the client that formed the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conformance {
    /// Random bits in use and cone bit clear: what RFC 5991 asks of clients.
    Rfc5991,
    /// Random bits in use but the deprecated cone bit set.
    Rfc5991WithCone,
    /// No random bits (0x0000 or 0x8000): an RFC 4380 client, predictable address.
    Rfc4380,
    /// The reserved bit is set (to be ignored on receipt, never sent).
    ReservedBitSet,
    /// U or G set: not a valid interface identifier.
    Invalid,
}

impl Conformance {
    /// Whether this is what RFC 5991 asks a client to form.
    pub const fn is_rfc5991(self) -> bool {
        matches!(self, Conformance::Rfc5991)
    }
    /// A short human description.
    pub const fn describe(self) -> &'static str {
        match self {
            Conformance::Rfc5991 => "RFC 5991 (random bits, cone bit clear)",
            Conformance::Rfc5991WithCone => "random bits but deprecated cone bit set",
            Conformance::Rfc4380 => "RFC 4380 only (no random bits: predictable address)",
            Conformance::ReservedBitSet => "reserved bit set (ignored on receipt)",
            Conformance::Invalid => "invalid: U/G bits set",
        }
    }
}

/// A decoded Teredo address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TeredoAddr {
    /// The first 32 bits (2001:0 or the configured Teredo prefix).
    pub prefix: u32,
    /// The Teredo server that issued the address.
    pub server: Ipv4Addr,
    /// The flags.
    pub flags: Flags,
    /// The client's mapped (NAT-external) IPv4 address and port, de-obfuscated.
    pub mapped: SocketAddrV4,
}

impl TeredoAddr {
    /// Decode `addr` if it starts with `prefix`.
    pub fn decode_with_prefix(addr: &Ipv6Addr, prefix: u32) -> Option<TeredoAddr> {
        if read_u32(&addr.octets()[field::PREFIX]) != prefix {
            return None;
        }
        Some(Self::decode_any(addr))
    }

    /// Decode `addr` if it is under the global or the experimental Teredo prefix.
    pub fn decode(addr: &Ipv6Addr) -> Option<TeredoAddr> {
        Self::decode_with_prefix(addr, PREFIX).or_else(|| Self::decode_with_prefix(addr, PREFIX_EXPERIMENTAL))
    }

    /// Read the fields of any address as if it were a Teredo address (also used for
    /// Teredo link-local identifiers).
    pub fn decode_any(addr: &Ipv6Addr) -> TeredoAddr {
        let o = addr.octets();
        let port = obfuscate_port(read_u16(&o[field::PORT]));
        let ip = obfuscate_ipv4(read_ipv4(&o[field::CLIENT_ADDR]));
        TeredoAddr {
            prefix: read_u32(&o[field::PREFIX]),
            server: read_ipv4(&o[field::SERVER]),
            flags: Flags(read_u16(&o[field::FLAGS])),
            mapped: SocketAddrV4::new(ip, port),
        }
    }

    /// Encode into an IPv6 address.
    pub fn to_ipv6(&self) -> Ipv6Addr {
        let mut o = [0u8; 16];
        write_u32(&mut o[field::PREFIX], self.prefix);
        o[field::SERVER].copy_from_slice(&self.server.octets());
        write_u16(&mut o[field::FLAGS], self.flags.0);
        write_u16(&mut o[field::PORT], obfuscate_port(self.mapped.port()));
        o[field::CLIENT_ADDR].copy_from_slice(&obfuscate_ipv4(*self.mapped.ip()).octets());
        Ipv6Addr::from(o)
    }

    /// The prefix a server with this address advertises: `prefix:server::/64`.
    pub fn client_prefix(prefix: u32, server: Ipv4Addr) -> Ipv6Addr {
        let mut o = [0u8; 16];
        write_u32(&mut o[field::PREFIX], prefix);
        o[field::SERVER].copy_from_slice(&server.octets());
        Ipv6Addr::from(o)
    }
}

impl fmt::Display for TeredoAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_ipv6(), f)
    }
}

/// Whether `addr` is under the global Teredo prefix 2001:0::/32.
pub fn is_teredo(addr: &Ipv6Addr) -> bool {
    addr.segments()[..2] == [0x2001, 0]
}

/// Invert a port as Teredo does (it is its own inverse).
pub const fn obfuscate_port(port: u16) -> u16 {
    !port
}

/// Invert an IPv4 address as Teredo does (it is its own inverse).
pub const fn obfuscate_ipv4(addr: Ipv4Addr) -> Ipv4Addr {
    Ipv4Addr::from_bits(!addr.to_bits())
}

/// The link-local address a server sends router advertisements from (RFC 4380
/// §5.3.2): fe80::8000:~3544:~server-IPv4.
pub fn server_link_local(server: Ipv4Addr) -> Ipv6Addr {
    TeredoAddr {
        prefix: 0xfe80_0000,
        server: Ipv4Addr::UNSPECIFIED,
        flags: Flags(Flags::CONE),
        mapped: SocketAddrV4::new(server, TEREDO_PORT),
    }
    .to_ipv6()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    const SERVER: Ipv4Addr = Ipv4Addr::new(65, 54, 227, 120);
    const MAPPED: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 45), 40000);

    #[test]
    fn reference_vectors() {
        for (flags, text) in [
            (Flags::new(true, 0), "2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            (Flags::new(false, 0), "2001:0:4136:e378:0:63bf:3fff:fdd2"),
            (Flags::new(false, 0xabc), "2001:0:4136:e378:28bc:63bf:3fff:fdd2"),
        ] {
            let t = TeredoAddr { prefix: PREFIX, server: SERVER, flags, mapped: MAPPED };
            assert_eq!(t.to_ipv6(), a(text));
            assert_eq!(TeredoAddr::decode(&a(text)), Some(t));
        }
        assert_eq!(Flags::new(false, 0xabc).0, 0x28bc);
        assert_eq!(Flags(0x28bc).random_bits(), 0xabc);
    }

    #[test]
    fn seed_paper_examples() {
        // Server 3.3.3.3, mapped 1.1.1.1:7863 behind a cone NAT.
        let t = TeredoAddr::decode(&a("2001:0:303:303:8000:e148:fefe:fefe")).unwrap();
        assert_eq!(t.server, Ipv4Addr::new(3, 3, 3, 3));
        assert!(t.flags.cone());
        assert_eq!(t.mapped, "1.1.1.1:7863".parse().unwrap());
        // Same server, mapped 1.1.1.1:2048, experimental prefix.
        let t = TeredoAddr {
            prefix: PREFIX_EXPERIMENTAL,
            server: Ipv4Addr::new(3, 3, 3, 3),
            flags: Flags::new(true, 0),
            mapped: "1.1.1.1:2048".parse().unwrap(),
        };
        assert_eq!(t.to_ipv6(), a("3ffe:831f:303:303:8000:f7ff:fefe:fefe"));
        assert_eq!(TeredoAddr::decode(&t.to_ipv6()), Some(t));
    }

    #[test]
    fn server_link_local_vector() {
        assert_eq!(server_link_local(SERVER), a("fe80::8000:f227:bec9:1c87"));
    }

    #[test]
    fn non_teredo_addresses_are_not_decoded() {
        assert_eq!(TeredoAddr::decode(&a("2001:db8::1")), None);
        assert_eq!(TeredoAddr::decode(&a("2002:c000:22d::1")), None);
        assert!(TeredoAddr::decode_with_prefix(&a("2001:db8::1"), 0x2001_0db8).is_some());
        assert!(is_teredo(&a("2001:0:4136:e378::1")));
        assert!(!is_teredo(&a("2001:db8::1")));
    }

    #[test]
    fn conformance_classes() {
        assert_eq!(Flags(0).conformance(), Conformance::Rfc4380);
        assert_eq!(Flags(0x8000).conformance(), Conformance::Rfc4380);
        assert_eq!(Flags(0x28bc).conformance(), Conformance::Rfc5991);
        assert!(Flags(0x28bc).conformance().is_rfc5991());
        assert_eq!(Flags(0xa8bc).conformance(), Conformance::Rfc5991WithCone);
        assert_eq!(Flags(0x0200).conformance(), Conformance::Invalid);
        assert_eq!(Flags(0x4001).conformance(), Conformance::ReservedBitSet);
    }
}
