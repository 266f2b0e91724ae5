//! The relay cut into shards, used by several threads at once (the daemon's workers).

use super::*;
use shipworm_proto::relay::SharedRelay;
use shipworm_wire::teredo_addr::{Flags, TeredoAddr};
use std::net::Ipv4Addr;

/// Client `i`: served by 65.54.227.120, mapped 198.51.100.(i / 60000 + 1):(i % 60000 + 1024).
fn client(i: u32) -> (Ipv6Addr, SocketAddrV4) {
    let mapped = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, (i / 60_000 + 1) as u8), (i % 60_000 + 1024) as u16);
    let t = TeredoAddr {
        prefix: shipworm_wire::teredo_addr::PREFIX,
        server: Ipv4Addr::new(65, 54, 227, 120),
        flags: Flags(0),
        mapped,
    };
    (t.to_ipv6(), mapped)
}

#[test]
fn workers_on_threads_serve_their_peers_through_shared_shards() {
    // 2000 new peers of one server in the same instant: more than one target's
    // burst of bubbles, which is not what this test is about.
    let cfg = RelayConfig { hash_keys: (3, 4), bubbles_per_target: (10_000, 10_000), ..RelayConfig::default() };
    let shared = SharedRelay::new(cfg, 16);
    assert_eq!(shared.shards(), 16);
    const PER_THREAD: u32 = 500;
    let totals: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u32)
            .map(|t| {
                let shared = &shared;
                s.spawn(move || {
                    let mut worker = shared.worker();
                    let mut w = Recorder::default();
                    let now = secs(10);
                    for i in t * PER_THREAD..(t + 1) * PER_THREAD {
                        let (addr, mapped) = client(i);
                        let dst = addr.to_string();
                        let p = udp_packet(NATIVE, &dst);
                        assert_eq!(shared.on_tun(&mut worker, now, &p, &mut w), Ok(Action::Queued));
                        let v = shared.on_udp(&mut worker, now, mapped, &bubble(&dst, NATIVE), &mut w);
                        assert_eq!(v, Ok(Action::Consumed));
                        // The queued packet left for the mapping the bubble came from.
                        assert_eq!(w.sent.last().map(|s| (s.to, s.payload.clone())), Some((mapped, p.clone())));
                        // Now both ways without bubbles.
                        assert_eq!(shared.on_tun(&mut worker, now, &p, &mut w), Ok(Action::Forwarded));
                        let back = udp_packet(&dst, NATIVE);
                        assert_eq!(shared.on_udp(&mut worker, now, mapped, &back, &mut w), Ok(Action::Forwarded));
                    }
                    worker.stats().clone()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut sum = shipworm_proto::relay::RelayStats::default();
    for t in &totals {
        sum.add(t);
    }
    let n = 4 * u64::from(PER_THREAD);
    assert_eq!((sum.to_teredo, sum.to_ipv6, sum.bubbles, sum.drops.total()), (2 * n, n, n, 0));
    assert_eq!(shared.peer_count(), n as usize);
    assert_eq!(shared.pending_len(), 0);
    assert!(shared.peer(&client(7).0).is_some_and(|p| p.trusted && p.mapped == client(7).1));
}

#[test]
fn past_the_caches_a_batch_is_fetched_ahead_and_served_alike() {
    use shipworm_proto::relay::FETCH_AHEAD_FROM;
    let cfg = RelayConfig { capacity: 200_000, per_address: 200_000, hash_keys: (7, 8), ..RelayConfig::default() };
    let shared = SharedRelay::new(cfg, 4);
    let mut worker = shared.worker();
    let mut w = Recorder::default();
    let n = FETCH_AHEAD_FROM as u32;
    for i in 0..n {
        let (addr, mapped) = client(i);
        let dst = addr.to_string();
        let _ = shared.on_tun(&mut worker, secs(10), &udp_packet(NATIVE, &dst), &mut w);
        let _ = shared.on_udp(&mut worker, secs(10), mapped, &bubble(&dst, NATIVE), &mut w);
        w.sent.clear();
        if i == n - 2 {
            shared.on_timer(&mut worker, secs(10), &mut w);
            assert!(!shared.fetches_ahead(), "one peer short of the threshold");
        }
    }
    shared.on_timer(&mut worker, secs(11), &mut w);
    assert!(shared.fetches_ahead());
    // A batch: every datagram's entry fetched ahead, then each handled as ever,
    // garbage and strangers included.
    let batch: Vec<(SocketAddrV4, Vec<u8>)> = (0..64u32)
        .map(|k| {
            let (addr, mapped) = client(k * 2000);
            (mapped, udp_packet(&addr.to_string(), NATIVE))
        })
        .chain([(client(0).1, vec![0x60; 7]), (client(n + 5).1, bubble(&client(n + 5).0.to_string(), NATIVE))])
        .collect();
    for (_, d) in &batch {
        shared.prefetch_udp(d);
    }
    let verdicts: Vec<shipworm_proto::Outcome> =
        batch.iter().map(|(from, d)| shared.on_udp(&mut worker, secs(12), *from, d, &mut w)).collect();
    assert!(verdicts[..64].iter().all(|v| *v == Ok(Action::Forwarded)), "{verdicts:?}");
    assert!(verdicts[64].is_err());
    assert_eq!(verdicts[65], Err(DropReason::NoPeerEntry));
    assert_eq!(shared.peer_count(), n as usize);
}

#[test]
fn a_flood_from_two_threads_keeps_every_cap_and_the_established_peers() {
    let cfg = RelayConfig { capacity: 1000, pending_capacity: 64, hash_keys: (5, 6), ..RelayConfig::default() };
    let shared = SharedRelay::new(cfg, 8);
    let mut worker = shared.worker();
    let mut w = Recorder::default();
    for i in 0..50 {
        let (addr, mapped) = client(i);
        let _ = shared.on_tun(&mut worker, secs(10), &udp_packet(NATIVE, &addr.to_string()), &mut w);
        assert_eq!(
            shared.on_udp(&mut worker, secs(10), mapped, &bubble(&addr.to_string(), NATIVE), &mut w),
            Ok(Action::Consumed)
        );
    }
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let shared = &shared;
            s.spawn(move || {
                let mut worker = shared.worker();
                let mut w = Recorder::default();
                for i in 0..50_000u32 {
                    let (addr, _) = client(1000 + t * 50_000 + i);
                    let _ = shared.on_tun(&mut worker, secs(11), &udp_packet(NATIVE, &addr.to_string()), &mut w);
                    w.sent.clear();
                }
            });
        }
    });
    assert!(shared.peer_count() <= 1000, "{} peers", shared.peer_count());
    assert!(shared.pending_len() <= 64, "{} waiting", shared.pending_len());
    for i in 0..50 {
        let (addr, mapped) = client(i);
        w.sent.clear();
        let v = shared.on_tun(&mut worker, secs(12), &udp_packet(NATIVE, &addr.to_string()), &mut w);
        assert_eq!((v, w.sent[0].to), (Ok(Action::Forwarded), mapped), "established peer {i}");
    }
}

