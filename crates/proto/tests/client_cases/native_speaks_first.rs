use super::*;
use shipworm_proto::transmit::Sent;
use shipworm_proto::DropReason;

const HOST: &str = "2001:db8:1::100";
const RELAY: &str = "192.0.2.10:3544";
const RELAY2: &str = "203.0.113.20:3544";

/// The echo request of a connectivity test among `w.udp()`: (ident, seq, nonce).
fn echo_request(w: &Recorder, me: Ipv6Addr, to: &str) -> Option<(u16, u16, Vec<u8>)> {
    w.udp().iter().find_map(|(dst, b)| {
        let ip = Ipv6Packet::new_checked(&b[..]).ok()?;
        if *dst != SocketAddrV4::new(P, 3544) || ip.dst_addr() != a(to) || ip.next_header() != 58 {
            return None;
        }
        let icmp = Icmpv6Packet::new_checked(ip.payload()).ok()?;
        match Icmpv6Repr::parse(&me, &a(to), &icmp).ok()? {
            Icmpv6Repr::EchoRequest { ident, seq_no, data } => Some((ident, seq_no, data.to_vec())),
            _ => None,
        }
    })
}

/// How many connectivity-test echoes to HOST are among `w.udp()`.
fn echoes_to_host(w: &Recorder, me: Ipv6Addr) -> usize {
    w.udp()
        .iter()
        .filter(|(dst, b)| {
            let one = Recorder { sent: vec![Sent::service(*dst, b.clone())], ..Recorder::default() };
            echo_request(&one, me, HOST).is_some()
        })
        .count()
}

/// Our host sends to HOST every `step` from `from` until `until`, time passing (the
/// server answering refreshes) and nothing else answering: the echoes to HOST that
/// went out, and what the host was told back (ICMPv6 errors).
fn host_sends(c: &mut Client<Rng>, me: Ipv6Addr, from: Duration, until: Duration, step: Duration) -> (usize, usize) {
    let (mut echoes, mut told) = (0, 0);
    let mut t = from;
    while t < until {
        let mut w = Recorder::default();
        let _ = c.on_tun(t, &ipv6(&me.to_string(), HOST, 17, &[1; 8]), &mut w);
        c.on_timer(t, &mut w);
        serve(c, t, &w);
        echoes += echoes_to_host(&w, me);
        told += w.delivered.len();
        t += step;
    }
    (echoes, told)
}

/// Our host sends to HOST every 100 ms from 3 s, unanswered, `meanwhile` happening
/// before each packet: when the client first tests HOST through the server (within
/// 6 s).
fn when_tested(
    c: &mut Client<Rng>,
    me: Ipv6Addr,
    mut meanwhile: impl FnMut(&mut Client<Rng>, Duration),
) -> Option<Duration> {
    let mut t = secs(3);
    while t < secs(6) {
        meanwhile(c, t);
        let mut w = Recorder::default();
        let _ = c.on_tun(t, &ipv6(&me.to_string(), HOST, 17, &[1; 8]), &mut w);
        c.on_timer(t, &mut w);
        if echo_request(&w, me, HOST).is_some() {
            return Some(t);
        }
        t += ms(100);
    }
    None
}

/// The server's answers to whatever RS `w` holds, so the client stays qualified.
fn serve(c: &mut Client<Rng>, t: Duration, w: &Recorder) {
    for (to, rs) in &w.udp() {
        if *to == SocketAddrV4::new(P, 3544) {
            if let Some((from, ra)) = answer(P, Local::Primary, M, rs) {
                let _ = c.on_udp(t, Via::Service, from, &ra, &mut Recorder::default());
            }
        }
    }
}

fn echo_reply(from: &str, me: Ipv6Addr, (ident, seq_no, nonce): &(u16, u16, Vec<u8>)) -> Vec<u8> {
    let r = Icmpv6Repr::EchoReply { ident: *ident, seq_no: *seq_no, data: nonce };
    let mut b = vec![0u8; 40 + r.buffer_len()];
    Ipv6Repr { src_addr: a(from), dst_addr: me, next_header: 58, payload_len: r.buffer_len(), hop_limit: 60 }
        .emit(&mut b)
        .unwrap();
    r.emit(&a(from), &me, &mut b[40..]).unwrap();
    b
}

