//! A port mapping for the client's service port from the NAT in front of it, asked
//! with PCP (RFC 6887): MAP, for the very external port the Teredo server saw, so
//! that the port our address embeds opens to anyone (RFC 6081 §5.3's aim, for a
//! symmetric NAT). Asked after qualification rather than before with a PEER towards
//! the server: gateways do not always send from a mapped port (miniupnpd 2.3's PEER
//! rule never matches), and a server relaying to a mapped port the server does not see
//! collides, on Linux, with the client's own flow to it. A gateway that already
//! keeps that port for us (the flow to the server) grants it (RFC 6887 §11.3).
//! Renewed at half its lifetime, deleted on exit.
//!
//! Each exchange is short (two tries, 100 and 300 ms): a gateway without PCP answers
//! with an ICMP error at once, and a silent one costs the start less than half a second.

use shipworm_wire::pcp::{result, Opcode, Request, Response, SERVER_PORT};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// Lifetime asked for (RFC 6887 suggests at least 2 minutes; renewed at half).
const LIFETIME: u32 = 3600;
/// UDP.
const UDP: u8 = 17;
/// Waits for an answer, one per try.
const TRIES: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(300)];

/// A mapping held.
#[derive(Debug, Clone)]
pub struct PortMapping {
    gateway: Ipv4Addr,
    /// Our address and service port, as the gateway sees them.
    internal: SocketAddrV4,
    /// The Teredo server whose view of us the mapping keeps open to all.
    server: SocketAddrV4,
    nonce: [u8; 12],
    /// The public address and port granted.
    pub external: SocketAddrV4,
    /// Seconds granted, and when.
    lifetime: u32,
    granted: Instant,
}

impl PortMapping {
    /// Ask the default gateway to map `port` (our service port) to `wanted`, the
    /// external endpoint the Teredo server `server` saw. `None` when there is no
    /// gateway, it does not speak PCP, or it refuses or grants another endpoint (then
    /// given back); the reason is logged.
    pub fn request(port: u16, wanted: SocketAddrV4, server: Ipv4Addr, nonce: [u8; 12]) -> Option<PortMapping> {
        let gateway = default_gateway()?;
        let server = SocketAddrV4::new(server, shipworm_wire::teredo_addr::TEREDO_PORT);
        match Self::ask(gateway, port, wanted, server, nonce) {
            Ok(mut m) if m.external != wanted => {
                tracing::info!("port mapping from {gateway}: {} granted, not {wanted}; given back", m.external);
                m.release();
                None
            }
            Ok(m) => {
                tracing::info!("port mapping from {gateway} (PCP): {} ↔ {}", m.external, m.internal);
                Some(m)
            }
            Err(e) => {
                tracing::info!("no port mapping from {gateway}: {e}");
                None
            }
        }
    }

    fn ask(
        gateway: Ipv4Addr,
        port: u16,
        wanted: SocketAddrV4,
        server: SocketAddrV4,
        nonce: [u8; 12],
    ) -> Result<PortMapping, String> {
        let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| e.to_string())?;
        sock.connect((gateway, SERVER_PORT)).map_err(|e| e.to_string())?;
        let local = match sock.local_addr().map_err(|e| e.to_string())? {
            std::net::SocketAddr::V4(a) => *a.ip(),
            std::net::SocketAddr::V6(_) => return Err("no IPv4 address towards the gateway".into()),
        };
        let internal = SocketAddrV4::new(local, port);
        let mut m = PortMapping {
            gateway,
            internal,
            server,
            nonce,
            external: wanted,
            lifetime: LIFETIME,
            granted: Instant::now(),
        };
        m.exchange(&sock, LIFETIME)?;
        Ok(m)
    }

    /// MAP `self.external` (a lifetime of 0 deletes it).
    fn exchange(&mut self, sock: &UdpSocket, lifetime: u32) -> Result<(), String> {
        let map = self.request_for(Opcode::Map, lifetime, self.external);
        let got = exchange(sock, &map)?;
        if lifetime != 0 {
            self.external = got.assigned;
            self.lifetime = got.lifetime;
            self.granted = Instant::now();
        }
        Ok(())
    }

    fn request_for(&self, opcode: Opcode, lifetime: u32, suggested: SocketAddrV4) -> Request {
        Request {
            opcode,
            lifetime,
            client: *self.internal.ip(),
            nonce: self.nonce,
            protocol: UDP,
            internal_port: self.internal.port(),
            suggested,
            remote: (opcode == Opcode::Peer).then_some(self.server),
            // (MAP only: see the module's notes on PEER.)
        }
    }

    /// Time to renew (half the lifetime gone).
    pub fn renew_due(&self) -> bool {
        self.granted.elapsed() >= Duration::from_secs(u64::from(self.lifetime / 2))
    }

    /// Renew; false if the gateway no longer grants it (the mapping is then gone).
    pub fn renew(&mut self) -> bool {
        let sock = match self.socket() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("port mapping renewal: {e}");
                return false;
            }
        };
        match self.exchange(&sock, LIFETIME) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("port mapping renewal refused by {}: {e}", self.gateway);
                false
            }
        }
    }

    /// Delete the mapping (lifetime 0), on exit or when the network changed.
    pub fn release(&mut self) {
        if let Ok(sock) = self.socket() {
            match self.exchange(&sock, 0) {
                Ok(()) => tracing::info!("port mapping {} released", self.external),
                Err(e) => tracing::info!("port mapping {} not released: {e}", self.external),
            }
        }
    }

    /// A description for `shipworm status`.
    pub fn json(&self) -> serde_json::Value {
        let left = u64::from(self.lifetime).saturating_sub(self.granted.elapsed().as_secs());
        serde_json::json!({
            "protocol": "PCP",
            "gateway": self.gateway.to_string(),
            "external": self.external.to_string(),
            "internal": self.internal.to_string(),
            "expires_in_s": left,
        })
    }

    fn socket(&self) -> io::Result<UdpSocket> {
        let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        sock.connect((self.gateway, SERVER_PORT))?;
        Ok(sock)
    }
}

