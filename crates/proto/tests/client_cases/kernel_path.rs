//! The client with a kernel data path: the kernel's peer list holds exactly the peers
//! the client would send to straight and take packets from without a test, and what
//! the kernel heard and sent counts when the client judges a peer.

use super::*;
use shipworm_proto::transmit::KernelModel;

fn kernel_client() -> (Client<Rng>, Ipv6Addr) {
    let mut cfg = ClientConfig::new(vec![ServerAddrs::new(P)]);
    cfg.local_discovery = false;
    cfg.kernel_path = true;
    let mut c = Client::new(cfg, Rng(0x1234_5678_9abc_def0));
    let me = up_address(&qualify(&mut c, secs(1), M, M, false));
    // The daemon gave the programs the address, as it does once it configured it.
    c.set_kernel_address(Some(me));
    (c, me)
}

fn listed(w: &Recorder) -> Vec<(Ipv6Addr, SocketAddrV4)> {
    w.kernel.as_ref().unwrap().peers.iter().map(|(a, (m, _))| (*a, *m)).collect()
}

fn with_kernel() -> Recorder {
    Recorder { kernel: Some(KernelModel::default()), ..Recorder::default() }
}

/// The server answers `c`'s refreshes while time passes, the kernel list in `w`.
fn keep_qualified(c: &mut Client<Rng>, w: &mut Recorder, at: Duration) {
    w.sent.clear();
    c.on_timer_answered(at, w);
    for (to, rs) in w.udp() {
        if to == SocketAddrV4::new(P, 3544) {
            if let Some((from, ra)) = answer(P, Local::Primary, M, &rs) {
                let _ = c.on_udp_answered(at, Via::Service, from, &ra, w);
            }
        }
    }
}

/// HOST speaks first through RELAY at 2 s, and the test it gets proves it.
fn host_proved(c: &mut Client<Rng>, me: Ipv6Addr, w: &mut Recorder) {
    let _ = c.on_udp_answered(secs(2), Via::Service, sa(RELAY), &datagram(HOST, me, 1), w);
    let echo = echo_request(w, me, HOST).unwrap();
    let _ = c.on_udp_answered(secs(2), Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), w);
}

