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

mod applications;
mod mobility;
mod peer_to_peer;
mod relays;
pub mod windows_like;

pub use applications::*;
pub use mobility::*;
pub use peer_to_peer::*;
pub use relays::*;

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
