//! Running it: the multi-worker relay, mobility, `shipworm status`, metrics, BIRD,
//! systemd notify, hook scripts, secure qualification, server failover, expiry and late DNS.

use super::*;

/// The cases of this topic.
pub fn cases(me: &Path) -> Vec<Case> {
    let single: [Single; 10] = [
        ("relay RelayThreads 2: multi-queue TUN, a second relay refused", false, Expect::Pass, multi_queue_relay_refuses_a_second),
        ("status of server, relay and client", false, Expect::Pass, status_of_every_role),
        ("metrics of server, relay and client", false, Expect::Pass, metrics_of_every_role),
        ("relay and BIRD: a second SIGTERM cuts a 30 s drain short", false, Expect::Pass, second_sigterm_cuts_the_drain),
        ("relay and BIRD: announced once serving and again after BIRD restarts, withdrawn before a clean stop, drained", false, Expect::Pass, bird_announces_withdraws_and_drains),
        ("systemd notify: ready, status, watchdog, stopping for every role", false, Expect::Pass, systemd_notify_for_every_role),
        ("client hook script and route metric", false, Expect::Pass, client_hook_and_route_metric),
        ("secure qualification", false, Expect::Pass, secure_qualification),
        ("server failover (RefreshInterval 10)", true, Expect::Pass, server_failover),
        ("server name resolves late", false, Expect::Pass, server_name_resolves_late),
    ];
    let mut cases: Vec<Case> = single.into_iter().map(|c| one(me, c)).collect();
    let shipworm = Impl::Shipworm(me.to_path_buf());
    // Mobility: the client changes networks under a running ping.
    for (from, to) in [(NatKind::PortRestricted, NatKind::FullCone), (NatKind::FullCone, NatKind::AddressRestricted)] {
        let me = shipworm.clone();
        cases.push(Case {
            waits: false,
            name: format!("handoff {from} → {to}"),
            expect: Expect::Pass,
            run: Box::new(move || handoff(&me, from, to)),
        });
    }
    // Expiry: the native host speaks first, both sides go quiet past the peers'
    // validity, and it speaks first again: shipworm's relay then waits for a client it
    // trusted (out of its kernel map until the client answers), Miredo's client too.
    // Long waits: they run beside the suite's jobs.
    let pairs: Vec<(Impl, Impl)> = [shipworm.clone(), Impl::Miredo]
        .iter()
        .map(|r| (r.clone(), shipworm.clone()))
        .chain(std::iter::once((shipworm.clone(), Impl::Miredo)))
        .collect();
    for (relay, client) in pairs {
        let me = shipworm.clone();
        cases.push(Case {
            waits: true,
            name: format!("native first again after 35 s idle relay={relay} client={client}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, (a, b)) =
                    scenario::run_native_first_after_idle(&me, &relay, &client, std::time::Duration::from_secs(35))
                        .map_err(Failed::from)?;
                Ok(format!("answered cold in {a:.1} ms, and again after the idle time in {b:.1} ms"))
            }),
        });
    }
    cases
}

/// Mobility: the client moves from a network behind `from` to one behind `to` under a
/// running ping.
fn handoff(me: &Impl, from: NatKind, to: NatKind) -> Result<String, Failed> {
    let (lab, h) = scenario::run_handoff(me, [from, to], &mut |_| {}).map_err(Failed::from)?;
    // On the new network the client's kernel path carries its traffic again:
    // the programs were given its new local and Teredo addresses.
    let moved =
        || lab.client_status(0).and_then(|s| s["counters"]["kernel_path_packets"]["decap"]["forwarded"].as_u64());
    let before = moved().ok_or(Failed::at(9, "step 9: the client's status socket did not answer"))?;
    let pings = shipworm_lab::traffic::ping(&lab.clients[0].ns, shipworm_lab::HOST6_V6, 20, 2)
        .map_err(|e| Failed::at(9, format!("step 9: ping6: {e}")))?;
    let after = moved().unwrap_or(0) - before;
    if after < 19 {
        return Err(Failed::at(
            9,
            format!(
                "step 9: after the move, 20 pings ({pings}): only {after} replies moved by the client's kernel path"
            ),
        ));
    }
    Ok(format!(
        "{} → {}: new address after {:.0} ms, longest gap between echo replies {:.0} ms ({} + {} answered, every 20 ms); then {after} of 20 replies moved by the client's kernel path",
        h.old,
        h.new,
        h.address_after.as_secs_f64() * 1000.0,
        h.traffic_gap.as_secs_f64() * 1000.0,
        h.answered.0,
        h.answered.1
    ))
}

