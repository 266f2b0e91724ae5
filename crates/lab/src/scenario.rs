//! One end-to-end run, step by step: build the lab, start server and relay, qualify a
//! client behind a NAT, then a cold first contact (a single echo request, the first
//! packet between the two, which must be answered), then ping6 and TCP both ways with
//! the native host. Used by
//! `shipworm-lab` (which prints the steps) and by the end-to-end suite (which asserts
//! the outcome).

use crate::error::{err, LabError, Result};
use crate::traffic::{self, PingResult, Transfer};
use crate::{Impl, Lab, LabSpec, NatKind, HOST6_B_V6, HOST6_V6};
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The NAT in front of the client.
    pub nat: NatKind,
    /// Who plays the server.
    pub server: Impl,
    /// Who plays the relay.
    pub relay: Impl,
    /// Who plays the client.
    pub client: Impl,
    /// Bytes in each TCP transfer.
    pub transfer_bytes: usize,
    /// Pings each way.
    pub pings: u32,
    /// Leave the lab running even when a step fails (for a look inside).
    pub keep_on_failure: bool,
    /// Who speaks first.
    pub first: Side,
    /// miredo.conf lines for shipworm's relay and client (not Miredo's), e.g. to take a
    /// path the defaults do not (`TunOffload no`).
    pub shipworm_extra: &'static str,
    /// The NAT's link to the core this narrow, with PMTU messages filtered
    /// ([`LabSpec::narrow_wan`]).
    pub narrow_wan: Option<u32>,
    /// Which hosts sum checksums in software ([`LabSpec::software_sums`]).
    pub software_sums: crate::SoftwareSums,
}

/// One end of a first contact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The native IPv6 host calls the client first (the relay has never seen the
    /// client, the client has never seen the relay).
    Native,
    /// The client calls the native host first (its connectivity test, the relay's
    /// bubble exchange).
    Client,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Native => "native first",
            Side::Client => "client first",
        })
    }
}

/// What the run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The client's Teredo address.
    pub address: Ipv6Addr,
    /// Seconds from client start to a configured address.
    pub qualify_secs: f64,
    /// The cold first contact's round trip, in ms (the side that spoke first as in
    /// the scenario).
    pub first_ms: f64,
    /// The second cold contact, the other way, to an address the client never met.
    pub second_ms: f64,
    /// Client → native host.
    pub ping_out: PingResult,
    /// Native host → client.
    pub ping_in: PingResult,
    /// Client → native host.
    pub tcp_out: Transfer,
    /// Native host → client.
    pub tcp_in: Transfer,
}

/// Run `s`, reporting each step through `say`. On success the lab is returned still
/// running (drop it to tear it down); on failure the error names the step.
pub fn run(s: &Scenario, say: &mut dyn FnMut(&str)) -> Result<(Lab, Outcome)> {
    let spec = LabSpec { narrow_wan: s.narrow_wan, software_sums: s.software_sums, ..LabSpec::nats(vec![(s.nat, 1)]) };
    let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
    if s.keep_on_failure {
        lab.keep();
    }
    let outcome = run_steps(&mut lab, s, say)?;
    Ok((lab, outcome))
}

