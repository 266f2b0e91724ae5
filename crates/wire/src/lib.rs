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
//! * `FooRepr` is a plain value with `parse(&view)`, `buffer_len()` and `emit(&mut view)`.
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
mod error;
pub mod exercise;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv4_scope;
pub mod ipv6;
pub mod ipv6_ext;
pub mod ndisc_option;
pub mod teredo_addr;
pub mod teredo_auth;
pub mod teredo_origin;
pub mod teredo_packet;
pub mod teredo_trailer;
pub mod udp;

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

/// Read a big-endian u16 at `at`; the caller has checked the bounds.
#[inline]
pub(crate) fn be16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

/// Read a big-endian u32 at `at`; the caller has checked the bounds.
#[inline]
pub(crate) fn be32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// Read 16 bytes at `at` as an IPv6 address; the caller has checked the bounds.
#[inline]
pub(crate) fn ipv6_at(buf: &[u8], at: usize) -> core::net::Ipv6Addr {
    let mut b = [0u8; 16];
    b.copy_from_slice(&buf[at..at + 16]);
    core::net::Ipv6Addr::from(b)
}
