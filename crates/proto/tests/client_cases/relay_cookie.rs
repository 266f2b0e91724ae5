//! A relay's cookie (its answer to a first packet over its client-first budget,
//! `relay::cookie`) as shipworm's client meets it: the bubble its server passes on,
//! with the relay's endpoint as the origin, is answered with a direct bubble that echoes
//! the cookie, from the service port, to the relay; the relay enters the client at the
//! mapping that bubble comes from, and its next packet goes on.

use super::*;
use shipworm_proto::relay::{Relay, RelayConfig};
use shipworm_proto::Action;

/// Seen failing with the client's echo left out (`primary_echo` answering `None`):
/// the relay refused the answer as a bubble from a client it has no entry for.
#[test]
fn the_client_echoes_a_relays_cookie_and_the_relay_enters_it() {
    let (mut c, me) = qualified();
    let native = "2001:db8::5";
    let relay_at = sa("198.51.100.20:3544");
    let mut r = Relay::new(RelayConfig { client_first_per_s: 1, hash_keys: (7, 9), ..RelayConfig::default() });
    let mut rw = Recorder::default();
    // Another client's first packet takes the budget's one token.
    let other = TeredoAddr { mapped: sa("203.0.113.7:41000"), ..TeredoAddr::decode(&me).unwrap() }.to_ipv6();
    let _ = r.on_udp(secs(5), sa("203.0.113.7:41000"), &ipv6(&other.to_string(), native, 17, &[1; 8]), &mut rw);
    // Ours is over budget: a cookie goes to our server, P.
    let first = ipv6(&me.to_string(), native, 17, &[2; 8]);
    rw.sent.clear();
    assert_eq!(r.on_udp(secs(5), sa(M), &first, &mut rw), Err(DropReason::RateLimited));
    let cookie = rw.sent.iter().find(|s| s.to == SocketAddrV4::new(P, 3544)).expect("a cookie").payload.clone();
    // P passes it on to us, the relay's endpoint as the origin.
    let mut passed = vec![0u8; 8 + cookie.len()];
    let at = TeredoHeaderRepr { auth: None, origin: Some(relay_at) }.emit(&mut passed).unwrap();
    passed.truncate(at);
    passed.extend_from_slice(&cookie);
    let mut cw = Recorder::default();
    let _ = c.on_udp(secs(5), Via::Service, SocketAddrV4::new(P, 3544), &passed, &mut cw);
    let echo = cw.sent.iter().find(|s| s.to == relay_at).expect("a direct bubble to the relay");
    assert_eq!(echo.from, Source::Service);
    // It reaches the relay from our mapping: entered, and our next packet goes on.
    assert_eq!(r.on_udp(secs(5), sa(M), &echo.payload, &mut rw), Ok(Action::Consumed));
    assert_eq!(r.on_udp(secs(6), sa(M), &first, &mut rw), Ok(Action::Forwarded));
}
