//! Port Control Protocol (RFC 6887) messages, for the two opcodes a Teredo client
//! needs from the NAT in front of it: MAP (an inbound mapping of the service port) and
//! PEER (an outbound mapping of the service port towards one remote endpoint, here the
//! Teredo server, so that the server sees the mapped port). IPv4 only.
//!
//! ```text
//! request:  version | R=0,opcode | reserved (2) | lifetime (4) | client address (16)
//! response: version | R=1,opcode | reserved | result | lifetime (4) | epoch (4) | reserved (12)
//! MAP:      nonce (12) | protocol | reserved (3) | internal port | external port | external address (16)
//! PEER:     MAP's fields | remote port | reserved (2) | remote address (16)
//! ```
//! Addresses are IPv4-mapped IPv6 addresses. Options after the opcode body are skipped.

use crate::{read_u16, read_u32, write_u16, Error, Result};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

mod field {
    use crate::field::*;

    // Common header, request and response.
    pub const VERSION: usize = 0;
    pub const OPCODE: usize = 1;
    pub const RESULT: usize = 3;
    pub const LIFETIME: Field = 4..8;
    pub const CLIENT: Field = 8..24;
    pub const EPOCH: Field = 8..12;
    pub const HEADER_END: usize = 24;

    // The opcode body, from the header's end.
    pub const NONCE: Field = 0..12;
    pub const PROTOCOL: usize = 12;
    pub const INTERNAL_PORT: Field = 16..18;
    pub const EXTERNAL_PORT: Field = 18..20;
    pub const EXTERNAL_ADDR: Field = 20..36;
    pub const MAP_END: usize = 36;
    pub const REMOTE_PORT: Field = 36..38;
    pub const REMOTE_ADDR: Field = 40..56;
    pub const PEER_END: usize = 56;
}

/// The PCP server's port (RFC 6887 §19.1).
pub const SERVER_PORT: u16 = 5351;
/// The PCP version this module speaks.
pub const VERSION: u8 = 2;
/// The largest PCP message (RFC 6887 §7).
pub const MAX_LEN: usize = 1100;
/// The R bit: a response.
const RESPONSE: u8 = 0x80;

/// The opcodes used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// MAP (1): an inbound mapping.
    Map,
    /// PEER (2): an outbound mapping towards one remote endpoint.
    Peer,
}

impl Opcode {
    fn code(self) -> u8 {
        match self {
            Opcode::Map => 1,
            Opcode::Peer => 2,
        }
    }
    fn body_len(self) -> usize {
        match self {
            Opcode::Map => field::MAP_END,
            Opcode::Peer => field::PEER_END,
        }
    }
}

/// Result codes (RFC 6887 §7.4) a client acts on.
pub mod result {
    /// Success.
    pub const SUCCESS: u8 = 0;
    /// The server speaks another version.
    pub const UNSUPP_VERSION: u8 = 1;
    /// Not allowed here.
    pub const NOT_AUTHORIZED: u8 = 2;
    /// No room for the mapping now; try later.
    pub const NO_RESOURCES: u8 = 8;
    /// The suggested external address cannot be had.
    pub const CANNOT_PROVIDE_EXTERNAL: u8 = 11;
    /// The client address in the request is not the packet's source (another NAT in
    /// between).
    pub const ADDRESS_MISMATCH: u8 = 12;
}

/// An IPv4 address as PCP carries it (IPv4-mapped IPv6).
fn mapped(a: Ipv4Addr) -> [u8; 16] {
    a.to_ipv6_mapped().octets()
}

/// The IPv4 address an IPv4-mapped field holds.
fn unmapped(field: &[u8]) -> Result<Ipv4Addr> {
    let mut b = [0u8; 16];
    b.copy_from_slice(field);
    Ipv6Addr::from(b).to_ipv4_mapped().ok_or(Error::BadValue)
}

/// A MAP or PEER request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// MAP or PEER.
    pub opcode: Opcode,
    /// Seconds asked for; 0 deletes the mapping.
    pub lifetime: u32,
    /// Our own address, as the PCP server should see it.
    pub client: Ipv4Addr,
    /// Ties the answer (and later renewals) to this request.
    pub nonce: [u8; 12],
    /// IP protocol of the mapping (17: UDP).
    pub protocol: u8,
    /// Our port.
    pub internal_port: u16,
    /// The external address and port we would like (0.0.0.0:0: any).
    pub suggested: SocketAddrV4,
    /// PEER only: the remote endpoint.
    pub remote: Option<SocketAddrV4>,
}

