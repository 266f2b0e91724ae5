//! RFC 4380 §5.2.6: no more than 4 bubbles of a kind to a peer in 300 s without a direct
//! answer.

use super::*;

/// The timer at `now`, the server answering every refresh the client sends (from the
/// `seen`th datagram on): the client stays qualified however long a case runs.
fn tick_served(c: &mut Client<Rng>, w: &mut Recorder, now: Duration, seen: &mut usize) {
    c.on_timer(now, w);
    let sent: Vec<(SocketAddrV4, Vec<u8>)> = w.udp()[*seen..].to_vec();
    *seen = w.udp().len();
    for (to, p) in sent {
        let bubble = TeredoPacket::parse(&p).is_ok_and(|p| p.is_bubble());
        if to == SocketAddrV4::new(P, 3544) && !bubble {
            if let Some((from, ra)) = answer(P, Local::Primary, M, &p) {
                let _ = c.on_udp(now, Via::Service, from, &ra, w);
            }
        }
    }
    *seen = w.udp().len();
}

/// RFC 4380 §5.2.6: no more than 4 bubbles of a kind to a peer in 300 s without a
/// direct answer, however often the host sends to it: the entry is given up after its
/// tries and made again by the host's next packet, and the count goes on across them.
/// With the budget taken out (every `spend` allowed) this case sees 27 of each in the
/// minute (seen: the client then bubbles every other second, as issue #59 measured from
/// outside: 31).
#[test]
fn a_host_pinging_a_silent_teredo_peer_gets_at_most_four_bubbles_of_each_kind_in_300_s() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let mut seen = 0;
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8"; // mapped 198.51.100.7:3544, server P
    let counts = |w: &Recorder| {
        let bubbles = |to: SocketAddrV4| {
            w.udp().iter().filter(|(t, p)| *t == to && TeredoPacket::parse(p).is_ok_and(|p| p.is_bubble())).count()
        };
        (bubbles(sa("198.51.100.7:3544")), bubbles(SocketAddrV4::new(P, 3544)))
    };
    // Once a second for 60 s, the timer every 250 ms.
    for t in (10_000..70_000u64).step_by(250) {
        if t % 1000 == 0 {
            let _ = c.on_tun(ms(t), &ipv6(&me.to_string(), peer, 58, &[128, 0, 0, 0, 0, 1, 0, 1]), &mut w);
        }
        tick_served(&mut c, &mut w, ms(t), &mut seen);
    }
    assert_eq!(counts(&w), (4, 4), "direct and indirect bubbles in the first minute");
    assert!(c.stats().bubbles_withheld > 0, "the tries went on, their bubbles withheld");
    // Still none until 300 s after the first went (at 10 s).
    for t in (70_000..309_000u64).step_by(1000) {
        let _ = c.on_tun(ms(t), &ipv6(&me.to_string(), peer, 58, &[128, 0, 0, 0, 0, 1, 0, 1]), &mut w);
        tick_served(&mut c, &mut w, ms(t), &mut seen);
    }
    assert_eq!(counts(&w), (4, 4), "none more within 300 s of the first");
    for t in (310_000..320_000u64).step_by(1000) {
        let _ = c.on_tun(ms(t), &ipv6(&me.to_string(), peer, 58, &[128, 0, 0, 0, 0, 1, 0, 1]), &mut w);
        tick_served(&mut c, &mut w, ms(t), &mut seen);
    }
    let (d, i) = counts(&w);
    assert!(d > 4 && i > 4 && d <= 8 && i <= 8, "the first bubbles' window passed: ({d}, {i})");
}

/// A direct answer starts the count over: a peer that answered, then fell silent, is
/// bubbled again (a Server Load Reduction solicitation, a direct bubble) when the host
/// needs it, within 300 s of the four it was sent before. With the answer not counted
/// (`answered` taken out) no bubble goes to it then (seen).
#[test]
fn a_direct_answer_gives_the_peer_its_four_bubbles_again() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let mut seen = 0;
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8";
    let mapped = sa("198.51.100.7:3544");
    let bubbles_to_mapping = |w: &Recorder| {
        w.udp().iter().filter(|(t, p)| *t == mapped && TeredoPacket::parse(p).is_ok_and(|p| p.is_bubble())).count()
    };
    for t in (10_000..30_000u64).step_by(250) {
        if t % 1000 == 0 {
            let _ = c.on_tun(ms(t), &ipv6(&me.to_string(), peer, 17, &[0; 8]), &mut w);
        }
        tick_served(&mut c, &mut w, ms(t), &mut seen);
    }
    assert_eq!(bubbles_to_mapping(&w), 4, "its four");
    // It answers directly from the mapping its address embeds, then falls silent.
    let _ = c.on_udp(ms(30_000), Via::Service, mapped, &bubble(peer, &me.to_string()), &mut w);
    let before = bubbles_to_mapping(&w);
    for t in (30_250..80_000u64).step_by(250) {
        if t >= 65_000 && t % 1000 == 0 {
            let _ = c.on_tun(ms(t), &ipv6(&me.to_string(), peer, 17, &[0; 8]), &mut w);
        }
        tick_served(&mut c, &mut w, ms(t), &mut seen);
    }
    assert!(bubbles_to_mapping(&w) > before, "the answered peer is bubbled again once silent");
}
