//! The relay against the black-box cases 41–48 of the requirements reference and
//! RFC 4380 §5.4, in virtual time.

use shipworm_proto::relay::{Relay, RelayConfig, Served};
use shipworm_proto::transmit::{Recorder, Sent};
use shipworm_proto::Action;
use shipworm_proto::DropReason;
use shipworm_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use shipworm_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use shipworm_wire::teredo_packet::{emit_bubble, TeredoPacket};
use std::net::{Ipv6Addr, SocketAddrV4};
use std::time::Duration;

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}
fn sa(s: &str) -> SocketAddrV4 {
    s.parse().unwrap()
}
fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Client B: served by 65.54.227.120, mapped 198.51.100.7:3544, cone bit clear.
const B: &str = "2001:0:4136:e378:0:f227:39cc:9bf8";
const B_MAPPED: &str = "198.51.100.7:3544";
const B_SERVER: &str = "65.54.227.120:3544";
const NATIVE: &str = "2001:db8::5";

fn relay() -> Relay {
    Relay::new(RelayConfig { icmp_source: Some(a("2001:db8::ff")), hash_keys: (7, 9), ..RelayConfig::default() })
}

fn ipv6(src: &str, dst: &str, nh: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 40];
    Ipv6Repr { src_addr: a(src), dst_addr: a(dst), next_header: nh, payload_len: payload.len(), hop_limit: 64 }
        .emit(&mut v)
        .unwrap();
    v.extend_from_slice(payload);
    v
}

fn udp_packet(src: &str, dst: &str) -> Vec<u8> {
    ipv6(src, dst, 17, &[0x12, 0x34, 0x56, 0x78, 0, 8, 0, 0])
}

fn bubble(src: &str, dst: &str) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    emit_bubble(&a(src), &a(dst), 0, &mut b).unwrap();
    b
}

/// Bring B to trusted: a native packet, then B's answering bubble.
fn establish(r: &mut Relay, w: &mut Recorder, now: Duration) {
    assert_eq!(r.on_tun(now, &udp_packet(NATIVE, B), w), Ok(Action::Queued));
    assert_eq!(r.on_udp(now, sa(B_MAPPED), &bubble(B, NATIVE), w), Ok(Action::Consumed));
}

#[test]
fn case41_queue_bubble_via_server_then_flush_to_the_mapping() {
    let mut r = relay();
    let mut w = Recorder::default();
    let pkt = udp_packet(NATIVE, B);
    assert_eq!(r.on_tun(secs(100), &pkt, &mut w), Ok(Action::Queued));
    // One indirect bubble, to B's server, from a link-local address of the relay's
    // (RFC 4380 §5.4.1: "a local IPv6 address") to B.
    assert_eq!(w.sent.len(), 1);
    let Sent { to, payload: b, .. } = &w.sent[0];
    assert_eq!(*to, sa(B_SERVER));
    let p = TeredoPacket::parse(b).unwrap();
    assert!(p.is_bubble());
    assert!(p.ipv6.src_addr().is_unicast_link_local() && p.ipv6.dst_addr() == a(B));
    assert!(w.delivered.is_empty());
    // B answers with a bubble from its mapping: the queued packet goes there, intact.
    w.sent.clear();
    assert_eq!(r.on_udp(secs(101), sa(B_MAPPED), &bubble(B, NATIVE), &mut w), Ok(Action::Consumed));
    assert_eq!(w.sent, vec![Sent::service(sa(B_MAPPED), pkt.clone())]);
    assert!(w.delivered.is_empty(), "bubbles are never delivered");
    // From now on, straight to the mapping.
    w.sent.clear();
    assert_eq!(r.on_tun(secs(102), &pkt, &mut w), Ok(Action::Forwarded));
    assert_eq!(w.sent, vec![Sent::service(sa(B_MAPPED), pkt)]);
    assert_eq!(r.pending_len(), 0);
}

#[test]
fn restricted_mode_also_bubbles_the_mapping_directly() {
    let mut r = Relay::new(RelayConfig { direct_bubbles: true, ..RelayConfig::default() });
    let mut w = Recorder::default();
    let _ = r.on_tun(secs(100), &udp_packet(NATIVE, B), &mut w);
    let mut to: Vec<SocketAddrV4> = w.sent.iter().map(|s| s.to).collect();
    to.sort();
    assert_eq!(to, vec![sa(B_SERVER), sa(B_MAPPED)]);
    // The nonce goes only through the server: whoever sits at the mapping (another
    // host behind the same address, maybe) does not see it.
    let direct = w.sent.iter().find(|s| s.to == sa(B_MAPPED)).unwrap();
    assert!(TeredoPacket::parse(&direct.payload).unwrap().trailers.is_empty());
    let indirect = w.sent.iter().find(|s| s.to == sa(B_SERVER)).unwrap();
    assert!(!TeredoPacket::parse(&indirect.payload).unwrap().trailers.is_empty());
}

#[test]
fn trusted_client_reaches_the_native_side() {
    let mut r = relay();
    let mut w = Recorder::default();
    establish(&mut r, &mut w, secs(10));
    w.delivered.clear();
    let up = udp_packet(B, NATIVE);
    assert_eq!(r.on_udp(secs(11), sa(B_MAPPED), &up, &mut w), Ok(Action::Forwarded));
    assert_eq!(w.delivered, vec![up]);
}

#[test]
fn case42_non_teredo_source_is_dropped() {
    let mut r = relay();
    let mut w = Recorder::default();
    let v = r.on_udp(secs(1), sa(B_MAPPED), &udp_packet("2001:db8::5", "2001:db8::6"), &mut w);
    assert_eq!(v, Err(DropReason::SourceMismatch));
    assert!(w.delivered.is_empty() && w.sent.is_empty());
}

