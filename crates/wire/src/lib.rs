//! # shipworm-wire
//!
//! The bottom floor of shipworm: typed, zero-copy views over packet buffers and the
//! plain representations that are parsed from and emitted into them.
//!
//! Every protocol follows the same pattern (learned from smoltcp's `wire` module):
//!
//! * `FooPacket<T: AsRef<[u8]>>` (or `FooHeader`) is a view over any buffer. Untrusted
//!   input goes through `new_checked`, which validates lengths once; after that no
//!   accessor can panic. Setters exist only where `T: AsMut<[u8]>`.
//! * `FooRepr` is a plain value with `parse(&view)`, `buffer_len()` and `emit`.
//! * Each file's private `mod field` names where every field lies, as a byte index for
//!   one-byte fields and a [`Range`](core::ops::Range) for wider ones; getters and setters
//!   read and write through those names and nowhere else, so the layout is written down
//!   once per protocol.
//!
//! ## One emit shape
//!
//! Every emitter, `FooRepr::emit` and the few free `emit_*` functions alike, has the shape
//!
//! ```text
//! fn emit(&self, /* what the checksum needs: src, dst */, buf: &mut [u8]) -> Result<usize>
//! ```
//!
//! It writes at the start of `buf`, through the view's setters (through the field
//! table for the TLV options, which have no view), and returns how many bytes it wrote
//! (`buffer_len()`); a `buf` too short gives [`Error::BufferTooSmall`], a length its
//! field cannot hold [`Error::BadLength`]. Teredo builds several headers back to back
//! in one scratch buffer (authentication, origin indication, IPv6, ICMPv6), so the
//! returned length is where the next one goes: `at += repr.emit(&mut buf[at..])?`.
//! smoltcp's `emit(&mut Packet)` would make every caller wrap each sub-slice in a view
//! first.
//!
//! A header that carries a payload (IPv4, IPv6, UDP) writes the header alone and
//! returns its length, which is where the payload starts. When the header claims the
//! payload's length (IPv4) or its checksum covers the payload (UDP), `buf` must hold
//! the payload too, and for UDP the caller places it before calling `emit`.
//!
//! The crate is `no_std` and never allocates: headers are read where they lie in the
//! caller's buffer, including the IPv6 extension-header chain (the KAME `m_pulldown`
//! lesson: walk, never copy intermediate headers).

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod checksum;
pub mod coalescing;
mod error;
// The fuzz harnesses are shared by the property tests and `fuzz/`, and are no API for
// anyone else: a feature keeps them out of ordinary builds.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod exercise;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv4_scope;
pub mod ipv6;
pub mod ipv6_ext;
pub mod ndisc_option;
pub mod pcp;
pub mod segmentation;
pub mod tcp;
pub mod teredo_addr;
pub mod teredo_auth;
pub mod teredo_origin;
pub mod teredo_packet;
pub mod teredo_trailer;
pub mod udp;
pub mod vnet_hdr;

pub use error::{Error, Result};

/// IP protocol numbers (IPv4 "protocol", IPv6 "next header") that shipworm names.
pub mod ip_protocol {
    /// IPv6 hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Encapsulating security payload (opaque: the chain walk stops here).
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// No next header (bubbles).
    pub const NO_NEXT_HEADER: u8 = 59;
    /// IPv6 destination options.
    pub const DEST_OPTS: u8 = 60;
}

/// The types each file's `mod field` is written in, as in smoltcp's wire module.
pub(crate) mod field {
    /// A fixed-width field.
    pub type Field = core::ops::Range<usize>;
    /// Everything from an offset to the end of the buffer.
    pub type Rest = core::ops::RangeFrom<usize>;
}

// Readers and writers of the fields `mod field` names. The slice is exactly the field:
// the width is checked in debug builds, where a wrong range in a field table would
// otherwise read the first bytes of a wider field unnoticed.

/// A big-endian u16 field.
#[inline]
pub(crate) fn read_u16(field: &[u8]) -> u16 {
    debug_assert_eq!(field.len(), 2);
    u16::from_be_bytes([field[0], field[1]])
}

/// A big-endian u32 field.
#[inline]
pub(crate) fn read_u32(field: &[u8]) -> u32 {
    debug_assert_eq!(field.len(), 4);
    u32::from_be_bytes([field[0], field[1], field[2], field[3]])
}

/// An IPv4 address field.
#[inline]
pub(crate) fn read_ipv4(field: &[u8]) -> core::net::Ipv4Addr {
    core::net::Ipv4Addr::from(read_u32(field))
}

/// An IPv6 address field.
#[inline]
pub(crate) fn read_ipv6(field: &[u8]) -> core::net::Ipv6Addr {
    let mut b = [0u8; 16];
    b.copy_from_slice(field);
    core::net::Ipv6Addr::from(b)
}

/// Write a big-endian u16 field.
#[inline]
pub(crate) fn write_u16(field: &mut [u8], v: u16) {
    field.copy_from_slice(&v.to_be_bytes());
}

/// Write a big-endian u32 field.
#[inline]
pub(crate) fn write_u32(field: &mut [u8], v: u32) {
    field.copy_from_slice(&v.to_be_bytes());
}
