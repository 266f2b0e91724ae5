//! Neighbor-discovery options (RFC 4861 §4.6) as Teredo uses them in router
//! advertisements: prefix information and MTU. Every option's length is in 8-octet
//! units and includes the type and length bytes; a length of 0 invalidates the whole
//! message.

use crate::{read_ipv6, read_u32, write_u32, Error, Result};
use core::net::Ipv6Addr;

mod field {
    use crate::field::*;

    // Every option.
    pub const TYPE: usize = 0;
    /// In units of 8 octets, type and length bytes included.
    pub const LENGTH: usize = 1;

    // Prefix information (RFC 4861 §4.6.2).
    pub const PREFIX_LEN: usize = 2;
    pub const PREFIX_FLAGS: usize = 3;
    pub const VALID_LIFETIME: Field = 4..8;
    pub const PREFERRED_LIFETIME: Field = 8..12;
    pub const PREFIX_RESERVED: Field = 12..16;
    pub const PREFIX: Field = 16..32;

    // MTU (RFC 4861 §4.6.4).
    pub const MTU_RESERVED: Field = 2..4;
    pub const MTU: Field = 4..8;
}

/// The on-link (L) flag of a prefix-information option.
const FLAG_ON_LINK: u8 = 0x80;
/// The autonomous address-configuration (A) flag of a prefix-information option.
const FLAG_AUTONOMOUS: u8 = 0x40;

/// Option type codes.
pub mod option_type {
    /// Source link-layer address.
    pub const SOURCE_LL_ADDR: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL_ADDR: u8 = 2;
    /// Prefix information.
    pub const PREFIX_INFO: u8 = 3;
    /// Redirected header.
    pub const REDIRECTED_HEADER: u8 = 4;
    /// MTU.
    pub const MTU: u8 = 5;
}

/// Length of a prefix-information option.
pub const PREFIX_INFO_LEN: usize = field::PREFIX.end;
/// Length of an MTU option.
pub const MTU_LEN: usize = field::MTU.end;

/// One option as it lies in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdOption<'a> {
    /// Option type.
    pub kind: u8,
    /// The whole option, type and length bytes included.
    pub bytes: &'a [u8],
}

/// Iterator over the options area of an ND message. Yields `Err` once and stops if an
/// option has length 0 or runs past the end.
#[derive(Debug, Clone)]
pub struct NdOptions<'a> {
    rest: &'a [u8],
}

impl<'a> NdOptions<'a> {
    /// Iterate over an options area.
    pub fn new(options: &'a [u8]) -> Self {
        NdOptions { rest: options }
    }

    /// Check every option's length; the RFC 4861 rule is all-or-nothing.
    pub fn validate(options: &'a [u8]) -> Result<()> {
        NdOptions::new(options).try_for_each(|o| o.map(|_| ()))
    }
}

impl<'a> Iterator for NdOptions<'a> {
    type Item = Result<NdOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let r = self.rest;
        self.rest = &[];
        let Some(&units) = r.get(field::LENGTH) else {
            return Some(Err(Error::BadOption));
        };
        let len = usize::from(units) * 8;
        if len == 0 || len > r.len() {
            return Some(Err(Error::BadOption));
        }
        let (opt, rest) = r.split_at(len);
        self.rest = rest;
        Some(Ok(NdOption { kind: opt[field::TYPE], bytes: opt }))
    }
}

/// A prefix-information option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixInfo {
    /// Prefix length in bits.
    pub prefix_len: u8,
    /// On-link (L) flag.
    pub on_link: bool,
    /// Autonomous address-configuration (A) flag.
    pub autonomous: bool,
    /// Valid lifetime in seconds.
    pub valid_lifetime: u32,
    /// Preferred lifetime in seconds.
    pub preferred_lifetime: u32,
    /// The prefix.
    pub prefix: Ipv6Addr,
}