#[test]
fn a_host_is_listed_once_its_test_proved_it_and_leaves_the_list_while_tested_again() {
    let (mut c, me) = kernel_client();
    let mut w = with_kernel();
    let _ = c.on_udp_answered(secs(2), Via::Service, sa(RELAY), &datagram(HOST, me, 1), &mut w);
    let echo = echo_request(&w, me, HOST).expect("a cold host is tested");
    assert!(listed(&w).is_empty(), "not before the test's answer: the echo reply must reach the client");
    let _ = c.on_udp_answered(secs(2), Via::Service, sa(RELAY), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(listed(&w), vec![(a(HOST), sa(RELAY))]);
    assert_eq!(c.kernel_peers(), 1);

    // The kernel carries the exchange for a while: the host stays valid and is not
    // swept, though the client itself heard nothing since 2 s.
    let mut t = secs(2);
    while t < secs(340) {
        t += secs(5);
        w.kernel.as_mut().unwrap().hear(&a(HOST), t);
        keep_qualified(&mut c, &mut w, t);
    }
    assert_eq!(c.status().peers, 1, "heard by the kernel: not idle");
    assert_eq!(listed(&w), vec![(a(HOST), sa(RELAY))]);

    // RELAY dies: the kernel sends on, unanswered, and after a second passes the
    // host's packets up. The client tests the host at once, from the kernel's first
    // unanswered send, and takes it off the list while the test runs.
    w.kernel.as_mut().unwrap().send(&a(HOST), t + ms(100));
    w.sent.clear();
    let up = t + ms(1200);
    let _ = c.on_tun_answered(up, &ipv6(&me.to_string(), HOST, 17, &[7; 8]), &mut w);
    let echo = echo_request(&w, me, HOST).expect("tested at once: silent for over a second");
    assert_eq!(c.stats().silent_retests, 1);
    assert!(listed(&w).is_empty(), "off the list while tested");
    assert_eq!(w.udp().iter().filter(|(to, _)| *to == sa(RELAY)).count(), 1, "the packet still went to RELAY");

    // The reply comes through RELAY2: listed there.
    let _ = c.on_udp_answered(up + ms(50), Via::Service, sa(RELAY2), &echo_reply(HOST, me, &echo), &mut w);
    assert_eq!(listed(&w), vec![(a(HOST), sa(RELAY2))]);
}

#[test]
fn a_host_the_kernel_heard_from_is_not_tested_for_silence() {
    let (mut c, me) = kernel_client();
    let mut w = with_kernel();
    host_proved(&mut c, me, &mut w);
    // The kernel sent at 10 s and heard the answer at 10.05 s; at 20 s a packet comes
    // up (the kernel had a reason of its own): no test, no leaving the list.
    let k = w.kernel.as_mut().unwrap();
    k.send(&a(HOST), secs(10));
    k.hear(&a(HOST), secs(10) + ms(50));
    w.sent.clear();
    let _ = c.on_tun_answered(secs(20), &ipv6(&me.to_string(), HOST, 17, &[7; 8]), &mut w);
    assert!(echo_request(&w, me, HOST).is_none());
    assert_eq!(c.stats().silent_retests, 0);
    assert_eq!(w.udp().len(), 1, "sent through RELAY");
    assert_eq!(listed(&w), vec![(a(HOST), sa(RELAY))]);
    // A packet sent first by userland while the host was silent past 30 s (by the
    // kernel's clock too) is not straight: the host is tested, and off the list.
    w.sent.clear();
    let _ = c.on_tun_answered(secs(45), &ipv6(&me.to_string(), HOST, 17, &[7; 8]), &mut w);
    assert!(echo_request(&w, me, HOST).is_some(), "stale: tested");
    assert!(listed(&w).is_empty());
}

#[test]
fn a_teredo_peer_at_its_embedded_mapping_is_listed_and_every_peer_goes_with_the_servers() {
    let (mut c, me) = kernel_client();
    let mut w = with_kernel();
    // A Teredo peer's packet from the mapping its address embeds (RFC 4380 §5.2.3
    // rule 3): trusted there at once.
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8"; // mapped 198.51.100.7:3544
    let from = TeredoAddr::decode(&a(peer)).unwrap().mapped;
    let _ = c.on_udp_answered(secs(2), Via::Service, from, &ipv6(peer, &me.to_string(), 17, &[1; 16]), &mut w);
    assert_eq!(w.delivered.len(), 1);
    assert_eq!(listed(&w), vec![(a(peer), from)]);
    // Other servers: every peer goes, from the kernel's list as soon as the client
    // next runs.
    c.set_servers(vec![ServerAddrs::new(Q)]);
    c.on_timer_answered(secs(3), &mut w);
    assert!(listed(&w).is_empty());
    assert_eq!(c.kernel_peers(), 0);
}

#[test]
fn a_full_table_keeps_a_peer_only_the_kernel_hears_from() {
    let mut cfg = ClientConfig::new(vec![ServerAddrs::new(P)]);
    (cfg.local_discovery, cfg.kernel_path, cfg.peer_capacity) = (false, true, 2);
    let mut c = Client::new(cfg, Rng(0x1234_5678_9abc_def0));
    let me = up_address(&qualify(&mut c, secs(1), M, M, false));
    c.set_kernel_address(Some(me));
    let me = me.to_string();
    let mut w = with_kernel();
    let peer = |i: u16| TeredoAddr {
        prefix: 0x2001_0000,
        server: P,
        flags: Default::default(),
        mapped: SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 4000 + i),
    };
    let hello = |c: &mut Client<Rng>, w: &mut Recorder, i: u16, at: Duration| {
        let t = peer(i);
        let _ = c.on_udp_answered(at, Via::Service, t.mapped, &ipv6(&t.to_ipv6().to_string(), &me, 17, &[1; 8]), w);
    };
    hello(&mut c, &mut w, 1, secs(2));
    assert_eq!(c.kernel_peers(), 1);
    // A minute of traffic only the kernel sees, the client ticking.
    let mut t = secs(2);
    while t < secs(62) {
        t += secs(1);
        w.kernel.as_mut().unwrap().hear(&peer(1).to_ipv6(), t);
        keep_qualified(&mut c, &mut w, t);
    }
    // Two newcomers; the table holds two: the second is refused, not peer 1 pushed out.
    hello(&mut c, &mut w, 2, t);
    hello(&mut c, &mut w, 3, t);
    assert!(listed(&w).iter().any(|(a, _)| *a == peer(1).to_ipv6()), "peer 1 kept: {:?}", listed(&w));
    assert_eq!(c.status().peers, 2);
}