/// Case 43: a Teredo source whose embedded mapping is not where it came from is never
/// forwarded on its word. From another address: dropped. From another port of the
/// address it embeds, for a client trusted at the embedded mapping: held while the
/// port is proved (a bubble with a nonce through the client's server, as for a
/// symmetric-NAT client's first packet), and let go unproved; nothing is delivered
/// and nothing answers the sender. (Dropped outright, a forged first packet from the
/// embedded mapping locked a symmetric-NAT client out: see
/// `a_proved_port_is_kept_against_the_embedded_mapping_forged`.)
#[test]
fn case43_mapping_mismatch_is_dropped() {
    let mut r = relay();
    let mut w = Recorder::default();
    establish(&mut r, &mut w, secs(10));
    w.delivered.clear();
    w.sent.clear();
    let v = r.on_udp(secs(11), sa("203.0.113.7:3544"), &udp_packet(B, NATIVE), &mut w);
    assert_eq!(v, Err(DropReason::SourceMismatch));
    let other_port = sa("198.51.100.7:3545");
    // Within the bubbles' spacing of the exchange, not even a proof starts.
    assert_eq!(r.on_udp(secs(11), other_port, &udp_packet(B, NATIVE), &mut w), Err(DropReason::SourceMismatch));
    assert_eq!(r.on_udp(secs(13), other_port, &udp_packet(B, NATIVE), &mut w), Ok(Action::Queued));
    assert!(w.sent.iter().all(|s| s.to != other_port), "nothing to the sender");
    assert!(w.sent.iter().any(|s| s.to == sa(B_SERVER)), "a bubble through B's server");
    for t in 14..=22 {
        r.on_timer(secs(t), &mut w);
    }
    // The proof failed: B stays trusted where it was, reached there (a stranger's packet
    // from another port does not cost it its entry).
    w.sent.clear();
    assert_eq!(r.on_tun(secs(23), &udp_packet(NATIVE, B), &mut w), Ok(Action::Forwarded));
    assert_eq!(w.sent.last().map(|s| s.to), Some(sa(B_MAPPED)));
    assert!(w.delivered.is_empty());
    assert!(w.sent.iter().all(|s| s.to != other_port), "nothing to the sender");
}

#[test]
fn symmetric_nat_client_is_learned_from_its_bubble() {
    let mut r = relay();
    let mut w = Recorder::default();
    let pkt = udp_packet(NATIVE, B);
    assert_eq!(r.on_tun(secs(10), &pkt, &mut w), Ok(Action::Queued));
    // B answers our bubble as RFC 4380 clients do: to its source.
    let ours = TeredoPacket::parse(&w.sent[0].payload).unwrap().ipv6.src_addr();
    w.sent.clear();
    // Data from another port is still refused, and so is a bubble addressed elsewhere
    // (anyone behind B's address could send it); the answering bubble is not.
    let other = sa("198.51.100.7:61000");
    assert_eq!(r.on_udp(secs(10), other, &udp_packet(B, NATIVE), &mut w), Err(DropReason::SourceMismatch));
    assert_eq!(r.on_udp(secs(10), other, &bubble(B, NATIVE), &mut w), Err(DropReason::SourceMismatch));
    assert_eq!(r.on_udp(secs(10), other, &bubble(B, &ours.to_string()), &mut w), Ok(Action::Consumed));
    assert_eq!(w.sent, vec![Sent::service(other, pkt.clone())], "queue flushed to the learned port");
    // From now on that port is the peer's, both ways.
    assert_eq!(r.on_udp(secs(11), other, &udp_packet(B, NATIVE), &mut w), Ok(Action::Forwarded));
    w.sent.clear();
    assert_eq!(r.on_tun(secs(11), &pkt, &mut w), Ok(Action::Forwarded));
    assert_eq!(w.sent[0].to, other);
    // A bubble from another IPv4 address is never accepted.
    let mut r = relay();
    let _ = r.on_tun(secs(10), &pkt, &mut w);
    let v = r.on_udp(secs(10), sa("203.0.113.5:61000"), &bubble(B, NATIVE), &mut w);
    assert_eq!(v, Err(DropReason::SourceMismatch));
}

/// RFC 4380 §5.4.2: a client's own first packet, from the mapping its address embeds,
/// enters it (trusted) and goes on; the way back needs no bubble. This is how a relay
/// sharing an anycast address takes over the clients of one that went (#42). A bubble
/// from a stranger enters nothing.
#[test]
fn a_clients_own_first_packet_from_its_embedded_mapping_enters_it() {
    let mut r = relay();
    let mut w = Recorder::default();
    assert_eq!(r.on_udp(secs(1), sa(B_MAPPED), &bubble(B, NATIVE), &mut w), Err(DropReason::NoPeerEntry));
    assert_eq!(r.peer_count(), 0);
    let up = udp_packet(B, NATIVE);
    assert_eq!(r.on_udp(secs(1), sa(B_MAPPED), &up, &mut w), Ok(Action::Forwarded));
    assert_eq!(w.delivered, vec![up]);
    assert!(w.sent.is_empty(), "no bubble for a client whose mapping its address proves");
    let down = udp_packet(NATIVE, B);
    assert_eq!(r.on_tun(secs(2), &down, &mut w), Ok(Action::Forwarded));
    assert_eq!(w.sent, vec![Sent::service(sa(B_MAPPED), down)]);
    // Not from another address, nor to what a client may not reach.
    let mut r = relay();
    let v = r.on_udp(secs(1), sa("203.0.113.5:3544"), &udp_packet(B, NATIVE), &mut w);
    assert_eq!(v, Err(DropReason::SourceMismatch));
    assert_eq!(r.on_udp(secs(1), sa(B_MAPPED), &udp_packet(B, "fe80::1"), &mut w), Err(DropReason::NotServed));
    assert_eq!(r.on_udp(secs(1), sa(B_MAPPED), &udp_packet(B, "ff0e::1"), &mut w), Err(DropReason::NotServed));
    assert_eq!(r.peer_count(), 0, "a refused packet enters nobody");
}