fn run_steps(lab: &mut Lab, s: &Scenario, say: &mut dyn FnMut(&str)) -> Result<Outcome> {
    say(&format!("lab built: {} namespaces ({} NAT)", lab.namespaces().len(), s.nat));
    lab.start_server(&s.server).map_err(|e| step(2, "start the server", e))?;
    say(&format!("server up ({}) on {}:3544 and {}:3544", s.server, crate::SERVER_V4, crate::SERVER2_V4));
    let extra = |imp: &Impl| if matches!(imp, Impl::Shipworm(_)) { s.shipworm_extra } else { "" };
    lab.start_relay_with(&s.relay, extra(&s.relay)).map_err(|e| step(3, "start the relay", e))?;
    say(&format!("relay up ({}) on {}, routing 2001::/32 for the native side", s.relay, crate::RELAY_V4));
    let t0 = Instant::now();
    lab.start_client_with(0, &s.client, extra(&s.client)).map_err(|e| step(4, "start the client", e))?;
    let address = lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| step(4, "qualify the client", e))?;
    let qualify_secs = t0.elapsed().as_secs_f64();
    say(&format!("client qualified ({}) in {qualify_secs:.2} s: {address}", s.client));
    let ns = lab.clients[0].ns.clone();
    let h6 = lab.ns("h6");
    // The first packet between the client and the native host is the one that matters:
    // a single echo request, answered or not (ping never retries). Then the other way,
    // to the native host's second address, which the client has never met (cold for the
    // client, the relay already warm).
    let (first_ms, second_ms) = match s.first {
        Side::Native => {
            let a = first_contact(&h6, address, "native host → client", say)
                .map_err(|e| step(5, "first contact native host → client", e))?;
            let b = first_contact(&ns, HOST6_B_V6, "client → native host's second address", say)
                .map_err(|e| step(5, "first contact client → native host's second address", e))?;
            (a, b)
        }
        Side::Client => {
            let a = first_contact(&ns, HOST6_V6, "client → native host", say)
                .map_err(|e| step(5, "first contact client → native host", e))?;
            let b = traffic::ping_from(&h6, HOST6_B_V6, address, 1, 5)
                .and_then(|p| p.rtts_ms.first().copied().ok_or_else(|| LabError::new("no answer within 5 s".into())))
                .map_err(|e| step(5, "first contact from the native host's second address → client", e))?;
            say(&format!("first contact native host's second address → client: answered in {b:.1} ms"));
            (a, b)
        }
    };
    let ping_out = traffic::ping(&ns, HOST6_V6, s.pings, 2).map_err(|e| step(5, "ping6 client → native host", e))?;
    check_ping(&ping_out).map_err(|e| step(5, "ping6 client → native host", e))?;
    say(&format!("ping6 client → {HOST6_V6}: {ping_out}"));
    let ping_in = traffic::ping(&h6, address, s.pings, 2).map_err(|e| step(6, "ping6 native host → client", e))?;
    check_ping(&ping_in).map_err(|e| step(6, "ping6 native host → client", e))?;
    say(&format!("ping6 {HOST6_V6} → client: {ping_in}"));
    let timeout = Duration::from_secs(30);
    let tcp_out = traffic::tcp_transfer(&ns, &h6, HOST6_V6, s.transfer_bytes, timeout)
        .and_then(check_transfer)
        .map_err(|e| step(7, "TCP client → native host", e))?;
    say(&format!("TCP client → native host: {} bytes intact, {:.1} Mbit/s", tcp_out.bytes, tcp_out.mbit_per_s()));
    let tcp_in = traffic::tcp_transfer(&h6, &ns, address, s.transfer_bytes, timeout)
        .and_then(check_transfer)
        .map_err(|e| step(8, "TCP native host → client", e))?;
    say(&format!("TCP native host → client: {} bytes intact, {:.1} Mbit/s", tcp_in.bytes, tcp_in.mbit_per_s()));
    Ok(Outcome { address, qualify_secs, first_ms, second_ms, ping_out, ping_in, tcp_out, tcp_in })
}

/// "step N (what) failed: why": how every scenario names the step that failed.
fn step(n: u32, what: &str, e: LabError) -> LabError {
    LabError::at_step(n, what, e)
}

/// A lab with `nats` (the first with one client, the others none: networks to move
/// to), server, relay and that client started, and the client qualified: steps 1-4 of
/// every single-client scenario. Returns the lab and the client's address.
fn start_chain(nats: &[NatKind], server: &Impl, relay: &Impl, client: &Impl) -> Result<(Lab, Ipv6Addr)> {
    let spec = nats.iter().enumerate().map(|(i, &k)| (k, usize::from(i == 0))).collect();
    let mut lab = Lab::build(&LabSpec::nats(spec)).map_err(|e| step(1, "build the lab", e))?;
    for i in 1..nats.len() {
        lab.add_spare_link(0, i + 1).map_err(|e| step(1, "add a network to move to", e))?;
    }
    let address = start_roles(&mut lab, server, relay, client)?;
    Ok((lab, address))
}

/// Steps 2-4 in a built lab: server, relay and client 0 started, the client qualified.
fn start_roles(lab: &mut Lab, server: &Impl, relay: &Impl, client: &Impl) -> Result<Ipv6Addr> {
    lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
    lab.start_relay(relay).map_err(|e| step(3, "start the relay", e))?;
    lab.start_client(0, client).map_err(|e| step(4, "start the client", e))?;
    lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| step(4, "qualify the client", e))
}

/// What a cold first contact and traffic each way between the client and a peer
/// measured.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The cold first contact's round trip, ms, from the side that spoke first.
    pub first_ms: f64,
    /// Client → peer.
    pub ping_out: PingResult,
    /// Peer → client.
    pub ping_in: PingResult,
    /// Client → peer.
    pub tcp_out: Transfer,
    /// Peer → client.
    pub tcp_in: Transfer,
}

impl std::fmt::Display for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "first contact {:.1} ms; ping out {}, in {}; TCP {:.0}/{:.0} Mbit/s",
            self.first_ms,
            self.ping_out,
            self.ping_in,
            self.tcp_out.mbit_per_s(),
            self.tcp_in.mbit_per_s()
        )
    }
}

/// The other end of an [`exchange`] with the client.
struct Peer<'a> {
    /// Its namespace.
    ns: &'a str,
    /// Its address.
    addr: Ipv6Addr,
    /// Its name in the steps.
    what: &'a str,
}

