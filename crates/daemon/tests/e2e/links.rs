//! Real links: a lossy uplink, and a narrow IPv4 path whose routers' "fragmentation
//! needed" messages a firewall filters. RFC 4380 §5.1.1: Teredo SHOULD NOT set Don't Fragment; with DF, a
//! full-size datagram (a 1280-byte IPv6 packet in 1308 IPv4 bytes) vanishes on such a
//! path, and TCP stalls.

use super::*;
use std::time::{Duration, Instant};

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    for relay in [Impl::Shipworm(me.to_path_buf()), Impl::Miredo] {
        for first in [Side::Native, Side::Client] {
            let s = Scenario { narrow_wan: Some(1300), relay: relay.clone(), ..shipworm_chain(me, first, "") };
            cases.push(Case {
                waits: false,
                name: format!(
                    "narrow path (IPv4 MTU 1300, fragmentation-needed filtered) first={first:?} relay={relay} client=shipworm"
                ),
                expect: Expect::Pass,
                run: Box::new(move || {
                    let (_lab, o) = scenario::run(&s, &mut |_| {}).map_err(Failed::from)?;
                    Ok(format!(
                        "full-size datagrams fragmented on the way: TCP out {:.0}, in {:.0} Mbit/s, intact",
                        o.tcp_out.mbit_per_s(),
                        o.tcp_in.mbit_per_s()
                    ))
                }),
            });
        }
    }
    cases
}

/// A lossy uplink must not change the address (a case of over a minute, mostly waiting:
/// it runs beside the suite's jobs): 30 % of the client's datagrams lost for 60 s, with a fallback server that one unanswered refresh used to move
/// it to (RFC 4380 §5.2.5 repeats the solicitation before the server counts as gone).
pub fn lossy_uplink(me: &std::path::Path) -> Case {
    let me = Impl::Shipworm(me.to_path_buf());
    Case {
        waits: true,
        name: "lossy uplink (30 % of the client's datagrams lost for 60 s, a fallback server): the address stays"
            .to_string(),
        expect: Expect::Pass,
        run: Box::new(move || {
            let spec = shipworm_lab::LabSpec {
                second_server: true,
                ..shipworm_lab::LabSpec::nats(vec![(NatKind::PortRestricted, 1)])
            };
            let mut lab = shipworm_lab::Lab::build(&spec).map_err(|e| Failed::at(1, e.to_string()))?;
            lab.start_server(&me).map_err(|e| Failed::at(2, e.to_string()))?;
            lab.start_server_b(&me).map_err(|e| Failed::at(2, e.to_string()))?;
            lab.start_relay(&me).map_err(|e| Failed::at(2, e.to_string()))?;
            let extra = format!("FallbackServerAddress {}\nRefreshInterval 10\n", shipworm_lab::SERVER_B_V4);
            lab.start_client_with(0, &me, &extra).map_err(|e| Failed::at(3, e.to_string()))?;
            let addr = lab.wait_qualified(0, Duration::from_secs(20)).map_err(|e| Failed::at(3, e.to_string()))?;
            let ns = lab.clients[0].ns.clone();
            lab.lose_uplink(0, 30).map_err(|e| Failed::at(4, e.to_string()))?;
            let start = Instant::now();
            let (mut sent, mut answered) = (0, 0);
            while start.elapsed() < Duration::from_secs(60) {
                let p = shipworm_lab::traffic::ping(&ns, shipworm_lab::HOST6_V6, 5, 2)
                    .map_err(|e| Failed::at(5, e.to_string()))?;
                (sent, answered) = (sent + p.sent, answered + p.received);
                let now = shipworm_lab::peers::teredo_address(&ns);
                if now != Some(addr) {
                    return Err(Failed::at(
                        5,
                        format!(
                            "step 5: the address changed after {:.0} s of loss: {addr} → {now:?}\n{}",
                            start.elapsed().as_secs_f64(),
                            lab.log_tail("client0", 10)
                        ),
                    ));
                }
            }
            lab.lose_uplink(0, 0).map_err(|e| Failed::at(6, e.to_string()))?;
            if answered == 0 {
                return Err(Failed::at(6, format!("step 6: no ping answered of {sent} under 30 % loss")));
            }
            Ok(format!("{addr} kept through 60 s of 30 % uplink loss; {answered}/{sent} pings answered"))
        }),
    }
}
