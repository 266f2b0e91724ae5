//! The client's next deadline (`poll_timeout`): what the daemon sleeps until. An idle
//! client wakes for its refresh, not on a fixed tick; a peer waited for wakes it at its
//! next bubble. With `poll_timeout` answering "a tick from now" (100 ms, the old fixed
//! period) the first two cases fail; the world of `two_clients` (every NAT pair's
//! calls, run from deadline to deadline) fails when a deadline is missing (seen with
//! the waiting list's left out: the Server Load Reduction case stalls).

use super::*;

#[test]
fn an_idle_qualified_client_sleeps_until_its_refresh() {
    let (mut c, _) = qualified();
    let mut w = Recorder::default();
    // Coming up announces on the link and repeats it: those are due first, a few
    // wake-ups (a fixed 100 ms tick would make some 190 by 20 s).
    let (mut now, mut wakes) = (secs(1), 0);
    while let Some(t) = c.poll_timeout().filter(|&t| t < secs(20)) {
        now = t.max(now);
        c.on_timer(now, &mut w);
        wakes += 1;
        assert!(wakes <= 5, "woke {wakes} times by {now:?}");
    }
    let next = c.poll_timeout().expect("a qualified client refreshes");
    // RFC 4380 §5.2.7: the refresh interval (30 s, randomised a little).
    assert!(next <= secs(1 + 30), "next deadline {next:?}");
    let before = w.sent.len();
    c.on_timer(next - ms(1), &mut w);
    assert_eq!(w.sent.len(), before, "nothing is due before the deadline");
    c.on_timer(next, &mut w);
    assert!(w.sent.len() > before, "the refresh goes at the deadline");
}

#[test]
fn a_waiting_peer_is_due_at_its_next_bubble() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let peer = a("2001:0:4136:e378:0:f227:39cc:9bf8");
    let mut p = vec![0u8; 40];
    Ipv6Repr { src_addr: me, dst_addr: peer, next_header: 59, payload_len: 0, hop_limit: 64 }.emit(&mut p).unwrap();
    let now = secs(3);
    let _ = c.on_tun(now, &p, &mut w);
    let bubbles =
        |w: &Recorder| w.udp().iter().filter(|(_, p)| TeredoPacket::parse(p).is_ok_and(|p| p.is_bubble())).count();
    let first = bubbles(&w);
    assert!(first > 0, "the first bubbles go at once");
    // Due at once (the list took the peer), then at its next try 2 s on.
    while c.poll_timeout().is_some_and(|d| d <= now) {
        c.on_timer(now, &mut w);
    }
    let next = c.poll_timeout().expect("a waiting peer");
    assert_eq!(next, now + secs(2), "the next try RFC 4380 §5.2.6 spaces 2 s on");
    c.on_timer(next, &mut w);
    assert!(bubbles(&w) > first, "bubbled again at its deadline");
}
