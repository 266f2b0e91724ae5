//! The scripted Windows-like client ([`crate::scripted_peer`]) against shipworm or
//! Miredo: what it did, in steps.

use super::*;
use crate::scripted_peer::{RandomPortCode, ScriptedClient, Via, PING_IDENT};

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

/// The local port of the scripted client's random port (its primary one is 40000).
const RANDOM_PORT: u16 = 40001;

/// It (behind a port-restricted NAT) calls `client` (behind a `callee` NAT) from a
/// random port of its own (RFC 6081 §5.4): its indirect bubble carries a fresh Nonce
/// and a Random Port trailer of type `code` naming that port (§5.2.4.1, §5.4.4.2), its
/// direct bubble leaves from there to the client's embedded mapping, and its primary
/// port sends the client nothing: only a client that reads the trailer and answers at
/// that port from the mapping its address embeds gets through its NAT, or, behind a
/// symmetric NAT, one that announces a random port of its own in its indirect bubble,
/// where the scripted client answers (§5.4.4.3, §5.4.4.4). Step 5: a direct bubble
/// echoing the nonce arrives on the random port (§5.2.4.2); step 6: an echo request
/// to the client's address from there is answered. Returns the ms from the first
/// bubble to the echo reply.
pub fn calls(server: &Impl, client: &Impl, callee: NatKind, code: RandomPortCode) -> Result<(Lab, f64)> {
    let spec = LabSpec::nats(vec![(NatKind::PortRestricted, 1), (callee, 1)]);
    let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
    lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
    lab.start_client(1, client).map_err(|e| step(3, "start the client", e))?;
    let peer = lab.wait_qualified(1, Duration::from_secs(20)).map_err(|e| step(3, "qualify the client", e))?;
    let ns = lab.clients[0].ns.clone();
    let mut w =
        ScriptedClient::qualify(&ns, 40000, crate::SERVER_V4).map_err(|e| step(4, "qualify the scripted client", e))?;
    w.open_random_port(&ns, RANDOM_PORT).map_err(|e| step(4, "open the random port", e))?;
    let t0 = Instant::now();
    w.call(peer, code).map_err(|e| step(5, "send the indirect bubble", e))?;
    let mut heard = Vec::new();
    let proven = |w: &ScriptedClient| w.trusted.iter().find(|t| t.peer == peer).copied();
    // The client's answers, and our own bubbles again as RFC 4380 §5.2.6 repeats them
    // (2 s apart), until it is proven.
    for _ in 0..3 {
        heard.extend(
            w.answer(Duration::from_secs(2), |_, w| w.trusted.iter().any(|t| t.peer == peer))
                .map_err(|e| step(5, "hear the client", e))?,
        );
        if proven(&w).is_some() {
            break;
        }
        w.call(peer, code).map_err(|e| step(5, "send the indirect bubble again", e))?;
    }
    let Some(t) = proven(&w) else {
        let what = format!("no direct bubble echoed our nonce; heard: {heard:?}");
        return Err(step(5, "the bubble exchange", LabError::new(what)));
    };
    if t.via != Via::Random {
        let what = format!("proven on the primary port, which sent the client nothing: {t:?}");
        return Err(step(5, "the bubble exchange", LabError::new(what)));
    }
    w.ping(peer, t.via, t.at, 1).map_err(|e| step(6, "ping the client", e))?;
    // The reply counts from where the client was proven only.
    let reply =
        |h: &crate::scripted_peer::Heard| h.echo == Some((false, PING_IDENT, 1)) && h.from == t.at && h.on == t.via;
    let heard = w.answer(Duration::from_secs(3), |h, _| reply(h)).map_err(|e| step(6, "hear the reply", e))?;
    if !heard.iter().any(reply) {
        return Err(step(6, "echo request to the client", LabError::new("no echo reply within 3 s".into())));
    }
    Ok((lab, t0.elapsed().as_secs_f64() * 1000.0))
}