/// `peer` and client 0 (at `address`): a cold first contact from `first` (a single
/// echo request that must be answered), then pings and a TCP transfer of `bytes` each
/// way; steps from `step0` on.
fn exchange(lab: &Lab, peer: &Peer, address: Ipv6Addr, first: Side, step0: u32, bytes: usize) -> Result<Exchange> {
    let (peer_ns, what) = (peer.ns, peer.what);
    let peer = peer.addr;
    let ns = lab.clients[0].ns.clone();
    let first_ms = match first {
        Side::Client => first_contact(&ns, peer, &format!("client → {what}"), &mut |_| {})
            .map_err(|e| step(step0, &format!("first contact client → {what}"), e))?,
        Side::Native => first_contact(peer_ns, address, &format!("{what} → client"), &mut |_| {})
            .map_err(|e| step(step0, &format!("first contact {what} → client"), e))?,
    };
    let ping_out = traffic::ping(&ns, peer, 5, 2)
        .and_then(|p| check_ping(&p).map(|()| p))
        .map_err(|e| step(step0 + 1, &format!("ping6 client → {what}"), e))?;
    let ping_in = traffic::ping(peer_ns, address, 5, 2)
        .and_then(|p| check_ping(&p).map(|()| p))
        .map_err(|e| step(step0 + 1, &format!("ping6 {what} → client"), e))?;
    let timeout = Duration::from_secs(30);
    let tcp_out = traffic::tcp_transfer(&ns, peer_ns, peer, bytes, timeout)
        .and_then(check_transfer)
        .map_err(|e| step(step0 + 2, &format!("TCP client → {what}"), e))?;
    let tcp_in = traffic::tcp_transfer(peer_ns, &ns, address, bytes, timeout)
        .and_then(check_transfer)
        .map_err(|e| step(step0 + 3, &format!("TCP {what} → client"), e))?;
    Ok(Exchange { first_ms, ping_out, ping_in, tcp_out, tcp_in })
}

/// A 6to4 host (RFC 4380 §5.2.9's other kind of peer) and a client behind a
/// port-restricted NAT: [`exchange`] from step 5. The 6to4 host's packets cross a 6to4
/// relay router to reach the native side, and the Teredo relay's go back through it
/// ([`crate::sixtofour`]).
pub fn run_sixtofour(server: &Impl, relay: &Impl, client: &Impl, first: Side, bytes: usize) -> Result<(Lab, Exchange)> {
    let spec = LabSpec { sixtofour: true, ..LabSpec::nats(vec![(NatKind::PortRestricted, 1)]) };
    let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
    let address = start_roles(&mut lab, server, relay, client)?;
    let h64 = lab.ns("h64");
    let peer = Peer { ns: &h64, addr: crate::sixtofour::HOST_V6, what: "6to4 host" };
    let x = exchange(&lab, &peer, address, first, 5, bytes)?;
    Ok((lab, x))
}

/// A server that relays too (shipworm's `ServerRelay yes`, RFC 4380 §5.4.3) and no
/// other relay: the native host routes 2001::/32 to the server, and everything between
/// the client and the native host passes the server's address and port 3544.
/// [`exchange`] from step 4.
pub fn run_server_relay(server: &Impl, client: &Impl, first: Side, bytes: usize) -> Result<(Lab, Exchange)> {
    let mut lab =
        Lab::build(&LabSpec::nats(vec![(NatKind::PortRestricted, 1)])).map_err(|e| step(1, "build the lab", e))?;
    lab.route_teredo_through_server().map_err(|e| step(1, "route 2001::/32 to the server", e))?;
    let extra = if matches!(server, Impl::Shipworm(_)) { "ServerRelay yes\nInterfaceName tsrv\n" } else { "" };
    lab.start_server_with(server, extra).map_err(|e| step(2, "start the server", e))?;
    lab.start_client(0, client).map_err(|e| step(3, "start the client", e))?;
    let address = lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| step(3, "qualify the client", e))?;
    let h6 = lab.ns("h6");
    let x = exchange(&lab, &Peer { ns: &h6, addr: HOST6_V6, what: "native host" }, address, first, 4, bytes)?;
    Ok((lab, x))
}

/// A host-specific relay (shipworm's `RelayType host`) on the relay host, and a client:
/// the client reaches the host's address (step 5, a single first echo); an address the
/// host gets afterwards (as SLAAC or a temporary address would come) is reached too
/// (step 6, a single first echo, after 1 s). Returns both round trips, ms.
pub fn run_host_relay_new_address(server: &Impl, client: &Impl) -> Result<(Lab, (f64, f64))> {
    let mut lab =
        Lab::build(&LabSpec::nats(vec![(NatKind::PortRestricted, 1)])).map_err(|e| step(1, "build the lab", e))?;
    lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
    let me = Impl::Shipworm(match client {
        Impl::Shipworm(b) => b.clone(),
        Impl::Miredo => match server {
            Impl::Shipworm(b) => b.clone(),
            Impl::Miredo => return err("no shipworm binary to run the host-specific relay"),
        },
    });
    lab.start_host_relay(&me).map_err(|e| step(3, "start the host-specific relay", e))?;
    lab.start_client(0, client).map_err(|e| step(4, "start the client", e))?;
    lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| step(4, "qualify the client", e))?;
    let ns = lab.clients[0].ns.clone();
    let first = first_contact(&ns, crate::RELAY_V6, "client → the relay host", &mut |_| {})
        .map_err(|e| step(5, "first contact client → the relay host", e))?;
    let added = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x99);
    Lab::addr(&lab.ns("rly"), &format!("{added}/64"), "eth0").map_err(|e| step(6, "add an address", e))?;
    std::thread::sleep(Duration::from_secs(1));
    let later = first_contact(&ns, added, "client → the relay host's new address", &mut |_| {})
        .map_err(|e| step(6, "first contact client → the relay host's new address", e))?;
    Ok((lab, (first, later)))
}

