//! Check what a lab NAT really does, with plain UDP: is the mapping the same for every
//! destination, and who may send in through it? The answer must match the kind the
//! box was built as, or the lab is lying to every test that uses it.

use crate::error::{LabError, Result};
use crate::{netns, Lab, RELAY_V4, SERVER2_V4, SERVER_V4};
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::time::Duration;

/// What a probe saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatBehaviour {
    /// The same public address and port towards two destinations (cone kinds).
    pub mapping_independent: bool,
    /// A host the client never wrote to gets in.
    pub inbound_from_anyone: bool,
    /// A host the client wrote to gets in from another port.
    pub inbound_from_other_port: bool,
    /// A host the client wrote to from one port gets in to another port that never
    /// wrote to it (filtering per host rather than per endpoint, RFC 4787 §5).
    pub inbound_to_other_endpoint: bool,
    /// The first mapping kept the client's port.
    pub port_preserved: bool,
    /// The second destination got the port after the first one's.
    pub sequential: bool,
    /// The box answers UPnP discovery (SSDP) as an Internet Gateway Device.
    pub upnp_igd: bool,
    /// The box grants a PCP MAP request (RFC 6887) on its public address.
    pub pcp_server: bool,
}

impl crate::NatKind {
    /// What this kind must do.
    pub fn expected_behaviour(self) -> NatBehaviour {
        use crate::NatKind::*;
        let (m, a, p) = match self {
            FullCone => (true, true, true),
            AddressRestricted => (true, false, true),
            PortRestricted => (true, false, false),
            Symmetric | SequentialSymmetric | PortPreservingSymmetric | SymmetricUpnp | SymmetricPcp => {
                (false, false, false)
            }
        };
        // Only a full cone lets a host in to an endpoint that never wrote to it.
        NatBehaviour {
            mapping_independent: m,
            inbound_from_anyone: a,
            inbound_from_other_port: p,
            inbound_to_other_endpoint: a,
            port_preserved: !matches!(self, Symmetric | SequentialSymmetric | SymmetricUpnp | SymmetricPcp),
            sequential: self == SequentialSymmetric,
            upnp_igd: self.igd().is_some(),
            pcp_server: self.igd() == Some(true),
        }
    }
}

pub(crate) fn socket_in(ns: &str, addr: SocketAddrV4) -> Result<UdpSocket> {
    let ns = ns.to_string();
    // Sockets keep the namespace they were made in; make each in a thread that enters it.
    std::thread::spawn(move || -> Result<UdpSocket> {
        netns::enter(&ns)?;
        let s = UdpSocket::bind(addr).map_err(|e| LabError::new(format!("bind {addr} in {ns}: {e}")))?;
        Ok(s)
    })
    .join()
    .map_err(|_| LabError::new("probe thread panicked".into()))?
}

/// How long a probe waits for what may get in.
const WAIT: Duration = Duration::from_millis(700);

/// What arrives within [`WAIT`], and from where.
fn observed(s: &UdpSocket) -> Option<SocketAddr> {
    let mut b = [0u8; 1500];
    receive_until(s, std::time::Instant::now() + WAIT, &mut b).map(|(_, a)| a)
}

