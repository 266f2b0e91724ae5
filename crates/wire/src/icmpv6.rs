//! ICMPv6 (RFC 4443) and the router solicitation / advertisement of RFC 4861 §4.1–4.2,
//! the messages Teredo exchanges: echo (the connectivity test), errors, RS/RA
//! (qualification).

use crate::checksum;
use crate::ndisc_option::{self, option_type, NdOptions, PrefixInfo};
use crate::{be16, be32, ip_protocol, Error, Result};
use core::net::Ipv6Addr;

/// Message type codes.
pub mod message {
    /// Destination unreachable.
    pub const DST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAM_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Router solicitation.
    pub const ROUTER_SOLICIT: u8 = 133;
    /// Router advertisement.
    pub const ROUTER_ADVERT: u8 = 134;

    /// Types 0–127 are errors (RFC 4443 §2.1): never answered with another error.
    pub const fn is_error(t: u8) -> bool {
        t < 128
    }
}

/// Destination-unreachable codes (RFC 4443 §3.1).
pub mod unreachable {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Communication administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 1;
    /// Address unreachable.
    pub const ADDRESS: u8 = 3;
    /// Port unreachable.
    pub const PORT: u8 = 4;
}

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQ: usize = 6;
    pub const WORD1: usize = 4;
    pub const RA_HOP_LIMIT: usize = 4;
    pub const RA_FLAGS: usize = 5;
    pub const RA_LIFETIME: usize = 6;
    pub const RA_REACHABLE: usize = 8;
    pub const RA_RETRANS: usize = 12;
}

/// Header length of every message but the RA.
pub const HEADER_LEN: usize = 8;
/// Header length of a router advertisement (options follow).
pub const RA_HEADER_LEN: usize = 16;

/// A view over an ICMPv6 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wrap a buffer without checking it; accessors may panic until checked.
    pub const fn new_unchecked(buffer: T) -> Self {
        Icmpv6Packet { buffer }
    }

    /// Wrap an untrusted buffer: after this succeeds no accessor can panic.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Validate that the buffer holds the fixed header of its message type.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < 4 || len < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Return the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Length of the fixed header for this message type (4 for unknown types).
    pub fn header_len(&self) -> usize {
        match self.buffer.as_ref().first() {
            Some(&message::ROUTER_ADVERT) => RA_HEADER_LEN,
            Some(
                &(message::DST_UNREACHABLE
                | message::PACKET_TOO_BIG
                | message::TIME_EXCEEDED
                | message::PARAM_PROBLEM
                | message::ECHO_REQUEST
                | message::ECHO_REPLY
                | message::ROUTER_SOLICIT),
            ) => HEADER_LEN,
            _ => 4,
        }
    }
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Echo identifier (echo messages).
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_IDENT)
    }
    /// Echo sequence number (echo messages).
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ECHO_SEQ)
    }
    /// The second 32-bit word: MTU (packet too big) or pointer (parameter problem).
    pub fn word1(&self) -> u32 {
        be32(self.buffer.as_ref(), field::WORD1)
    }
    /// RA current hop limit.
    pub fn ra_cur_hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::RA_HOP_LIMIT]
    }
    /// RA flags byte (M, O and reserved bits).
    pub fn ra_flags(&self) -> u8 {
        self.buffer.as_ref()[field::RA_FLAGS]
    }
    /// RA router lifetime in seconds.
    pub fn ra_router_lifetime(&self) -> u16 {
        be16(self.buffer.as_ref(), field::RA_LIFETIME)
    }
    /// RA reachable time in milliseconds.
    pub fn ra_reachable_time(&self) -> u32 {
        be32(self.buffer.as_ref(), field::RA_REACHABLE)
    }
    /// RA retransmission timer in milliseconds.
    pub fn ra_retrans_time(&self) -> u32 {
        be32(self.buffer.as_ref(), field::RA_RETRANS)
    }
    /// What follows the fixed header: echo data, the invoking packet of an error, or
    /// ND options.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// Whether the checksum verifies over the IPv6 pseudo-header.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let Ok(len) = u32::try_from(b.len()) else {
            return false;
        };
        let acc = checksum::ipv6_pseudo_header(src, dst, ip_protocol::ICMPV6, len) + checksum::sum(b);
        checksum::fold(acc) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Compute and store the checksum over the pseudo-header and the whole message.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        let b = self.buffer.as_mut();
        b[field::CHECKSUM..field::CHECKSUM + 2].fill(0);
        let len = b.len() as u32;
        let acc = checksum::ipv6_pseudo_header(src, dst, ip_protocol::ICMPV6, len) + checksum::sum(b);
        b[field::CHECKSUM..field::CHECKSUM + 2].copy_from_slice(&checksum::finish(acc).to_be_bytes());
    }
}

