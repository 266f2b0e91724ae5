//! A port mapping for the client's service port from the NAT in front of it: the very
//! external port the Teredo server saw, opened to anyone, so that peers behind
//! symmetric NATs reach the port our address embeds (RFC 6081 §5.3's aim). Asked with
//! PCP (RFC 6887 MAP) first, then UPnP IGD (AddPortMapping, as RFC 6081 has it).
//!
//! Asked after qualification, for the port the server saw, rather than before with the
//! service port's own number as RFC 6081 §5.3.3 does: that relies on the gateway
//! sending to the server from the mapped port, which Linux gateways do not (their
//! UPnP and PCP mappings are inbound only; miniupnpd's PCP PEER rule never matches),
//! and a server then relaying to a port it did not see collides, on Linux, with the
//! client's own flow to it. A gateway keeping that port for our flow to the server
//! grants it (RFC 6887 §11.3; miniupnpd adds the inbound rule).
//!
//! Renewed at half its lifetime, deleted on exit and when the network changes. Each
//! exchange is short: PCP tries twice (100 and 300 ms; a gateway without it answers
//! with an ICMP error at once), UPnP searches for two seconds.

use crate::io::upnp;
use shipworm_wire::pcp::{result, Opcode, Request, Response, SERVER_PORT};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Lifetime asked for, in seconds (renewed at half).
const LIFETIME: u32 = 3600;
/// UDP.
const UDP: u8 = 17;
/// Shortest lifetime taken from a PCP answer (RFC 6887 §15 suggests 120 s at least).
const MIN_LIFETIME: u32 = 120;
/// PCP: waits for an answer, one per try.
const TRIES: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(300)];
/// UPnP: how long to look for a gateway. A gateway may wait up to the search's MX (1 s)
/// before it answers (miniupnpd does).
const SEARCH: Duration = Duration::from_secs(2);
/// What the mapping is called on the gateway.
const DESCRIPTION: &str = "shipworm Teredo";

/// Which protocols to try (`PortMapping` directive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocols {
    /// PCP, then UPnP.
    Auto,
    /// PCP only.
    Pcp,
    /// UPnP only.
    Upnp,
    /// Neither.
    Off,
}

/// How the mapping was had, and how to renew and delete it.
enum Via {
    Pcp { gateway: Ipv4Addr, nonce: [u8; 12] },
    Upnp(Box<upnp::Igd>),
}

/// A mapping held.
pub struct PortMapping {
    via: Via,
    /// Our address and service port, as the gateway sees them.
    internal: SocketAddrV4,
    /// The public address and port granted.
    pub external: SocketAddrV4,
    /// Seconds granted (0: until deleted), and when.
    lifetime: u32,
    granted: Instant,
}

impl PortMapping {
    /// Ask the gateway to map `port` (our service port) to `wanted`, the external
    /// endpoint the Teredo server saw. `None` when no gateway grants exactly that; the
    /// reason is logged.
    pub fn request(protocols: Protocols, port: u16, wanted: SocketAddrV4, nonce: [u8; 12]) -> Option<PortMapping> {
        if protocols == Protocols::Off || port == 0 {
            return None;
        }
        let gateway = default_gateway()?;
        let internal = SocketAddrV4::new(local_towards(gateway)?, port);
        let ask = |via: Via| {
            let mut m = PortMapping { via, internal, external: wanted, lifetime: LIFETIME, granted: Instant::now() };
            m.renew_now().map(|()| m)
        };
        if matches!(protocols, Protocols::Auto | Protocols::Pcp) {
            match ask(Via::Pcp { gateway, nonce }) {
                Ok(m) => return m.keep_if(wanted),
                Err(e) => tracing::info!("no PCP mapping from {gateway}: {e}"),
            }
        }
        if matches!(protocols, Protocols::Auto | Protocols::Upnp) {
            // Only the default gateway may map our port, and only its answers are read:
            // any host on the LAN can answer a search (`upnp`).
            match upnp::discover(*internal.ip(), gateway, SEARCH).and_then(|g| ask(Via::Upnp(Box::new(g)))) {
                Ok(m) => return m.keep_if(wanted),
                Err(e) => tracing::info!("no UPnP mapping: {e}"),
            }
        }
        None
    }

    /// Keep the mapping if it is `wanted`, else give it back.
    fn keep_if(mut self, wanted: SocketAddrV4) -> Option<PortMapping> {
        if self.external != wanted {
            tracing::info!("port mapping: {} granted, not {wanted}; given back", self.external);
            self.release();
            return None;
        }
        tracing::info!("port mapping ({}): {} ↔ {}", self.protocol(), self.external, self.internal);
        Some(self)
    }