/// A SIP-like UDP datagram from `host` to the client.
fn datagram(host: &str, me: Ipv6Addr, tag: u8) -> Vec<u8> {
    ipv6(host, &me.to_string(), 17, &[tag; 64])
}

/// Time passes for `c` until `until`, with the server answering its refreshes
/// (same mapping), so it stays qualified.
fn idle(c: &mut Client<Rng>, from: Duration, until: Duration) {
    let mut t = from;
    while t < until {
        t += ms(500);
        let mut w = Recorder::default();
        c.on_timer(t, &mut w);
        for (to, rs) in w.udp() {
            if to == SocketAddrV4::new(P, 3544) {
                if let Some((from, ra)) = answer(P, Local::Primary, M, &rs) {
                    let _ = c.on_udp(t, Via::Service, from, &ra, &mut Recorder::default());
                }
            }
        }
    }
}

#[test]
fn held_then_tested_through_the_server_then_delivered_in_order() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let (first, second) = (datagram(HOST, me, 1), datagram(HOST, me, 2));
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &first, &mut w);
    assert!(w.delivered.is_empty(), "not delivered before the test");
    let echo = echo_request(&w, me, HOST).expect("an echo request to the host, through our server");
    assert!(echo.2.len() >= 8, "a 64-bit nonce at least");
    assert_eq!(w.udp().len(), 1, "one echo, nothing else");
    assert_eq!(c.status().first_contacts, 1);
    // A retransmission arrives before the answer: held too, no second echo at once.
    let _ = c.on_udp(secs(2) + ms(300), Via::Service, sa(RELAY), &second, &mut w);
    assert_eq!(w.udp().len(), 1);
    // The host answers meanwhile: the answer waits for the test too.
    let answer = ipv6(&me.to_string(), HOST, 17, &[9; 32]);
    let _ = c.on_tun(secs(2) + ms(400), &answer, &mut w);
    assert_eq!(w.udp().len(), 1, "nothing goes to an unproven relay");
    // The reply comes through the relay: both datagrams reach the host, in order,
    // and the answer leaves for the relay. The reply itself stays with the client.
    w = Recorder::default();
    let _ = c.on_udp(secs(2) + ms(500), Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(w.delivered, vec![first, second]);
    assert_eq!(w.udp(), vec![(sa(RELAY), answer)]);
    assert_eq!((c.stats().first_contacts, c.stats().first_contact_delivered), (1, 2));
    assert_eq!(c.status().first_contacts, 0);
    // From now on, straight through both ways.
    w = Recorder::default();
    let third = datagram(HOST, me, 3);
    let _ = c.on_udp(secs(3), Via::Service, sa(RELAY), &third, &mut w);
    assert_eq!(w.delivered, vec![third]);
    let _ = c.on_tun(secs(3), &ipv6(&me.to_string(), HOST, 17, &[8; 8]), &mut w);
    assert_eq!(w.udp().len(), 1);
    assert_eq!(w.udp()[0].0, sa(RELAY));
}

#[test]
fn a_test_that_gets_no_answer_tries_four_times_then_drops_and_counts() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &datagram(HOST, me, 1), &mut w);
    let mut echoes_at = vec![];
    if echo_request(&w, me, HOST).is_some() {
        echoes_at.push(2000);
    }
    for t in (2100..12_000).step_by(100) {
        let mut w = Recorder::default();
        c.on_timer(ms(t), &mut w);
        if echo_request(&w, me, HOST).is_some() {
            echoes_at.push(t);
        }
    }
    assert_eq!(echoes_at, vec![2000, 4000, 6000, 8000], "RFC 4380: 2 s apart, 3 repeats");
    assert!(w.delivered.is_empty());
    assert_eq!(c.status().first_contacts, 0, "given up");
    assert_eq!(c.stats().drops.get(DropReason::ConnectivityTestFailed), 1);
    // A late reply finds no test: it is not a key to anything.
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(13), Via::Service, sa(RELAY), &datagram(HOST, me, 2), &mut w);
    assert!(w.delivered.is_empty(), "a new first contact is held again");
    assert!(echo_request(&w, me, HOST).is_some(), "and tested afresh");
}