/// A router advertisement as Teredo reads it: the fixed fields, the first prefix
/// information option, how many there were, and the MTU option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterAdvertRepr {
    /// Current hop limit.
    pub cur_hop_limit: u8,
    /// Flags byte (M = 0x80, O = 0x40).
    pub flags: u8,
    /// Router lifetime (s).
    pub router_lifetime: u16,
    /// Reachable time (ms).
    pub reachable_time: u32,
    /// Retransmission timer (ms).
    pub retrans_time: u32,
    /// The first prefix-information option.
    pub prefix_info: Option<PrefixInfo>,
    /// How many prefix-information options the message carried (a Teredo RA must carry
    /// exactly one); saturates at 255.
    pub prefix_info_count: u8,
    /// The MTU option, if any.
    pub mtu: Option<u32>,
}

impl RouterAdvertRepr {
    fn options_len(&self) -> usize {
        self.prefix_info.map_or(0, |_| ndisc_option::PREFIX_INFO_LEN) + self.mtu.map_or(0, |_| ndisc_option::MTU_LEN)
    }
}

/// A parsed ICMPv6 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv6Repr<'a> {
    /// Echo request.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data (the connectivity test puts its nonce here).
        data: &'a [u8],
    },
    /// Echo reply.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data, returned unchanged.
        data: &'a [u8],
    },
    /// Destination unreachable.
    DstUnreachable {
        /// Code (see [`unreachable`]).
        code: u8,
        /// As much of the invoking packet as fits.
        invoking: &'a [u8],
    },
    /// Packet too big.
    PacketTooBig {
        /// The next-hop MTU.
        mtu: u32,
        /// As much of the invoking packet as fits.
        invoking: &'a [u8],
    },
    /// Time exceeded.
    TimeExceeded {
        /// 0: hop limit exceeded in transit, 1: reassembly time exceeded.
        code: u8,
        /// As much of the invoking packet as fits.
        invoking: &'a [u8],
    },
    /// Parameter problem.
    ParamProblem {
        /// Code.
        code: u8,
        /// Offset of the offending byte.
        pointer: u32,
        /// As much of the invoking packet as fits.
        invoking: &'a [u8],
    },
    /// Router solicitation (options validated and ignored).
    RouterSolicit,
    /// Router advertisement.
    RouterAdvert(RouterAdvertRepr),
}