impl Request {
    /// Bytes the request takes.
    pub fn buffer_len(&self) -> usize {
        field::HEADER_END + self.opcode.body_len()
    }

    /// Write the request at the start of `buf`; its length. A PEER request needs its
    /// remote endpoint.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let b = buf.get_mut(..len).ok_or(Error::BufferTooSmall)?;
        b.fill(0);
        b[field::VERSION] = VERSION;
        b[field::OPCODE] = self.opcode.code();
        b[field::LIFETIME].copy_from_slice(&self.lifetime.to_be_bytes());
        b[field::CLIENT].copy_from_slice(&mapped(self.client));
        let body = &mut b[field::HEADER_END..];
        body[field::NONCE].copy_from_slice(&self.nonce);
        body[field::PROTOCOL] = self.protocol;
        write_u16(&mut body[field::INTERNAL_PORT], self.internal_port);
        write_u16(&mut body[field::EXTERNAL_PORT], self.suggested.port());
        body[field::EXTERNAL_ADDR].copy_from_slice(&mapped(*self.suggested.ip()));
        if self.opcode == Opcode::Peer {
            let remote = self.remote.ok_or(Error::BadValue)?;
            write_u16(&mut body[field::REMOTE_PORT], remote.port());
            body[field::REMOTE_ADDR].copy_from_slice(&mapped(*remote.ip()));
        }
        Ok(len)
    }
}

/// A MAP or PEER response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// MAP or PEER.
    pub opcode: Opcode,
    /// Result code ([`result`]).
    pub result: u8,
    /// Seconds the mapping lasts (on errors: how long the error holds).
    pub lifetime: u32,
    /// The server's epoch: a jump backwards means it lost its mappings.
    pub epoch: u32,
    /// The request's nonce, echoed.
    pub nonce: [u8; 12],
    /// IP protocol.
    pub protocol: u8,
    /// Our port.
    pub internal_port: u16,
    /// The external address and port assigned (on success).
    pub assigned: SocketAddrV4,
    /// PEER only: the remote endpoint.
    pub remote: Option<SocketAddrV4>,
}