/// An off-path host forges one packet in the host's name just before the host's first
/// packet arrives through its relay (#40, 6): each endpoint's packets are held apart,
/// the test's reply through the relay delivers the genuine one, and the forged one is
/// dropped. One endpoint per source would have refused the genuine packets instead,
/// each time the host speaks first.
#[test]
fn a_forged_first_packet_does_not_shut_out_the_genuine_one() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY2), &datagram(HOST, me, 1), &mut w);
    let echo = echo_request(&w, me, HOST).unwrap();
    // More forgeries, from as many endpoints as there are places: they take no place
    // from the genuine packet either.
    let places = shipworm_proto::first_contact::ENDPOINTS_PER_SOURCE as u16;
    for i in 1..places {
        let from = SocketAddrV4::new("203.0.113.20".parse().unwrap(), 4000 + i);
        let _ = c.on_udp(secs(2) + ms(u64::from(i)), Via::Service, from, &datagram(HOST, me, 1), &mut w);
    }
    let genuine = datagram(HOST, me, 2);
    assert_eq!(c.on_udp(secs(2), Via::Service, sa(RELAY), &genuine, &mut w), Ok(shipworm_proto::Action::Queued));
    assert_eq!(echo_request(&w, me, HOST).map(|e| e.2), Some(echo.2.clone()), "one test for the source");
    w = Recorder::default();
    let _ = c.on_udp(secs(3), Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(w.delivered, vec![genuine], "what the relay brought, and only that");
    assert_eq!(c.stats().drops.get(DropReason::SourceMismatch), u64::from(places), "the forged ones");
    let _ = c.on_tun(secs(3), &ipv6(&me.to_string(), HOST, 17, &[8; 8]), &mut w);
    assert_eq!(w.udp()[0].0, sa(RELAY), "the proven relay carries the traffic");
}

#[test]
fn speaking_first_again_after_expiry_works_cold() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &datagram(HOST, me, 1), &mut w);
    let echo = echo_request(&w, me, HOST).unwrap();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(w.delivered.len(), 1);
    // Idle past the 30 s validity: the entry is stale, the same relay still serves.
    let t = secs(70);
    idle(&mut c, secs(2), t);
    w = Recorder::default();
    let _ = c.on_udp(t, Via::Service, sa(RELAY), &datagram(HOST, me, 2), &mut w);
    assert_eq!(w.delivered.len(), 1, "its relay is still known: delivered at once");
    let _ = c.on_tun(t, &ipv6(&me.to_string(), HOST, 17, &[8; 8]), &mut w);
    assert_eq!(w.udp().last().unwrap().0, sa(RELAY), "and answered directly");
    // Idle past the peer's lifetime (swept), then through another relay.
    let t = secs(470);
    idle(&mut c, secs(70), t);
    assert_eq!(c.address(), Some(me), "still qualified");
    assert_eq!(c.status().peers, 0, "swept");
    w = Recorder::default();
    let again = datagram(HOST, me, 3);
    let _ = c.on_udp(t, Via::Service, sa(RELAY2), &again, &mut w);
    assert!(w.delivered.is_empty());
    let echo = echo_request(&w, me, HOST).expect("tested again");
    let _ = c.on_udp(t + ms(1), Via::Service, sa(RELAY2), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(w.delivered, vec![again]);
}

#[test]
fn a_trusted_host_moving_to_another_relay_is_tested_and_followed() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &datagram(HOST, me, 1), &mut w);
    let echo = echo_request(&w, me, HOST).unwrap();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), &mut w);
    // The host's route changes: its packets come through RELAY2.
    w = Recorder::default();
    let moved = datagram(HOST, me, 2);
    let _ = c.on_udp(secs(5), Via::Service, sa(RELAY2), &moved, &mut w);
    assert!(w.delivered.is_empty());
    let echo = echo_request(&w, me, HOST).expect("tested");
    // Until the answer, the host's traffic still goes to the relay it had.
    let _ = c.on_tun(secs(5), &ipv6(&me.to_string(), HOST, 17, &[8; 8]), &mut w);
    assert_eq!(w.udp().last().unwrap().0, sa(RELAY));
    let _ = c.on_udp(secs(5) + ms(1), Via::Service, sa(RELAY2), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(w.delivered, vec![moved]);
    let _ = c.on_tun(secs(6), &ipv6(&me.to_string(), HOST, 17, &[8; 8]), &mut w);
    assert_eq!(w.udp().last().unwrap().0, sa(RELAY2));
}