/// A client behind a symmetric NAT speaks first from another port than its address
/// embeds: its packets are held, a bubble with a nonce goes through its server, and
/// the direct bubble echoing the nonce from that port proves it: the held packets go
/// on, in order, and the port is the client's both ways. Unproved, they are let go.
#[test]
fn a_symmetric_nat_clients_first_packets_are_held_until_its_port_is_proved() {
    use shipworm_wire::teredo_trailer::{trailer_type, TrailerRepr};
    let mut r = relay();
    let mut w = Recorder::default();
    let port = sa("198.51.100.7:61000");
    let (first, second) = (ipv6(B, NATIVE, 17, &[1; 8]), ipv6(B, NATIVE, 17, &[2; 8]));
    assert_eq!(r.on_udp(secs(1), port, &first, &mut w), Ok(Action::Queued));
    assert_eq!(r.on_udp(secs(1), port, &second, &mut w), Ok(Action::Queued), "held too, not proved yet");
    // Held or not, a packet goes only where a client's may.
    assert_eq!(r.on_udp(secs(1), port, &udp_packet(B, "fe80::1"), &mut w), Err(DropReason::NotServed));
    assert_eq!(r.on_udp(secs(1), port, &udp_packet(B, "2001:0:1:2::3"), &mut w), Err(DropReason::NotServed));
    // Someone behind the same address, from another port, in B's name: held, but a
    // bubble without the nonce proves nothing here, and what it sent never leaves.
    let other = sa("198.51.100.7:62000");
    assert_eq!(r.on_udp(secs(1), other, &udp_packet(B, NATIVE), &mut w), Ok(Action::Queued));
    assert_eq!(r.on_udp(secs(1), other, &bubble(B, NATIVE), &mut w), Err(DropReason::SourceMismatch));
    assert!(w.delivered.is_empty());
    let indirect = w.sent.pop().expect("a bubble through the client's server");
    assert_eq!(indirect.to, sa(B_SERVER));
    let p = TeredoPacket::parse(&indirect.payload).unwrap();
    assert!(
        p.ipv6.src_addr().is_unicast_link_local() && p.ipv6.dst_addr() == a(B),
        "from a link-local address of ours"
    );
    let Some(TrailerRepr::Nonce(nonce)) = p.trailers.get(trailer_type::NONCE) else { panic!("no nonce") };
    let mut echo = bubble(B, NATIVE);
    echo.extend_from_slice(&[1, 4]);
    echo.extend_from_slice(&nonce);
    assert_eq!(r.on_udp(secs(1), port, &echo, &mut w), Ok(Action::Consumed));
    assert_eq!(w.delivered, vec![first, second.clone()], "the held packets go on once the port is proved");
    assert_eq!(r.on_udp(secs(2), port, &second, &mut w), Ok(Action::Forwarded));
    w.sent.clear();
    let down = udp_packet(NATIVE, B);
    assert_eq!(r.on_tun(secs(2), &down, &mut w), Ok(Action::Forwarded));
    assert_eq!(w.sent, vec![Sent::service(port, down)]);
    // Never proved: the held packets go after 2 s, and more than a source's share (4 a
    // shard) push its oldest out; nothing is delivered.
    let mut r = relay();
    let mut w = Recorder::default();
    for i in 0..40u8 {
        assert_eq!(r.on_udp(secs(10), port, &ipv6(B, NATIVE, 17, &[i; 8]), &mut w), Ok(Action::Queued));
    }
    assert_eq!(r.stats().drops.get(DropReason::QueueFull), 36, "4 held, the 36 oldest pushed out");
    let c = "2001:0:4136:e378:0:f227:39cc:9bf7";
    for i in 0..40u8 {
        let from = SocketAddrV4::new("198.51.100.8".parse().unwrap(), 20_000 + u16::from(i));
        let _ = r.on_udp(secs(10), from, &ipv6(c, NATIVE, 17, &[i; 8]), &mut w);
    }
    r.on_timer(secs(13), &mut w);
    let pushed_out = r.stats().drops.get(DropReason::QueueFull);
    assert!(pushed_out >= 8);
    // Past the bubbles' rounds (4 × 2 s) the held packets are let go, counted as such
    // (not as a full queue, which said nothing of why).
    r.on_timer(secs(19), &mut w);
    assert_eq!(r.stats().drops.get(DropReason::PortNotProved), 8, "the held ones let go");
    assert_eq!(r.stats().drops.get(DropReason::QueueFull), pushed_out);
    assert!(w.delivered.is_empty());
}

/// The Teredo address of a client of B's server, cone bit clear, mapped at `mapped`.
fn served_by_b_server(mapped: SocketAddrV4) -> String {
    let (p, m) = (!mapped.port(), mapped.ip().octets().map(|o| !o));
    format!("2001:0:4136:e378:0:{p:x}:{:x}:{:x}", u16::from_be_bytes([m[0], m[1]]), u16::from_be_bytes([m[2], m[3]]))
}

