//! A correspondent calls the client first with a real application: a SIP call and a
//! TCP connection from the native host, for every server/relay/client pairing.

use super::*;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let me = me.to_path_buf();
    let impls = [Impl::Shipworm(me.clone()), Impl::Miredo];
    let mut cases: Vec<Case> = Vec::new();
    // A correspondent calls first with a real application: a SIP call (Debian's SIPp)
    // from the native host to the client's Teredo address, whose first INVITE must
    // be answered (no retransmission allowed), for every server/relay/client pairing.
    for (server, relay, client) in pairings(&impls) {
        cases.push(Case {
            waits: false,
            name: format!("SIP call native → client server={server} relay={relay} client={client}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, c) = scenario::run_sip(NatKind::PortRestricted, &server, &relay, &client, None, &mut |_| {})
                    .map_err(Failed::from)?;
                Ok(format!("first INVITE answered; call completed in {:.2} s", c.first.1.secs))
            }),
        });
    }
    // And a TCP connection, the native host's SYN first (no retransmission allowed).
    for (server, relay, client) in pairings(&impls) {
        cases.push(Case {
            waits: false,
            name: format!("TCP connection native → client server={server} relay={relay} client={client}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, t) = scenario::run_tcp_first(NatKind::PortRestricted, &server, &relay, &client, P2P_BYTES)
                    .map_err(Failed::from)?;
                Ok(format!("first SYN answered; {} bytes intact, {:.0} Mbit/s", t.bytes, t.mbit_per_s()))
            }),
        });
    }
    {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            waits: false,
            name: "SIP call native → client, then again after a handoff".into(),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, c) =
                    scenario::run_sip(NatKind::PortRestricted, &me, &me, &me, Some(NatKind::FullCone), &mut |_| {})
                        .map_err(Failed::from)?;
                let (new, after) = c.after_handoff.ok_or("no call after the handoff")?;
                Ok(format!(
                    "{}: call in {:.2} s; after the move, {new}: call in {:.2} s; both on their first INVITE",
                    c.first.0, c.first.1.secs, after.secs
                ))
            }),
        });
    }
    cases
}