/// A host trusted through RELAY, met cold (it spoke first).
fn trusted_through_relay() -> (Client<Rng>, Ipv6Addr) {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &datagram(HOST, me, 1), &mut w);
    let echo = echo_request(&w, me, HOST).unwrap();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(w.delivered.len(), 1);
    (c, me)
}

#[test]
fn a_host_whose_relay_went_silent_while_we_sent_is_tested_and_followed_to_its_new_relay() {
    let (mut c, me) = trusted_through_relay();
    let out = |n: u8| ipv6(&me.to_string(), HOST, 17, &[n; 8]);
    // RELAY dies at 3 s; the host sends nothing (our upload stalls): every 200 ms
    // our retransmission goes to RELAY, unanswered.
    let mut w = Recorder::default();
    let mut echo = None;
    let mut t = secs(3);
    while t <= secs(5) && echo.is_none() {
        let _ = c.on_tun(t, &out(1), &mut w);
        c.on_timer(t, &mut w);
        echo = echo_request(&w, me, HOST).map(|e| (t, e));
        t += ms(200);
    }
    let (tested_at, echo) = echo.expect("a silent host is tested again");
    assert_eq!(tested_at, secs(4), "one second after the first unanswered packet");
    assert_eq!(c.stats().silent_retests, 1);
    assert!(w.udp().iter().filter(|(to, _)| *to == sa(RELAY)).count() >= 6, "traffic kept going meanwhile");
    // While the test runs, nothing more is asked: one echo per try, not per packet.
    let mut w = Recorder::default();
    let _ = c.on_tun(tested_at + ms(100), &out(2), &mut w);
    c.on_timer(tested_at + ms(100), &mut w);
    assert!(echo_request(&w, me, HOST).is_none());
    assert_eq!(w.udp().last().unwrap().0, sa(RELAY), "the old relay until the answer");
    // Routing moved the host's side to RELAY2: the reply comes through it, and our
    // traffic follows.
    let _ = c.on_udp(tested_at + ms(150), Via::Service, sa(RELAY2), &echo_reply(HOST, me, &echo), &mut w);
    assert!(w.delivered.is_empty(), "the reply is ours, not the host's");
    let mut w = Recorder::default();
    let _ = c.on_tun(tested_at + ms(200), &out(3), &mut w);
    assert_eq!(w.udp(), vec![(sa(RELAY2), out(3))]);
    // And the host's packets through RELAY2 go straight in.
    let _ = c.on_udp(tested_at + ms(210), Via::Service, sa(RELAY2), &datagram(HOST, me, 4), &mut w);
    assert_eq!(w.delivered.len(), 1);
}

#[test]
fn bubbles_drawn_through_the_server_do_not_hold_off_the_test_of_a_silent_host() {
    let (mut c, me) = trusted_through_relay();
    // Someone has the server pass us a bubble in the host's name every 300 ms (each
    // answered at its origin) while our traffic to the host goes unanswered.
    let mut d = vec![0u8; 48];
    TeredoHeaderRepr { auth: None, origin: Some(sa("198.51.100.66:4444")) }.emit(&mut d).unwrap();
    emit_bubble(&a(HOST), &me, 0, &mut d[8..]).unwrap();
    let tested = when_tested(&mut c, me, |c, t| {
        if (t.as_millis() % 300) == 0 {
            let _ = c.on_udp(t, Via::Service, SocketAddrV4::new(P, 3544), &d, &mut Recorder::default());
        }
    });
    assert_eq!(tested, Some(secs(4)), "tested one second after our first unanswered packet");
}