/// Entries a client's own packet makes come at a bounded rate: a forger of UDP sources
/// cannot fill the table that way.
#[test]
fn clients_entered_by_their_own_packets_come_at_a_bounded_rate() {
    let mut r = Relay::new(RelayConfig { client_first_per_s: 10, hash_keys: (7, 9), ..RelayConfig::default() });
    let mut w = Recorder::default();
    let client = |k: u16| {
        let mapped = SocketAddrV4::new(std::net::Ipv4Addr::new(198, 51, 100, 7 + k as u8), 10_000 + k);
        (served_by_b_server(mapped), mapped)
    };
    let mut verdicts = Vec::new();
    for k in 0..30 {
        let (addr, mapped) = client(k);
        verdicts.push(r.on_udp(secs(5), mapped, &udp_packet(&addr, NATIVE), &mut w));
    }
    assert_eq!(verdicts.iter().filter(|v| **v == Ok(Action::Forwarded)).count(), 10, "{verdicts:?}");
    assert!(verdicts[10..].iter().all(|v| *v == Err(DropReason::RateLimited)));
    assert_eq!(r.peer_count(), 10);
    let (addr, mapped) = client(100);
    assert_eq!(r.on_udp(secs(6), mapped, &udp_packet(&addr, NATIVE), &mut w), Ok(Action::Forwarded), "a second later");
    // One public address spends a tenth of the budget in a burst, not all of it.
    let mut r = Relay::new(RelayConfig { client_first_per_s: 100, hash_keys: (7, 9), ..RelayConfig::default() });
    let one = |k: u16| {
        let mapped = SocketAddrV4::new(std::net::Ipv4Addr::new(198, 51, 100, 7), 10_000 + k);
        (served_by_b_server(mapped), mapped)
    };
    let entered = (0..50).filter(|&k| {
        let (addr, mapped) = one(k);
        r.on_udp(secs(5), mapped, &udp_packet(&addr, NATIVE), &mut w) == Ok(Action::Forwarded)
    });
    assert_eq!(entered.count(), 10);
    let (addr, mapped) = client(200);
    assert_eq!(
        r.on_udp(secs(5), mapped, &udp_packet(&addr, NATIVE), &mut w),
        Ok(Action::Forwarded),
        "others still enter"
    );
}

#[test]
fn case44_non_global_embedded_addresses_get_no_udp() {
    let mut r = relay();
    let mut w = Recorder::default();
    // Mapped 224.0.0.1, 255.255.255.255, 192.88.99.1, 0.0.0.0 (inverted in the address).
    for dst in [
        "2001:0:4136:e378:0:f227:1fff:fffe",
        "2001:0:4136:e378:0:f227:0:0",
        "2001:0:4136:e378:0:f227:3fa7:9cfe",
        "2001:0:4136:e378:0:f227:ffff:ffff",
        "2001:0:0:0:0:f227:39cc:9bf8", // server 0.0.0.0
    ] {
        let v = r.on_tun(secs(1), &udp_packet(NATIVE, dst), &mut w);
        assert_eq!(v, Err(DropReason::DestinationMappingNotGlobal), "{dst}");
    }
    assert!(w.sent.is_empty());
}

#[test]
fn case45_destinations_outside_the_served_range_are_dropped() {
    let mut r = Relay::new(RelayConfig { served: Served::Only(vec![a("2001:db8::5")]), ..RelayConfig::default() });
    let mut w = Recorder::default();
    establish(&mut r, &mut w, secs(10));
    w.delivered.clear();
    for dst in ["2001:db8::6", "fe80::1", "ff0e::1"] {
        let v = r.on_udp(secs(11), sa(B_MAPPED), &udp_packet(B, dst), &mut w);
        assert_eq!(v, Err(DropReason::NotServed), "{dst}");
    }
    assert_eq!(r.on_udp(secs(11), sa(B_MAPPED), &udp_packet(B, "2001:db8::5"), &mut w), Ok(Action::Forwarded));
    assert_eq!(w.delivered.len(), 1);
    // A full relay still refuses Teredo, link-local and multicast destinations.
    let mut r = relay();
    establish(&mut r, &mut w, secs(10));
    for dst in ["2001:0:4136:e378::1", "fe80::1", "ff02::1"] {
        let v = r.on_udp(secs(11), sa(B_MAPPED), &udp_packet(B, dst), &mut w);
        assert_eq!(v, Err(DropReason::NotServed), "{dst}");
    }
}

/// A host-specific relay serves the host's addresses as they are now: one added later
/// (SLAAC, a temporary address) is served, one removed is not, and the list is capped.
#[test]
fn a_host_specific_relay_follows_the_hosts_addresses() {
    use shipworm_proto::relay::HOST_ADDRESSES_CAP;
    let mut r = Relay::new(RelayConfig { served: Served::Only(vec![a("2001:db8::5")]), ..RelayConfig::default() });
    let mut w = Recorder::default();
    establish(&mut r, &mut w, secs(10));
    let to = |r: &mut Relay, w: &mut Recorder, dst: &str| r.on_udp(secs(11), sa(B_MAPPED), &udp_packet(B, dst), w);
    assert_eq!(to(&mut r, &mut w, "2001:db8::7"), Err(DropReason::NotServed));
    assert!(r.set_served(&[a("2001:db8::5"), a("2001:db8::7")]));
    assert_eq!(to(&mut r, &mut w, "2001:db8::7"), Ok(Action::Forwarded));
    assert!(r.set_served(&[a("2001:db8::7")]));
    assert_eq!(to(&mut r, &mut w, "2001:db8::5"), Err(DropReason::NotServed));
    // A host with more addresses than the cap: the rest are not served, and it says so.
    let many: Vec<Ipv6Addr> =
        (0..HOST_ADDRESSES_CAP as u16 + 10).map(|i| Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, i)).collect();
    assert!(!r.set_served(&many));
    assert_eq!(to(&mut r, &mut w, "2001:db8:9::1"), Ok(Action::Forwarded));
    let past = Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, HOST_ADDRESSES_CAP as u16 + 1).to_string();
    assert_eq!(to(&mut r, &mut w, &past), Err(DropReason::NotServed));
    // A relay serving any destination is not narrowed.
    let mut r = relay();
    establish(&mut r, &mut w, secs(10));
    assert!(r.set_served(&[a("2001:db8::7")]));
    assert_eq!(to(&mut r, &mut w, "2001:db8::8"), Ok(Action::Forwarded));
}

