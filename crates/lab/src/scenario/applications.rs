//! What users run through the tunnel: SIP calls, TCP opened from the client side, a
//! native host calling first after an idle spell.

use super::*;

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