impl PrefixInfo {
    /// Parse a prefix-information option (type 3, length 4).
    pub fn parse(opt: &NdOption<'_>) -> Result<Self> {
        if opt.kind != option_type::PREFIX_INFO || opt.bytes.len() != PREFIX_INFO_LEN {
            return Err(Error::BadOption);
        }
        let b = opt.bytes;
        Ok(PrefixInfo {
            prefix_len: b[field::PREFIX_LEN],
            on_link: b[field::PREFIX_FLAGS] & FLAG_ON_LINK != 0,
            autonomous: b[field::PREFIX_FLAGS] & FLAG_AUTONOMOUS != 0,
            valid_lifetime: read_u32(&b[field::VALID_LIFETIME]),
            preferred_lifetime: read_u32(&b[field::PREFERRED_LIFETIME]),
            prefix: read_ipv6(&b[field::PREFIX]),
        })
    }

    /// Write the option into the first 32 bytes of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let b = buf.get_mut(..PREFIX_INFO_LEN).ok_or(Error::BufferTooSmall)?;
        b[field::TYPE] = option_type::PREFIX_INFO;
        b[field::LENGTH] = (PREFIX_INFO_LEN / 8) as u8;
        b[field::PREFIX_LEN] = self.prefix_len;
        b[field::PREFIX_FLAGS] =
            (u8::from(self.on_link) * FLAG_ON_LINK) | (u8::from(self.autonomous) * FLAG_AUTONOMOUS);
        write_u32(&mut b[field::VALID_LIFETIME], self.valid_lifetime);
        write_u32(&mut b[field::PREFERRED_LIFETIME], self.preferred_lifetime);
        b[field::PREFIX_RESERVED].fill(0);
        b[field::PREFIX].copy_from_slice(&self.prefix.octets());
        Ok(PREFIX_INFO_LEN)
    }
}

/// Parse an MTU option (type 5, length 1).
pub fn parse_mtu(opt: &NdOption<'_>) -> Result<u32> {
    if opt.kind != option_type::MTU || opt.bytes.len() != MTU_LEN {
        return Err(Error::BadOption);
    }
    Ok(read_u32(&opt.bytes[field::MTU]))
}

/// Write an MTU option into the first 8 bytes of `buf`; returns its length.
pub fn emit_mtu(mtu: u32, buf: &mut [u8]) -> Result<usize> {
    let b = buf.get_mut(..MTU_LEN).ok_or(Error::BufferTooSmall)?;
    b[field::TYPE] = option_type::MTU;
    b[field::LENGTH] = (MTU_LEN / 8) as u8;
    b[field::MTU_RESERVED].fill(0);
    write_u32(&mut b[field::MTU], mtu);
    Ok(MTU_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_length_option_invalidates_everything() {
        let opts = [5, 1, 0, 0, 0, 0, 5, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(NdOptions::validate(&opts), Err(Error::BadOption));
        let mut it = NdOptions::new(&opts);
        assert!(it.next().unwrap().is_ok());
        assert_eq!(it.next().unwrap(), Err(Error::BadOption));
        assert!(it.next().is_none());
    }

    #[test]
    fn option_running_past_the_end_is_refused() {
        assert_eq!(NdOptions::validate(&[3, 4, 0, 0]), Err(Error::BadOption));
        assert_eq!(NdOptions::validate(&[3]), Err(Error::BadOption));
        assert_eq!(NdOptions::validate(&[]), Ok(()));
    }

    #[test]
    fn prefix_info_round_trip() {
        let pi = PrefixInfo {
            prefix_len: 64,
            on_link: false,
            autonomous: true,
            valid_lifetime: u32::MAX,
            preferred_lifetime: u32::MAX,
            prefix: "2001:0:4136:e378::".parse().unwrap(),
        };
        let mut b = [0u8; 32];
        pi.emit(&mut b).unwrap();
        assert_eq!(&b[..4], &[3, 4, 64, 0x40]);
        let opt = NdOptions::new(&b).next().unwrap().unwrap();
        assert_eq!(PrefixInfo::parse(&opt).unwrap(), pi);
    }

    #[test]
    fn mtu_option() {
        let mut b = [0u8; 8];
        emit_mtu(1280, &mut b).unwrap();
        assert_eq!(b, [5, 1, 0, 0, 0, 0, 5, 0]);
        let opt = NdOptions::new(&b).next().unwrap().unwrap();
        assert_eq!(parse_mtu(&opt).unwrap(), 1280);
    }
}