#[test]
fn case46_unresponsive_peer_queue_is_capped_and_the_entry_dropped() {
    let mut r = relay();
    let mut w = Recorder::default();
    let big = ipv6(NATIVE, B, 17, &[0u8; 1240]);
    assert_eq!(big.len(), 1280);
    let mut queued = 0;
    for _ in 0..100 {
        if r.on_tun(secs(100), &big, &mut w) == Ok(Action::Queued) {
            queued += 1;
        }
    }
    assert_eq!(queued, 3, "4096 bytes hold three 1280-byte packets");
    assert_eq!(r.stats().drops.get(DropReason::QueueFull), 97);
    // Bubbles at 0, 2, 4, 6 s, never closer; then the peer is given up.
    let mut times = vec![100u64];
    for t in (1000..=110_000u64).step_by(250) {
        let before = r.stats().bubbles;
        r.on_timer(Duration::from_millis(t), &mut w);
        if r.stats().bubbles > before {
            times.push(t / 1000);
        }
    }
    assert_eq!(times, vec![100, 102, 104, 106]);
    assert_eq!(r.peer_count(), 0, "entry removed");
    assert_eq!(r.stats().unreachable_peers, 1);
    // Each queued packet earned an address-unreachable (UDP, so allowed), ≤ 1280 bytes.
    assert_eq!(w.delivered.len(), 3);
    for e in &w.delivered {
        assert!(e.len() <= 1280);
        let ip = Ipv6Packet::new_checked(&e[..]).unwrap();
        assert_eq!(ip.dst_addr(), a(NATIVE));
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert!(matches!(
            Icmpv6Repr::parse(&ip.src_addr(), &ip.dst_addr(), &icmp).unwrap(),
            Icmpv6Repr::DstUnreachable { code: 3, .. }
        ));
    }
}

/// RFC 4380 §5.2.6 across entries: a native host sending to a silent client once a
/// second for a minute gets 4 bubbles sent (and in `restricted` mode 4 direct ones),
/// none more within 300 s of the first, though the entry is given up and made anew by
/// its next packets; an answer starts the count over. With the budget taken out (every
/// `spend` allowed) this case sees 27 of each kind in the minute (seen).
#[test]
fn a_silent_client_gets_four_bubbles_of_each_kind_in_300_s_however_often_it_is_sent_to() {
    let mut r = Relay::new(RelayConfig { direct_bubbles: true, hash_keys: (7, 9), ..RelayConfig::default() });
    let mut w = Recorder::default();
    let count = |w: &Recorder, to: &str| w.sent.iter().filter(|s| s.to == sa(to)).count();
    let run = |r: &mut Relay, w: &mut Recorder, from_ms: u64, to_ms: u64| {
        for t in (from_ms..to_ms).step_by(250) {
            if t % 1000 == 0 {
                let _ = r.on_tun(Duration::from_millis(t), &udp_packet(NATIVE, B), w);
            }
            r.on_timer(Duration::from_millis(t), w);
        }
    };
    run(&mut r, &mut w, 100_000, 160_000);
    assert_eq!((count(&w, B_SERVER), count(&w, B_MAPPED)), (4, 4), "indirect and direct in the first minute");
    assert!(r.stats().unreachable_peers > 1, "the entry was given up and made again");
    assert!(r.stats().bubbles_withheld > 0);
    run(&mut r, &mut w, 160_000, 399_000);
    assert_eq!((count(&w, B_SERVER), count(&w, B_MAPPED)), (4, 4), "none more within 300 s of the first");
    run(&mut r, &mut w, 400_000, 410_000);
    let (i, d) = (count(&w, B_SERVER), count(&w, B_MAPPED));
    assert!(i > 4 && d > 4 && i <= 8 && d <= 8, "after the first bubbles' window: ({i}, {d})");
    // The client answers: counted from nothing again, bubbled at once when needed.
    let _ = r.on_udp(Duration::from_millis(410_000), sa(B_MAPPED), &bubble(B, NATIVE), &mut w);
    assert_eq!(r.pending_len(), 0);
}

/// A client's direct answer starts its count over at the relay: answered after its
/// four bubbles, then silent, it is bubbled again within 300 s of them when a native
/// packet comes for it. (With the answer not counted no bubble goes: seen.)
#[test]
fn a_clients_answer_gives_it_four_bubbles_again() {
    let mut r = relay();
    let mut w = Recorder::default();
    let to_server = |w: &Recorder| w.sent.iter().filter(|s| s.to == sa(B_SERVER)).count();
    for t in (100_000..110_000u64).step_by(250) {
        if t % 1000 == 0 {
            let _ = r.on_tun(Duration::from_millis(t), &udp_packet(NATIVE, B), &mut w);
        }
        r.on_timer(Duration::from_millis(t), &mut w);
    }
    assert_eq!(to_server(&w), 4, "its four");
    let _ = r.on_tun(Duration::from_millis(120_000), &udp_packet(NATIVE, B), &mut w);
    assert_eq!(
        r.on_udp(Duration::from_millis(120_100), sa(B_MAPPED), &bubble(B, NATIVE), &mut w),
        Ok(Action::Consumed)
    );
    let before = to_server(&w);
    // Silent for more than 30 s, then needed again: bubbled (through its server).
    for t in (120_250..200_000u64).step_by(250) {
        if t >= 170_000 && t % 1000 == 0 {
            let _ = r.on_tun(Duration::from_millis(t), &udp_packet(NATIVE, B), &mut w);
        }
        r.on_timer(Duration::from_millis(t), &mut w);
    }
    assert!(to_server(&w) > before, "the client that answered is bubbled again");
}

#[test]
fn case47_no_error_about_an_error() {
    let mut r = relay();
    let mut w = Recorder::default();
    let err = ipv6(NATIVE, B, 58, &[1, 3, 0, 0, 0, 0, 0, 0]);
    let _ = r.on_tun(secs(100), &err, &mut w);
    for t in 101..120 {
        r.on_timer(secs(t), &mut w);
    }
    assert_eq!(r.stats().unreachable_peers, 1);
    assert!(w.delivered.is_empty(), "no ICMPv6 error about an ICMPv6 error");
}

#[test]
fn case48_errors_are_rate_limited() {
    let mut r = relay();
    let mut w = Recorder::default();
    // 1000 packets to non-Teredo destinations: routing errors, at most 10 per second.
    for i in 0..1000u32 {
        let dst = format!("2001:db8:1::{:x}", i + 1);
        let _ = r.on_tun(secs(50) + Duration::from_micros(u64::from(i)), &udp_packet(NATIVE, &dst), &mut w);
    }
    assert!(w.delivered.len() <= 10, "{} errors", w.delivered.len());
    assert!(!w.delivered.is_empty());
    assert!(w.delivered.iter().all(|e| e.len() <= 1280));
}

