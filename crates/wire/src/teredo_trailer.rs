//! RFC 6081 trailers: type-length-value options after the IPv6 packet in a Teredo UDP
//! payload (the IPv6 packet ends at 40 + Payload Length; whatever follows is trailer
//! space).
//!
//! Every node tolerates them and a server forwards them intact, so the trailer area is
//! kept as the raw bytes it arrived as; this module only reads it. The look-ups process
//! the trailers as RFC 6081 §5.1.2 has a client do: in order, skipping unknown types,
//! and stopping at the first malformed one, which §5.1.2 defines by length alone (a TLV
//! that runs past the end) — those before it count, the packet is kept, so a plain
//! RFC 4380 exchange is never broken by a bad trailer. A known type whose value does not
//! parse is not malformed there: it is not used (its typed look-up gives nothing), and
//! the trailers after it count. An unknown type whose two top
//! bits are 01 asks that the packet be discarded ([`Trailers::must_discard`]).
//! [`Trailers::validate`] says whether every TLV fits (what a server checks before it
//! forwards them).

use crate::{read_ipv4, read_u16, write_u16, Error, Result};
use core::net::SocketAddrV4;

mod field {
    #![allow(non_snake_case)]
    use crate::field::*;

    // Every trailer: a type, the length of its value, the value.
    pub const TYPE: usize = 0;
    pub const LENGTH: usize = 1;
    pub const fn VALUE(length: usize) -> Field {
        LENGTH + 1..LENGTH + 1 + length
    }

    // Inside the value of each known type.
    pub const NONCE: Field = 0..4;
    pub const ALT_RESERVED: Field = 0..2;
    pub const ALT_ENTRIES: Rest = 2..;
    pub const DISCOVERY_TYPE: usize = 0;
    pub const DISCOVERY_RESERVED: Field = 1..4;
    pub const RANDOM_PORT: Field = 0..2;

    // One alternate address entry.
    pub const ENTRY_ADDR: Field = 0..4;
    pub const ENTRY_PORT: Field = 4..6;
}

/// Bytes before a trailer's value: type and length.
const TL_LEN: usize = field::VALUE(0).start;
/// Length of an alternate address entry.
const ENTRY_LEN: usize = field::ENTRY_PORT.end;
/// Value lengths of the fixed-size trailers.
const NONCE_LEN: usize = field::NONCE.end;
const DISCOVERY_LEN: usize = field::DISCOVERY_RESERVED.end;
const RANDOM_PORT_LEN: usize = field::RANDOM_PORT.end;
/// The DiscoveryType values (RFC 6081 §4.4).
const SOLICITATION: u8 = 0;
const ADVERTISEMENT: u8 = 1;

/// Trailer type codes.
pub mod trailer_type {
    /// Nonce trailer (4-byte nonce).
    pub const NONCE: u8 = 0x01;
    /// Alternate address trailer (hairpinning).
    pub const ALTERNATE_ADDRESS: u8 = 0x03;
    /// Neighbor discovery option trailer (server load reduction).
    pub const NEIGHBOR_DISCOVERY: u8 = 0x04;
    /// Random port trailer (port-preserving symmetric NAT), as RFC 6081 §4.5 numbers it,
    /// and as shipworm sends it: §4.5 is the section that defines the trailer, and the
    /// number Windows' implementation (the RFC's source) is documented with.
    pub const RANDOM_PORT: u8 = 0x05;
    /// The number RFC 6081's IANA table (§9) gives the random port trailer; parsed as
    /// the same trailer, never sent.
    pub const RANDOM_PORT_IANA: u8 = 0x02;
}

/// One trailer as it lies in the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer<'a> {
    /// Type.
    pub kind: u8,
    /// Value (Length bytes).
    pub value: &'a [u8],
}

/// The trailer area of a Teredo payload, kept as it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Trailers<'a> {
    bytes: &'a [u8],
}