#[test]
fn forged_first_contacts_spending_the_echo_budget_do_not_hold_off_the_test_of_a_silent_host() {
    let (mut c, me) = trusted_through_relay();
    let tested = when_tested(&mut c, me, |c, t| {
        let mut w = Recorder::default();
        // 50 forged native sources every 100 ms, through any endpoint.
        for i in 0..50u16 {
            let src = Ipv6Addr::new(0x2001, 0xdb8, 0xbad, 0, 0, 0, (t.as_millis() / 100) as u16, i).to_string();
            let _ = c.on_udp(t, Via::Service, sa("198.51.100.66:4444"), &datagram(&src, me, 0), &mut w);
        }
        // Their tests' retries take every echo the budget refills.
        c.on_timer(t, &mut w);
    });
    assert_eq!(tested, Some(secs(4)), "our own test goes out on time");
}

#[test]
fn silent_hosts_pushed_off_a_full_waiting_list_leave_room_for_later_tests() {
    // A waiting list of 4, and 8 native hosts trusted through RELAY (each spoke first).
    let mut cfg = ClientConfig::new(vec![ServerAddrs::new(P)]);
    cfg.local_discovery = false;
    cfg.pending_capacity = 4;
    let mut c = Client::new(cfg, Rng(0x1234_5678_9abc_def0));
    let me = up_address(&qualify(&mut c, secs(1), M, M, false));
    let hosts: Vec<String> = (0..8).map(|i| format!("2001:db8:1::2{i}")).collect();
    for h in &hosts {
        let mut w = Recorder::default();
        let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &datagram(h, me, 1), &mut w);
        let echo = echo_request(&w, me, h).expect("tested");
        let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &echo_reply(h, me, &echo), &mut w);
    }
    // The first four fall silent while we send: tested, the list full.
    let tested = |c: &mut Client<Rng>, from: Duration, to: Duration, hosts: &[String]| {
        let mut t = from;
        let mut n = 0;
        while t < to {
            let mut w = Recorder::default();
            for h in hosts {
                let _ = c.on_tun(t, &ipv6(&me.to_string(), h, 17, &[1; 8]), &mut w);
            }
            c.on_timer(t, &mut w);
            serve(c, t, &w);
            n += hosts.iter().filter(|h| echo_request(&w, me, h).is_some()).count();
            t += ms(100);
        }
        n
    };
    assert!(tested(&mut c, secs(3), ms(4500), &hosts[..4]) >= 4);
    // Four native sources speaking first push them off the list.
    for i in 0..4 {
        let src = format!("2001:db8:2::{i}");
        let _ = c.on_udp(ms(4500), Via::Service, sa(RELAY2), &datagram(&src, me, 1), &mut Recorder::default());
    }
    // Once those tests are over, the other four fall silent: each is tested.
    let quiet = |c: &mut Client<Rng>| {
        let mut t = ms(4600);
        while t < secs(13) {
            let mut w = Recorder::default();
            c.on_timer(t, &mut w);
            serve(c, t, &w);
            t += ms(100);
        }
    };
    quiet(&mut c);
    assert_eq!(tested(&mut c, secs(13), secs(15), &hosts[4..]), 4);
}

#[test]
fn a_silent_host_whose_test_fails_stays_with_its_relay() {
    let (mut c, me) = trusted_through_relay();
    // Four unanswered tries from 4 s to 10 s; the host still sends through RELAY
    // meanwhile, and the entry is valid until 32 s.
    let t = secs(11);
    let (echoes, _) = host_sends(&mut c, me, secs(3), t, ms(500));
    assert!(echoes >= 4, "{echoes} echoes");
    // The host speaks through RELAY again: taken, straight through.
    let mut w = Recorder::default();
    let _ = c.on_udp(t, Via::Service, sa(RELAY), &datagram(HOST, me, 9), &mut w);
    assert_eq!(w.delivered.len(), 1);
    let _ = c.on_tun(t, &ipv6(&me.to_string(), HOST, 17, &[2; 8]), &mut w);
    assert_eq!(w.udp().last().unwrap().0, sa(RELAY));
}