#[test]
fn shards_keep_a_working_share_of_each_cap() {
    use shipworm_proto::relay::{MIN_SHARD_PEERS, MIN_SHARD_PENDING};
    let shared = SharedRelay::new(RelayConfig { capacity: 3 * MIN_SHARD_PEERS, ..RelayConfig::default() }, 64);
    assert_eq!(shared.shards(), 3);
    let cfg = RelayConfig { pending_capacity: 5 * MIN_SHARD_PENDING, ..RelayConfig::default() };
    assert_eq!(SharedRelay::new(cfg, 64).shards(), 5);
    // A tiny table is one shard: 16 peers stay 16 usable places.
    let small = SharedRelay::new(RelayConfig { capacity: 16, ..RelayConfig::default() }, 128);
    assert_eq!(small.shards(), 1);
}

#[test]
fn peers_spread_over_the_shards() {
    let shared = SharedRelay::new(RelayConfig { hash_keys: (11, 12), ..RelayConfig::default() }, 16);
    let mut worker = shared.worker();
    let mut w = Recorder::default();
    for i in 0..1600 {
        let _ = shared.on_tun(&mut worker, secs(1), &udp_packet(NATIVE, &client(i).0.to_string()), &mut w);
    }
    let lens = shared.shard_lens();
    assert_eq!(lens.iter().sum::<usize>(), 1600);
    assert!(lens.iter().all(|&n| (50..=150).contains(&n)), "uneven: {lens:?}");
}

#[test]
fn the_timer_repeats_bubbles_and_gives_up_in_every_shard() {
    let cfg = RelayConfig { icmp_source: Some(a("2001:db8::ff")), icmp_rate: 1000, ..RelayConfig::default() };
    let shared = SharedRelay::new(cfg, 16);
    let mut worker = shared.worker();
    let mut w = Recorder::default();
    for i in 0..200 {
        let _ = shared.on_tun(&mut worker, secs(1), &udp_packet(NATIVE, &client(i).0.to_string()), &mut w);
    }
    assert_eq!(shared.pending_len(), 200);
    w.sent.clear();
    shared.on_timer(&mut worker, secs(3), &mut w);
    assert_eq!(w.sent.len(), 200, "one repeated bubble per waiting peer, whatever its shard");
    for t in [5, 7, 9, 11] {
        shared.on_timer(&mut worker, secs(t), &mut w);
    }
    assert_eq!((shared.peer_count(), worker.stats().unreachable_peers), (0, 200));
    assert_eq!(w.delivered.len(), 200, "an address-unreachable for each queued packet");
}

#[test]
fn a_bubble_answer_on_another_thread_releases_the_queue() {
    // The daemon's usual case: the native packet arrives on one worker's TUN queue,
    // the client's bubble on another worker's socket.
    let shared = SharedRelay::new(RelayConfig::default(), 16);
    let (addr, mapped) = client(42);
    let p = udp_packet(NATIVE, &addr.to_string());
    let mut tun_side = shared.worker();
    let mut w = Recorder::default();
    assert_eq!(shared.on_tun(&mut tun_side, secs(1), &p, &mut w), Ok(Action::Queued));
    let sent = std::thread::scope(|s| {
        s.spawn(|| {
            let mut udp_side = shared.worker();
            let mut w2 = Recorder::default();
            let v = shared.on_udp(&mut udp_side, secs(1), mapped, &bubble(&addr.to_string(), NATIVE), &mut w2);
            assert_eq!(v, Ok(Action::Consumed));
            w2.sent
        })
        .join()
        .unwrap()
    });
    assert_eq!(sent, vec![Sent::service(mapped, p.clone())]);
    assert_eq!(shared.on_tun(&mut tun_side, secs(1), &p, &mut w), Ok(Action::Forwarded));
}
