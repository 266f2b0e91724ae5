//! Maintenance on a lossy link: a lost refresh must not cost the address; a server that
//! is gone is still left.

use super::*;

/// Run the timer every 250 ms from `from` to `to` (ms); the datagrams sent, with when.
fn tick(c: &mut Client<Rng>, from: u64, to: u64) -> Vec<(u64, SocketAddrV4)> {
    let mut sent = Vec::new();
    for t in (from..to).step_by(250) {
        let mut w = Recorder::default();
        c.on_timer(ms(t), &mut w);
        sent.extend(w.udp().into_iter().map(|(to, _)| (t, to)));
    }
    sent
}

fn qualified_with(servers: &[Ipv4Addr]) -> (Client<Rng>, Ipv6Addr) {
    let mut c = client(servers);
    let ev = qualify(&mut c, secs(1), M, M, false);
    (c, up_address(&ev))
}

#[test]
fn lost_refreshes_are_retried_with_back_off_and_the_address_stays() {
    let (mut c, addr) = qualified_with(&[P, Q]);
    // Nothing from the server: the refresh (22.5–30 s after qualifying), then retries.
    let sent = tick(&mut c, 2_000, 51_000);
    let to_p: Vec<u64> = sent.iter().filter(|(_, to)| *to.ip() == P).map(|(t, _)| *t).collect();
    assert_eq!(to_p.len(), 8, "{sent:?}");
    let gaps: Vec<u64> = to_p.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, vec![1_000, 2_000, 2_000, 4_000, 4_000, 4_000, 4_000]);
    assert!(sent.iter().all(|(_, to)| *to.ip() == P), "no failover yet: {sent:?}");
    assert_eq!((c.address(), c.poll_event()), (Some(addr), None));
    // The last one is answered (same mapping): nothing changes.
    let (mut c2, addr2) = qualified_with(&[P, Q]);
    let mut n = 0;
    for t in (2_000..52_000u64).step_by(250) {
        let mut w = Recorder::default();
        c2.on_timer(ms(t), &mut w);
        if let Some((to, rs)) = w.pop_udp() {
            assert_eq!(*to.ip(), P);
            n += 1;
            if n == 8 {
                let (from, ra) = answer(P, Local::Primary, M, &rs).unwrap();
                let _ = c2.on_udp(ms(t + 100), Via::Service, from, &ra, &mut w);
                break;
            }
        }
    }
    assert_eq!(n, 8);
    assert_eq!((c2.status().state, c2.address()), (ClientState::Qualified, Some(addr2)));
    let events: Vec<ClientEvent> = std::iter::from_fn(|| c2.poll_event()).collect();
    assert!(events.iter().all(|e| matches!(e, ClientEvent::Up { address, .. } if *address == addr2)), "{events:?}");
}

#[test]
fn a_server_that_is_gone_is_left_25_s_after_the_first_refresh() {
    let (mut c, _) = qualified_with(&[P, Q]);
    let sent = tick(&mut c, 2_000, 60_000);
    let first = sent.iter().find(|(_, to)| *to.ip() == P).unwrap().0;
    let to_q = sent.iter().find(|(_, to)| *to.ip() == Q).expect("failover to Q").0;
    assert_eq!(to_q - first, 25_000);
    assert!(matches!(c.poll_event(), Some(ClientEvent::Down("server stopped answering"))));
}

#[test]
fn a_lone_server_that_stops_answering_is_asked_again_with_the_address_held() {
    let (mut c, addr) = qualified_with(&[P]);
    // The refresh (22.5–30 s), its 25 s of retries, then qualification again.
    let sent = tick(&mut c, 2_000, 58_000);
    assert!(sent.len() > 8, "{sent:?}");
    assert_eq!(c.status().state, ClientState::Qualifying);
    assert_eq!(c.address(), Some(addr), "held while it qualifies again");
    assert_eq!(c.poll_event(), None, "the interface keeps its address");
}
