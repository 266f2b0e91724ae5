//! Two clients reaching each other directly: every ordered pair of NAT kinds and
//! implementations, cold, and two clients behind one NAT (hairpinning, local discovery).

use super::*;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let me = me.to_path_buf();
    let impls = [Impl::Shipworm(me.clone()), Impl::Miredo];
    let mut cases: Vec<Case> = Vec::new();
    // Two clients behind one NAT that does not hairpin (Linux masquerade), A calls B
    // cold: they meet on their own network through RFC 6081 hairpinning.
    for nat in [NatKind::PortRestricted, NatKind::Symmetric] {
        for server in &impls {
            for a in &impls {
                for b in &impls {
                    let (server, a, b) = (server.clone(), a.clone(), b.clone());
                    let expect = if matches!(a, Impl::Miredo) || matches!(b, Impl::Miredo) {
                        Expect::Fail(
                            5,
                            "the NAT does not hairpin, and Miredo 1.2.6 has neither RFC 6081 hairpinning (§5.6) nor RFC 4380 local discovery (§5.2.8)",
                        )
                    } else {
                        Expect::Pass
                    };
                    cases.push(Case {
                        waits: false,
                        name: format!("same NAT A={nat}/{a} calls B={nat}/{b} server={server}"),
                        expect,
                        run: Box::new(move || {
                            scenario::run_same_nat(nat, &server, [&a, &b], "", P2P_BYTES, &mut |_| {})
                                .map(|(_lab, o)| direct_summary(&o))
                                .map_err(Failed::from)
                        }),
                    });
                }
            }
        }
    }
    // The same, shipworm's clients without hairpinning: they find each other by RFC
    // 4380 §5.2.8 local discovery instead.
    for nat in [NatKind::PortRestricted, NatKind::Symmetric] {
        let me = Impl::Shipworm(me.clone());
        cases.push(Case {
            waits: false,
            name: format!("same NAT by local discovery (Hairpinning no) {nat}"),
            expect: Expect::Pass,
            run: Box::new(move || {
                scenario::run_same_nat(nat, &me, [&me, &me], "Hairpinning no\n", P2P_BYTES, &mut |_| {})
                    .map(|(_lab, o)| direct_summary(&o))
                    .map_err(Failed::from)
            }),
        });
    }
    // Client to client, cold: A calls B first, for every ordered pair of NAT kinds,
    // every pairing of implementations (Miredo's client with ours both ways) and
    // both servers. No relay takes part: they must reach each other directly.
    // The RFC 6081 symmetric kinds: shipworm's clients through shipworm's server, and
    // Miredo's client as the peer behind a full cone.
    for a_nat in NatKind::ALL {
        for b_nat in NatKind::ALL {
            let classic = NatKind::RFC4380.contains(&a_nat) && NatKind::RFC4380.contains(&b_nat);
            let (servers, a_impls, b_impls) = if classic {
                (impls.to_vec(), impls.to_vec(), impls.to_vec())
            } else if b_nat == NatKind::FullCone {
                (vec![impls[0].clone()], vec![impls[0].clone()], impls.to_vec())
            } else if a_nat == NatKind::FullCone {
                (vec![impls[0].clone()], impls.to_vec(), vec![impls[0].clone()])
            } else {
                (vec![impls[0].clone()], vec![impls[0].clone()], vec![impls[0].clone()])
            };
            for server in &servers {
                for a in &a_impls {
                    for b in &b_impls {
                        let (server, a, b) = (server.clone(), a.clone(), b.clone());
                        cases.push(Case {
                            waits: false,
                            name: format!("client↔client A={a_nat}/{a} calls B={b_nat}/{b} server={server}"),
                            expect: peer_expectation([a_nat, b_nat], &a, &b),
                            run: Box::new(move || {
                                scenario::run_peer_to_peer([a_nat, b_nat], &server, [&a, &b], P2P_BYTES, &mut |_| {})
                                    .map(|(_lab, o)| direct_summary(&o))
                                    .map_err(Failed::from)
                            }),
                        });
                    }
                }
            }
        }
    }
    // RFC 6081 §6.1's arrangement: A behind a symmetric NAT at one server calls B behind
    // an address-restricted NAT at another; A's indirect bubble reaches B's server from a
    // port A's address does not embed.
    for server in impls.iter() {
        let (server, me) = (server.clone(), Impl::Shipworm(me.clone()));
        let expect = match server {
            Impl::Shipworm(_) => Expect::Pass,
            Impl::Miredo => Expect::Fail(
                5,
                "Miredo's server drops A's indirect bubble (RFC 4380 §5.3.1 check 5: its source's mapping is not where it came from); shipworm's passes it on (docs/decisions.md)",
            ),
        };
        // §6.4's: A behind a sequential port-symmetric NAT calls B behind a
        // port-restricted one; A's predicted port reaches B only in the Random Port of
        // A's indirect bubble (packet 7), which B's server must pass on (with the Nonce
        // alone passed, as before, this case failed at step 5: seen).
        for (section, nats) in [
            ("§6.1", [NatKind::Symmetric, NatKind::AddressRestricted]),
            ("§6.4", [NatKind::SequentialSymmetric, NatKind::PortRestricted]),
        ] {
            let (server, me, expect) = (server.clone(), me.clone(), expect.clone());
            cases.push(Case {
                waits: false,
                name: format!(
                    "client↔client across two servers (RFC 6081 {section}) A={}/shipworm calls B={}/shipworm servers={server}",
                    nats[0], nats[1]
                ),
                expect,
                run: Box::new(move || {
                    scenario::run_peer_to_peer_two_servers(nats, &server, [&me, &me], P2P_BYTES)
                        .map(|(_lab, o)| direct_summary(&o))
                        .map_err(Failed::from)
                }),
            });
        }
    }
    cases
}
