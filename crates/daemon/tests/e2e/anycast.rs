//! Anycast relays (RFC 4380 §5.4): two relays announce 2001::/32 by BGP to the native
//! side's router, each through its own BIRD with BFD; the router prefers relay A. A
//! native host and a Teredo client exchange echoes every 20 ms through A; A dies or
//! stops, and each case tells how long traffic took to come back through B in each
//! direction, from the moment A went.

use super::{Case, Expect, Failed};
use nix::sys::signal::Signal;
use shipworm_lab::anycast::{Health, Place};
use shipworm_lab::traffic::{echo_requests_heard, ping_stream_from, stream_ident, Echo};
use shipworm_lab::{Impl, Lab, LabSpec, NatKind, HOST6_V6};
use std::path::Path;
use std::time::{Duration, Instant};

/// Echoes every 20 ms; relay A goes 1.5 s into the stream, which lasts 5 s.
const INTERVAL: Duration = Duration::from_millis(20);
const BEFORE: Duration = Duration::from_millis(1500);
const STREAM: Duration = Duration::from_secs(5);

/// A running echo stream and its listener at the other end.
type Streams = (
    std::thread::JoinHandle<shipworm_lab::Result<Vec<Echo>>>,
    std::thread::JoinHandle<shipworm_lab::Result<Vec<(u16, Duration)>>>,
);

/// Which packets of a stream arrived (by sequence number), and when.
type Arrivals = Vec<(usize, Duration)>;

/// How relay A goes.
#[derive(Clone, Copy, PartialEq)]
enum End {
    /// The relay is killed (SIGKILL, every process of it): its interface goes, and its
    /// BIRD withdraws the route bound to it.
    Killed,
    /// The relay is stopped (SIGTERM): it withdraws first, then drains.
    Stopped,
    /// The relay host is cut off (its link goes down): nothing is withdrawn, the router
    /// notices through BFD.
    CutOff,
}

/// Who sends the echo requests.
#[derive(Clone, Copy, PartialEq)]
enum Caller {
    /// The native host pings the client: its requests are the native → client traffic.
    Native,
    /// The client pings the native host: only its own traffic can tell it A is gone.
    Client,
}

/// One direction's packets across relay A's end (times from the stream's start).
struct Direction {
    /// From the end to the first arrival of a packet sent after it.
    moved: Option<Duration>,
    /// The longest time without an arrival, from the last one before the end on.
    silence: Option<Duration>,
    /// Packets sent after the end, and those of them that never arrived.
    sent: usize,
    lost: usize,
}

impl Direction {
    /// From when each packet was sent and when (by sequence number) those that crossed
    /// arrived, relay A having gone at `end`.
    fn across(sent: &[Duration], arrivals: &[(usize, Duration)], end: Duration) -> Direction {
        let arrival = |seq: usize| arrivals.iter().find(|(s, _)| *s == seq).map(|(_, at)| *at);
        let after: Vec<usize> = (0..sent.len()).filter(|&i| sent[i] >= end).collect();
        let moved = after.iter().filter_map(|&i| arrival(i)).min().map(|at| at - end);
        let mut times: Vec<Duration> = arrivals.iter().map(|(_, at)| *at).collect();
        times.sort();
        let from = times.iter().rposition(|&at| at <= end).unwrap_or(0);
        let silence = moved.and(times[from..].windows(2).map(|w| w[1] - w[0]).max());
        let lost = after.iter().filter(|&&i| arrival(i).is_none()).count();
        Direction { moved, silence, sent: after.len(), lost }
    }

    fn within(&self, d: Duration) -> bool {
        self.moved.is_some_and(|m| m < d) && self.silence.is_some_and(|s| s < d)
    }

    fn describe(&self, way: &str) -> String {
        format!(
            "{way}: traffic moved in {} (longest silence {}, {} of {} lost)",
            ms(self.moved),
            ms(self.silence),
            self.lost,
            self.sent
        )
    }
}