#[test]
fn bubbles_stop_at_four_per_300_seconds() {
    let mut r = relay();
    let mut w = Recorder::default();
    // Data keeps arriving every 500 ms for a peer that never answers; the peer is
    // given up after four bubbles and re-created, but bubbles stay ≥ 2 s apart.
    let mut last = None;
    for ms in (0..20_000u64).step_by(500) {
        let now = secs(1000) + Duration::from_millis(ms);
        let before = w.sent.len();
        let _ = r.on_tun(now, &udp_packet(NATIVE, B), &mut w);
        r.on_timer(now, &mut w);
        if w.sent.len() > before {
            if let Some(l) = last {
                assert!(now - l >= Duration::from_secs(2), "bubbles {:?} apart", now - l);
            }
            last = Some(now);
        }
    }
}

#[test]
fn flood_of_new_destinations_keeps_established_peers_served() {
    let mut r = Relay::new(RelayConfig { capacity: 1000, pending_capacity: 64, ..RelayConfig::default() });
    let mut w = Recorder::default();
    establish(&mut r, &mut w, secs(10));
    // 100 000 packets to 100 000 made-up clients (all with global mappings).
    for i in 0..100_000u32 {
        let m = i.to_be_bytes();
        let dst = format!(
            "2001:0:4136:e378:0:f227:{:x}:{:x}",
            0x3900 | u16::from(m[1]),
            u16::from_be_bytes([m[2], m[3]]) | 0x100
        );
        let _ = r.on_tun(secs(11), &udp_packet(NATIVE, &dst), &mut w);
    }
    assert!(r.pending_len() <= 64);
    assert!(r.peer_count() <= 1000);
    w.sent.clear();
    assert_eq!(r.on_tun(secs(12), &udp_packet(NATIVE, B), &mut w), Ok(Action::Forwarded));
    assert_eq!(w.sent[0].to, sa(B_MAPPED));
}

#[test]
fn non_teredo_destinations_get_a_routing_error() {
    let mut r = relay();
    let mut w = Recorder::default();
    let v = r.on_tun(secs(1), &udp_packet(NATIVE, "2001:db8:2::1"), &mut w);
    assert_eq!(v, Err(DropReason::NotOurClient));
    assert_eq!(w.delivered.len(), 1);
    assert!(w.sent.is_empty());
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn relay_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200), port in any::<u16>(), as_tun in any::<bool>(), valid in any::<bool>()) {
            let mut r = relay();
            let mut w = Recorder::default();
            establish(&mut r, &mut w, secs(5));
            let mut d = data;
            if valid && d.len() >= 40 {
                d[..40].copy_from_slice(&bubble(B, NATIVE));
            }
            if as_tun {
                let _ = r.on_tun(secs(6), &d, &mut w);
            } else {
                let _ = r.on_udp(secs(6), SocketAddrV4::new("198.51.100.7".parse().unwrap(), port), &d, &mut w);
            }
            r.on_timer(secs(9), &mut w);
            prop_assert!(w.sent.iter().all(|s| s.payload.len() <= 2048));
        }
    }
}

#[test]
fn first_bubble_goes_at_once_even_right_after_start() {
    // Daemons count time from their start: a peer seen in the first seconds must still
    // be bubbled immediately.
    let mut r = relay();
    let mut w = Recorder::default();
    assert_eq!(r.on_tun(Duration::from_millis(300), &udp_packet(NATIVE, B), &mut w), Ok(Action::Queued));
    assert_eq!(w.sent.len(), 1);
}

/// The relay's next deadline (`poll_timeout`), what the daemon sleeps until: none
/// without peers, a waiting peer's next bubble 2 s after its last, and none again once
/// it is given up. With `poll_timeout` answering "a tick from now" (250 ms, the old
/// fixed period), this case fails at its first assertion.
#[test]
fn a_relay_sleeps_until_something_is_due() {
    let mut r = relay();
    let mut w = Recorder::default();
    assert_eq!(r.poll_timeout(), None, "no peers: nothing is due until a packet comes");
    assert_eq!(r.on_tun(secs(10), &udp_packet(NATIVE, B), &mut w), Ok(Action::Queued));
    let sent = w.sent.len();
    assert!(sent > 0, "the first bubble goes at once");
    // Deadline to deadline (the sweep's among them): nothing leaves before 12 s.
    while let Some(t) = r.poll_timeout().filter(|&t| t < secs(12)) {
        r.on_timer(t, &mut w);
        assert_eq!(w.sent.len(), sent, "nothing due at {t:?}");
    }
    assert_eq!(r.poll_timeout(), Some(secs(12)), "the next bubble, 2 s after the first");
    r.on_timer(secs(12), &mut w);
    assert!(w.sent.len() > sent, "bubbled again at its deadline");
    // Unanswered, the peer is given up after its tries; then nothing is due.
    let mut wakes = 0;
    while let Some(t) = r.poll_timeout() {
        assert!(t < secs(60), "still due at {t:?}");
        r.on_timer(t, &mut w);
        wakes += 1;
    }
    assert_eq!(r.peer_count(), 0);
    assert!(wakes < 20, "{wakes} wake-ups to give one peer up");
}

/// The relay cut into shards, used by several threads at once (the daemon's workers).
#[path = "relay_cases/sharded.rs"]
mod sharded;

/// Client `i` of many, each behind its own public IPv4 address (documentation ranges),
/// served by B's server: its Teredo address and mapping.
fn client(i: u32) -> (String, SocketAddrV4) {
    use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX};
    let ip = if i < 250 { [198, 51, 100, 1 + i as u8] } else { [203, 0, 113, 1 + (i - 250) as u8] };
    let mapped = SocketAddrV4::new(ip.into(), 3544);
    let t = TeredoAddr { prefix: PREFIX, server: "65.54.227.120".parse().unwrap(), flags: Flags(0), mapped };
    (t.to_ipv6().to_string(), mapped)
}