    fn protocol(&self) -> &'static str {
        match self.via {
            Via::Pcp { .. } => "PCP",
            Via::Upnp(_) => "UPnP",
        }
    }

    /// Ask for (or renew) the mapping of `self.external`.
    fn renew_now(&mut self) -> Result<(), String> {
        match &self.via {
            Via::Pcp { gateway, nonce } => {
                let sock = pcp_socket(*gateway).map_err(|e| e.to_string())?;
                let got = pcp_exchange(&sock, &self.pcp_map(*nonce, LIFETIME))?;
                self.external = got.assigned;
                // A lifetime the gateway cut to nothing would renew every tick.
                self.lifetime = got.lifetime.max(MIN_LIFETIME);
            }
            Via::Upnp(g) => {
                let add = |lease| g.add_port(self.external.port(), self.internal, lease, DESCRIPTION);
                // IGDv1 gateways may take only permanent leases (error 725): renewal
                // then has nothing to do, and the exit deletes it.
                self.lifetime = match add(LIFETIME) {
                    Ok(()) => LIFETIME,
                    Err(upnp::AddError::OnlyPermanentLeases) => {
                        add(0).map_err(|e| format!("{e:?}"))?;
                        0
                    }
                    Err(upnp::AddError::Other(e)) => return Err(e),
                };
                match g.external_ip() {
                    Ok(ip) => self.external = SocketAddrV4::new(ip, self.external.port()),
                    Err(e) => {
                        let _ = g.remove_port(self.external.port());
                        return Err(e);
                    }
                }
            }
        }
        self.granted = Instant::now();
        Ok(())
    }

    fn pcp_map(&self, nonce: [u8; 12], lifetime: u32) -> Request {
        Request {
            opcode: Opcode::Map,
            lifetime,
            client: *self.internal.ip(),
            nonce,
            protocol: UDP,
            internal_port: self.internal.port(),
            suggested: self.external,
            remote: None,
        }
    }

    /// Time to renew (half the lifetime gone; never for a permanent one).
    pub fn renew_due(&self) -> bool {
        self.renew_at().is_some_and(|t| Instant::now() >= t)
    }

    /// When the mapping is renewed: half its lifetime on (`None`: it lasts).
    pub fn renew_at(&self) -> Option<Instant> {
        (self.lifetime != 0).then(|| self.granted + Duration::from_secs(u64::from(self.lifetime / 2)))
    }

    /// Renew; false if the gateway no longer grants the same mapping.
    pub fn renew(&mut self) -> bool {
        let before = self.external;
        match self.renew_now() {
            Ok(()) if self.external == before => true,
            Ok(()) => {
                tracing::warn!("port mapping renewal gave {} instead of {before}", self.external);
                false
            }
            Err(e) => {
                tracing::warn!("port mapping {before} not renewed: {e}");
                false
            }
        }
    }

    /// Delete the mapping, on exit or when the network changed.
    pub fn release(&mut self) {
        let done = match &self.via {
            Via::Pcp { gateway, nonce } => pcp_socket(*gateway)
                .map_err(|e| e.to_string())
                .and_then(|sock| pcp_exchange(&sock, &self.pcp_map(*nonce, 0)).map(drop)),
            Via::Upnp(g) => g.remove_port(self.external.port()),
        };
        match done {
            Ok(()) => tracing::info!("port mapping {} released", self.external),
            Err(e) => tracing::info!("port mapping {} not released: {e}", self.external),
        }
    }

    /// A description for `shipworm status`.
    pub fn json(&self) -> serde_json::Value {
        let left = u64::from(self.lifetime).saturating_sub(self.granted.elapsed().as_secs());
        serde_json::json!({
            "protocol": self.protocol(),
            "external": self.external.to_string(),
            "internal": self.internal.to_string(),
            "expires_in_s": (self.lifetime != 0).then_some(left),
        })
    }
}

/// The client daemon's port mapping, asked, renewed and given back on a thread of its
/// own: a gateway that does not answer must not stall the packet loop (a UPnP search
/// waits a second, and a gateway's HTTP server may never finish an answer). Waits on
/// those threads are bounded: a stuck one is left behind, and nothing new is asked
/// while it runs.
pub struct Mapper {
    protocols: Protocols,
    port: u16,
    held: Option<PortMapping>,
    /// A request or renewal under way, for this external endpoint.
    asking: Option<(SocketAddrV4, Receiver<Option<PortMapping>>)>,
    /// What the state machine was last told.
    told: Option<SocketAddrV4>,
    /// The last endpoint no gateway granted, and when: not asked again for a while
    /// (every refresh would otherwise search the LAN anew).
    refused: Option<(SocketAddrV4, Instant)>,
    /// When [`Mapper::poll`] last looked for an answer.
    looked_at: Instant,
}

/// How long an endpoint no gateway granted is not asked for again.
const REFUSED_FOR: Duration = Duration::from_secs(600);
/// How often the loop looks for a background request's answer.
const BACKGROUND_LOOK: Duration = Duration::from_millis(100);
/// How long the exit waits for a mapping's release.
const EXIT_WAIT: Duration = Duration::from_secs(2);

impl Mapper {
    /// Mappings of the service port `port`, with `protocols`.
    pub fn new(protocols: Protocols, port: u16) -> Mapper {
        Mapper { protocols, port, held: None, asking: None, told: None, refused: None, looked_at: Instant::now() }
    }

