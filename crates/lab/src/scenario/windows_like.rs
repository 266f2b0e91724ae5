//! The scripted Windows-like client ([`crate::scripted_peer`]) against shipworm or
//! Miredo: what it did, in steps.

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
    let heard =
        w.answer(Duration::from_secs(4), |h| proof(h) && h.src == peer).map_err(|e| step(5, "hear the client", e))?;
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
    let heard =
        w.answer(Duration::from_secs(4), |h| h.echo == Some((false, PING_IDENT, 7))).map_err(|e| step(5, "hear", e))?;
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
