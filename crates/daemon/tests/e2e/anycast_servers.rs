//! Anycast Teredo servers (#42, 2): two server hosts both serve the server addresses
//! (192.0.2.1 and .2), each announcing them through its BIRD while its server says it
//! serves; the router prefers server A. Server A goes — its process killed (its BIRD
//! link withdraws on its behalf) or its host cut off (BFD) — and the clients must not
//! notice: their refreshes are answered by server B with the same prefix, so their
//! addresses stay; a native host still reaches them; two clients that never spoke meet
//! through B; and a client started then qualifies within a second.

use super::{Case, Expect, Failed};
use nix::sys::signal::Signal;
use shipworm_lab::anycast::{Health, Place, ServerPlace};
use shipworm_lab::traffic::ping;
use shipworm_lab::{Impl, Lab, LabSpec, NatKind};
use std::path::Path;
use std::time::{Duration, Instant};

/// How server A goes.
#[derive(Clone, Copy)]
enum End {
    /// Its server process is killed (SIGKILL): its BIRD link sees it go and withdraws.
    Killed,
    /// Its host's link goes down: the router notices through BFD.
    CutOff,
}

/// The clients' refresh interval in the case (RFC 6081 §5.1.1's `RefreshInterval`):
/// short, so that each refreshes with server B within the case.
const REFRESH: u64 = 5;

