//! The list of servers the daemon gives as their names resolve: none at first, another
//! one later.

use super::*;

#[test]
fn a_client_without_a_server_waits_then_qualifies_with_the_servers_it_is_given() {
    let mut cfg = ClientConfig::new(Vec::new());
    cfg.local_discovery = false;
    let mut c = Client::new(cfg, Rng(7));
    let mut w = Recorder::default();
    for t in [1, 10, 30] {
        c.on_timer(secs(t), &mut w);
    }
    assert!(w.sent.is_empty(), "no server to ask while the names resolve: {:?}", w.sent);
    assert_eq!((c.status().state, c.address()), (ClientState::Resolving, None));
    c.set_servers(vec![ServerAddrs::new(P)]);
    let events = qualify(&mut c, secs(31), M, M, false);
    assert_eq!(c.status().state, ClientState::Qualified);
    assert_eq!(TeredoAddr::decode(&up_address(&events)).unwrap().server, P);
}

#[test]
fn another_server_list_takes_the_address_away_and_qualifies_afresh() {
    let (mut c, addr) = qualified();
    let advertisements = c.stats().advertisements;
    assert!(advertisements > 0);
    // The same list again changes nothing.
    c.set_servers(vec![ServerAddrs::new(P)]);
    assert_eq!((c.poll_event(), c.address()), (None, Some(addr)));
    c.set_servers(vec![ServerAddrs::new(Q)]);
    assert_eq!(c.poll_event(), Some(ClientEvent::Down("the Teredo servers' addresses changed")));
    assert_eq!(c.address(), None, "the address came from the old server");
    let mut w = Recorder::default();
    c.on_timer(secs(40), &mut w);
    let (to, _) = w.pop_udp().expect("a solicitation to the new server at the next tick");
    assert_eq!(to, SocketAddrV4::new(Q, 3544));
    assert_eq!(c.status().state, ClientState::Qualifying);
    assert_eq!(c.stats().advertisements, advertisements, "the counters go on");
}

#[test]
fn a_client_that_finds_no_server_after_a_network_change_gives_the_held_address_up() {
    let (mut c, addr) = qualified();
    let mut w = Recorder::default();
    c.on_network_change(secs(10), &mut w);
    assert_eq!(c.address(), Some(addr), "held while it qualifies again");
    assert_eq!(c.poll_event(), None);
    // The new network does not reach the server: three solicitations unanswered.
    for t in (14..=30).step_by(4) {
        c.on_timer(secs(t), &mut w);
    }
    assert_eq!(c.status().state, ClientState::Offline);
    assert_eq!(c.address(), None);
    assert_eq!(
        std::iter::from_fn(|| c.poll_event()).collect::<Vec<_>>(),
        vec![ClientEvent::Down("server does not answer")],
        "the interface must drop the address it held"
    );
}