impl Response {
    /// Parse an untrusted datagram: a version-2 response to MAP or PEER, long enough
    /// for its opcode, no longer than PCP allows. Options after the body are skipped.
    pub fn parse(data: &[u8]) -> Result<Response> {
        if data.len() > MAX_LEN {
            return Err(Error::BadLength);
        }
        let head = data.get(..field::HEADER_END).ok_or(Error::Truncated)?;
        if head[field::VERSION] != VERSION || head[field::OPCODE] & RESPONSE == 0 {
            return Err(Error::BadValue);
        }
        let opcode = match head[field::OPCODE] & !RESPONSE {
            1 => Opcode::Map,
            2 => Opcode::Peer,
            _ => return Err(Error::BadValue),
        };
        let body = data.get(field::HEADER_END..field::HEADER_END + opcode.body_len()).ok_or(Error::Truncated)?;
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&body[field::NONCE]);
        let assigned = SocketAddrV4::new(unmapped(&body[field::EXTERNAL_ADDR])?, read_u16(&body[field::EXTERNAL_PORT]));
        let remote = match opcode {
            Opcode::Map => None,
            Opcode::Peer => {
                Some(SocketAddrV4::new(unmapped(&body[field::REMOTE_ADDR])?, read_u16(&body[field::REMOTE_PORT])))
            }
        };
        Ok(Response {
            opcode,
            result: head[field::RESULT],
            lifetime: read_u32(&head[field::LIFETIME]),
            epoch: read_u32(&head[field::EPOCH]),
            nonce,
            protocol: body[field::PROTOCOL],
            internal_port: read_u16(&body[field::INTERNAL_PORT]),
            assigned,
            remote,
        })
    }

    /// Whether this answers `request` (same opcode, nonce, protocol, port and, for
    /// PEER, remote endpoint).
    pub fn answers(&self, request: &Request) -> bool {
        self.opcode == request.opcode
            && self.nonce == request.nonce
            && self.protocol == request.protocol
            && self.internal_port == request.internal_port
            && (self.opcode == Opcode::Map || self.remote == request.remote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> Request {
        Request {
            opcode: Opcode::Map,
            lifetime: 7200,
            client: Ipv4Addr::new(10, 1, 0, 2),
            nonce: [7; 12],
            protocol: 17,
            internal_port: 40000,
            suggested: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 40000),
            remote: None,
        }
    }

    /// A server's answer to `req`: the request's bytes with R set, a result, an
    /// assigned endpoint.
    fn answer(req: &Request, result: u8, assigned: SocketAddrV4) -> [u8; 80] {
        let mut b = [0u8; 80];
        let n = req.emit(&mut b).unwrap();
        b[1] |= RESPONSE;
        b[3] = result;
        b[8..24].fill(0);
        b[8..12].copy_from_slice(&1234u32.to_be_bytes());
        b[24 + 18..24 + 20].copy_from_slice(&assigned.port().to_be_bytes());
        b[24 + 20..24 + 36].copy_from_slice(&mapped(*assigned.ip()));
        assert!(n <= 80);
        b
    }

    #[test]
    fn map_request_bytes() {
        let mut b = [0u8; 60];
        assert_eq!(map().emit(&mut b), Ok(60));
        assert_eq!(&b[..8], &[2, 1, 0, 0, 0, 0, 0x1c, 0x20]);
        assert_eq!(&b[8..24], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 0, 2]);
        assert_eq!(&b[24..36], &[7; 12]);
        assert_eq!(&b[36..44], &[17, 0, 0, 0, 0x9c, 0x40, 0x9c, 0x40]);
        assert_eq!(&b[44..60], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(map().emit(&mut [0u8; 59]), Err(Error::BufferTooSmall));
    }

    #[test]
    fn peer_request_carries_the_remote_endpoint() {
        let peer = Request { opcode: Opcode::Peer, remote: Some("192.0.2.1:3544".parse().unwrap()), ..map() };
        let mut b = [0u8; 80];
        assert_eq!(peer.emit(&mut b), Ok(80));
        assert_eq!(b[1], 2);
        assert_eq!(&b[60..62], &[0x0d, 0xd8]);
        assert_eq!(&b[64..80], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(Request { remote: None, ..peer }.emit(&mut b), Err(Error::BadValue));
    }

    #[test]
    fn responses_parse_and_match_their_request() {
        let req = map();
        let ext: SocketAddrV4 = "192.0.2.21:40000".parse().unwrap();
        let r = Response::parse(&answer(&req, result::SUCCESS, ext)[..60]).unwrap();
        assert_eq!((r.opcode, r.result, r.lifetime, r.epoch, r.assigned), (Opcode::Map, 0, 7200, 1234, ext));
        assert!(r.answers(&req));
        assert!(!r.answers(&Request { nonce: [8; 12], ..req }), "another nonce is another request");
        // Options after the body are skipped.
        assert!(Response::parse(&answer(&req, result::SUCCESS, ext)).is_ok());
    }

    #[test]
    fn malformed_responses_are_refused() {
        let req = map();
        let good = answer(&req, 0, "192.0.2.21:40000".parse().unwrap());
        assert_eq!(Response::parse(&good[..59]), Err(Error::Truncated));
        assert_eq!(Response::parse(&good[..10]), Err(Error::Truncated));
        let mut b = good;
        b[1] &= !RESPONSE;
        assert_eq!(Response::parse(&b[..60]), Err(Error::BadValue), "a request is not an answer");
        let mut b = good;
        b[0] = 1;
        assert_eq!(Response::parse(&b[..60]), Err(Error::BadValue), "NAT-PMP is not PCP");
        let mut b = good;
        b[1] = RESPONSE | 3;
        assert_eq!(Response::parse(&b[..60]), Err(Error::BadValue), "an opcode we never ask for");
        let mut b = good;
        b[24 + 30] = 1;
        assert_eq!(Response::parse(&b[..60]), Err(Error::BadValue), "an external address that is not IPv4");
        assert_eq!(Response::parse(&[0u8; 1101]), Err(Error::BadLength));
    }
}
