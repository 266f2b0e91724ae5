//! Real links: a narrow IPv4 path whose routers' "fragmentation needed" messages a
//! firewall filters. RFC 4380 §5.1.1: Teredo SHOULD NOT set Don't Fragment; with DF, a
//! full-size datagram (a 1280-byte IPv6 packet in 1308 IPv4 bytes) vanishes on such a
//! path, and TCP stalls.

use super::*;

/// The cases of this topic.
pub fn cases(me: &std::path::Path) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    for relay in [Impl::Shipworm(me.to_path_buf()), Impl::Miredo] {
        for first in [Side::Native, Side::Client] {
            let s = Scenario { narrow_wan: Some(1300), relay: relay.clone(), ..shipworm_chain(me, first, "") };
            cases.push(Case {
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