impl<'a> Trailers<'a> {
    /// Wrap the bytes after the IPv6 packet.
    pub const fn new(bytes: &'a [u8]) -> Self {
        Trailers { bytes }
    }
    /// The raw area, to be forwarded unchanged.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// No trailer bytes at all.
    pub const fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    /// Iterate over the TLVs; yields `Err` once and stops if one runs past the end.
    pub fn iter(&self) -> TrailerIter<'a> {
        TrailerIter { rest: self.bytes }
    }
    /// Whether every TLV fits.
    pub fn validate(&self) -> Result<()> {
        self.iter().try_for_each(|t| t.map(|_| ()))
    }
    /// The first trailer of type `kind` before the first malformed one (RFC 6081
    /// §5.1.2), whether or not its value parses, so that the caller can tell a bad one
    /// (a bad Alternate Address trailer spoils its bubble, §5.6.4.2).
    pub fn find(&self, kind: u8) -> Option<Trailer<'a>> {
        for t in self.iter() {
            let t = t.ok()?;
            if t.kind == kind {
                return Some(t);
            }
        }
        None
    }

    /// A trailer before the first malformed one is of a type this node does not know and
    /// whose two top bits are 01: RFC 6081 §4.1 has the whole packet discarded.
    pub fn must_discard(&self) -> bool {
        for t in self.iter() {
            let Ok(t) = t else { return false };
            if !is_known(t.kind) && t.kind >> 6 == 0b01 {
                return true;
            }
        }
        false
    }
    /// The typed value of the first trailer of type `kind`, if well formed.
    pub fn get(&self, kind: u8) -> Option<TrailerRepr<'a>> {
        TrailerRepr::parse(&self.find(kind)?).ok()
    }
}

/// A type this module parses.
fn is_known(kind: u8) -> bool {
    matches!(
        kind,
        trailer_type::NONCE
            | trailer_type::ALTERNATE_ADDRESS
            | trailer_type::NEIGHBOR_DISCOVERY
            | trailer_type::RANDOM_PORT
            | trailer_type::RANDOM_PORT_IANA
    )
}

/// Iterator over trailer TLVs.
#[derive(Debug, Clone)]
pub struct TrailerIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for TrailerIter<'a> {
    type Item = Result<Trailer<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let r = core::mem::take(&mut self.rest);
        let Some(&len) = r.get(field::LENGTH) else {
            return Some(Err(Error::Truncated));
        };
        let range = field::VALUE(usize::from(len));
        let Some(value) = r.get(range.clone()) else {
            return Some(Err(Error::Truncated));
        };
        self.rest = &r[range.end..];
        Some(Ok(Trailer { kind: r[field::TYPE], value }))
    }
}

/// The DiscoveryType of a neighbor-discovery option trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryType {
    /// TeredoDiscoverySolicitation (0): please answer with a direct bubble.
    Solicitation,
    /// TeredoDiscoveryAdvertisement (1): the answer.
    Advertisement,
}

/// Alternate addresses, as they lie in the trailer (6 bytes each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlternateAddresses<'a> {
    entries: &'a [u8],
}

impl<'a> AlternateAddresses<'a> {
    /// Number of entries.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.entries.len() / ENTRY_LEN
    }
    /// The entries, as IPv4 address and port.
    pub fn iter(&self) -> impl Iterator<Item = SocketAddrV4> + 'a {
        self.entries.chunks_exact(ENTRY_LEN).map(entry)
    }
}

/// An alternate address entry's address and port.
fn entry(e: &[u8]) -> SocketAddrV4 {
    SocketAddrV4::new(read_ipv4(&e[field::ENTRY_ADDR]), read_u16(&e[field::ENTRY_PORT]))
}

/// A typed trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrailerRepr<'a> {
    /// Nonce trailer.
    Nonce([u8; 4]),
    /// Alternate address trailer: 1 to 4 entries.
    AlternateAddress(AlternateAddresses<'a>),
    /// Neighbor discovery option trailer.
    NeighborDiscovery(DiscoveryType),
    /// Random port trailer.
    RandomPort(u16),
}

impl<'a> TrailerRepr<'a> {
    /// Parse a known trailer; unknown types and wrong lengths give `BadValue`.
    pub fn parse(t: &Trailer<'a>) -> Result<Self> {
        let v = t.value;
        match (t.kind, v.len()) {
            (trailer_type::NONCE, NONCE_LEN) => {
                let mut n = [0u8; NONCE_LEN];
                n.copy_from_slice(&v[field::NONCE]);
                Ok(TrailerRepr::Nonce(n))
            }
            // One to four entries after the reserved bytes.
            (trailer_type::ALTERNATE_ADDRESS, 8 | 14 | 20 | 26) => {
                let entries = &v[field::ALT_ENTRIES];
                // Each address must be unicast and each port non-zero (RFC 6081 §4.3).
                let ok = entries.chunks_exact(ENTRY_LEN).map(entry).all(|a| {
                    let ip = a.ip();
                    a.port() != 0 && !ip.is_unspecified() && !ip.is_multicast() && !ip.is_broadcast()
                });
                if !ok {
                    return Err(Error::BadValue);
                }
                Ok(TrailerRepr::AlternateAddress(AlternateAddresses { entries }))
            }
            (trailer_type::NEIGHBOR_DISCOVERY, DISCOVERY_LEN) => match v[field::DISCOVERY_TYPE] {
                SOLICITATION => Ok(TrailerRepr::NeighborDiscovery(DiscoveryType::Solicitation)),
                ADVERTISEMENT => Ok(TrailerRepr::NeighborDiscovery(DiscoveryType::Advertisement)),
                _ => Err(Error::BadValue),
            },
            (trailer_type::RANDOM_PORT | trailer_type::RANDOM_PORT_IANA, RANDOM_PORT_LEN) => {
                Ok(TrailerRepr::RandomPort(read_u16(&v[field::RANDOM_PORT])))
            }
            _ => Err(Error::BadValue),
        }
    }

