//! Peers other than Teredo clients and plain native hosts: a 6to4 host (RFC 4380
//! §5.2.9), each side calling first, through every server/relay pairing with a
//! shipworm client, and with Miredo's client through shipworm's server and relay.

use super::*;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let impls = [Impl::Shipworm(me.to_path_buf()), Impl::Miredo];
    let mut cases: Vec<Case> = Vec::new();
    // Every server/relay pairing with shipworm's client; Miredo's client through
    // shipworm's server and relay.
    let mut chains: Vec<(Impl, Impl, Impl)> =
        pairings(&impls).into_iter().filter(|(_, _, c)| matches!(c, Impl::Shipworm(_))).collect();
    chains.push((impls[0].clone(), impls[0].clone(), Impl::Miredo));
    for first in [Side::Client, Side::Native] {
        for (server, relay, client) in &chains {
            {
                let (server, relay, client) = (server.clone(), relay.clone(), client.clone());
                cases.push(Case {
                    waits: false,
                    name: format!("6to4 host ↔ client ({first}) server={server} relay={relay} client={client}"),
                    expect: Expect::Pass,
                    run: Box::new(move || {
                        let (_lab, o) = scenario::run_sixtofour(&server, &relay, &client, first, P2P_BYTES)
                            .map_err(Failed::from)?;
                        Ok(o.to_string())
                    }),
                });
            }
        }
    }
    // A server that relays too, and no other relay: shipworm's client (RFC 4380
    // §5.4.3: the server's packets from native hosts are a relay's) and Miredo's.
    for first in [Side::Client, Side::Native] {
        for client in &impls {
            let (server, client) = (Impl::Shipworm(me.to_path_buf()), client.clone());
            cases.push(Case {
                waits: false,
                name: format!(
                    "server that relays ↔ native host ({first}) server=shipworm (ServerRelay yes) client={client}"
                ),
                expect: Expect::Pass,
                run: Box::new(move || {
                    let (_lab, o) =
                        scenario::run_server_relay(&server, &client, first, P2P_BYTES).map_err(Failed::from)?;
                    Ok(o.to_string())
                }),
            });
        }
    }
    // A host-specific relay serves the addresses its host gets after it started.
    for client in &impls {
        let (me, client) = (Impl::Shipworm(me.to_path_buf()), client.clone());
        cases.push(Case {
            waits: false,
            name: format!("host-specific relay serves an address added later server=shipworm client={client}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                let (_lab, (first, later)) =
                    scenario::run_host_relay_new_address(&me, &client).map_err(Failed::from)?;
                Ok(format!("host's address: first echo {first:.1} ms; address added later: {later:.1} ms"))
            }),
        });
    }
    cases
}