impl<'a> Icmpv6Repr<'a> {
    /// Parse a checked message: the checksum must verify over the pseudo-header built
    /// from `src` and `dst`; ND messages must have code 0 and valid options (a zero
    /// option length refuses the whole message). Unknown types are refused.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        packet: &Icmpv6Packet<&'a T>,
    ) -> Result<Self> {
        if !packet.verify_checksum(src, dst) {
            return Err(Error::BadChecksum);
        }
        let buf: &'a [u8] = packet.buffer.as_ref();
        let payload = &buf[packet.header_len()..];
        let code = packet.msg_code();
        Ok(match packet.msg_type() {
            message::ECHO_REQUEST | message::ECHO_REPLY if code != 0 => return Err(Error::BadValue),
            message::ECHO_REQUEST => {
                Icmpv6Repr::EchoRequest { ident: packet.echo_ident(), seq_no: packet.echo_seq_no(), data: payload }
            }
            message::ECHO_REPLY => {
                Icmpv6Repr::EchoReply { ident: packet.echo_ident(), seq_no: packet.echo_seq_no(), data: payload }
            }
            message::DST_UNREACHABLE => Icmpv6Repr::DstUnreachable { code, invoking: payload },
            message::PACKET_TOO_BIG => Icmpv6Repr::PacketTooBig { mtu: packet.word1(), invoking: payload },
            message::TIME_EXCEEDED => Icmpv6Repr::TimeExceeded { code, invoking: payload },
            message::PARAM_PROBLEM => Icmpv6Repr::ParamProblem { code, pointer: packet.word1(), invoking: payload },
            message::ROUTER_SOLICIT | message::ROUTER_ADVERT if code != 0 => return Err(Error::BadValue),
            message::ROUTER_SOLICIT => {
                NdOptions::validate(payload)?;
                Icmpv6Repr::RouterSolicit
            }
            message::ROUTER_ADVERT => {
                let mut ra = RouterAdvertRepr {
                    cur_hop_limit: packet.ra_cur_hop_limit(),
                    flags: packet.ra_flags(),
                    router_lifetime: packet.ra_router_lifetime(),
                    reachable_time: packet.ra_reachable_time(),
                    retrans_time: packet.ra_retrans_time(),
                    prefix_info: None,
                    prefix_info_count: 0,
                    mtu: None,
                };
                for opt in NdOptions::new(payload) {
                    let opt = opt?;
                    match opt.kind {
                        option_type::PREFIX_INFO => {
                            let pi = PrefixInfo::parse(&opt)?;
                            ra.prefix_info.get_or_insert(pi);
                            ra.prefix_info_count = ra.prefix_info_count.saturating_add(1);
                        }
                        option_type::MTU => ra.mtu = Some(ndisc_option::parse_mtu(&opt)?),
                        _ => {} // unknown options are skipped (RFC 4861 §4.6)
                    }
                }
                Icmpv6Repr::RouterAdvert(ra)
            }
            _ => return Err(Error::BadValue),
        })
    }

    /// Bytes the message needs.
    pub fn buffer_len(&self) -> usize {
        match self {
            Icmpv6Repr::EchoRequest { data, .. } | Icmpv6Repr::EchoReply { data, .. } => HEADER_LEN + data.len(),
            Icmpv6Repr::DstUnreachable { invoking, .. }
            | Icmpv6Repr::PacketTooBig { invoking, .. }
            | Icmpv6Repr::TimeExceeded { invoking, .. }
            | Icmpv6Repr::ParamProblem { invoking, .. } => HEADER_LEN + invoking.len(),
            Icmpv6Repr::RouterSolicit => HEADER_LEN,
            Icmpv6Repr::RouterAdvert(ra) => RA_HEADER_LEN + ra.options_len(),
        }
    }

    /// Write the message into the first [`buffer_len`](Self::buffer_len) bytes of
    /// `buf`, checksum included. Returns the length written.
    pub fn emit(&self, src: &Ipv6Addr, dst: &Ipv6Addr, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let b = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
        b.fill(0);
        let (t, code, word1, body): (u8, u8, [u8; 4], &[u8]) = match *self {
            Icmpv6Repr::EchoRequest { ident, seq_no, data } => {
                (message::ECHO_REQUEST, 0, echo_word(ident, seq_no), data)
            }
            Icmpv6Repr::EchoReply { ident, seq_no, data } => (message::ECHO_REPLY, 0, echo_word(ident, seq_no), data),
            Icmpv6Repr::DstUnreachable { code, invoking } => (message::DST_UNREACHABLE, code, [0; 4], invoking),
            Icmpv6Repr::PacketTooBig { mtu, invoking } => (message::PACKET_TOO_BIG, 0, mtu.to_be_bytes(), invoking),
            Icmpv6Repr::TimeExceeded { code, invoking } => (message::TIME_EXCEEDED, code, [0; 4], invoking),
            Icmpv6Repr::ParamProblem { code, pointer, invoking } => {
                (message::PARAM_PROBLEM, code, pointer.to_be_bytes(), invoking)
            }
            Icmpv6Repr::RouterSolicit => (message::ROUTER_SOLICIT, 0, [0; 4], &[]),
            Icmpv6Repr::RouterAdvert(ra) => {
                b[0] = message::ROUTER_ADVERT;
                b[field::RA_HOP_LIMIT] = ra.cur_hop_limit;
                b[field::RA_FLAGS] = ra.flags;
                b[field::RA_LIFETIME..field::RA_LIFETIME + 2].copy_from_slice(&ra.router_lifetime.to_be_bytes());
                b[field::RA_REACHABLE..field::RA_REACHABLE + 4].copy_from_slice(&ra.reachable_time.to_be_bytes());
                b[field::RA_RETRANS..field::RA_RETRANS + 4].copy_from_slice(&ra.retrans_time.to_be_bytes());
                let mut at = RA_HEADER_LEN;
                if let Some(pi) = ra.prefix_info {
                    pi.emit(&mut b[at..])?;
                    at += ndisc_option::PREFIX_INFO_LEN;
                }
                if let Some(mtu) = ra.mtu {
                    ndisc_option::emit_mtu(mtu, &mut b[at..])?;
                }
                Icmpv6Packet::new_unchecked(&mut *b).fill_checksum(src, dst);
                return Ok(len);
            }
        };
        b[field::TYPE] = t;
        b[field::CODE] = code;
        b[field::WORD1..field::WORD1 + 4].copy_from_slice(&word1);
        b[HEADER_LEN..].copy_from_slice(body);
        Icmpv6Packet::new_unchecked(&mut *b).fill_checksum(src, dst);
        Ok(len)
    }
}