    /// The mapping held.
    pub fn current(&self) -> Option<&PortMapping> {
        self.held.as_ref()
    }

    /// The server sees the service port as `seen`: map that, unless it is held, being
    /// asked for, or was refused lately. True when a mapping held for another endpoint
    /// was let go (the state machine must forget it).
    pub fn want(&mut self, seen: SocketAddrV4, nonce: [u8; 12]) -> bool {
        let refused = self.refused.is_some_and(|(e, t)| e == seen && t.elapsed() < REFUSED_FOR);
        if self.protocols == Protocols::Off
            || self.held.as_ref().is_some_and(|m| m.external == seen)
            || self.asking.as_ref().is_some_and(|(w, _)| *w == seen)
            || refused
        {
            return false;
        }
        let dropped = self.held.is_some();
        self.forget();
        let (protocols, port) = (self.protocols, self.port);
        self.asking = Some((seen, background(move || PortMapping::request(protocols, port, seen, nonce))));
        dropped
    }

    /// The network changed (or the state machine was replaced, and told nothing): what
    /// was held or asked means nothing now; given back in the background.
    pub fn forget(&mut self) {
        self.told = None;
        let held = self.held.take();
        let asking = self.asking.take();
        if held.is_some() || asking.is_some() {
            drop(background(move || {
                let late = asking.and_then(|(_, rx)| rx.recv_timeout(REQUEST_WAIT).ok().flatten());
                for mut m in held.into_iter().chain(late) {
                    m.release();
                }
                None
            }));
        }
    }

    /// Each tick: take in a finished request or renewal, start a due renewal. Returns
    /// the mapping to tell the state machine when it changed (`Some(None)`: lost).
    pub fn poll(&mut self) -> Option<Option<SocketAddrV4>> {
        self.looked_at = Instant::now();
        if let Some((wanted, rx)) = &self.asking {
            match rx.try_recv() {
                Ok(got) => {
                    if got.is_none() {
                        self.refused = Some((*wanted, Instant::now()));
                    }
                    self.asking = None;
                    self.held = got;
                }
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => self.asking = None,
            }
            let now = self.held.as_ref().map(|m| m.external);
            if now != self.told {
                self.told = now;
                return Some(now);
            }
            return None;
        }
        if self.held.as_ref().is_some_and(PortMapping::renew_due) {
            let mut m = self.held.take().expect("checked");
            let external = m.external;
            self.asking = Some((
                external,
                background(move || {
                    if m.renew() {
                        return Some(m);
                    }
                    // Given back: whatever the gateway did grant must not linger.
                    m.release();
                    None
                }),
            ));
            // Held again when the renewal answers; until then the mapping still stands.
        }
        None
    }

    /// When [`Mapper::poll`] next has something to do: soon while a request runs (its
    /// answer comes on a channel the loop cannot poll), the renewal otherwise.
    pub fn next_due(&self) -> Option<Instant> {
        if self.asking.is_some() {
            return Some(self.looked_at + BACKGROUND_LOOK);
        }
        self.held.as_ref().and_then(PortMapping::renew_at)
    }

    /// On exit: give back what is held (and what is being asked), waiting a little.
    pub fn release_all(&mut self) {
        if let Some((_, rx)) = self.asking.take() {
            if let Ok(Some(m)) = rx.recv_timeout(EXIT_WAIT) {
                self.held = Some(m);
            }
        }
        if let Some(mut m) = self.held.take() {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                m.release();
                let _ = tx.send(());
            });
            let _ = rx.recv_timeout(EXIT_WAIT);
        }
    }
}

impl Drop for Mapper {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// How long a background wait for a request lasts before it is given up on.
const REQUEST_WAIT: Duration = Duration::from_secs(30);

/// Run `f` on a thread (the client process holds no capability: its interface helper
/// does): a gateway's answers are parsed there. Its result comes through the channel.
fn background<F>(f: F) -> Receiver<Option<PortMapping>>
where
    F: FnOnce() -> Option<PortMapping> + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

/// Our address on the way to `gateway` (a connected socket that sends nothing).
fn local_towards(gateway: Ipv4Addr) -> Option<Ipv4Addr> {
    let sock = pcp_socket(gateway).ok()?;
    match sock.local_addr().ok()? {
        SocketAddr::V4(a) => Some(*a.ip()),
        SocketAddr::V6(_) => None,
    }
}

fn pcp_socket(gateway: Ipv4Addr) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    sock.connect((gateway, SERVER_PORT))?;
    Ok(sock)
}

/// One PCP request and its successful answer, within the tries.
fn pcp_exchange(sock: &UdpSocket, req: &Request) -> Result<Response, String> {
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
/// the gateway flag; addresses are the kernel's native-order words, in hex.
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
        let sock = pcp_socket(Ipv4Addr::LOCALHOST).unwrap();
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
        let e = pcp_exchange(&sock, &req).unwrap_err();
        assert!(e.contains("does not speak PCP") || e.contains("no PCP answer"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
