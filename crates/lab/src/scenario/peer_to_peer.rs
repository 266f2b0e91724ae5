//! Two clients calling each other: behind two NATs, through one or two servers, and
//! behind one NAT.

use super::*;

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