fn echo_word(ident: u16, seq_no: u16) -> [u8; 4] {
    let (i, s) = (ident.to_be_bytes(), seq_no.to_be_bytes());
    [i[0], i[1], s[0], s[1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn rs_checksums_match_the_reference_vectors() {
        let dst = a("ff02::2");
        for (src, sum) in
            [("fe80::8000:5445:5245:444f", 0x125d), ("fe80::ffff:ffff:ffff", 0x7d37), ("fe80::5445:5245:444f", 0x925d)]
        {
            let mut b = [0u8; 8];
            Icmpv6Repr::RouterSolicit.emit(&a(src), &dst, &mut b).unwrap();
            let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
            assert_eq!(p.checksum(), sum, "RS from {src}");
            assert!(p.verify_checksum(&a(src), &dst));
            assert_eq!(Icmpv6Repr::parse(&a(src), &dst, &p).unwrap(), Icmpv6Repr::RouterSolicit);
        }
    }

    #[test]
    fn echo_round_trip_and_checksum() {
        let (s, d) = (a("2001:0:4136:e378:0:63bf:3fff:fdd2"), a("2001:db8::1"));
        let nonce = [1, 2, 3, 4, 5, 6, 7, 8];
        let repr = Icmpv6Repr::EchoRequest { ident: 7, seq_no: 9, data: &nonce };
        let mut b = [0u8; 16];
        assert_eq!(repr.emit(&s, &d, &mut b).unwrap(), 16);
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&s, &d, &p).unwrap(), repr);
        // The pseudo-header matters: the same bytes from another source do not verify.
        let other = a("2001:0:4136:e378:0:63bf:3fff:fdd3");
        assert_eq!(Icmpv6Repr::parse(&other, &d, &p).unwrap_err(), Error::BadChecksum);
    }

    #[test]
    fn errors_round_trip() {
        let (s, d) = (a("2001:db8::1"), a("2001:db8::2"));
        let inv = [0x60u8; 48];
        for repr in [
            Icmpv6Repr::DstUnreachable { code: unreachable::ADDRESS, invoking: &inv },
            Icmpv6Repr::PacketTooBig { mtu: 1280, invoking: &inv },
            Icmpv6Repr::TimeExceeded { code: 0, invoking: &inv },
            Icmpv6Repr::ParamProblem { code: 1, pointer: 40, invoking: &inv },
        ] {
            let mut b = [0u8; 56];
            repr.emit(&s, &d, &mut b).unwrap();
            let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
            assert_eq!(Icmpv6Repr::parse(&s, &d, &p).unwrap(), repr);
        }
    }

    #[test]
    fn ra_with_zero_length_option_is_refused() {
        let (s, d) = (a("fe80::8000:f227:bec9:1c87"), a("fe80::ffff:ffff:ffff"));
        let ra = RouterAdvertRepr {
            cur_hop_limit: 0,
            flags: 0,
            router_lifetime: 0,
            reachable_time: 0,
            retrans_time: 2000,
            prefix_info: None,
            prefix_info_count: 0,
            mtu: Some(1280),
        };
        let mut b = [0u8; 32];
        let n = Icmpv6Repr::RouterAdvert(ra).emit(&s, &d, &mut b).unwrap();
        assert_eq!(n, 24);
        b[24..32].copy_from_slice(&[5, 0, 0, 0, 0, 0, 5, 0]);
        let mut p = Icmpv6Packet::new_unchecked(&mut b[..]);
        p.fill_checksum(&s, &d);
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&s, &d, &p).unwrap_err(), Error::BadOption);
    }

    #[test]
    fn truncated_and_bad_codes() {
        assert_eq!(Icmpv6Packet::new_checked(&[134u8, 0, 0, 0, 0, 0, 0, 0][..]).unwrap_err(), Error::Truncated);
        assert_eq!(Icmpv6Packet::new_checked(&[128u8, 0, 0][..]).unwrap_err(), Error::Truncated);
        let (s, d) = (a("fe80::1"), a("ff02::2"));
        let mut b = [133u8, 1, 0, 0, 0, 0, 0, 0];
        Icmpv6Packet::new_unchecked(&mut b[..]).fill_checksum(&s, &d);
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&s, &d, &p).unwrap_err(), Error::BadValue);
    }
}