#[test]
fn one_endpoint_answering_for_many_addresses_cannot_lock_newcomers_out() {
    // The attack: a native host sends to many Teredo addresses that all embed one
    // endpoint (they differ in the server field), and that endpoint answers every
    // bubble, so each entry is trusted, and it keeps them fresh.
    use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX};
    let mut r = Relay::new(RelayConfig { capacity: 1000, per_address: 64, ..RelayConfig::default() });
    let mut w = Recorder::default();
    let attacker = sa("203.0.113.254:40000");
    for round in 0..3u64 {
        for i in 0..2000u32 {
            let server = std::net::Ipv4Addr::from(0x4100_0000 + i);
            let t = TeredoAddr { prefix: PREFIX, server, flags: Flags(0), mapped: attacker };
            let addr = t.to_ipv6().to_string();
            let _ = r.on_tun(secs(10 + round * 20), &udp_packet(NATIVE, &addr), &mut w);
            let _ = r.on_udp(secs(10 + round * 20), attacker, &bubble(&addr, NATIVE), &mut w);
        }
    }
    assert!(r.peer_count() <= 64, "one endpoint holds its share: {} entries", r.peer_count());
    assert!(r.stats().drops.get(DropReason::AddressFull) > 0);
    // Everyone else still gets in, up to the table's capacity.
    for i in 0..400 {
        let (c, mapped) = client(i);
        assert_eq!(r.on_tun(secs(60), &udp_packet(NATIVE, &c), &mut w), Ok(Action::Queued), "client {i}");
        assert_eq!(r.on_udp(secs(60), mapped, &bubble(&c, NATIVE), &mut w), Ok(Action::Consumed));
        assert_eq!(r.on_tun(secs(60), &udp_packet(NATIVE, &c), &mut w), Ok(Action::Forwarded));
    }
}

#[test]
fn trusted_peers_gone_silent_wait_within_the_same_cap_as_newcomers() {
    let cfg = RelayConfig { pending_capacity: 32, queue_bytes: 4096, ..RelayConfig::default() };
    let mut r = Relay::new(cfg);
    let mut w = Recorder::default();
    for i in 0..300 {
        let (c, mapped) = client(i);
        let _ = r.on_tun(secs(10), &udp_packet(NATIVE, &c), &mut w);
        assert_eq!(r.on_udp(secs(10), mapped, &bubble(&c, NATIVE), &mut w), Ok(Action::Consumed));
    }
    assert_eq!(r.pending_len(), 0);
    // 31 s later none is valid: traffic to each makes it wait again, queueing what it can.
    let big = ipv6(NATIVE, B, 17, &[0u8; 1200]);
    for i in 0..300 {
        let (c, _) = client(i);
        let mut p = big.clone();
        p[24..40].copy_from_slice(&a(&c).octets());
        for _ in 0..4 {
            let _ = r.on_tun(secs(41), &p, &mut w);
        }
    }
    assert!(r.pending_len() <= 32, "waiting peers: {}", r.pending_len());
    assert!(r.queued_bytes() <= 32 * 4096, "queued: {} bytes", r.queued_bytes());
    // The entries stay (trusted), only their waits and queues gave way; a newcomer still waits.
    assert_eq!(r.peer_count(), 300);
    let (c, _) = client(400);
    assert_eq!(r.on_tun(secs(42), &udp_packet(NATIVE, &c), &mut w), Ok(Action::Queued));
    assert!(r.stats().drops.get(DropReason::QueueFull) > 0);
}

#[test]
fn a_trusted_client_reaches_neither_site_addresses_nor_v4_stand_ins() {
    let mut r = relay();
    let mut w = Recorder::default();
    establish(&mut r, &mut w, secs(10));
    w.delivered.clear();
    for dst in ["fd00::1", "fc12::5", "::ffff:192.0.2.7", "::192.0.2.7", "fec0::1"] {
        let v = r.on_udp(secs(11), sa(B_MAPPED), &udp_packet(B, dst), &mut w);
        assert_eq!(v, Err(DropReason::NotServed), "{dst}");
    }
    assert!(w.delivered.is_empty());
    assert_eq!(r.on_udp(secs(11), sa(B_MAPPED), &udp_packet(B, NATIVE), &mut w), Ok(Action::Forwarded));
}

#[test]
fn a_relay_on_another_prefix_never_routes_back_into_it() {
    use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX_EXPERIMENTAL};
    let mut r = Relay::new(RelayConfig { prefix: PREFIX_EXPERIMENTAL, ..RelayConfig::default() });
    let mut w = Recorder::default();
    let t = |mapped: &str| {
        let server = "65.54.227.120".parse().unwrap();
        TeredoAddr { prefix: PREFIX_EXPERIMENTAL, server, flags: Flags(0), mapped: sa(mapped) }.to_ipv6().to_string()
    };
    let b = t(B_MAPPED);
    let _ = r.on_tun(secs(10), &udp_packet(NATIVE, &b), &mut w);
    assert_eq!(r.on_udp(secs(10), sa(B_MAPPED), &bubble(&b, NATIVE), &mut w), Ok(Action::Consumed));
    w.delivered.clear();
    // To another client of the same prefix, or of 2001::/32: not through the native side.
    for dst in [t("198.51.100.8:3544"), "2001:0:4136:e378::1".to_string()] {
        let v = r.on_udp(secs(11), sa(B_MAPPED), &udp_packet(&b, &dst), &mut w);
        assert_eq!(v, Err(DropReason::NotServed), "{dst}");
    }
    assert!(w.delivered.is_empty());
    assert_eq!(r.on_udp(secs(11), sa(B_MAPPED), &udp_packet(&b, NATIVE), &mut w), Ok(Action::Forwarded));
}