/// Step 6 of a handoff: move client 0 behind the second NAT and wait (15 s at most)
/// for an address other than `old` on its interface.
fn move_and_wait(lab: &mut Lab, old: Ipv6Addr) -> Result<Ipv6Addr> {
    lab.move_client(0, 2).map_err(|e| step(6, "move the client", e))?;
    let ns = lab.clients[0].ns.clone();
    let moved = Instant::now();
    loop {
        match crate::peers::teredo_address(&ns) {
            Some(a) if a != old => return Ok(a),
            _ if moved.elapsed() > Duration::from_secs(15) => {
                return Err(step(6, "configure the new address", LabError::new(lab.log_tail("client0", 15))))
            }
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// A single echo request from `ns` to `dst` as the first packet between them: answered
/// within 5 s (or what [`with_first_contact_wait`] set), or the step fails. Returns
/// the round trip in ms.
fn first_contact(ns: &str, dst: Ipv6Addr, what: &str, say: &mut dyn FnMut(&str)) -> Result<f64> {
    let wait = FIRST_CONTACT_WAIT.with(std::cell::Cell::get);
    let p = traffic::ping(ns, dst, 1, wait)?;
    let ms = p
        .rtts_ms
        .first()
        .copied()
        .ok_or_else(|| LabError::new(format!("the first echo request got no answer within {wait} s")))?;
    say(&format!("first contact {what}: answered in {ms:.1} ms"));
    Ok(ms)
}

thread_local! {
    /// How long a first contact waits for its answer, in seconds, on this thread.
    static FIRST_CONTACT_WAIT: std::cell::Cell<u32> = const { std::cell::Cell::new(5) };
}

/// Run `f` (scenarios on this thread) with first contacts waiting `secs` for their
/// answer instead of 5 s. The e2e suite gives less to the cases it expects to fail at a
/// first contact: their limits are structural (a NAT that does not hairpin, a peer
/// without the extension), no answer comes late, and the wait was most of what they
/// cost.
pub fn with_first_contact_wait<T>(secs: u32, f: impl FnOnce() -> T) -> T {
    let before = FIRST_CONTACT_WAIT.with(|w| w.replace(secs));
    let out = f();
    FIRST_CONTACT_WAIT.with(|w| w.set(before));
    out
}

fn check_ping(p: &PingResult) -> Result<()> {
    // Allow one loss: the first echo may wait for the bubble exchange.
    if p.received + 1 >= p.sent && p.received > 0 {
        Ok(())
    } else {
        err(format!("{}/{} replies", p.received, p.sent))
    }
}

fn check_transfer(t: Transfer) -> Result<Transfer> {
    if t.intact {
        Ok(t)
    } else {
        err(format!("data damaged or cut: {} bytes arrived, checksums differ", t.bytes))
    }
}

/// What a client-to-client run measured.
#[derive(Debug, Clone)]
pub struct PeerToPeer {
    /// The cold first contact A → B (a single echo, the first packet between them), ms.
    pub first_ms: f64,
    /// Pings A → B after it.
    pub ping: PingResult,
    /// TCP B → A.
    pub tcp: Transfer,
}

/// Two clients behind two NATs, one server, no relay: client A (behind `nats[0]`,
/// played by `clients[0]`) calls client B first, with a single echo that must be
/// answered; then pings and TCP the other way. They must reach each other directly
/// (bubbles through the server, then straight across the NATs).
pub fn run_peer_to_peer(
    nats: [NatKind; 2],
    server: &Impl,
    clients: [&Impl; 2],
    transfer_bytes: usize,
    say: &mut dyn FnMut(&str),
) -> Result<(Lab, PeerToPeer)> {
    peer_to_peer(LabSpec::nats(vec![(nats[0], 1), (nats[1], 1)]), nats, server, clients, "", transfer_bytes, say)
}

/// [`run_peer_to_peer`] with A qualified at the second server (192.0.2.5) and B at the
/// first: each client's bubbles to the other go through the other's server (RFC 6081
/// §6.1's arrangement).
pub fn run_peer_to_peer_two_servers(
    nats: [NatKind; 2],
    server: &Impl,
    clients: [&Impl; 2],
    transfer_bytes: usize,
) -> Result<(Lab, PeerToPeer)> {
    let spec = LabSpec { second_server: true, ..LabSpec::nats(vec![(nats[0], 1), (nats[1], 1)]) };
    peer_to_peer(spec, nats, server, clients, "", transfer_bytes, &mut |_| {})
}

/// Two clients behind one NAT box of kind `nat`, which (as Linux `masquerade` and most
/// home routers) does not hairpin: A calls B cold, as in [`run_peer_to_peer`]; shipworm
/// clients get the configuration lines `extra`.
pub fn run_same_nat(
    nat: NatKind,
    server: &Impl,
    clients: [&Impl; 2],
    extra: &str,
    transfer_bytes: usize,
    say: &mut dyn FnMut(&str),
) -> Result<(Lab, PeerToPeer)> {
    peer_to_peer(LabSpec::nats(vec![(nat, 2)]), [nat, nat], server, clients, extra, transfer_bytes, say)
}

fn peer_to_peer(
    spec: LabSpec,
    nats: [NatKind; 2],
    server: &Impl,
    clients: [&Impl; 2],
    extra: &str,
    transfer_bytes: usize,
    say: &mut dyn FnMut(&str),
) -> Result<(Lab, PeerToPeer)> {
    let two_servers = spec.second_server;
    let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
    lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
    if two_servers {
        lab.start_server_b(server).map_err(|e| step(2, "start the second server", e))?;
    }
    let mut addrs = Vec::new();
    for (c, imp) in clients.iter().enumerate() {
        let extra = if matches!(imp, Impl::Shipworm(_)) { extra } else { "" };
        let at = if two_servers && c == 0 { crate::SERVER_B_V4 } else { crate::SERVER_V4 };
        lab.start_client_to(c, imp, &at.to_string(), extra).map_err(|e| step(4, "start the clients", e))?;
        addrs.push(lab.wait_qualified(c, Duration::from_secs(20)).map_err(|e| step(4, "qualify the clients", e))?);
    }
    say(&format!("clients qualified: {} ({}) and {} ({})", addrs[0], nats[0], addrs[1], nats[1]));
    let (a, b) = (lab.clients[0].ns.clone(), lab.clients[1].ns.clone());
    let first_ms = first_contact(&a, addrs[1], "client A → client B", say)
        .map_err(|e| step(5, "first contact client A → client B", e))?;
    let ping = traffic::ping(&a, addrs[1], 5, 2).map_err(|e| step(6, "ping6 client A → client B", e))?;
    check_ping(&ping).map_err(|e| step(6, "ping6 client A → client B", e))?;
    say(&format!("ping6 A → B: {ping}"));
    let tcp = traffic::tcp_transfer(&b, &a, addrs[0], transfer_bytes, Duration::from_secs(30))
        .and_then(check_transfer)
        .map_err(|e| step(7, "TCP client B → client A", e))?;
    say(&format!("TCP B → A: {} bytes intact, {:.1} Mbit/s", tcp.bytes, tcp.mbit_per_s()));
    Ok((lab, PeerToPeer { first_ms, ping, tcp }))
}

/// What a handoff did.
#[derive(Debug, Clone)]
pub struct Handoff {
    /// The address before the move.
    pub old: Ipv6Addr,
    /// The address after.
    pub new: Ipv6Addr,
    /// From the move to the new address on the interface.
    pub address_after: Duration,
    /// The longest time without an answered echo across the move (echoes go every
    /// 20 ms, so 20 ms means no interruption at all).
    pub traffic_gap: Duration,
    /// Echoes answered before and after the move.
    pub answered: (usize, usize),
}

/// A phone changing networks: a shipworm client behind one NAT, pinging the native
/// host every 20 ms, is moved behind another NAT (new IPv4 address and route). The
/// new Teredo address must replace the old one and the pings must come back.
pub fn run_handoff(client: &Impl, nats: [NatKind; 2], say: &mut dyn FnMut(&str)) -> Result<(Lab, Handoff)> {
    let (mut lab, old) = start_chain(&nats, client, client, client)?;
    // Warm the relay path so the measurement shows the handoff, not the first contact.
    let ns = lab.clients[0].ns.clone();
    traffic::ping(&ns, HOST6_V6, 1, 5).map_err(|e| step(5, "first ping", e))?;
    say(&format!("client qualified behind the {} NAT: {old}", nats[0]));
    let stream_ns = ns.clone();
    let stream = std::thread::spawn(move || {
        traffic::ping_stream(&stream_ns, HOST6_V6, Duration::from_millis(20), Duration::from_secs(6))
    });
    std::thread::sleep(Duration::from_secs(2));
    let moved = Instant::now();
    let moved_at = Duration::from_secs(2);
    let new = move_and_wait(&mut lab, old)?;
    let address_after = moved.elapsed();
    let echoes = stream.join().map_err(|_| LabError::new("ping thread panicked".into()))??;
    let still_old =
        crate::netns::exec(&ns, &["ip", "-6", "-o", "addr", "show", "dev", "teredo"])?.contains(&old.to_string());
    if still_old {
        return Err(step(7, "remove the old address", LabError::new(format!("{old} is still configured"))));
    }
    let before = echoes.iter().filter(|e| e.sent < moved_at && e.rtt.is_some()).count();
    let after = echoes.iter().filter(|e| e.sent >= moved_at && e.rtt.is_some()).count();
    if after == 0 {
        return Err(step(
            8,
            "traffic after the move",
            LabError::new(format!("no echo answered after the move ({before} before)")),
        ));
    }
    let replies: Vec<Duration> = echoes.iter().filter_map(|e| e.rtt.map(|r| e.sent + r)).collect();
    let traffic_gap = replies.windows(2).map(|w| w[1].saturating_sub(w[0])).max().unwrap_or_default();
    say(&format!(
        "moved behind the {} NAT: new address {new} after {:.0} ms; longest wait for an echo reply {:.0} ms",
        nats[1],
        address_after.as_secs_f64() * 1000.0,
        traffic_gap.as_secs_f64() * 1000.0
    ));
    let answered = (before, after);
    Ok((lab, Handoff { old, new, address_after, traffic_gap, answered }))
}

/// The client's server dies: a shipworm client configured with a fallback server must
/// qualify with it. Returns the time from the kill to the new address.
pub fn run_failover(client: &Impl, refresh_secs: u64, say: &mut dyn FnMut(&str)) -> Result<(Lab, Duration)> {
    let spec = LabSpec { second_server: true, ..LabSpec::nats(vec![(NatKind::PortRestricted, 1)]) };
    let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
    lab.start_server(client).map_err(|e| step(2, "start the servers", e))?;
    lab.start_server_b(client).map_err(|e| step(2, "start the servers", e))?;
    let extra = format!("FallbackServerAddress {}\nRefreshInterval {refresh_secs}\n", crate::SERVER_B_V4);
    lab.start_client_with(0, client, &extra).map_err(|e| step(4, "start the client", e))?;
    let first = lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| step(4, "qualify the client", e))?;
    say(&format!("client qualified with {}: {first}", crate::SERVER_V4));
    lab.stop_peer("server");
    let killed = Instant::now();
    let ns = lab.clients[0].ns.clone();
    // The refresh interval, its eight solicitations (25 s), and qualification.
    let limit = Duration::from_secs(refresh_secs + 30);
    loop {
        if let Some(a) = crate::peers::teredo_address(&ns) {
            if a != first && crate::peers::teredo_address(&ns).is_some() {
                let t = shipworm_addr_server(&a);
                if t == Some(crate::SERVER_B_V4) {
                    let took = killed.elapsed();
                    say(&format!(
                        "server killed; qualified with {} after {:.1} s: {a}",
                        crate::SERVER_B_V4,
                        took.as_secs_f64()
                    ));
                    return Ok((lab, took));
                }
            }
        }
        if killed.elapsed() > limit {
            return Err(step(
                5,
                "fail over",
                LabError::new(format!(
                    "still no address from the second server after {limit:?}:\n{}",
                    lab.log_tail("client0", 10)
                )),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The server IPv4 embedded in a Teredo address.
fn shipworm_addr_server(a: &Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let o = a.octets();
    (o[..4] == [0x20, 0x01, 0, 0]).then(|| std::net::Ipv4Addr::new(o[4], o[5], o[6], o[7]))
}

/// What the SIP run measured: each call's duration (INVITE to BYE answered).
#[derive(Debug, Clone)]
pub struct SipCalls {
    /// The client's address, and the call to it.
    pub first: (Ipv6Addr, traffic::SipCall),
    /// After the handoff: the new address, and the call to it.
    pub after_handoff: Option<(Ipv6Addr, traffic::SipCall)>,
}

/// A correspondent calls a Teredo client: the native host places a SIP call (Debian's
/// SIPp) to the client's Teredo address, the INVITE being the first packet between
/// them; with `handoff`, the client then moves behind a NAT of that kind and the host
/// calls its new address, cold again.
pub fn run_sip(
    nat: NatKind,
    server: &Impl,
    relay: &Impl,
    client: &Impl,
    handoff: Option<NatKind>,
    say: &mut dyn FnMut(&str),
) -> Result<(Lab, SipCalls)> {
    let nats: Vec<NatKind> = std::iter::once(nat).chain(handoff).collect();
    let (mut lab, address) = start_chain(&nats, server, relay, client)?;
    let (ns, h6) = (lab.clients[0].ns.clone(), lab.ns("h6"));
    let call = traffic::sip_call(&h6, HOST6_V6, &ns, address, Duration::from_secs(15))
        .map_err(|e| step(5, "SIP call native host → client", e))?;
    say(&format!("SIP call {HOST6_V6} → {address}: completed on its first INVITE, {:.2} s", call.secs));
    let mut calls = SipCalls { first: (address, call), after_handoff: None };
    if handoff.is_some() {
        let new = move_and_wait(&mut lab, address)?;
        let call = traffic::sip_call(&h6, HOST6_V6, &ns, new, Duration::from_secs(15))
            .map_err(|e| step(7, "SIP call native host → client's new address", e))?;
        say(&format!("after the handoff, SIP call → {new}: completed on its first INVITE, {:.2} s", call.secs));
        calls.after_handoff = Some((new, call));
    }
    Ok((lab, calls))
}

/// A correspondent opens a TCP connection to a Teredo client: its SYN is the first
/// packet between them, and must not need retransmitting (the native host's kernel
/// counts retransmitted SYNs; one fails the step). Then `bytes` go
/// over it, checked end to end. Returns the transfer.
pub fn run_tcp_first(
    nat: NatKind,
    server: &Impl,
    relay: &Impl,
    client: &Impl,
    bytes: usize,
) -> Result<(Lab, Transfer)> {
    let (lab, address) = start_chain(&[nat], server, relay, client)?;
    let (ns, h6) = (lab.clients[0].ns.clone(), lab.ns("h6"));
    let before = traffic::syn_retransmissions(&h6).map_err(|e| step(5, "read the host's TCP counters", e))?;
    let t = traffic::tcp_transfer(&h6, &ns, address, bytes, Duration::from_secs(15))
        .and_then(check_transfer)
        .map_err(|e| step(5, "TCP connection native host → client", e))?;
    let resent = traffic::syn_retransmissions(&h6).map_err(|e| step(5, "read the host's TCP counters", e))? - before;
    if resent > 0 {
        return Err(step(
            5,
            "TCP connection native host → client",
            LabError::new(format!("the SYN was retransmitted {resent} time(s): the first was not answered")),
        ));
    }
    Ok((lab, t))
}

/// The native host calls the client first, both go quiet for `idle` (past the peers'
/// 30 s validity, at the client and at the relay), and the host calls first again:
/// each call is a single echo that must be answered. Returns both round trips, ms.
pub fn run_native_first_after_idle(
    server: &Impl,
    relay: &Impl,
    client: &Impl,
    idle: Duration,
) -> Result<(Lab, (f64, f64))> {
    let (lab, address) = start_chain(&[NatKind::PortRestricted], server, relay, client)?;
    let h6 = lab.ns("h6");
    let first = first_contact(&h6, address, "native host → client", &mut |_| {})
        .map_err(|e| step(5, "first contact native host → client", e))?;
    std::thread::sleep(idle);
    let again = first_contact(&h6, address, "native host → client after the idle time", &mut |_| {})
        .map_err(|e| step(6, "native host → client again after the idle time", e))?;
    Ok((lab, (first, again)))
}

/// The scripted Windows-like client ([`crate::scripted_peer`]) against shipworm or
/// Miredo: what it did, in steps.
pub mod windows_like {
    use super::*;
    use crate::scripted_peer::{RandomPortCode, ScriptedClient, CALL_NONCE, PING_IDENT};

    /// Step 4: it qualifies at `server` with an RS carrying a link-layer address option
    /// (RFC 4380 §5.2.1, RFC 4861 §4.1), from behind a port-restricted NAT.
    pub fn qualifies(server: &Impl) -> Result<(Lab, Ipv6Addr)> {
        let mut lab =
            Lab::build(&LabSpec::nats(vec![(NatKind::PortRestricted, 1)])).map_err(|e| step(1, "build the lab", e))?;
        lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
        let w = ScriptedClient::qualify(&lab.clients[0].ns, 40000, crate::SERVER_V4)
            .map_err(|e| step(4, "qualify the scripted client", e))?;
        Ok((lab, w.address))
    }

    /// It (behind a port-restricted NAT) calls `client` (behind an address-restricted
    /// one: a Linux port-restricted NAT would move the client's answer to another port,
    /// as conntrack saw our first direct bubble, sent with full TTL as RFC 4380 §5.2.6
    /// has it) with an
    /// indirect bubble carrying a Nonce and a Random Port trailer of type `code` (RFC
    /// 6081 §5.2.4.1, §5.4.4.2): step 5, the client's direct bubble echoes the nonce
    /// (RFC 6081 §5.2.4.2) and the client takes our direct answer to its own nonce;
    /// step 6, an echo request to the client's address is answered. Returns the ms from
    /// the first bubble to the echo reply.
    pub fn calls(server: &Impl, client: &Impl, code: RandomPortCode) -> Result<(Lab, f64)> {
        let spec = LabSpec::nats(vec![(NatKind::PortRestricted, 1), (NatKind::AddressRestricted, 1)]);
        let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
        lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
        lab.start_client(1, client).map_err(|e| step(3, "start the client", e))?;
        let peer = lab.wait_qualified(1, Duration::from_secs(20)).map_err(|e| step(3, "qualify the client", e))?;
        let mut w = ScriptedClient::qualify(&lab.clients[0].ns, 40000, crate::SERVER_V4)
            .map_err(|e| step(4, "qualify the scripted client", e))?;
        let t0 = Instant::now();
        w.call(peer, Some(code)).map_err(|e| step(5, "send the indirect bubble", e))?;
        let proof = |h: &crate::scripted_peer::Heard| h.bubble && h.origin.is_none() && h.nonce == Some(CALL_NONCE);
        let heard = w
            .answer(Duration::from_secs(4), |h| proof(h) && h.src == peer)
            .map_err(|e| step(5, "hear the client", e))?;
        let Some(&(_, at)) = w.trusted.iter().find(|(a, _)| *a == peer) else {
            let what = format!("no direct bubble echoed our nonce; heard: {heard:?}");
            return Err(step(5, "the bubble exchange", LabError::new(what)));
        };
        w.ping(peer, at, 1).map_err(|e| step(6, "ping the client", e))?;
        let heard = w
            .answer(Duration::from_secs(3), |h| h.echo == Some((false, PING_IDENT, 1)))
            .map_err(|e| step(6, "hear the reply", e))?;
        if !heard.iter().any(|h| h.echo == Some((false, PING_IDENT, 1))) {
            return Err(step(6, "echo request to the client", LabError::new("no echo reply within 3 s".into())));
        }
        Ok((lab, t0.elapsed().as_secs_f64() * 1000.0))
    }

    /// `client` (behind a port-restricted NAT) calls it (behind an address-restricted
    /// one, for the reason [`calls`] gives, the other way round): a single
    /// echo request from the client's host to its address must be answered (step 5):
    /// the client's indirect bubble is answered as RFC 6081 §5.2.4.2 says, with a direct
    /// bubble echoing its nonce and an indirect one of ours. Returns the round trip, ms.
    pub fn is_called(server: &Impl, client: &Impl) -> Result<(Lab, f64)> {
        let spec = LabSpec::nats(vec![(NatKind::AddressRestricted, 1), (NatKind::PortRestricted, 1)]);
        let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
        lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
        lab.start_client(1, client).map_err(|e| step(3, "start the client", e))?;
        lab.wait_qualified(1, Duration::from_secs(20)).map_err(|e| step(3, "qualify the client", e))?;
        let mut w = ScriptedClient::qualify(&lab.clients[0].ns, 40000, crate::SERVER_V4)
            .map_err(|e| step(4, "qualify the scripted client", e))?;
        let (address, ns) = (w.address, lab.clients[1].ns.clone());
        let (ping, heard) = std::thread::scope(|s| {
            // Until it has answered the client's echo request.
            let answering =
                s.spawn(move || w.answer(Duration::from_secs(6), |h| h.echo.is_some_and(|(request, ..)| request)));
            let ping = traffic::ping(&ns, address, 1, 5);
            (ping, answering.join())
        });
        let ms = ping.ok().and_then(|p| p.rtts_ms.first().copied()).ok_or_else(|| {
            let what = format!("no answer within 5 s; the scripted client heard: {heard:?}");
            step(5, "first contact client → scripted client", LabError::new(what))
        })?;
        Ok((lab, ms))
    }

    /// It pings the native host through its server (the direct connectivity test, RFC
    /// 4380 §5.2.9) and `relay` brings the reply: the relay's indirect bubble is
    /// answered at its origin (§5.2.3), and the echo reply must arrive (step 5).
    pub fn through_relay(server: &Impl, relay: &Impl) -> Result<(Lab, f64)> {
        let mut lab =
            Lab::build(&LabSpec::nats(vec![(NatKind::PortRestricted, 1)])).map_err(|e| step(1, "build the lab", e))?;
        lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
        lab.start_relay(relay).map_err(|e| step(3, "start the relay", e))?;
        let mut w = ScriptedClient::qualify(&lab.clients[0].ns, 40000, crate::SERVER_V4)
            .map_err(|e| step(4, "qualify the scripted client", e))?;
        let t0 = Instant::now();
        w.ping(HOST6_V6, w.server(), 7).map_err(|e| step(5, "ping the native host", e))?;
        let heard = w
            .answer(Duration::from_secs(4), |h| h.echo == Some((false, PING_IDENT, 7)))
            .map_err(|e| step(5, "hear", e))?;
        if !heard.iter().any(|h| h.echo == Some((false, PING_IDENT, 7))) {
            return Err(step(
                5,
                "echo request to the native host",
                LabError::new("no echo reply through the relay within 4 s".into()),
            ));
        }
        Ok((lab, t0.elapsed().as_secs_f64() * 1000.0))
    }

    /// A host-specific relay (shipworm's, standing in for Windows': RFC 4380 §5.5) whose
    /// host filters ICMPv6 echo requests if `filtered`, as Windows' firewall does by
    /// default, and `client`: a TCP connection from the client to the host (step 5).
    pub fn host_relay_tcp(server: &Impl, client: &Impl, filtered: bool) -> Result<(Lab, Transfer)> {
        let mut lab =
            Lab::build(&LabSpec::nats(vec![(NatKind::PortRestricted, 1)])).map_err(|e| step(1, "build the lab", e))?;
        lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
        let me = match (server, client) {
            (Impl::Shipworm(b), _) | (_, Impl::Shipworm(b)) => Impl::Shipworm(b.clone()),
            _ => return err("no shipworm binary to run the host-specific relay"),
        };
        lab.start_host_relay(&me).map_err(|e| step(3, "start the host-specific relay", e))?;
        let rly = lab.ns("rly");
        let filter = "table inet lab_echo_filter {\n  chain input { type filter hook input priority 0; icmpv6 type echo-request drop; }\n}\n";
        if filtered {
            crate::netns::exec_input(&rly, &["nft", "-f", "-"], Some(filter))
                .map_err(|e| step(3, "filter echo requests", e))?;
        }
        lab.start_client(0, client).map_err(|e| step(4, "start the client", e))?;
        lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| step(4, "qualify the client", e))?;
        let ns = lab.clients[0].ns.clone();
        let t = traffic::tcp_transfer(&ns, &rly, crate::RELAY_V6, 100_000, Duration::from_secs(12))
            .and_then(check_transfer)
            .map_err(|e| step(5, "TCP client → the host-specific relay's host", e))?;
        Ok((lab, t))
    }
}