/// The multi-worker relay owns its interface: a second daemon is refused, the first
/// keeps its queues (RelayThreads 2 forces the multi-queue path on any machine).
fn multi_queue_relay_refuses_a_second(me: &Path) -> Result<String, Failed> {
    let me = me.to_path_buf();
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![])).map_err(|e| e.to_string())?;
    lab.start_relay_with(&Impl::Shipworm(me.clone()), "RelayThreads 2\n").map_err(|e| e.to_string())?;
    let ns = lab.ns("rly");
    let queues = |lab: &shipworm_lab::Lab| {
        shipworm_lab::netns::exec(&ns, &["ip", "-d", "link", "show", "teredo"])
            .map(|t| t.contains("multi_queue numqueues 2 "))
            .unwrap_or(false)
            .then_some(())
            .ok_or_else(|| format!("teredo is not a 2-queue TUN; relay log:\n{}", lab.log_tail("relay", 10)))
    };
    queues(&lab)?;
    let conf = lab.dir().join("relay.conf").display().to_string();
    let bin = me.display().to_string();
    // Bounded: a second relay that wrongly starts is stopped after 5 s.
    let second = shipworm_lab::netns::exec(&ns, &["timeout", "5", &bin, "relay", "-c", &conf]);
    match second {
        Err(e) if e.to_string().contains("exists and is in use") => {}
        Err(e) => return Err(format!("second relay failed, but not because the interface is taken: {e}").into()),
        Ok(_) => return Err("a second relay started on the same interface".into()),
    }
    queues(&lab)?;
    Ok("second relay refused: interface in use; the first keeps 2 queues".into())
}