    /// Bytes the trailer needs, type and length included.
    pub fn buffer_len(&self) -> usize {
        TL_LEN
            + match self {
                TrailerRepr::Nonce(_) => NONCE_LEN,
                TrailerRepr::NeighborDiscovery(_) => DISCOVERY_LEN,
                TrailerRepr::AlternateAddress(a) => field::ALT_ENTRIES.start + a.entries.len(),
                TrailerRepr::RandomPort(_) => RANDOM_PORT_LEN,
            }
    }

    /// Write the trailer at the start of `buf`, reserved bytes zeroed; returns its
    /// length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let b = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
        let value_len = len - TL_LEN;
        let value = &mut b[field::VALUE(value_len)];
        let kind = match *self {
            TrailerRepr::Nonce(n) => {
                value[field::NONCE].copy_from_slice(&n);
                trailer_type::NONCE
            }
            TrailerRepr::AlternateAddress(a) => {
                value[field::ALT_RESERVED].fill(0);
                value[field::ALT_ENTRIES].copy_from_slice(a.entries);
                trailer_type::ALTERNATE_ADDRESS
            }
            TrailerRepr::NeighborDiscovery(d) => {
                value[field::DISCOVERY_TYPE] = match d {
                    DiscoveryType::Solicitation => SOLICITATION,
                    DiscoveryType::Advertisement => ADVERTISEMENT,
                };
                value[field::DISCOVERY_RESERVED].fill(0);
                trailer_type::NEIGHBOR_DISCOVERY
            }
            TrailerRepr::RandomPort(p) => {
                write_u16(&mut value[field::RANDOM_PORT], p);
                trailer_type::RANDOM_PORT
            }
        };
        b[field::TYPE] = kind;
        b[field::LENGTH] = value_len as u8;
        Ok(len)
    }
}