fn run(me: &Path, end: End, client: &Impl, nat: NatKind) -> Result<String, Failed> {
    let ship = Impl::Shipworm(me.to_path_buf());
    // Client 0 behind the NAT kind of the case; client 1 behind a port-restricted NAT
    // (a full-cone one for Miredo's: two of its clients behind port-restricted NATs do
    // not reach each other in this lab, anycast or not); the client started after the
    // failover behind a full-cone NAT, which every kind reaches (RFC 6081 §3).
    let second = if matches!(client, Impl::Miredo) { NatKind::FullCone } else { NatKind::PortRestricted };
    let nats = vec![(nat, 1), (second, 1), (NatKind::FullCone, 1)];
    let spec = LabSpec { anycast: true, anycast_servers: true, ..LabSpec::nats(nats) };
    let step1 = |e: String| Failed::at(1, format!("step 1: {e}"));
    let mut lab = Lab::build(&spec).map_err(|e| step1(e.to_string()))?;
    let rtr = lab.start_router_bird().map_err(|e| step1(format!("the router's BIRD: {e}")))?;
    for place in [ServerPlace::A, ServerPlace::B] {
        let ctl = lab.start_server_bird(place).map_err(|e| step1(format!("BIRD at server {place:?}: {e}")))?;
        let extra = format!("BirdSocket {}\nBirdProtocol teredo_server\nDrainTime 1\n", ctl.display());
        lab.start_server_at(place, &ship, &extra).map_err(|e| step1(format!("server {place:?}: {e}")))?;
    }
    let ctl = lab.start_relay_bird(Place::A, Health::InterfaceAndControl).map_err(|e| step1(e.to_string()))?;
    lab.start_relay_at(Place::A, &ship, &format!("BirdSocket {}\n", ctl.display()))
        .map_err(|e| step1(e.to_string()))?;
    let routed = Instant::now() + Duration::from_secs(20);
    while lab.anycast_server() != Some(ServerPlace::A) || lab.anycast_relay() != Some(Place::A) {
        if Instant::now() > routed {
            let known = shipworm_lab::bird::birdc(&rtr, &["show", "protocols"]).unwrap_or_default();
            return Err(Failed::at(2, format!("step 2: the router routes neither server A nor the relay:\n{known}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Miredo's client refreshes every 30 s (its interval is not configurable).
    let (refresh, refresh_every) = match client {
        Impl::Shipworm(_) => (format!("RefreshInterval {REFRESH}\n"), REFRESH),
        Impl::Miredo => (String::new(), 30),
    };
    let mut before = Vec::new();
    for c in 0..2 {
        lab.start_client_with(c, client, &refresh).map_err(|e| e.to_string())?;
        let q = lab.wait_qualified(c, Duration::from_secs(20)).map_err(|e| {
            let routes = shipworm_lab::netns::exec(&lab.ns("rtr"), &["ip", "-4", "route"]).unwrap_or_default();
            Failed::at(
                2,
                format!("step 2: {e}\nthe router's routes:\n{routes}\nserver A:\n{}", lab.log_tail("server", 8)),
            )
        })?;
        before.push(q);
    }
    let h6 = lab.ns("h6");
    let pinged = |lab: &Lab, from: &str, to, what: &str, step: u32| -> Result<(), Failed> {
        let r = ping(from, to, 5, 5).map_err(|e| e.to_string())?;
        if r.received == 0 {
            return Err(Failed::at(
                step,
                format!("step {step}: {what}: no echo answered\n{}", lab.log_tail("client0", 6)),
            ));
        }
        Ok(())
    };
    pinged(&lab, &h6, before[0], "native host → client 0 through server A's days", 2)?;
    // Advertisements taken and addresses configured so far, by client.
    let counts = |lab: &Lab, c: usize| {
        lab.client_status(c).map_or((0, 0), |st| {
            let n = |k: &str| st["counters"][k].as_u64().unwrap_or(0);
            (n("router_advertisements"), n("address_changes"))
        })
    };
    let counted: Vec<(u64, u64)> = (0..2).map(|c| counts(&lab, c)).collect();

    // Server A goes.
    let t0 = Instant::now();
    match end {
        End::Killed => lab.signal_peer(ServerPlace::A.daemon(), Signal::SIGKILL).map_err(|e| e.to_string())?,
        End::CutOff => shipworm_lab::netns::ip(&["-n", &lab.ns(ServerPlace::A.short()), "link", "set", "eth0", "down"])
            .map(drop)
            .map_err(|e| e.to_string())?,
    }
    let mut moved = None;
    while t0.elapsed() < Duration::from_secs(5) {
        if lab.anycast_server() == Some(ServerPlace::B) {
            moved = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let moved = moved.ok_or_else(|| {
        let known = shipworm_lab::bird::birdc(&rtr, &["show", "route", "table", "master4"]).unwrap_or_default();
        Failed::at(
            3,
            format!(
                "step 3: the router still routes the server addresses to {:?}:\n{known}\n{}",
                lab.anycast_server(),
                lab.log_tail("server", 6)
            ),
        )
    })?;

    // A client started now qualifies with server B, within a second.
    let t1 = Instant::now();
    lab.start_client_with(2, client, &refresh).map_err(|e| e.to_string())?;
    lab.wait_qualified(2, Duration::from_secs(10)).map_err(|e| Failed::at(4, format!("step 4: {e}")))?;
    let qualified = t1.elapsed();
    if qualified > Duration::from_secs(1) {
        return Err(Failed::at(4, format!("step 4: a new client qualified in {} ms", qualified.as_millis())));
    }
    // Two clients that never spoke meet through server B (their first bubbles go
    // through it), and the others refresh with it and keep their addresses.
    let c2 = lab.clients[2].ns.clone();
    pinged(&lab, &c2, before[0], "new client → client 0 (bubbles through server B)", 5)?;
    std::thread::sleep(Duration::from_secs(refresh_every + 1));
    for (c, was) in before.iter().enumerate() {
        let now = lab.wait_qualified(c, Duration::from_secs(5)).map_err(|e| Failed::at(6, format!("step 6: {e}")))?;
        if now != *was {
            return Err(Failed::at(6, format!("step 6: client {c}'s address changed: {was} → {now}")));
        }
    }
    let mut refreshed = Vec::new();
    for (c, &(ads, changes)) in counted.iter().enumerate() {
        let (ads_now, changes_now) = counts(&lab, c);
        if matches!(client, Impl::Miredo) {
            continue; // no status socket: its address, checked above, is the test
        }
        if ads_now <= ads || changes_now != changes {
            return Err(Failed::at(
                6,
                format!(
                    "step 6: client {c}: advertisements {ads} → {ads_now} (a refresh answered by server B adds one), \
                 address changes {changes} → {changes_now}\n{}",
                    lab.log_tail(&format!("client{c}"), 8)
                ),
            ));
        }
        refreshed.push((ads_now - ads).to_string());
    }
    pinged(&lab, &h6, before[1], "native host → client 1 after the refreshes", 7)?;
    pinged(&lab, &c2, before[1], "new client → client 1 after the refreshes", 7)?;
    pinged(&lab, &h6, before[0], "native host → client 0 after the refreshes", 7)?;
    Ok(format!(
        "routed to server B {} ms after; a new client qualified in {} ms; addresses unchanged {}; native → \
         client, client ↔ client through B",
        moved.as_millis(),
        qualified.as_millis(),
        if refreshed.is_empty() {
            format!("{refresh_every} s on (past a refresh)")
        } else {
            format!("and refreshes answered by B ({} advertisements each)", refreshed.join(", "))
        }
    ))
}

/// The anycast-server cases.
pub fn cases(me: &Path) -> Vec<Case> {
    let ship = Impl::Shipworm(me.to_path_buf());
    let killed = "server A's process killed (its BIRD link withdraws)";
    let mut table: Vec<(End, &str, Impl, NatKind)> =
        [NatKind::FullCone, NatKind::AddressRestricted, NatKind::PortRestricted, NatKind::Symmetric]
            .into_iter()
            .map(|nat| (End::Killed, killed, ship.clone(), nat))
            .collect();
    table.push((End::CutOff, "server host A cut off (BFD)", ship, NatKind::PortRestricted));
    table.push((End::Killed, killed, Impl::Miredo, NatKind::FullCone));
    table
        .into_iter()
        .map(|(end, how, client, nat)| {
            let me = me.to_path_buf();
            Case {
                // Miredo's client: most of the case is its 30 s refresh.
                waits: matches!(client, Impl::Miredo),
                name: format!(
                    "anycast servers: {how}, client {client} ({nat} NAT); addresses unchanged, traffic flows, \
                     a new client qualifies within 1 s"
                ),
                expect: Expect::Pass,
                run: Box::new(move || run(&me, end, &client, nat)),
            }
        })
        .collect()
}