/// `shipworm status` for every role: the counters a user reads move with traffic.
fn status_of_every_role(me: &Path) -> Result<String, Failed> {
    let bin = me.display().to_string();
    let me = Impl::Shipworm(me.to_path_buf());
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
        .map_err(|e| e.to_string())?;
    lab.start_server(&me).map_err(|e| e.to_string())?;
    lab.start_relay(&me).map_err(|e| e.to_string())?;
    lab.start_client(0, &me).map_err(|e| e.to_string())?;
    let addr = lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
    let status = |name: &str, json: bool| -> Result<String, String> {
        let socket = lab.daemon_socket(name).display().to_string();
        let mut args = vec![bin.as_str(), "status", "--socket", &socket];
        if json {
            args.push("--json");
        }
        let out = std::process::Command::new(args[0]).args(&args[1..]).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("shipworm status of {name}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let json = |name: &str| -> Result<serde_json::Value, String> {
        serde_json::from_str(&status(name, true)?).map_err(|e| format!("{name}: {e}"))
    };
    let relay_before = json("relay")?;
    let cns = lab.clients[0].ns.clone();
    let out = shipworm_lab::traffic::ping(&cns, shipworm_lab::HOST6_V6, 5, 3).map_err(|e| e.to_string())?;
    let back = shipworm_lab::traffic::ping(&lab.ns("h6"), addr, 5, 3).map_err(|e| e.to_string())?;
    if out.received == 0 || back.received == 0 {
        return Err(Failed::at(2, format!("step 2: ping {}/5 out, {}/5 back", out.received, back.received)));
    }
    // The relay publishes its workers' counters every tick (250 ms).
    std::thread::sleep(std::time::Duration::from_millis(600));
    let (relay, server, client) = (json("relay")?, json("server")?, json("client0")?);
    // A number, or the sum of the numbers under it (the relay's per worker).
    fn total(v: &serde_json::Value) -> u64 {
        match v {
            serde_json::Value::Object(m) => m.values().map(total).sum(),
            other => other.as_u64().unwrap_or(0),
        }
    }
    let n = |v: &serde_json::Value, path: &[&str]| total(path.iter().fold(v, |v, k| &v[*k]));
    let moved = |k: &str| n(&relay, &["counters", "packets", k]) - n(&relay_before, &["counters", "packets", k]);
    if relay["role"] != "relay" || moved("to_teredo") < 5 || moved("to_ipv6") < 5 || n(&relay, &["peers"]) < 1 {
        return Err(Failed::at(
            3,
            format!("step 3: relay status did not follow the 10 echoes: before {relay_before}, after {relay}"),
        ));
    }
    if server["role"] != "server" || n(&server, &["counters", "router_advertisements"]) < 1 {
        return Err(Failed::at(3, format!("step 3: server status shows no advertisement: {server}")));
    }
    if client["state"] != "qualified" || client["address"] != addr.to_string() {
        return Err(Failed::at(3, format!("step 3: client status: {client}")));
    }
    let text = status("relay", false)? + &status("server", false)?;
    let want_text = [
        "role       relay on teredo",
        "peers      ",
        "data path  ",
        "role       server on 192.0.2.1:3544",
        "  router_advertisements ",
    ];
    for want in want_text {
        if !text.contains(want) {
            return Err(Failed::at(4, format!("step 4: `shipworm status` says no {want:?}:\n{text}")));
        }
    }
    Ok(format!(
        "relay: {} peer(s), +{} to Teredo, +{} to IPv6 over 10 echoes; server: {} RAs, {} forwarded to Teredo; client {}",
        n(&relay, &["peers"]),
        moved("to_teredo"),
        moved("to_ipv6"),
        n(&server, &["counters", "router_advertisements"]),
        n(&server, &["counters", "forwarded", "to_teredo"]),
        client["state"]
    ))
}

/// Prometheus: every role's /metrics (MetricsAddress) names its counters and they move
/// with traffic.
fn metrics_of_every_role(me: &Path) -> Result<String, Failed> {
    let me = Impl::Shipworm(me.to_path_buf());
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
        .map_err(|e| e.to_string())?;
    let extra = "MetricsAddress 127.0.0.1:9544\n";
    lab.start_server_with(&me, extra).map_err(|e| e.to_string())?;
    lab.start_relay_with(&me, extra).map_err(|e| e.to_string())?;
    lab.start_client_with(0, &me, extra).map_err(|e| e.to_string())?;
    let addr = lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
    let (srv, rly, cns) = (lab.ns("srv"), lab.ns("rly"), lab.clients[0].ns.clone());
    // What Prometheus does: GET /metrics on the daemon's namespace's loopback.
    let get = |ns: &str, path: &str| -> Result<String, String> {
        let (ns, path) = (ns.to_string(), path.to_string());
        std::thread::spawn(move || -> Result<String, String> {
            use std::io::{Read, Write};
            shipworm_lab::netns::enter(&ns).map_err(|e| e.to_string())?;
            let mut s = std::net::TcpStream::connect("127.0.0.1:9544").map_err(|e| format!("{ns}: {e}"))?;
            s.set_read_timeout(Some(std::time::Duration::from_secs(5))).map_err(|e| e.to_string())?;
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).map_err(|e| e.to_string())?;
            let mut text = String::new();
            s.read_to_string(&mut text).map_err(|e| e.to_string())?;
            Ok(text)
        })
        .join()
        .map_err(|_| "scrape thread panicked".to_string())?
    };
    // The sum of the samples whose lines start with `series` (a name and the
    // first labels: the relay's packets over all its workers).
    let value = |text: &str, series: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.strip_prefix(series))
            .filter_map(|v| v.rsplit(' ').next()?.trim().parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    // Published every 250 ms.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let before = get(&rly, "/metrics")?;
    let out = shipworm_lab::traffic::ping(&cns, shipworm_lab::HOST6_V6, 5, 3).map_err(|e| e.to_string())?;
    let back = shipworm_lab::traffic::ping(&lab.ns("h6"), addr, 5, 3).map_err(|e| e.to_string())?;
    if out.received == 0 || back.received == 0 {
        return Err(Failed::at(2, format!("step 2: ping {}/5 out, {}/5 back", out.received, back.received)));
    }
    std::thread::sleep(std::time::Duration::from_millis(600));
    let (relay, server, client) = (get(&rly, "/metrics")?, get(&srv, "/metrics")?, get(&cns, "/metrics")?);
    for (who, text) in [("relay", &relay), ("server", &server), ("client", &client)] {
        if !text.starts_with("HTTP/1.1 200 OK") || !text.contains("text/plain; version=0.0.4") {
            return Err(Failed::at(3, format!("step 3: {who}'s /metrics: {}", text.lines().next().unwrap_or(""))));
        }
        if !text.contains(&format!("shipworm_info{{role=\"{who}\"")) {
            return Err(Failed::at(3, format!("step 3: {who} has no shipworm_info")));
        }
        // What a monitoring system keys on: the build, the start, and every
        // drop reason from the start (a reason never seen, at 0).
        for series in [
            "shipworm_build_info{",
            "process_start_time_seconds ",
            "shipworm_dropped_total{reason=\"peer_table_full\"} 0",
        ] {
            if !text.contains(series) {
                return Err(Failed::at(3, format!("step 3: {who}'s /metrics has no {series}")));
            }
        }
    }
    let to_teredo = "shipworm_relay_packets_total{direction=\"to_teredo\",";
    let to_ipv6 = "shipworm_relay_packets_total{direction=\"to_ipv6\",";
    let moved = |series: &str| value(&relay, series).saturating_sub(value(&before, series));
    // An echo of ping's 56 data bytes is a 104-byte IPv6 packet.
    let bytes_ipv6 = "shipworm_relay_bytes_total{direction=\"to_ipv6\",";
    if moved(bytes_ipv6) < 5 * 104 {
        return Err(Failed::at(
            4,
            format!("step 4: relay bytes to IPv6 moved by {} over 5 echoes:\n{relay}", moved(bytes_ipv6)),
        ));
    }
    if moved(to_teredo) < 5 || moved(to_ipv6) < 5 || value(&relay, "shipworm_relay_peers ") < 1 {
        return Err(Failed::at(4, format!("step 4: relay counters did not follow 10 echoes:\n{relay}")));
    }
    if value(&server, "shipworm_server_router_advertisements_total ") < 1 {
        return Err(Failed::at(4, format!("step 4: server sent no RA?\n{server}")));
    }
    // The client's first echo to the native host went through the server (the
    // relay's discovery), and the relay's bubble came back through it: at
    // least one packet forwarded, each at least an IPv6 header's bytes.
    let server_forwarded = value(&server, "shipworm_server_forwarded_total{");
    let server_bytes = value(&server, "shipworm_server_bytes_total{");
    if server_forwarded == 0 || server_bytes < server_forwarded * 40 {
        return Err(Failed::at(
            4,
            format!("step 4: server bytes {server_bytes} for {server_forwarded} forwarded:\n{server}"),
        ));
    }
    let delivered = value(&client, "shipworm_client_packets_total{direction=\"to_host\"}");
    if value(&client, "shipworm_client_bytes_total{direction=\"to_host\"}") < delivered * 104 {
        return Err(Failed::at(4, format!("step 4: client bytes to the host under {delivered} × 104:\n{client}")));
    }
    if value(&client, "shipworm_client_qualified ") != 1 || delivered < 5 {
        return Err(Failed::at(4, format!("step 4: client metrics:\n{client}")));
    }
    let missing = get(&rly, "/")?;
    if !missing.starts_with("HTTP/1.1 404") {
        return Err(Failed::at(5, format!("step 5: GET / answered {}", missing.lines().next().unwrap_or(""))));
    }
    Ok(format!(
        "relay +{} to Teredo, +{} to IPv6 over 10 echoes, {} peer(s); server {} RAs, {} forwarded ({} B); client qualified, {} delivered; GET / → 404",
        moved(to_teredo),
        moved(to_ipv6),
        value(&relay, "shipworm_relay_peers "),
        value(&server, "shipworm_server_router_advertisements_total "),
        server_forwarded,
        server_bytes,
        delivered
    ))
}