/// Write an alternate-address trailer listing `addrs` (1 to 4) at the start of `buf`.
pub fn emit_alternate_addresses(addrs: &[SocketAddrV4], buf: &mut [u8]) -> Result<usize> {
    if addrs.is_empty() || addrs.len() > 4 {
        return Err(Error::BadValue);
    }
    let value_len = field::ALT_ENTRIES.start + ENTRY_LEN * addrs.len();
    let len = TL_LEN + value_len;
    let b = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
    b[field::TYPE] = trailer_type::ALTERNATE_ADDRESS;
    b[field::LENGTH] = value_len as u8;
    let value = &mut b[field::VALUE(value_len)];
    value[field::ALT_RESERVED].fill(0);
    for (e, a) in value[field::ALT_ENTRIES].chunks_exact_mut(ENTRY_LEN).zip(addrs) {
        e[field::ENTRY_ADDR].copy_from_slice(&a.ip().octets());
        write_u16(&mut e[field::ENTRY_PORT], a.port());
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nd_solicitation_and_advertisement() {
        let t = Trailers::new(&[4, 4, 0, 0, 0, 0]);
        assert_eq!(
            t.get(trailer_type::NEIGHBOR_DISCOVERY),
            Some(TrailerRepr::NeighborDiscovery(DiscoveryType::Solicitation))
        );
        let mut b = [0u8; 6];
        TrailerRepr::NeighborDiscovery(DiscoveryType::Advertisement).emit(&mut b).unwrap();
        assert_eq!(b, [4, 4, 1, 0, 0, 0]);
    }

    #[test]
    fn tlv_past_the_end_is_ignored_without_over_read() {
        // Case 50: a length running past the datagram.
        let t = Trailers::new(&[4, 40, 0, 0]);
        assert_eq!(t.validate(), Err(Error::Truncated));
        assert_eq!(t.find(4), None);
        assert_eq!(t.as_bytes(), &[4, 40, 0, 0]);
        assert_eq!(Trailers::new(&[1]).validate(), Err(Error::Truncated));
    }

    #[test]
    fn several_trailers_and_unknown_types() {
        let mut b = [0u8; 64];
        let mut n = TrailerRepr::Nonce([1, 2, 3, 4]).emit(&mut b).unwrap();
        b[n..n + 3].copy_from_slice(&[0x7f, 1, 0xee]); // unknown: skipped
        n += 3;
        n += emit_alternate_addresses(
            &["10.0.0.2:3544".parse().unwrap(), "192.0.2.1:50000".parse().unwrap()],
            &mut b[n..],
        )
        .unwrap();
        n += TrailerRepr::RandomPort(4242).emit(&mut b[n..]).unwrap();
        let t = Trailers::new(&b[..n]);
        assert_eq!(t.validate(), Ok(()));
        assert_eq!(t.iter().count(), 4);
        assert_eq!(t.get(trailer_type::NONCE), Some(TrailerRepr::Nonce([1, 2, 3, 4])));
        assert_eq!(t.get(trailer_type::RANDOM_PORT), Some(TrailerRepr::RandomPort(4242)));
        let Some(TrailerRepr::AlternateAddress(alt)) = t.get(trailer_type::ALTERNATE_ADDRESS) else {
            panic!("alternate address trailer not found");
        };
        assert_eq!(alt.len(), 2);
        assert_eq!(alt.iter().nth(1), Some("192.0.2.1:50000".parse().unwrap()));
    }

    #[test]
    fn trailers_before_the_first_malformed_one_count_and_the_rest_do_not() {
        // Nonce, then a Neighbor Discovery option of the wrong length, then a Random Port:
        // a bad value is not malformed (RFC 6081 §5.1.2 defines that by length alone),
        // so the Random Port after it counts; the bad one is shown, and not used.
        let t = Trailers::new(&[1, 4, 9, 8, 7, 6, 4, 2, 0, 0, 5, 2, 0x04, 0xb1]);
        assert_eq!(t.get(trailer_type::NONCE), Some(TrailerRepr::Nonce([9, 8, 7, 6])));
        assert_eq!(t.get(trailer_type::RANDOM_PORT), Some(TrailerRepr::RandomPort(1201)), "read past a bad value");
        assert!(t.find(trailer_type::NEIGHBOR_DISCOVERY).is_some(), "the bad one itself is shown");
        assert_eq!(t.get(trailer_type::NEIGHBOR_DISCOVERY), None, "and not used");
        assert!(Trailers::new(&[4, 1, 0, 0x40, 0]).must_discard(), "a 01 type after a bad value discards");
        // A Nonce, then a TLV running past the end: the Nonce still counts.
        let t = Trailers::new(&[1, 4, 1, 2, 3, 4, 0x7f, 9]);
        assert_eq!(t.validate(), Err(Error::Truncated));
        assert_eq!(t.get(trailer_type::NONCE), Some(TrailerRepr::Nonce([1, 2, 3, 4])));
    }

    #[test]
    fn an_unknown_type_with_top_bits_01_discards_the_packet_and_others_are_skipped() {
        for (kind, discard) in [(0x40, true), (0x7f, true), (0x3f, false), (0x80, false), (0xc0, false)] {
            let bytes = [kind, 1, 0, 1, 4, 1, 2, 3, 4];
            let t = Trailers::new(&bytes);
            assert_eq!(t.must_discard(), discard, "type {kind:#x}");
            assert_eq!(t.get(trailer_type::NONCE), Some(TrailerRepr::Nonce([1, 2, 3, 4])), "type {kind:#x}");
        }
        // After a malformed trailer (past the end) nothing is processed, a 01 type
        // neither.
        assert!(!Trailers::new(&[1, 9, 0, 0x40, 0]).must_discard());
    }

    #[test]
    fn the_random_port_trailer_is_read_under_both_numbers() {
        for kind in [trailer_type::RANDOM_PORT, trailer_type::RANDOM_PORT_IANA] {
            let bytes = [kind, 2, 0x04, 0xb1];
            let t = Trailers::new(&bytes);
            assert_eq!(t.get(kind), Some(TrailerRepr::RandomPort(1201)));
        }
        let mut b = [0u8; 4];
        TrailerRepr::RandomPort(1201).emit(&mut b).unwrap();
        assert_eq!(b, [trailer_type::RANDOM_PORT, 2, 0x04, 0xb1], "sent as §4.5 numbers it");
    }

    #[test]
    fn alternate_address_rules() {
        // Length 10 is not 8 + 6k; port 0 is refused.
        assert!(TrailerRepr::parse(&Trailer { kind: 3, value: &[0; 10] }).is_err());
        let v = [0, 0, 192, 0, 2, 1, 0, 0];
        assert!(TrailerRepr::parse(&Trailer { kind: 3, value: &v }).is_err());
        assert!(emit_alternate_addresses(&[], &mut [0; 8]).is_err());
    }
}
