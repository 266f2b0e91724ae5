//! A client that moves: a handoff between networks, a relay failing over.

use super::*;

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