/// The next datagram before `deadline`. Only the deadline ends the wait: a signal does
/// not, nor does any other error (said, so that a probe that comes out wrong shows
/// why).
fn receive_until(s: &UdpSocket, deadline: std::time::Instant, b: &mut [u8]) -> Option<(usize, SocketAddr)> {
    use std::io::ErrorKind::*;
    loop {
        let left = deadline.checked_duration_since(std::time::Instant::now()).filter(|d| !d.is_zero())?;
        s.set_read_timeout(Some(left)).ok()?;
        match s.recv_from(b) {
            Ok(got) => return Some(got),
            Err(e) if matches!(e.kind(), WouldBlock | TimedOut) => return None,
            Err(e) if e.kind() == Interrupted => continue,
            Err(e) => {
                eprintln!("NAT probe: a receive on {:?} failed, waiting on: {e}", s.local_addr());
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Send `request` to `to` at most `tries` times, `every` apart, until an answer that
/// `takes` arrives.
fn ask_until(
    s: &UdpSocket,
    to: SocketAddrV4,
    request: &[u8],
    tries: u32,
    every: Duration,
    mut takes: impl FnMut(&[u8]) -> bool,
) -> Result<bool> {
    let mut b = [0u8; 1500];
    for _ in 0..tries {
        s.send_to(request, to).map_err(|e| LabError::new(format!("send to {to}: {e}")))?;
        let deadline = std::time::Instant::now() + every;
        while let Some((n, _)) = receive_until(s, deadline, &mut b) {
            if takes(&b[..n]) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

fn arrives(s: &UdpSocket) -> bool {
    observed(s).is_some()
}

impl Lab {
    /// Probe the NAT in front of `client` (an index into [`Lab::clients`]), from UDP
    /// port 40000 behind it to ports 7000/7001 on the server host's two addresses and
    /// 7000 on the relay host. The mapping is checked first: on Linux an unsolicited
    /// inbound packet leaves a conntrack entry that can make the NAT pick another port.
    pub fn probe_nat(&self, client: usize) -> Result<NatBehaviour> {
        let (srv, rly) = (self.ns("srv"), self.ns("rly"));
        let c = socket_in(&self.clients[client].ns, SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 40000))?;
        let quiet = socket_in(&self.clients[client].ns, SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 40001))?;
        let s1 = socket_in(&srv, SocketAddrV4::new(SERVER_V4, 7000))?;
        let s1b = socket_in(&srv, SocketAddrV4::new(SERVER_V4, 7001))?;
        let stranger = socket_in(&srv, SocketAddrV4::new(SERVER2_V4, 7000))?;
        let r = socket_in(&rly, SocketAddrV4::new(RELAY_V4, 7000))?;
        let send = |s: &UdpSocket, to: SocketAddr| {
            s.send_to(b"probe", to).map_err(|e| LabError::new(format!("send to {to}: {e}")))
        };

        send(&c, SocketAddr::V4(SocketAddrV4::new(SERVER_V4, 7000)))?;
        let m1 = observed(&s1).ok_or_else(|| LabError::new("the client's UDP did not reach the server host".into()))?;
        send(&c, SocketAddr::V4(SocketAddrV4::new(RELAY_V4, 7000)))?;
        let m2 = observed(&r).ok_or_else(|| LabError::new("the client's UDP did not reach the relay host".into()))?;
        // 192.0.2.2 was never written to; 192.0.2.1 was, but from port 7000.
        send(&stranger, m1)?;
        let inbound_from_anyone = arrives(&c);
        send(&s1b, m1)?;
        let inbound_from_other_port = arrives(&c);
        // Port 40001 never wrote anywhere; the cone kinds map it to the same port.
        send(&s1, SocketAddr::new(m1.ip(), 40001))?;
        let inbound_to_other_endpoint = arrives(&quiet);
        Ok(NatBehaviour {
            mapping_independent: m1 == m2,
            inbound_from_anyone,
            inbound_from_other_port,
            inbound_to_other_endpoint,
            port_preserved: m1.port() == 40000,
            sequential: m2.port() == m1.port().wrapping_add(1),
            upnp_igd: upnp_answers(&self.clients[client])?,
            pcp_server: pcp_grants(&self.clients[client])?,
        })
    }
}

/// The client's gateway: the NAT box's LAN address (.1 of its /24).
fn gateway(c: &crate::ClientHost) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(u32::from(c.lan) & 0xffff_ff00 | 1)
}

/// Whether the gateway answers an SSDP search for an Internet Gateway Device. Searched
/// three times, as control points do (SSDP is UDP), the last one given the full MX
/// (1 s) a responder may wait before it answers (UPnP Device Architecture 1.1 §1.3.3;
/// miniupnpd does).
fn upnp_answers(c: &crate::ClientHost) -> Result<bool> {
    let s = socket_in(&c.ns, SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 40002))?;
    let search = "M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: \"ssdp:discover\"\r\nMX: 1\r\n\
                  ST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n\r\n";
    let to = SocketAddrV4::new(gateway(c), 1900);
    let location = |b: &[u8]| String::from_utf8_lossy(b).to_ascii_lowercase().contains("location:");
    Ok(ask_until(&s, to, search.as_bytes(), 2, Duration::from_millis(400), location)?
        || ask_until(&s, to, search.as_bytes(), 1, Duration::from_millis(1700), location)?)
}

/// Whether the gateway grants a PCP MAP of a UDP port on the box's public address
/// (deleted again at once).
fn pcp_grants(c: &crate::ClientHost) -> Result<bool> {
    use shipworm_wire::pcp::{result, Opcode, Request, Response, SERVER_PORT};
    let s = socket_in(&c.ns, SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 40003))?;
    let map = |lifetime| Request {
        opcode: Opcode::Map,
        lifetime,
        client: c.lan,
        nonce: [0x5a; 12],
        protocol: 17,
        internal_port: 40003,
        suggested: SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 40003),
        remote: None,
    };
    // Asked twice: a request is a datagram, and may be lost.
    let ask = |req: Request| -> Result<Option<Response>> {
        let mut b = [0u8; 1100];
        let n = req.emit(&mut b).map_err(|e| LabError::new(format!("PCP request: {e:?}")))?;
        let mut answer = None;
        let to = SocketAddrV4::new(gateway(c), SERVER_PORT);
        ask_until(&s, to, &b[..n], 2, Duration::from_millis(400), |got| {
            answer = Response::parse(got).ok().filter(|r| r.answers(&req));
            answer.is_some()
        })?;
        Ok(answer)
    };
    let granted = ask(map(60))?.is_some_and(|r| r.result == result::SUCCESS && *r.assigned.ip() == c.nat_public);
    if granted {
        let _ = ask(map(0));
    }
    Ok(granted)
}