#[test]
fn nobody_is_listed_before_the_programs_have_the_clients_address() {
    let mut cfg = ClientConfig::new(vec![ServerAddrs::new(P)]);
    (cfg.local_discovery, cfg.kernel_path) = (false, true);
    let mut c = Client::new(cfg, Rng(0x1234_5678_9abc_def0));
    let me = up_address(&qualify(&mut c, secs(1), M, M, false));
    let mut w = with_kernel();
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8";
    let from = TeredoAddr::decode(&a(peer)).unwrap().mapped;
    let hello = |c: &mut Client<Rng>, w: &mut Recorder, at: Duration| {
        let _ = c.on_udp_answered(at, Via::Service, from, &ipv6(peer, &me.to_string(), 17, &[1; 16]), w);
    };
    hello(&mut c, &mut w, secs(2));
    assert_eq!(w.delivered.len(), 1, "delivered by the client meanwhile");
    assert!(listed(&w).is_empty(), "the programs still match another address (or none)");
    // The old address given, not the new one: still nobody.
    c.set_kernel_address(Some(a("2001:0:4136:e378:8000:63bf:3fff:fdd2")));
    hello(&mut c, &mut w, secs(3));
    assert!(listed(&w).is_empty());
    c.set_kernel_address(Some(me));
    hello(&mut c, &mut w, secs(4));
    assert_eq!(listed(&w), vec![(a(peer), from)]);
}

#[test]
fn without_a_kernel_path_nothing_is_listed() {
    let (mut c, me) = qualified();
    let mut w = with_kernel();
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8";
    let from = TeredoAddr::decode(&a(peer)).unwrap().mapped;
    let _ = c.on_udp_answered(secs(2), Via::Service, from, &ipv6(peer, &me.to_string(), 17, &[1; 16]), &mut w);
    assert_eq!(w.delivered.len(), 1);
    assert!(listed(&w).is_empty());
}

/// A host whose answers all come through the daemon (a relay on the same machine leaves
/// their checksums to be taken, so the programs pass them up) while the kernel sends
/// to it: the kernel's last-heard time keeps up, so the programs never take the host
/// for silent (a second after their first unanswered send) and pass its packets up
/// for a test it does not need.
#[test]
fn a_host_heard_only_through_the_daemon_is_never_silent_to_the_kernel() {
    let (mut c, me) = kernel_client();
    let mut w = with_kernel();
    host_proved(&mut c, me, &mut w);
    assert_eq!(listed(&w), vec![(a(HOST), sa(RELAY))]);
    // A call: the kernel sends every 20 ms, each answered 30 ms later through the daemon.
    let start = secs(2) + ms(1);
    for k in 0..250u32 {
        let t = start + ms(20) * k;
        let (heard, sent) = {
            let m = w.kernel.as_mut().unwrap();
            m.send(&a(HOST), t);
            let heard = m.peers[&a(HOST)].1;
            (heard, m.sent.get(&a(HOST)).copied().filter(|&s| s > heard))
        };
        if let Some(sent) = sent {
            assert!(
                t < sent + secs(1),
                "at {t:?} the kernel took the host for silent: heard {heard:?}, unanswered since {sent:?}"
            );
        }
        // The answer to the send 30 ms ago.
        if k >= 2 {
            let _ = c.on_udp_answered(t + ms(10), Via::Service, sa(RELAY), &datagram(HOST, me, k as u8), &mut w);
        }
    }
    assert_eq!(c.stats().silent_retests, 0);
    assert_eq!(listed(&w), vec![(a(HOST), sa(RELAY))]);
}

/// What the kernel heard itself is not written back to it: the write would clear its
/// first unanswered send since, and with it the programs' count towards silence.
#[test]
fn the_kernels_own_last_heard_time_is_not_written_back_over_its_unanswered_send() {
    let (mut c, me) = kernel_client();
    let mut w = with_kernel();
    host_proved(&mut c, me, &mut w);
    let m = w.kernel.as_mut().unwrap();
    m.hear(&a(HOST), secs(3));
    m.send(&a(HOST), secs(3) + ms(10));
    // A packet the programs pass up (one the daemon must judge) makes the client read
    // the kernel's times back.
    let _ = c.on_tun_answered(secs(3) + ms(500), &ipv6(&me.to_string(), HOST, 17, &[7; 8]), &mut w);
    let m = w.kernel.as_ref().unwrap();
    assert_eq!(m.peers[&a(HOST)].1, secs(3), "the kernel's own time");
    assert_eq!(m.sent.get(&a(HOST)), Some(&(secs(3) + ms(10))), "its unanswered send kept");
}