/// A second SIGTERM during a long drain stops the relay now, as an operator who
/// insists expects (with the second one ignored it drains on: step 3 fails, seen).
fn second_sigterm_cuts_the_drain(me: &Path) -> Result<String, Failed> {
    let me = Impl::Shipworm(me.to_path_buf());
    use nix::sys::signal::Signal;
    use std::time::Duration;
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![])).map_err(Failed::from)?;
    let bird_conf = "router id 192.0.2.10;\nprotocol device { scan time 10; }\n\
                     protocol static teredo { disabled; ipv6; route 2001::/32 via \"teredo\"; }\n";
    let ctl = lab.start_bird("rly", bird_conf).map_err(Failed::from)?;
    lab.start_relay_with(&me, &format!("BirdSocket {}\nDrainTime 30\n", ctl.display())).map_err(Failed::from)?;
    // Serving (announced): its signal handlers are in place.
    let serving = Instant::now();
    while !shipworm_lab::bird::birdc(&ctl, &["show", "route", "2001::/32", "protocol", "teredo"])
        .is_ok_and(|r| r.contains("2001::/32"))
    {
        if serving.elapsed() > Duration::from_secs(5) {
            return Err(Failed::at(1, format!("step 1: never announced:\n{}", lab.log_tail("relay", 8))));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    lab.signal_peer("relay", Signal::SIGTERM).map_err(Failed::from)?;
    std::thread::sleep(Duration::from_millis(500));
    if lab.exited("relay").is_some() {
        return Err(Failed::at(2, format!("step 2: the relay did not drain:\n{}", lab.log_tail("relay", 8))));
    }
    let again = Instant::now();
    lab.signal_peer("relay", Signal::SIGTERM).map_err(Failed::from)?;
    while lab.exited("relay").is_none() {
        if again.elapsed() > Duration::from_secs(5) {
            return Err(Failed::at(
                3,
                format!("step 3: still draining 5 s after a second SIGTERM:\n{}", lab.log_tail("relay", 8)),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(format!("stopped {} ms after the second SIGTERM (DrainTime 30)", again.elapsed().as_millis()))
}

/// BIRD announces the Teredo prefix for the relay (RFC 4380 §5.4): the relay enables
/// BIRD's protocol once it serves, and on SIGTERM disables it first and forwards for
/// DrainTime while routing moves the traffic elsewhere. The protocol starts disabled in
/// BIRD's configuration, so an announcement proves the relay made it.
fn bird_announces_withdraws_and_drains(me: &Path) -> Result<String, Failed> {
    let me = Impl::Shipworm(me.to_path_buf());
    use nix::sys::signal::Signal;
    use shipworm_lab::bird::birdc;
    use std::time::Duration;
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
        .map_err(|e| e.to_string())?;
    let bird_conf = "router id 192.0.2.10;\nprotocol device { scan time 10; }\n\
                     protocol static teredo { disabled; ipv6; route 2001::/32 via \"teredo\"; }\n";
    let ctl = lab.start_bird("rly", bird_conf).map_err(|e| Failed::at(1, format!("step 1 (BIRD): {e}")))?;
    let announced = |ctl: &std::path::Path| {
        birdc(ctl, &["show", "route", "2001::/32", "protocol", "teredo"]).is_ok_and(|r| r.contains("2001::/32"))
    };
    if announced(&ctl) {
        return Err(Failed::at(1, "step 1: BIRD announces before the relay started"));
    }
    lab.start_server(&me).map_err(|e| e.to_string())?;
    let extra = format!("BirdSocket {}\nDrainTime 2\n", ctl.display());
    lab.start_relay_with(&me, &extra).map_err(|e| e.to_string())?;
    lab.start_client(0, &me).map_err(|e| e.to_string())?;
    let addr = lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| e.to_string())?;
    if !announced(&ctl) {
        return Err(Failed::at(2, format!("step 2: BIRD does not announce 2001::/32:\n{}", lab.log_tail("relay", 10))));
    }
    // #40, 4: the relay itself holds no connection to BIRD (which takes any
    // command); the process that does is its small BIRD link.
    let relay_pid = lab.peer_pid("relay").ok_or("the relay is not running")?;
    let holders = shipworm_lab::bird::connected_to(&lab.ns("rly"), &ctl).map_err(|e| e.to_string())?;
    if holders.is_empty() || holders.contains(&relay_pid) {
        return Err(Failed::at(
            2,
            format!(
                "step 2: connected to BIRD: {holders:?}; the relay (pid {relay_pid}) must not be, its BIRD link must"
            ),
        ));
    }
    // BIRD restarts (`systemctl restart bird`): its protocol starts disabled,
    // as its file says, and the relay's BIRD link connects again and enables
    // it. (Without the reconnection it stays withdrawn: the relay's link held
    // the old connection only.)
    lab.stop_peer("bird-rly");
    let restarted = Instant::now();
    let ctl = lab.start_bird("rly", bird_conf).map_err(|e| Failed::at(2, format!("step 2 (BIRD again): {e}")))?;
    while !announced(&ctl) {
        if restarted.elapsed() > Duration::from_secs(8) {
            return Err(Failed::at(
                2,
                format!("step 2: BIRD restarted and does not announce 2001::/32 again:\n{}", lab.log_tail("relay", 10)),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let again = restarted.elapsed();
    // The native host pings the client every 20 ms through the relay while it stops.
    let h6 = lab.ns("h6");
    let t0 = Instant::now();
    let pings = std::thread::spawn(move || {
        shipworm_lab::traffic::ping_stream(&h6, addr, Duration::from_millis(20), Duration::from_secs(4))
    });
    std::thread::sleep(Duration::from_millis(800));
    let term = t0.elapsed();
    lab.signal_peer("relay", Signal::SIGTERM).map_err(|e| e.to_string())?;
    let (mut withdrawn, mut exited) = (None, None);
    while t0.elapsed() < Duration::from_secs(6) && exited.is_none() {
        if withdrawn.is_none() && !announced(&ctl) {
            withdrawn = Some(t0.elapsed());
        }
        if lab.exited("relay").is_some() {
            exited = Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let echoes = pings.join().map_err(|_| "ping thread panicked".to_string())?.map_err(|e| e.to_string())?;
    let log = lab.log_tail("relay", 8);
    let withdrawn = withdrawn.ok_or(Failed::at(3, format!("step 3: BIRD still announces after SIGTERM:\n{log}")))?;
    let exited =
        exited.ok_or(Failed::at(3, format!("step 3: the relay did not stop within 5 s of SIGTERM:\n{log}")))?;
    if exited < withdrawn || exited - term < Duration::from_millis(1500) {
        return Err(Failed::at(
            3,
            format!(
                "step 3: withdrawn {:?} and exited {:?} after SIGTERM: no drain\n{log}",
                withdrawn - term,
                exited - term
            ),
        ));
    }
    // Echoes sent between the withdrawal and the last 50 ms of the drain (2 s
    // from SIGTERM; then the relay closes, which takes a moment before it
    // exits): the relay still forwarded them (the lab has no other relay to
    // move to).
    let drain_end = term + Duration::from_secs(2);
    let drained: Vec<_> =
        echoes.iter().filter(|e| e.sent > withdrawn && e.sent + Duration::from_millis(50) < drain_end).collect();
    let answered = drained.iter().filter(|e| e.rtt.is_some()).count();
    if drained.is_empty() || answered < drained.len() {
        let lost: Vec<String> = drained
            .iter()
            .filter(|e| e.rtt.is_none())
            .map(|e| format!("{} ms", (drain_end.as_millis() as i64) - (e.sent.as_millis() as i64)))
            .collect();
        return Err(Failed::at(
            4,
            format!(
            "step 4: {answered} of {} echoes answered during the drain (lost: sent {} before the drain's end)\n{log}",
            drained.len(),
            lost.join(", ")
        ),
        ));
    }
    Ok(format!(
        "announced once serving, and again {} ms after BIRD restarted; withdrawn {} ms after SIGTERM, exited {:.1} s after it; {answered} of {} echoes answered during the drain",
        again.as_millis(),
        (withdrawn - term).as_millis(),
        (exited - term).as_secs_f64(),
        drained.len()
    ))
}

/// Run by systemd (Type=notify, WatchdogSec): each role says READY=1 once it serves,
/// feeds the watchdog from its event loop, says what it does (the client: qualified,
/// with its address) and STOPPING=1 on SIGTERM. The service manager is a datagram
/// socket per daemon, as systemd's NOTIFY_SOCKET.
fn systemd_notify_for_every_role(me: &Path) -> Result<String, Failed> {
    let me = Impl::Shipworm(me.to_path_buf());
    use std::os::unix::net::UnixDatagram;
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
        .map_err(|e| e.to_string())?;
    // The daemons end as the service user: their managers' sockets must be
    // writable by it, as systemd's is.
    // Each read as it arrives, as systemd does (a datagram socket's queue holds ten).
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut managers = Vec::new();
    for name in ["server", "relay", "client0"] {
        let path = lab.dir().join(format!("{name}.notify"));
        let sock = UnixDatagram::bind(&path).map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(std::time::Duration::from_millis(50))).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .map_err(|e| e.to_string())?;
        let done = Arc::clone(&done);
        let reader = std::thread::spawn(move || {
            let mut got: Vec<String> = Vec::new();
            let mut buf = [0u8; 1024];
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(n) = sock.recv(&mut buf) {
                    got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                }
            }
            got
        });
        managers.push((name, reader, path));
    }
    lab.set_daemon_env("WATCHDOG_USEC", "1500000");
    let start = Instant::now();
    for (name, _, path) in &managers {
        lab.set_daemon_env("NOTIFY_SOCKET", &path.display().to_string());
        match *name {
            "server" => lab.start_server(&me),
            "relay" => lab.start_relay(&me),
            _ => lab.start_client(0, &me),
        }
        .map_err(|e| e.to_string())?;
    }
    let addr = lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
    // Two watchdog periods' worth of feeding, and the client's status catching up.
    std::thread::sleep(std::time::Duration::from_millis(3200).saturating_sub(start.elapsed()));
    std::thread::sleep(std::time::Duration::from_millis(300));
    for name in ["client0", "relay", "server"] {
        lab.stop_peer(name);
    }
    let took = start.elapsed().as_secs_f64();
    std::thread::sleep(std::time::Duration::from_millis(100));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut said = Vec::new();
    for (name, reader, _) in managers {
        let got = reader.join().map_err(|_| "a manager's reader panicked".to_string())?;
        if !got.first().is_some_and(|m| m.starts_with("READY=1\nSTATUS=")) {
            return Err(format!("{name}: first message is not READY=1 with a status: {got:?}").into());
        }
        let feeds = got.iter().filter(|m| *m == "WATCHDOG=1").count();
        // Fed at a third of 1.5 s over the seconds it ran: at least one feed a period.
        if (feeds as f64) < took / 1.5 {
            return Err(format!("{name}: {feeds} watchdog feeds in {took:.1} s: {got:?}").into());
        }
        if got.last().map(String::as_str) != Some("STOPPING=1") {
            return Err(format!("{name}: did not say STOPPING=1 last: {got:?}\n{}", lab.log_tail(name, 8)).into());
        }
        if name == "client0"
            && !got.iter().any(|m| m.starts_with(&format!("STATUS=qualified: {addr} (server 192.0.2.1, NAT ")))
        {
            return Err(format!("client0: no status saying it qualified as {addr}: {got:?}").into());
        }
        said.push(format!("{name} {feeds} feeds"));
    }
    Ok(format!(
        "READY=1, STATUS, WATCHDOG=1 ({}) over {took:.1} s, STOPPING=1; client: qualified: {addr}",
        said.join(", ")
    ))
}

/// Miredo's hook script variables and a configurable default-route metric.
fn client_hook_and_route_metric(me: &Path) -> Result<String, Failed> {
    let me = Impl::Shipworm(me.to_path_buf());
    use std::os::unix::fs::PermissionsExt;
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
        .map_err(|e| e.to_string())?;
    let out = lab.dir().join("hook-out");
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).map_err(|e| e.to_string())?;
    let hook = lab.dir().join("hook.sh");
    let record = out.join("env");
    std::fs::write(&hook, format!("#!/bin/sh\nenv | sort > {}.$STATE\n", record.display()))
        .map_err(|e| e.to_string())?;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    std::fs::set_permissions(lab.dir(), std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    lab.start_server(&me).map_err(|e| e.to_string())?;
    lab.start_client_with(0, &me, &format!("HookScript {}\nDefaultRouteMetric 1500\n", hook.display()))
        .map_err(|e| e.to_string())?;
    let addr = lab.wait_qualified(0, std::time::Duration::from_secs(20)).map_err(|e| e.to_string())?;
    let ns = lab.clients[0].ns.clone();
    let routes =
        shipworm_lab::netns::exec(&ns, &["ip", "-6", "route", "show", "default"]).map_err(|e| e.to_string())?;
    if !routes.contains("dev teredo") || !routes.contains("metric 1500") {
        return Err(Failed::at(5, format!("step 5 (default route) failed: {routes:?}")));
    }
    let file = record.with_extension("up");
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let env = loop {
        if let Ok(t) = std::fs::read_to_string(&file) {
            if !t.is_empty() {
                break t;
            }
        }
        if Instant::now() > deadline {
            return Err(Failed::at(6, "step 6 (hook script) failed: it did not run"));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    for want in [
        "STATE=up".to_string(),
        "IFACE=teredo".into(),
        format!("ADDRESS={addr}"),
        "LLADDRESS=fe80::ffff:ffff:ffff".into(),
        "MTU=1280".into(),
    ] {
        if !env.lines().any(|l| l == want) {
            return Err(Failed::at(6, format!("step 6 (hook script) failed: {want} missing from {env:?}")));
        }
    }
    Ok(format!("hook saw STATE=up ADDRESS={addr}; default route metric 1500"))
}

/// Secure qualification (RFC 4380 §5.2.2): only the client with the secret qualifies;
/// a client whose key the server retired is told so (§5.3.2) and says so.
fn secure_qualification(me: &Path) -> Result<String, Failed> {
    let me = Impl::Shipworm(me.to_path_buf());
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 3)]))
        .map_err(|e| e.to_string())?;
    lab.start_server_with(
        &me,
        "SecureQualification alice correct-horse-battery\nRetiredQualification bob old-staple-key\n",
    )
    .map_err(|e| e.to_string())?;
    lab.start_client_with(0, &me, "SecureQualification alice correct-horse-battery\n").map_err(|e| e.to_string())?;
    lab.start_client_with(1, &me, "SecureQualification alice wrong-secret\n").map_err(|e| e.to_string())?;
    lab.start_client_with(2, &me, "SecureQualification bob old-staple-key\n").map_err(|e| e.to_string())?;
    let a = lab.wait_qualified(0, std::time::Duration::from_secs(10)).map_err(|e| e.to_string())?;
    std::thread::sleep(std::time::Duration::from_secs(2));
    // Bob's client: not qualified, and its status and counters say why (with
    // the client's check of the confirmation byte taken out, bob qualified:
    // seen).
    let bob = lab.client_status(2).ok_or("step 5: bob's client did not answer its status")?;
    let retired_by = bob["key_retired_by"].as_str().map(str::to_string);
    let counted = bob["counters"]["dropped"]["key_retired"].as_u64().unwrap_or(0);
    if bob["state"] == "qualified"
        || retired_by.as_deref() != Some(&shipworm_lab::SERVER_V4.to_string())
        || counted == 0
    {
        return Err(Failed::at(
            5,
            format!("step 5 (a retired key is told so) failed: state {}, key_retired_by {retired_by:?}, key_retired {counted}", bob["state"]),
        ));
    }
    let state = lab.client_status(1).map(|s| s["state"].as_str().unwrap_or("").to_string());
    if state.as_deref() == Some("qualified") || shipworm_lab::peers::teredo_address(&lab.clients[1].ns).is_some() {
        return Err(Failed::at(
            4,
            "step 4 (refuse the wrong secret) failed: the client with the wrong secret qualified",
        ));
    }
    Ok(format!(
        "alice qualified ({a}); the wrong secret got nothing (client state {state:?}); bob's retired key was told so"
    ))
}

/// Server failover: the primary server is killed.
fn server_failover(me: &Path) -> Result<String, Failed> {
    let me = Impl::Shipworm(me.to_path_buf());
    let (_lab, took) = scenario::run_failover(&me, 10, &mut |_| {}).map_err(Failed::from)?;
    Ok(format!("qualified with the second server {:.1} s after the first died", took.as_secs_f64()))
}

/// A server name that resolves only after the client started (issue #21): the client
/// waits, resolving, and qualifies once the name appears in its hosts file.
fn server_name_resolves_late(me: &Path) -> Result<String, Failed> {
    let me = Impl::Shipworm(me.to_path_buf());
    use shipworm_lab::names::SERVER_NAME;
    use std::time::Duration;
    let mut lab = shipworm_lab::Lab::build(&shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)]))
        .map_err(|e| Failed::at(1, format!("step 1 (build the lab) failed: {e}")))?;
    lab.start_server(&me).map_err(|e| Failed::at(2, format!("step 2 (start the server) failed: {e}")))?;
    lab.start_client_named(0, &me, SERVER_NAME)
        .map_err(|e| Failed::at(3, format!("step 3 (start the client) failed: {e}")))?;
    std::thread::sleep(Duration::from_secs(3));
    lab.check_alive("client0").map_err(|e| Failed::at(4, format!("step 4 (wait for the name) failed: {e}")))?;
    let st =
        lab.client_status(0).ok_or(Failed::at(4, "step 4 (wait for the name) failed: no status from the client"))?;
    if st["state"] != "resolving" || !st["waiting_for"].to_string().contains(SERVER_NAME) {
        return Err(Failed::at(4, format!("step 4 (wait for the name) failed: status {st}")));
    }
    lab.add_host(0, shipworm_lab::SERVER_V4, SERVER_NAME)
        .map_err(|e| Failed::at(5, format!("step 5 (add the name) failed: {e}")))?;
    let added = Instant::now();
    let a = lab
        .wait_qualified(0, Duration::from_secs(10))
        .map_err(|e| Failed::at(6, format!("step 6 (qualify once it resolves) failed: {e}")))?;
    Ok(format!(
        "resolving for 3 s, then qualified {:.1} s after the name was added: {a}",
        added.elapsed().as_secs_f64()
    ))
}
