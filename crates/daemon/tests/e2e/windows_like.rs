//! A Teredo client scripted from the RFC texts as Windows sends its packets
//! (`shipworm_lab::scripted_peer`; no Windows machine is in the lab), against
//! shipworm's server, relay and client, and Miredo's where they can be; and a
//! host-specific relay whose host filters echo requests, as Windows' firewall does.
//! Each case names the RFC section it exercises.

use super::*;
use shipworm_lab::scenario::windows_like;
use shipworm_lab::scripted_peer::RandomPortCode;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let impls = [Impl::Shipworm(me.to_path_buf()), Impl::Miredo];
    let ours = Impl::Shipworm(me.to_path_buf());
    let mut cases: Vec<Case> = Vec::new();
    // A tolerance case (RFC 4861 §4.1 allows the option; no source says Windows sends
    // it): seen failing with shipworm's server refusing a solicitation with options.
    for server in &impls {
        let server = server.clone();
        cases.push(Case {
            waits: false,
            name: format!("Windows-like client: an RS with a link-layer address option qualifies (RFC 4380 §5.2.1, RFC 4861 §4.1) server={server}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, a) = windows_like::qualifies(&server).map_err(Failed::from)?;
                Ok(format!("qualified: {a}"))
            }),
        });
    }
    // It calls from a random port of its own that only its trailer names (RFC 6081
    // §5.4), the client behind a NAT that filters by port: a client that ignored the
    // trailer answers where the caller's NAT lets nothing in (seen: with shipworm's
    // client reading no Random Port trailer, each shipworm cell below fails at step 5).
    // Behind a port-preserving or sequential symmetric NAT the client announces a port
    // of its own, which the caller answers: the §6.2/§6.3 cells (issue #59.6). (Behind
    // an address-restricted NAT the caller's direct answer from its random port reaches
    // the client, which learns the port from it, trailer or not: no such cell here.)
    let codes = [(RandomPortCode::Section4, "0x05, §4.5"), (RandomPortCode::Iana, "0x02, §9")];
    let callers = [
        (&ours, NatKind::PortRestricted, codes[0]),
        (&ours, NatKind::PortRestricted, codes[1]),
        (&ours, NatKind::PortPreservingSymmetric, codes[0]),
        (&ours, NatKind::SequentialSymmetric, codes[0]),
        (&impls[1], NatKind::PortRestricted, codes[0]),
    ];
    for (client, callee, (code, what)) in callers {
        let (server, client) = (ours.clone(), client.clone());
        let expect = match client {
            Impl::Shipworm(_) => Expect::Pass,
            Impl::Miredo => Expect::Fail(
                5,
                "Miredo's client speaks no RFC 6081: it reads no Random Port trailer (its answers go to the mapping the caller's address embeds, where the caller's NAT lets nothing in) and its direct bubble echoes no nonce (§5.2.4.3)",
            ),
        };
        cases.push(Case {
            waits: false,
            name: format!("Windows-like client calls client={client} behind {callee}: from a random port that only its Random Port trailer ({what}) names, with a fresh Nonce (RFC 6081 §5.2.4, §5.4.4)"),
            expect,
            run: Box::new(move || {
                let (_lab, ms) = windows_like::calls(&server, &client, callee, code).map_err(Failed::from)?;
                Ok(format!("proven on its random port, an echo answered there in {ms:.1} ms"))
            }),
        });
    }
    // Called: behind a port-restricted NAT the client's direct bubble comes from the
    // mapping its address embeds, which proves it (RFC 6081 §5.2.4.4 a); behind a
    // symmetric one from another port, where only the nonce it echoes does (b: seen
    // failing with shipworm's client echoing none).
    let called = [
        (&ours, NatKind::PortRestricted),
        (&impls[1], NatKind::PortRestricted),
        (&ours, NatKind::Symmetric),
        (&impls[1], NatKind::Symmetric),
    ];
    for (client, nat) in called {
        let (server, client) = (ours.clone(), client.clone());
        let expect = match (&client, nat) {
            (Impl::Miredo, NatKind::Symmetric) => Expect::Fail(
                5,
                "Miredo's client speaks no RFC 6081: its direct bubble, from a port its address does not embed, echoes no nonce, so nothing proves it (§5.2.4.4)",
            ),
            _ => Expect::Pass,
        };
        cases.push(Case {
            waits: false,
            name: format!("client={client} behind {nat} calls a Windows-like client: its direct bubble proves it, from its embedded mapping or echoing the nonce (RFC 6081 §5.2.4.2, §5.2.4.4)"),
            expect,
            run: Box::new(move || {
                let (_lab, ms) = windows_like::is_called(&server, &client, nat).map_err(Failed::from)?;
                Ok(format!("first echo answered in {ms:.1} ms"))
            }),
        });
    }
    // Server Load Reduction both ways: shipworm's client solicits a peer gone quiet,
    // the scripted client answers (fails with `ServerLoadReduction no`: step 6, the
    // client's indirect bubble goes through the server, seen).
    {
        let (server, client) = (ours.clone(), ours.clone());
        cases.push(Case {
            waits: true,
            name: "client=shipworm refreshes a Windows-like peer quiet for 32 s with a direct solicitation, answered (RFC 6081 §5.7)".into(),
            expect: Expect::Pass,
            run: Box::new(move || {
                let idle = std::time::Duration::from_secs(32);
                let (_lab, n, ms) = windows_like::slr_after_idle(&server, &client, idle, "").map_err(Failed::from)?;
                Ok(format!("{n} solicitation(s) answered, no indirect bubble; the echo after the idle time answered in {ms:.1} ms"))
            }),
        });
    }
    // Seen failing with shipworm's relay sending no indirect bubble (the client's NAT
    // then never opens to it).
    for relay in &impls {
        let (server, relay) = (ours.clone(), relay.clone());
        cases.push(Case {
            waits: false,
            name: format!(
                "Windows-like client reaches the native host through relay={relay} (RFC 4380 §5.2.9, §5.4.2)"
            ),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, ms) = windows_like::through_relay(&server, &relay).map_err(Failed::from)?;
                Ok(format!("echo answered through the relay in {ms:.1} ms"))
            }),
        });
    }
    // The same TCP connection to a host-specific relay's host, its echo requests
    // filtered (Windows' firewall default) or not: what the filter alone costs.
    for (client, filtered) in [(&ours, true), (&impls[1], true), (&ours, false)] {
        let (server, client) = (ours.clone(), client.clone());
        let expect = if filtered {
            Expect::Fail(
                5,
                "RFC 4380 §5.2.9: a native host is reached only once an echo request through the server comes back through its relay; a host that drops echo requests never proves it, and taking it unproven would let anyone speak for any IPv6 address",
            )
        } else {
            Expect::Pass
        };
        let how = if filtered { "filters echo requests (Windows' firewall default)" } else { "answers echo requests" };
        cases.push(Case {
            // Filtered, the client's TCP retransmits its connection while the host's
            // relay waits for an echo that never comes: a wait.
            waits: filtered,
            name: format!(
                "host-specific relay whose host {how} client={client}: TCP to the host (RFC 4380 §5.2.9, §5.5)"
            ),
            expect,
            run: Box::new(move || {
                let (_lab, t) = windows_like::host_relay_tcp(&server, &client, filtered).map_err(Failed::from)?;
                Ok(format!("TCP: {} bytes intact", t.bytes))
            }),
        });
    }
    cases
}
