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
    let codes = [(RandomPortCode::Section4, "0x05, §4.5"), (RandomPortCode::Iana, "0x02, §9")];
    for (client, (code, what)) in [(&ours, codes[0]), (&ours, codes[1]), (&impls[1], codes[0])] {
        let (server, client) = (ours.clone(), client.clone());
        let expect = match client {
            Impl::Shipworm(_) => Expect::Pass,
            Impl::Miredo => Expect::Fail(
                5,
                "Miredo's client speaks no RFC 6081: its direct bubble echoes no nonce, so a client that needs one (§5.2.4.3) never takes it",
            ),
        };
        cases.push(Case {
            waits: false,
            name: format!("Windows-like client calls client={client}: Nonce and Random Port ({what}) in its indirect bubble (RFC 6081 §5.2.4, §5.4.4)"),
            expect,
            run: Box::new(move || {
                let (_lab, ms) = windows_like::calls(&server, &client, code).map_err(Failed::from)?;
                Ok(format!("bubbles exchanged and an echo answered in {ms:.1} ms"))
            }),
        });
    }
    for client in &impls {
        let (server, client) = (ours.clone(), client.clone());
        cases.push(Case {
            waits: false,
            name: format!("client={client} calls a Windows-like client: it answers with a direct bubble echoing the nonce and an indirect one of its own (RFC 6081 §5.2.4.2)"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, ms) = windows_like::is_called(&server, &client).map_err(Failed::from)?;
                Ok(format!("first echo answered in {ms:.1} ms"))
            }),
        });
    }
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