#[test]
fn a_host_that_answers_within_the_second_is_never_tested_again() {
    let (mut c, me) = trusted_through_relay();
    let mut echoes = 0;
    // Request and answer every 100 ms for 20 s, then after a 10-s pause a burst of 20
    // packets in 50 ms before the answer: all quick, no test.
    let mut t = secs(3);
    let mut w = Recorder::default();
    let exchange = |c: &mut Client<Rng>, t: Duration, burst: u8, w: &mut Recorder| {
        for n in 0..burst {
            let _ =
                c.on_tun(t + Duration::from_micros(2500 * u64::from(n)), &ipv6(&me.to_string(), HOST, 17, &[n; 8]), w);
        }
        let _ = c.on_udp(t + ms(60), Via::Service, sa(RELAY), &datagram(HOST, me, 1), w);
        c.on_timer(t + ms(60), w);
    };
    while t < secs(23) {
        exchange(&mut c, t, 1, &mut w);
        t += ms(100);
    }
    exchange(&mut c, secs(33), 20, &mut w);
    echoes += echoes_to_host(&w, me);
    assert_eq!((echoes, c.stats().silent_retests), (0, 0));
    assert!(w.udp().iter().all(|(to, _)| *to == sa(RELAY) || to.ip() == &P), "data to RELAY, refreshes to the server");
}

#[test]
fn a_host_that_only_listens_costs_one_echo_per_second_and_keeps_its_relay() {
    let (mut c, me) = trusted_through_relay();
    // One-way traffic for 10 s, one packet every 20 ms; each test is answered through
    // the same relay.
    let mut t = secs(3);
    let mut echoes = 0;
    while t < secs(13) {
        let mut w = Recorder::default();
        let _ = c.on_tun(t, &ipv6(&me.to_string(), HOST, 17, &[1; 8]), &mut w);
        c.on_timer(t, &mut w);
        if let Some(echo) = echo_request(&w, me, HOST) {
            echoes += 1;
            let _ = c.on_udp(t + ms(5), Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), &mut w);
        }
        assert!(w.udp().iter().all(|(to, _)| *to == sa(RELAY) || to.ip() == &P));
        t += ms(20);
    }
    assert!((9..=10).contains(&echoes), "{echoes} echoes in 10 s of one-way traffic");
}

#[test]
fn a_silent_host_with_no_relay_left_is_tested_a_bounded_number_of_times_then_expires() {
    let (mut c, me) = trusted_through_relay();
    // Nothing ever answers again; the host sends every 100 ms for a minute.
    let (echoes, refused) = host_sends(&mut c, me, secs(3), secs(63), ms(100));
    // Tests of 4 tries, 2 s apart, while the entry is valid (30 s), then the normal
    // course of an unknown destination: queued, tested, given up, the host told.
    assert!((8..=4 * 60 / 8 + 4).contains(&echoes), "{echoes} echoes in a minute");
    assert!(refused > 0, "the host is told the destination is unreachable");
}

#[test]
fn a_trusted_hosts_bubble_through_another_relay_is_answered_at_that_relay() {
    let (mut c, me) = trusted_through_relay();
    // Routing moved the host's side to RELAY2, which holds its packets and asks us
    // through our server (its origin indication).
    let mut d = vec![0u8; 48];
    TeredoHeaderRepr { auth: None, origin: Some(sa(RELAY2)) }.emit(&mut d).unwrap();
    emit_bubble(&a(HOST), &me, 0, &mut d[8..]).unwrap();
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(3), Via::Service, SocketAddrV4::new(P, 3544), &d, &mut w);
    assert_eq!(w.udp().len(), 1);
    assert_eq!(w.udp()[0].0, sa(RELAY2), "the relay holding the host's packets, not the one we trusted");
    // What RELAY2 then brings is tested before it counts, and followed.
    let moved = datagram(HOST, me, 2);
    let _ = c.on_udp(secs(3) + ms(1), Via::Service, sa(RELAY2), &moved, &mut w);
    let echo = echo_request(&w, me, HOST).expect("tested");
    let _ = c.on_udp(secs(3) + ms(2), Via::Service, sa(RELAY2), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(w.delivered, vec![moved]);
}