/// A figure in milliseconds, or "never" (within the stream).
fn ms(d: Option<Duration>) -> String {
    d.map_or("never".to_string(), |d| format!("{} ms", d.as_millis()))
}

/// How traffic fared across relay A's end, each way.
struct Moved {
    native_to_client: Direction,
    client_to_native: Direction,
    /// The daemons' last words, for a failure's report.
    logs: String,
    /// How long after relay A's end the router stopped routing through it.
    rerouted: Option<Duration>,
}

/// Relays A and B (`relays`, each with BIRD health as it can) announce through the
/// router; echoes flow through A; A ends as `end_by` says 1.5 s into the stream.
fn failover(me: &Path, sc: &Scenario) -> Result<(Moved, String), Failed> {
    let (relays, client, end_by, caller) = (&sc.relays, &sc.client, sc.end_by, sc.caller);
    let ship = Impl::Shipworm(me.to_path_buf());
    let spec = LabSpec { anycast: true, anycast_v4: sc.shared_v4, ..LabSpec::nats(vec![(sc.nat, 1)]) };
    let mut lab = Lab::build(&spec).map_err(|e| e.to_string())?;
    let rtr = lab.start_router_bird().map_err(|e| Failed::at(1, format!("step 1 (the router's BIRD): {e}")))?;
    for (place, imp) in [(Place::A, &relays.0), (Place::B, &relays.1)] {
        let health = if matches!(imp, Impl::Miredo) { Health::Interface } else { Health::InterfaceAndControl };
        let ctl = lab
            .start_relay_bird(place, health)
            .map_err(|e| Failed::at(1, format!("step 1 (BIRD at relay {place:?}): {e}")))?;
        let extra = match imp {
            // With a shared address, its protocol goes with the prefix's.
            Impl::Shipworm(_) if sc.shared_v4 => {
                format!("BirdSocket {}\nBirdProtocol teredo teredo4\nDrainTime 1\n", ctl.display())
            }
            Impl::Shipworm(_) => format!("BirdSocket {}\nDrainTime 1\n", ctl.display()),
            Impl::Miredo => String::new(),
        };
        if place == Place::A {
            lab.start_server(&ship).map_err(|e| Failed::at(1, format!("step 1 (server): {e}")))?;
        }
        lab.start_relay_at(place, imp, &extra).map_err(|e| Failed::at(1, format!("step 1 (relay {place:?}): {e}")))?;
    }
    lab.start_client(0, client).map_err(|e| e.to_string())?;
    let client = lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| Failed::at(1, format!("step 1: {e}")))?;
    lab.wait_anycast(&rtr, Place::A, &[Place::B], Duration::from_secs(20))
        .map_err(|e| Failed::at(2, format!("step 2: {e}")))?;

    let (h6, c) = (lab.ns("h6"), lab.clients[0].ns.clone());
    // One stream each way (the native host's only when it calls), each heard at the
    // other end: one-way arrivals.
    let start = Instant::now() + Duration::from_millis(100);
    let listen = STREAM + Duration::from_millis(600);
    let (to_client, to_native) = (stream_ident(), stream_ident() ^ 0x0101);
    let stream = |from: &str, to_ns: &str, dst, ident| {
        let (from, to_ns) = (from.to_string(), to_ns.to_string());
        let heard = std::thread::spawn(move || echo_requests_heard(&to_ns, ident, listen, start));
        let pings = std::thread::spawn(move || ping_stream_from(&from, dst, INTERVAL, STREAM, start, ident));
        (pings, heard)
    };
    let native_stream = (caller == Caller::Native).then(|| stream(&h6, &c, client, to_client));
    let client_stream = stream(&c, &h6, HOST6_V6, to_native);
    std::thread::sleep((start + BEFORE).saturating_duration_since(Instant::now()));
    let through_a = lab.anycast_relay();
    let ending = start.elapsed();
    match end_by {
        // Miredo's relay is two processes: both go.
        End::Killed => lab.signal_peer_tree(Place::A.daemon(), Signal::SIGKILL).map_err(|e| e.to_string())?,
        End::Stopped => lab.signal_peer(Place::A.daemon(), Signal::SIGTERM).map_err(|e| e.to_string())?,
        End::CutOff => {
            shipworm_lab::netns::ip(&["-n", &lab.ns(Place::A.short()), "link", "set", "eth0", "down"])
                .map_err(|e| e.to_string())?;
        }
    }
    // Relay A is gone (or going) once the call returns: whatever is sent from here on
    // must find B.
    let end = start.elapsed();
    let ending = end - ending;
    // When the router stopped routing through A.
    let mut rerouted = None;
    while start.elapsed() < STREAM {
        if rerouted.is_none() && lab.anycast_relay() != Some(Place::A) {
            rerouted = Some(start.elapsed() - end);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let join = |(pings, heard): Streams| -> Result<(Vec<Echo>, Arrivals), String> {
        let echoes = pings.join().map_err(|_| "ping thread panicked")?.map_err(|e| e.to_string())?;
        let heard = heard.join().map_err(|_| "listening thread panicked")?.map_err(|e| e.to_string())?;
        Ok((echoes, heard.into_iter().map(|(seq, at)| (usize::from(seq), at)).collect()))
    };
    let sent = |echoes: &[Echo]| echoes.iter().map(|e| e.sent).collect::<Vec<_>>();
    let (client_echoes, client_heard) = join(client_stream)?;
    let client_to_native = Direction::across(&sent(&client_echoes), &client_heard, end);
    let native_to_client = match native_stream {
        Some(st) => {
            let (echoes, heard) = join(st)?;
            Direction::across(&sent(&echoes), &heard, end)
        }
        // Only the client calls: the native side's traffic is the replies.
        None => {
            let replies: Vec<(usize, Duration)> =
                client_echoes.iter().enumerate().filter_map(|(i, e)| e.rtt.map(|r| (i, e.sent + r))).collect();
            Direction::across(&sent(&client_echoes), &replies, end)
        }
    };
    let before: Vec<&Echo> = client_echoes.iter().filter(|e| e.sent + Duration::from_millis(200) < end).collect();
    let answered = before.iter().filter(|e| e.rtt.is_some()).count();
    if through_a != Some(Place::A) || answered + 2 < before.len() {
        return Err(Failed::at(3, format!(
            "step 3: before relay A went, the router routed through {through_a:?} and {answered} of {} echoes were answered",
            before.len()
        )));
    }
    if lab.anycast_relay() != Some(Place::B) {
        let routes = shipworm_lab::bird::birdc(&rtr, &["show", "route", "2001::/32", "all"]).unwrap_or_default();
        let a_left = lab.exited(Place::A.daemon()).map_or("still running".to_string(), |s| s.to_string());
        return Err(Failed::at(
            4,
            format!(
                "step 4: the router routes through {:?}, not relay B (relay A {a_left}):\n{routes}",
                lab.anycast_relay()
            ),
        ));
    }
    let how = match lab.client_status(0) {
        Some(st) => format!(
            "{}rerouted {} after; client: {} silent re-test(s), {} first contact(s)",
            if sc.shared_v4 { "one relay address; " } else { "" },
            ms(rerouted),
            st["counters"]["silent_retests"],
            st["counters"]["first_contacts"]
        ),
        None => format!("rerouted {} after", ms(rerouted)),
    };
    let a_ns = lab.ns(Place::A.short());
    let a_link = shipworm_lab::netns::exec(&a_ns, &["ip", "-br", "link", "show"]).unwrap_or_default();
    let logs = format!(
        "ended at {end:?} (the end took {ending:?})\nrelay A's host's links now:\n{a_link}\nrelay A:\n{}\nrelay B:\n{}\nclient:\n{}\nserver:\n{}",
        lab.log_tail(Place::A.daemon(), 6),
        lab.log_tail(Place::B.daemon(), 8),
        lab.log_tail("client0", 8),
        lab.log_tail("server", 4)
    );
    Ok((Moved { native_to_client, client_to_native, logs, rerouted }, how))
}

fn report(m: &Moved, how: &str) -> String {
    format!(
        "{}; {}; {how}",
        m.native_to_client.describe("native → client"),
        m.client_to_native.describe("client → native")
    )
}

/// What a case must show to pass.
#[derive(Clone, Copy)]
enum Bar {
    /// Native → client traffic back within this long, and never silent as long.
    NativeWithin(Duration),
    /// Client → native traffic back within this long, and never silent as long.
    ClientWithin(Duration),
    /// Client → native traffic back within this long of the router's move to relay B,
    /// the move within a second: for a client that only follows routing (Miredo's), whose
    /// packets find B when the route does. The lab's routing takes 50 to 300 ms to move
    /// (seen over eight suites), so a bar from relay A's end judged the lab's BIRD, not
    /// the relay: it failed in 2 of them at 294 and 297 ms, 276 ms of it the route.
    ClientAfterReroute(Duration),
    /// Not one packet lost either way.
    NothingLost,
}

impl Bar {
    fn met(self, m: &Moved) -> bool {
        match self {
            Bar::NativeWithin(d) => m.native_to_client.within(d),
            Bar::ClientWithin(d) => m.client_to_native.within(d),
            Bar::ClientAfterReroute(d) => m.rerouted.is_some_and(|r| {
                r < Duration::from_secs(1) && m.client_to_native.moved.is_some_and(|moved| moved.saturating_sub(r) < d)
            }),
            Bar::NothingLost => [&m.native_to_client, &m.client_to_native].iter().all(|d| d.lost == 0 && d.sent > 0),
        }
    }
}

/// One anycast case.
struct Scenario {
    name: String,
    relays: (Impl, Impl),
    client: Impl,
    end_by: End,
    caller: Caller,
    bar: Bar,
    /// The client's NAT.
    nat: NatKind,
    /// The relays share an IPv4 service address (clients see one relay endpoint).
    shared_v4: bool,
}

/// The anycast cases.
pub fn cases(me: &Path) -> Vec<Case> {
    let ship = Impl::Shipworm(me.to_path_buf());
    let second = Duration::from_secs(1);
    let quarter = Duration::from_millis(250);
    let native = "the native host pings the client";
    let mut table = Vec::new();
    let mut case = |name: String, relays: (Impl, Impl), client: Impl, end_by, caller, bar| {
        table.push(Scenario {
            name,
            relays,
            client,
            end_by,
            caller,
            bar,
            nat: NatKind::PortRestricted,
            shared_v4: false,
        })
    };
    // The native host pings the client (the issue's case): its requests must come back
    // within a second, through B, whichever relays and whichever client. Relay B's first
    // packet to the client is cold: its bubble through the server, answered at its origin.
    let (m, s) = (Impl::Miredo, ship.clone());
    for (relays, client) in [
        ((s.clone(), s.clone()), s.clone()),
        ((m.clone(), s.clone()), s.clone()),
        ((s.clone(), m.clone()), s.clone()),
        ((s.clone(), s.clone()), m.clone()),
    ] {
        let name = format!(
            "relay A ({}) killed, relay B ({}), {native} ({client}); native → client within 250 ms",
            relays.0, relays.1
        );
        case(name, relays, client, End::Killed, Caller::Native, Bar::NativeWithin(quarter));
    }
    let both = (ship.clone(), ship.clone());
    // The client pings: nothing comes back through B until the client's own traffic
    // finds it (the native host answers only what reaches it). The client tests the
    // silent host again after a second and follows the reply to B.
    for client in [ship.clone(), Impl::Miredo] {
        case(
            format!(
                "relay A (shipworm) killed, the client ({client}) pings the native host; client → native within 2 s"
            ),
            both.clone(),
            client,
            End::Killed,
            Caller::Client,
            Bar::ClientWithin(2 * second),
        );
    }
    // The relay host is cut off: BFD (three missed 50-ms hellos) ends the BGP session.
    case(
        format!("relay host A cut off (BFD), {native}; native → client within 250 ms"),
        both.clone(),
        ship.clone(),
        End::CutOff,
        Caller::Native,
        Bar::NativeWithin(quarter),
    );
    // A clean stop: the relay withdraws first and forwards while routing moves.
    case(
        format!("relay A (shipworm) stopped cleanly, {native}; no echo lost"),
        both.clone(),
        ship.clone(),
        End::Stopped,
        Caller::Native,
        Bar::NothingLost,
    );
    // The relays share their IPv4 address too: the client sends to one relay endpoint,
    // which routing moves to B with the prefix; B takes the client's packets by the
    // mapping its address embeds, or, behind a symmetric NAT, holds them until a
    // nonce-carrying bubble exchange proves the client's port.
    let miredo_b = (ship.clone(), Impl::Miredo);
    for (relays, client, nat, end_by, caller) in [
        (&both, &ship, NatKind::PortRestricted, End::Killed, Caller::Client),
        (&both, &ship, NatKind::Symmetric, End::Killed, Caller::Client),
        (&both, &Impl::Miredo, NatKind::PortRestricted, End::Killed, Caller::Client),
        (&both, &ship, NatKind::PortRestricted, End::Killed, Caller::Native),
        (&miredo_b, &ship, NatKind::PortRestricted, End::Killed, Caller::Client),
        (&both, &ship, NatKind::PortRestricted, End::CutOff, Caller::Client),
        (&both, &ship, NatKind::PortRestricted, End::Stopped, Caller::Client),
    ] {
        let who = match caller {
            Caller::Client => format!("the client ({client}, {nat}) pings the native host"),
            Caller::Native => format!("{native} ({client}, {nat})"),
        };
        let way = if caller == Caller::Client { "client → native" } else { "native → client" };
        let (how, bar, within) = match (end_by, caller) {
            (End::Stopped, _) => ("stopped cleanly", Bar::NothingLost, "no echo lost".to_string()),
            (End::CutOff, _) => ("cut off (BFD)", Bar::ClientWithin(quarter), format!("{way} within 250 ms")),
            (End::Killed, Caller::Client) if matches!(client, Impl::Miredo) => {
                ("killed", Bar::ClientAfterReroute(quarter), format!("{way} within 250 ms of the route's move"))
            }
            (End::Killed, Caller::Client) => ("killed", Bar::ClientWithin(quarter), format!("{way} within 250 ms")),
            (End::Killed, Caller::Native) => ("killed", Bar::NativeWithin(quarter), format!("{way} within 250 ms")),
        };
        table.push(Scenario {
            name: format!("one relay address: relay A ({}) {how}, relay B ({}), {who}; {within}", relays.0, relays.1),
            relays: relays.clone(),
            client: client.clone(),
            end_by,
            caller,
            bar,
            nat,
            shared_v4: true,
        });
    }
    table
        .into_iter()
        .map(|sc| {
            let me = me.to_path_buf();
            Case {
                waits: false,
                name: format!("anycast relays: {}", sc.name),
                expect: match (&sc.client, sc.caller, sc.shared_v4) {
                    (_, Caller::Client, true) if matches!(sc.relays.1, Impl::Miredo) => Expect::Fail(
                        5,
                        "Miredo's relay takes a client's packets only once it knows the client (its own bubble exchange, which a native packet starts): the client's own traffic is dropped until its one-second silent re-test brings the native host's reply through it",
                    ),
                    (Impl::Miredo, Caller::Client, false) => Expect::PassOrFail(
                        5,
                        "Miredo's client sends to the relay it trusted until the peer entry expires, 30 s after the host's last packet; only the native host's own packets, arriving through relay B, may make it test the host again, and whether that comes within the 2 s bar is its timing",
                    ),
                    _ => Expect::Pass,
                },
                run: Box::new(move || {
                    let (m, how) = failover(&me, &sc)?;
                    let text = report(&m, &how);
                    if sc.bar.met(&m) {
                        Ok(text)
                    } else {
                        Err(Failed::at(5, format!("step 5: {text}\n{}", m.logs)))
                    }
                }),
            }
        })
        .collect()
}