/// One request and its answer, within the tries.
fn exchange(sock: &UdpSocket, req: &Request) -> Result<Response, String> {
    let mut out = [0u8; 128];
    let n = req.emit(&mut out).map_err(|e| e.to_string())?;
    let mut buf = [0u8; shipworm_wire::pcp::MAX_LEN];
    for wait in TRIES {
        sock.send(&out[..n]).map_err(|e| format!("PCP request: {e}"))?;
        sock.set_read_timeout(Some(wait)).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            match sock.recv(&mut buf) {
                Ok(len) => match Response::parse(&buf[..len]) {
                    Ok(r) if r.answers(req) && r.result == result::SUCCESS => return Ok(r),
                    Ok(r) if r.answers(req) => return Err(format!("PCP result code {}", r.result)),
                    _ => continue,
                },
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    return Err("the gateway does not speak PCP (port 5351 unreachable)".into())
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => break,
                Err(e) => return Err(format!("PCP: {e}")),
            }
        }
    }
    Err("no PCP answer from the gateway".into())
}

/// The default route's gateway, from the kernel's routing table.
fn default_gateway() -> Option<Ipv4Addr> {
    parse_default_gateway(&std::fs::read_to_string("/proc/net/route").ok()?)
}

/// `/proc/net/route`: the first line whose destination and mask are 0 and that has
/// the gateway flag; addresses are in host byte order, in hex.
fn parse_default_gateway(table: &str) -> Option<Ipv4Addr> {
    const RTF_GATEWAY: u32 = 0x2;
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let hex = |s: &str| u32::from_str_radix(s, 16).ok();
        let (dst, gw, flags, mask) = (hex(f.get(1)?)?, hex(f.get(2)?)?, hex(f.get(3)?)?, hex(f.get(7)?)?);
        (dst == 0 && mask == 0 && flags & RTF_GATEWAY != 0).then(|| Ipv4Addr::from(gw.to_ne_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_route_names_the_gateway() {
        let table = "Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT\n\
                     eth0 0000010A 00000000 0001 0 0 0 00FFFFFF 0 0 0\n\
                     eth0 00000000 0100010A 0003 0 0 0 00000000 0 0 0\n";
        assert_eq!(parse_default_gateway(table), Some(Ipv4Addr::new(10, 1, 0, 1)));
        assert_eq!(parse_default_gateway("Iface Destination\n"), None);
    }

    #[test]
    fn a_gateway_without_pcp_is_told_at_once() {
        // Nothing listens on loopback's PCP port: the ICMP error ends the exchange.
        let sock = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        sock.connect((Ipv4Addr::LOCALHOST, SERVER_PORT)).unwrap();
        let req = Request {
            opcode: Opcode::Map,
            lifetime: 60,
            client: Ipv4Addr::LOCALHOST,
            nonce: [1; 12],
            protocol: UDP,
            internal_port: 40000,
            suggested: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 40000),
            remote: None,
        };
        let started = Instant::now();
        let e = exchange(&sock, &req).unwrap_err();
        assert!(e.contains("does not speak PCP") || e.contains("no PCP answer"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