#[test]
fn a_forged_packet_through_another_relay_cannot_unseat_a_trusted_host() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &datagram(HOST, me, 1), &mut w);
    let echo = echo_request(&w, me, HOST).unwrap();
    let _ = c.on_udp(secs(2), Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), &mut w);
    // Someone sends as HOST through RELAY2; the test it starts gets no answer.
    let _ = c.on_udp(secs(3), Via::Service, sa(RELAY2), &datagram(HOST, me, 2), &mut w);
    let mut t = secs(3);
    while t < secs(14) {
        t += ms(100);
        c.on_timer(t, &mut Recorder::default());
    }
    assert_eq!(c.stats().drops.get(DropReason::ConnectivityTestFailed), 1, "the forged packet is dropped");
    let mut w = Recorder::default();
    let _ = c.on_tun(t, &ipv6(&me.to_string(), HOST, 17, &[8; 8]), &mut w);
    // Still trusted via RELAY. (Silent for 12 s while the forged test's echoes went
    // unanswered, the host is tested again too; the genuine one would answer through
    // RELAY.)
    assert_eq!(w.udp()[0], (sa(RELAY), ipv6(&me.to_string(), HOST, 17, &[8; 8])), "still trusted via RELAY");
    assert_eq!(w.udp().len(), 2);
    assert!(echo_request(&w, me, HOST).is_some(), "and the silent host tested through the server");
}

#[test]
fn a_flood_of_forged_first_contacts_stays_within_every_budget() {
    let (mut c, me) = qualified();
    let limits = shipworm_proto::first_contact::FirstContactLimits::default();
    let mut echoes = 0;
    let mut peak = 0;
    // 20 000 forged native sources in 2 s, two packets each, through one endpoint.
    for i in 0..20_000u32 {
        let t = secs(2) + Duration::from_micros(u64::from(i) * 100);
        let src = Ipv6Addr::new(0x2001, 0xdb8, 0xbad, 0, 0, 0, (i >> 16) as u16, i as u16).to_string();
        let mut w = Recorder::default();
        for tag in 0..2 {
            let _ = c.on_udp(t, Via::Service, sa("198.51.100.66:4444"), &datagram(&src, me, tag), &mut w);
        }
        if i % 1000 == 0 {
            c.on_timer(t, &mut w);
        }
        echoes += w.udp().len();
        assert!(w.delivered.is_empty(), "nothing forged reaches the host");
        peak = peak.max(c.status().first_contacts);
        assert!(c.status().peers <= limits.sources + 1, "forged sources over budget take no peer entry");
    }
    assert!(peak <= limits.sources, "{peak} sources waiting, cap {}", limits.sources);
    // Over 2 s the echo budget allows its burst and two seconds' refill.
    assert!(echoes <= 3 * limits.tests_per_sec as usize, "{echoes} echoes");
    let d = &c.stats().drops;
    assert!(d.get(DropReason::FirstContactBudget) > 30_000, "over-budget packets are counted");
    // The flood's tests expire; a real host then gets through at once.
    let mut t = secs(4);
    for _ in 0..120 {
        t += ms(100);
        c.on_timer(t, &mut Recorder::default());
    }
    assert_eq!(c.status().first_contacts, 0);
    let mut w = Recorder::default();
    let real = datagram(HOST, me, 7);
    let _ = c.on_udp(t, Via::Service, sa(RELAY), &real, &mut w);
    let echo = echo_request(&w, me, HOST).expect("tested");
    let _ = c.on_udp(t, Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(w.delivered, vec![real]);
}

#[test]
fn a_teredo_source_with_another_mapping_is_still_refused() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8";
    let _ =
        c.on_udp(secs(2), Via::Service, sa("198.51.100.99:3544"), &ipv6(peer, &me.to_string(), 17, &[0; 8]), &mut w);
    assert!(w.delivered.is_empty() && w.udp().is_empty(), "Teredo peers prove themselves by bubbles, not echoes");
}

/// The same hosts with a kernel data path.
#[path = "kernel_path.rs"]
mod kernel_path;
