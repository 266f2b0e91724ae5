//! ICMPv6 (RFC 4443) and the router solicitation / advertisement of RFC 4861 §4.1–4.2,
//! the messages Teredo exchanges: echo (the connectivity test), errors, RS/RA
//! (qualification).

use crate::checksum;
use crate::ndisc_option::{self, option_type, NdOptions, PrefixInfo};
use crate::{ip_protocol, read_u16, read_u32, write_u16, write_u32, Error, Result};
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
    use crate::field::*;

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    /// The second word: echo identifier and sequence number, the MTU of a packet too
    /// big, the pointer of a parameter problem, reserved in the other errors and the RS.
    pub const WORD1: Field = 4..8;
    pub const ECHO_IDENT: Field = 4..6;
    pub const ECHO_SEQ_NO: Field = 6..8;
    pub const RA_CUR_HOP_LIMIT: usize = 4;
    pub const RA_FLAGS: usize = 5;
    pub const RA_ROUTER_LIFETIME: Field = 6..8;
    pub const RA_REACHABLE_TIME: Field = 8..12;
    pub const RA_RETRANS_TIME: Field = 12..16;
}

/// Header length of every message but the RA.
pub const HEADER_LEN: usize = field::WORD1.end;
/// Header length of a router advertisement (options follow).
pub const RA_HEADER_LEN: usize = field::RA_RETRANS_TIME.end;

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
        if len < field::CHECKSUM.end || len < self.header_len() {
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
            _ => field::CHECKSUM.end,
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
        read_u16(&self.buffer.as_ref()[field::CHECKSUM])
    }
    /// Echo identifier (echo messages).
    pub fn echo_ident(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::ECHO_IDENT])
    }
    /// Echo sequence number (echo messages).
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::ECHO_SEQ_NO])
    }
    /// The second 32-bit word: MTU (packet too big) or pointer (parameter problem).
    pub fn word1(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::WORD1])
    }
    /// RA current hop limit.
    pub fn ra_cur_hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::RA_CUR_HOP_LIMIT]
    }
    /// RA flags byte (M, O and reserved bits).
    pub fn ra_flags(&self) -> u8 {
        self.buffer.as_ref()[field::RA_FLAGS]
    }
    /// RA router lifetime in seconds.
    pub fn ra_router_lifetime(&self) -> u16 {
        read_u16(&self.buffer.as_ref()[field::RA_ROUTER_LIFETIME])
    }
    /// RA reachable time in milliseconds.
    pub fn ra_reachable_time(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::RA_REACHABLE_TIME])
    }
    /// RA retransmission timer in milliseconds.
    pub fn ra_retrans_time(&self) -> u32 {
        read_u32(&self.buffer.as_ref()[field::RA_RETRANS_TIME])
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
    /// Set the message type.
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }
    /// Set the message code.
    pub fn set_msg_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }
    /// Set the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::CHECKSUM], v);
    }
    /// Set the echo identifier (echo messages).
    pub fn set_echo_ident(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::ECHO_IDENT], v);
    }
    /// Set the echo sequence number (echo messages).
    pub fn set_echo_seq_no(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::ECHO_SEQ_NO], v);
    }
    /// Set the second 32-bit word: MTU, pointer, or zero where it is reserved.
    pub fn set_word1(&mut self, v: u32) {
        write_u32(&mut self.buffer.as_mut()[field::WORD1], v);
    }
    /// Set the RA current hop limit.
    pub fn set_ra_cur_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::RA_CUR_HOP_LIMIT] = v;
    }
    /// Set the RA flags byte.
    pub fn set_ra_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::RA_FLAGS] = v;
    }
    /// Set the RA router lifetime in seconds.
    pub fn set_ra_router_lifetime(&mut self, v: u16) {
        write_u16(&mut self.buffer.as_mut()[field::RA_ROUTER_LIFETIME], v);
    }
    /// Set the RA reachable time in milliseconds.
    pub fn set_ra_reachable_time(&mut self, v: u32) {
        write_u32(&mut self.buffer.as_mut()[field::RA_REACHABLE_TIME], v);
    }
    /// Set the RA retransmission timer in milliseconds.
    pub fn set_ra_retrans_time(&mut self, v: u32) {
        write_u32(&mut self.buffer.as_mut()[field::RA_RETRANS_TIME], v);
    }
    /// Mutable payload: what follows the fixed header of the message type set.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
    /// Compute and store the checksum over the pseudo-header and the whole message.
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let len = b.len() as u32;
        let acc = checksum::ipv6_pseudo_header(src, dst, ip_protocol::ICMPV6, len) + checksum::sum(b);
        self.set_checksum(checksum::finish(acc));
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
    /// The advertisement a Teredo server answers a qualifying client's solicitation
    /// with (RFC 4380 §5.2.1, §5.3.1): the client's /64 `prefix` (autonomous, not
    /// on-link, lifetimes infinite), a 2 s retransmission timer, no router lifetime (the
    /// server is no default router), and the tunnel's `mtu`.
    pub fn teredo(prefix: Ipv6Addr, mtu: u32) -> RouterAdvertRepr {
        RouterAdvertRepr {
            cur_hop_limit: 0,
            flags: 0,
            router_lifetime: 0,
            reachable_time: 0,
            retrans_time: 2000,
            prefix_info: Some(PrefixInfo {
                prefix_len: 64,
                on_link: false,
                autonomous: true,
                valid_lifetime: u32::MAX,
                preferred_lifetime: u32::MAX,
                prefix,
            }),
            prefix_info_count: 1,
            mtu: Some(mtu),
        }
    }

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
        /// Code (see [`unreachable`](mod@unreachable)).
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

    /// The message type and code.
    fn type_and_code(&self) -> (u8, u8) {
        match *self {
            Icmpv6Repr::EchoRequest { .. } => (message::ECHO_REQUEST, 0),
            Icmpv6Repr::EchoReply { .. } => (message::ECHO_REPLY, 0),
            Icmpv6Repr::DstUnreachable { code, .. } => (message::DST_UNREACHABLE, code),
            Icmpv6Repr::PacketTooBig { .. } => (message::PACKET_TOO_BIG, 0),
            Icmpv6Repr::TimeExceeded { code, .. } => (message::TIME_EXCEEDED, code),
            Icmpv6Repr::ParamProblem { code, .. } => (message::PARAM_PROBLEM, code),
            Icmpv6Repr::RouterSolicit => (message::ROUTER_SOLICIT, 0),
            Icmpv6Repr::RouterAdvert(_) => (message::ROUTER_ADVERT, 0),
        }
    }

    /// Write the message into the first [`buffer_len`](Self::buffer_len) bytes of
    /// `buf`, checksum included. Returns the length written.
    pub fn emit(&self, src: &Ipv6Addr, dst: &Ipv6Addr, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let mut packet = Icmpv6Packet::new_unchecked(buf.get_mut(..len).ok_or(Error::BufferTooSmall)?);
        // The type goes first: it decides where the payload starts.
        let (msg_type, code) = self.type_and_code();
        packet.set_msg_type(msg_type);
        packet.set_msg_code(code);
        match *self {
            Icmpv6Repr::EchoRequest { ident, seq_no, data } | Icmpv6Repr::EchoReply { ident, seq_no, data } => {
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                packet.payload_mut().copy_from_slice(data);
            }
            Icmpv6Repr::PacketTooBig { mtu, invoking } => {
                packet.set_word1(mtu);
                packet.payload_mut().copy_from_slice(invoking);
            }
            Icmpv6Repr::ParamProblem { pointer, invoking, .. } => {
                packet.set_word1(pointer);
                packet.payload_mut().copy_from_slice(invoking);
            }
            Icmpv6Repr::DstUnreachable { invoking, .. } | Icmpv6Repr::TimeExceeded { invoking, .. } => {
                packet.set_word1(0);
                packet.payload_mut().copy_from_slice(invoking);
            }
            Icmpv6Repr::RouterSolicit => packet.set_word1(0),
            Icmpv6Repr::RouterAdvert(ra) => {
                packet.set_ra_cur_hop_limit(ra.cur_hop_limit);
                packet.set_ra_flags(ra.flags);
                packet.set_ra_router_lifetime(ra.router_lifetime);
                packet.set_ra_reachable_time(ra.reachable_time);
                packet.set_ra_retrans_time(ra.retrans_time);
                let options = packet.payload_mut();
                let mut at = 0;
                if let Some(pi) = ra.prefix_info {
                    at += pi.emit(&mut options[at..])?;
                }
                if let Some(mtu) = ra.mtu {
                    ndisc_option::emit_mtu(mtu, &mut options[at..])?;
                }
            }
        }
        packet.fill_checksum(src, dst);
        Ok(len)
    }
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
    fn emit_writes_every_byte() {
        // Scratch buffers are reused: nothing left in them may leak into a message.
        let (s, d) = (a("fe80::1"), a("fe80::2"));
        let ra = RouterAdvertRepr::teredo(a("2001:0:4136:e378::"), 1280);
        let inv = [0x60u8; 12];
        for repr in [
            Icmpv6Repr::RouterAdvert(ra),
            Icmpv6Repr::RouterSolicit,
            Icmpv6Repr::EchoReply { ident: 1, seq_no: 2, data: &inv },
            Icmpv6Repr::TimeExceeded { code: 0, invoking: &inv },
        ] {
            let (mut clean, mut dirty) = ([0u8; 64], [0xffu8; 64]);
            let n = repr.emit(&s, &d, &mut clean).unwrap();
            assert_eq!(repr.emit(&s, &d, &mut dirty).unwrap(), n);
            assert_eq!(clean[..n], dirty[..n], "{repr:?}");
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