#[test]
fn made_up_addresses_naming_one_server_aim_a_bounded_stream_of_bubbles_at_it() {
    use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX};
    let (rate, burst) = shipworm_proto::relay::BUBBLES_PER_TARGET;
    let mut r = Relay::new(RelayConfig { capacity: 100_000, pending_capacity: 100_000, ..RelayConfig::default() });
    let mut w = Recorder::default();
    let victim = std::net::Ipv4Addr::new(198, 51, 100, 77);
    // 20 000 native packets over 2 s, each to a new address whose server field is the
    // victim, and the relay's retries as time passes.
    for i in 0..20_000u32 {
        let mapped = SocketAddrV4::new(std::net::Ipv4Addr::from(0xcb00_7100 + (i % 200)), 1024 + (i / 200) as u16);
        let dst = TeredoAddr { prefix: PREFIX, server: victim, flags: Flags(0), mapped }.to_ipv6().to_string();
        let now = secs(10) + Duration::from_micros(u64::from(i) * 100);
        let _ = r.on_tun(now, &udp_packet(NATIVE, &dst), &mut w);
        if i % 1000 == 0 {
            r.on_timer(now, &mut w);
        }
    }
    let to_victim = w.sent.iter().filter(|s| *s.to.ip() == victim).count();
    let most = (burst + 2 * rate) as usize + 1;
    assert!(to_victim <= most, "{to_victim} bubbles to one server, at most {most}");
    assert!(to_victim >= burst as usize, "{to_victim}");
    assert!(r.stats().drops.get(DropReason::RateLimited) > 0);
    // A peer served by another server is bubbled at once.
    w.sent.clear();
    assert_eq!(r.on_tun(secs(12), &udp_packet(NATIVE, B), &mut w), Ok(Action::Queued));
    assert_eq!(w.sent.iter().map(|s| s.to).collect::<Vec<_>>(), vec![sa(B_SERVER)]);
}

#[test]
fn an_attached_subnets_broadcast_is_never_a_mapping_or_a_server() {
    use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX};
    let bcast = std::net::Ipv4Addr::new(198, 51, 100, 255);
    let mut r = Relay::new(RelayConfig { local_broadcasts: vec![bcast], ..RelayConfig::default() });
    let mut w = Recorder::default();
    let server = "65.54.227.120".parse().unwrap();
    let to_bcast = TeredoAddr { prefix: PREFIX, server, flags: Flags(0), mapped: SocketAddrV4::new(bcast, 3544) };
    let via_bcast = TeredoAddr { prefix: PREFIX, server: bcast, flags: Flags(0), mapped: sa(B_MAPPED) };
    for t in [to_bcast, via_bcast] {
        let v = r.on_tun(secs(1), &udp_packet(NATIVE, &t.to_ipv6().to_string()), &mut w);
        assert_eq!(v, Err(DropReason::AttachedSubnet));
    }
    assert!(w.sent.is_empty());
    assert_eq!(r.on_tun(secs(1), &udp_packet(NATIVE, B), &mut w), Ok(Action::Queued));
}

/// RFC 4380 §5.2.9 and RFC 6324 §3.3: 6to4 hosts are peers like any other, both ways;
/// only the relay's own 6to4 and ISATAP addresses, which would loop between the relay
/// and a 6to4 or ISATAP router, are refused, each way, as `routing_loop`.
#[test]
fn sixtofour_hosts_are_served_and_only_a_loop_is_refused() {
    let own = std::net::Ipv4Addr::new(192, 0, 2, 10);
    let mut r = Relay::new(RelayConfig { own_ipv4: vec![own], hash_keys: (7, 9), ..RelayConfig::default() });
    let mut w = Recorder::default();
    let sixtofour = "2002:c633:6401::5";
    // A 6to4 host calls B first, and B answers: through, each way.
    let pkt = udp_packet(sixtofour, B);
    assert_eq!(r.on_tun(secs(1), &pkt, &mut w), Ok(Action::Queued));
    assert_eq!(r.on_udp(secs(1), sa(B_MAPPED), &bubble(B, sixtofour), &mut w), Ok(Action::Consumed));
    assert_eq!(w.sent.last(), Some(&Sent::service(sa(B_MAPPED), pkt)));
    let reply = udp_packet(B, sixtofour);
    assert_eq!(r.on_udp(secs(2), sa(B_MAPPED), &reply, &mut w), Ok(Action::Forwarded));
    assert_eq!(w.delivered.last(), Some(&reply));
    // Out of the tunnel to the relay's own 6to4 or ISATAP address: a loop.
    for dst in ["2002:c000:20a::1", "2001:db8:7::200:5efe:c000:20a"] {
        assert_eq!(r.on_udp(secs(3), sa(B_MAPPED), &udp_packet(B, dst), &mut w), Err(DropReason::RoutingLoop));
    }
    // Into the tunnel from one: a loop too.
    let sent = w.sent.len();
    assert_eq!(r.on_tun(secs(3), &udp_packet("2002:c000:20a::1", B), &mut w), Err(DropReason::RoutingLoop));
    assert_eq!(w.sent.len(), sent);
    assert_eq!(r.stats().drops.get(DropReason::RoutingLoop), 3);
    // A Teredo address whose mapping is the relay itself is no peer.
    use shipworm_wire::teredo_addr::{Flags, TeredoAddr, PREFIX};
    let to_self = TeredoAddr {
        prefix: PREFIX,
        server: "65.54.227.120".parse().unwrap(),
        flags: Flags(0),
        mapped: SocketAddrV4::new(own, 3544),
    };
    let v = r.on_tun(secs(3), &udp_packet(NATIVE, &to_self.to_ipv6().to_string()), &mut w);
    assert_eq!(v, Err(DropReason::DestinationMappingNotGlobal));
}

/// The relay with a kernel data path.
/// Forged sources: a client's port against its neighbours and forgers.
#[path = "relay_cases/spoofing.rs"]
mod spoofing;

#[path = "relay_cases/kernel_path.rs"]
mod kernel_path;