/// `client` (behind a `nat`) calls it (behind an address-restricted one: a Linux
/// port-restricted NAT would move the client's answer to another port, as conntrack
/// saw the scripted client's first direct bubble): a single echo request from the
/// client's host to its address must be answered (step 5). The client's indirect
/// bubble is answered as RFC 6081 §5.2.4.2 says, with a direct bubble echoing its
/// nonce and an indirect one of ours; the client's data is taken only once a direct
/// bubble of the client's proved it (§5.2.4.4): from the mapping its address embeds,
/// or, behind a symmetric NAT, from elsewhere echoing our nonce. Returns the round
/// trip, ms.
pub fn is_called(server: &Impl, client: &Impl, nat: NatKind) -> Result<(Lab, f64)> {
    let spec = LabSpec::nats(vec![(NatKind::AddressRestricted, 1), (nat, 1)]);
    let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
    lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
    lab.start_client(1, client).map_err(|e| step(3, "start the client", e))?;
    lab.wait_qualified(1, Duration::from_secs(20)).map_err(|e| step(3, "qualify the client", e))?;
    let mut w = ScriptedClient::qualify(&lab.clients[0].ns, 40000, crate::SERVER_V4)
        .map_err(|e| step(4, "qualify the scripted client", e))?;
    let (address, ns) = (w.address, lab.clients[1].ns.clone());
    let (ping, heard) = std::thread::scope(|s| {
        // Until it has answered the client's echo request.
        let answering = s.spawn(move || w.answer(Duration::from_secs(6), |_, w| w.echoes_answered > 0));
        let ping = traffic::ping(&ns, address, 1, 5);
        (ping, answering.join())
    });
    let ms = ping.ok().and_then(|p| p.rtts_ms.first().copied()).ok_or_else(|| {
        let what = format!("no answer within 5 s; the scripted client heard: {heard:?}");
        step(5, "first contact client → scripted client", LabError::new(what))
    })?;
    Ok((lab, ms))
}

/// `client` (behind a port-restricted NAT) calls it (behind an address-restricted
/// one, as [`is_called`]); both go quiet for `idle`; then the client's host sends
/// again. Past 30 s without data, Server Load Reduction (RFC 6081 §5.7.4.1) refreshes
/// the peer with a direct bubble asking for an answer, which it answers (§5.7.4.2):
/// no indirect bubble reaches it through the server (step 6) and the echo request is
/// answered (step 7). `extra` goes into the client's configuration
/// (`ServerLoadReduction no` shows the case fail). Returns the solicitations answered
/// and the second round trip, ms.
pub fn slr_after_idle(server: &Impl, client: &Impl, idle: Duration, extra: &str) -> Result<(Lab, usize, f64)> {
    let spec = LabSpec::nats(vec![(NatKind::AddressRestricted, 1), (NatKind::PortRestricted, 1)]);
    let mut lab = Lab::build(&spec).map_err(|e| step(1, "build the lab", e))?;
    lab.start_server(server).map_err(|e| step(2, "start the server", e))?;
    lab.start_client_with(1, client, extra).map_err(|e| step(3, "start the client", e))?;
    lab.wait_qualified(1, Duration::from_secs(20)).map_err(|e| step(3, "qualify the client", e))?;
    let mut w = ScriptedClient::qualify(&lab.clients[0].ns, 40000, crate::SERVER_V4)
        .map_err(|e| step(4, "qualify the scripted client", e))?;
    let (address, ns) = (w.address, lab.clients[1].ns.clone());
    let round = |w: &mut ScriptedClient| {
        std::thread::scope(|s| {
            let answering = s.spawn(move || {
                let before = w.echoes_answered;
                w.answer(Duration::from_secs(6), |_, w| w.echoes_answered > before)
            });
            let ping = traffic::ping(&ns, address, 1, 5).ok().and_then(|p| p.rtts_ms.first().copied());
            let heard = answering.join().map_err(|_| LabError::new("the scripted client's thread panicked".into()));
            (ping, heard.and_then(|h| h))
        })
    };
    let (first, heard) = round(&mut w);
    let heard = heard.map_err(|e| step(5, "the scripted client", e))?;
    if first.is_none() {
        let what = format!("no answer within 5 s; the scripted client heard: {heard:?}");
        return Err(step(5, "first contact client → scripted client", LabError::new(what)));
    }
    // Quiet: neither side sends to the other (the scripted client keeps its server's
    // mapping with its refreshes meanwhile, as a Windows client would).
    w.answer(idle, |_, _| false).map_err(|e| step(6, "the quiet time", e))?;
    let before = w.solicitations_answered;
    let (second, heard) = round(&mut w);
    let heard = heard.map_err(|e| step(6, "the scripted client", e))?;
    let indirect = heard.iter().filter(|h| h.bubble && h.origin.is_some()).count();
    let answered = w.solicitations_answered - before;
    if indirect > 0 || answered == 0 {
        let what = format!(
            "{indirect} indirect bubbles through the server, {answered} solicitations answered; heard: {heard:?}"
        );
        return Err(step(6, "the peer refreshed directly (SLR)", LabError::new(what)));
    }
    let ms =
        second.ok_or_else(|| step(7, "the echo after the idle time", LabError::new("no answer within 5 s".into())))?;
    Ok((lab, answered, ms))
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
    w.ping(HOST6_V6, Via::Primary, w.server(), 7).map_err(|e| step(5, "ping the native host", e))?;
    let heard = w
        .answer(Duration::from_secs(4), |h, _| h.echo == Some((false, PING_IDENT, 7)))
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
