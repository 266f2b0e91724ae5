//! Two clients behind one NAT that does not hairpin ([`two_clients`]): they meet on
//! their own network, by RFC 6081 hairpinning (§5.6) and RFC 4380 local discovery
//! (§5.2.8), each calling cold; when the announcements go, which are lost, and what a
//! caller holds for a neighbour that may not take its packets yet.

mod common;
mod two_clients;

use shipworm_proto::client::Via;
use shipworm_proto::transmit::Recorder;
use shipworm_proto::Action;
use shipworm_wire::ipv6::Ipv6Repr;
use shipworm_wire::teredo_packet::TeredoPacket;
use shipworm_wire::teredo_trailer::{trailer_type, TrailerRepr};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;
use two_clients::*;

#[test]
fn two_clients_behind_one_nat_meet_by_hairpinning() {
    // RFC 6081 §5.6, §6.5: the NAT does not hairpin, so bubbles to each other's mapping
    // die there; the local address listed in the indirect bubble brings them together
    // on their own network, and the packets go there, not through the NAT.
    let mut net = Net::shared(Kind::PortRestricted, |_, _| {});
    assert!(net.a_calls_b(), "{}", net.trace);
    assert!(net.trace.contains("alternate 10.1.0.2:40000"), "A listed its local address:\n{}", net.trace);
    let data: Vec<&str> = net.trace.lines().filter(|l| l.contains(" data")).collect();
    assert!(
        !data.is_empty() && data.iter().all(|l| l.ends_with("delivered on the local network")),
        "data between them stays on their network:\n{}",
        net.trace
    );
    // Without it (and without local discovery) they never meet.
    let mut net = Net::shared(Kind::PortRestricted, |_, c| {
        c.hairpinning = false;
        c.local_discovery = false;
    });
    assert!(!net.a_calls_b(), "{}", net.trace);
}

#[test]
fn two_clients_behind_one_nat_meet_by_local_discovery() {
    // RFC 4380 §5.2.8: each announces itself on the link; A's bubble goes to B's local
    // address, which B takes because it heard A there (case 5).
    let mut net = Net::shared(Kind::PortRestricted, |_, c| c.hairpinning = false);
    assert!(net.a_calls_b(), "{}", net.trace);
    let data: Vec<&str> = net.trace.lines().filter(|l| l.contains(" data")).collect();
    assert!(!data.is_empty() && data.iter().all(|l| l.ends_with("delivered on the local network")), "{}", net.trace);
    // A discovery bubble from off the link (another /24) or about another NAT's client
    // is not taken.
    let me = net.addresses[0].unwrap();
    let stranger = shipworm_wire::teredo_addr::TeredoAddr {
        prefix: 0x2001_0000,
        server: SERVER,
        flags: shipworm_wire::teredo_addr::Flags(0),
        mapped: SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 9), 4000),
    }
    .to_ipv6();
    let mut b = vec![0u8; 40];
    shipworm_wire::teredo_packet::emit_bubble(&stranger, &shipworm_proto::local_discovery::ALL_NODES, 1, &mut b)
        .unwrap();
    let mut out = net.out(0);
    let _ = net.clients[0].on_udp(
        net.now,
        Via::Discovery,
        SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, 9), 4000),
        &b,
        &mut out,
    );
    assert!(out.sent.is_empty(), "a stranger's announcement is not answered");
    let _ = me;
}

#[test]
fn an_announcement_on_coming_up_is_repeated_twice_then_kept_to_its_interval() {
    // RFC 4380 §5.2.8 announces every 200 to 300 s; we announce on coming up too, and a
    // lost datagram, or a neighbour up a moment later, would wait minutes for the
    // next. Two repeats, 2 s apart; answers to a new neighbour do not use them up.
    let mut net = Net::shared(Kind::PortRestricted, |_, c| c.hairpinning = false);
    net.pass(Duration::from_secs(199));
    let announced = |net: &Net, who: &str| {
        net.trace
            .lines()
            .filter(|l| l.split_whitespace().nth(2) == Some(who) && l.ends_with("multicast on the local network"))
            .map(|l| l.split_whitespace().next().unwrap().parse::<f64>().unwrap())
            .collect::<Vec<f64>>()
    };
    // Both come up at the same instant (time zero: the world runs from deadline to
    // deadline), A first. A: its own at once, its answer to B's
    // (new to it) when the 200 ms since its own are up, its repeats 2 and 4 s after
    // its own — the answer neither used one up nor moved them. B: its answer to A's at
    // once (none of its own had gone out), its own when the 200 ms are up, its repeats
    // 2 and 4 s after that. Then nothing until 200 s.
    let expected = [("A", [0.0, 0.2, 2.0, 4.0]), ("B", [0.0, 0.2, 2.2, 4.2])];
    for (who, want) in expected {
        let at = announced(&net, who);
        let same = at.len() == want.len() && at.iter().zip(want).all(|(a, w)| (a - w).abs() < 0.05);
        assert!(same, "{who} announced at {at:?}, not {want:?}:\n{}", net.trace);
    }
}

#[test]
fn clients_behind_one_nat_meet_on_the_link_when_every_announcement_before_the_call_was_lost() {
    // Every announcement of both, repeats included, lost before the call: the caller
    // announces itself when it calls a peer behind its own NAT, which the peer answers
    // with its own.
    // Each side calling, cold: A (up first) and B (up a moment after it, in the same
    // tick).
    for caller in [0, 1] {
        let mut net = Net::shared(Kind::PortRestricted, |_, c| c.hairpinning = false);
        net.lose_announcements = [3, 3];
        assert!(net.calls(caller), "client {caller} calling:\n{}", net.trace);
        let data: Vec<&str> = net.trace.lines().filter(|l| l.contains(" data")).collect();
        let local = !data.is_empty() && data.iter().all(|l| l.ends_with("delivered on the local network"));
        assert!(local, "client {caller} calling:\n{}", net.trace);
    }
}

/// The service port is what the model NATs see as the client's local port.

#[test]
fn local_discovery_takes_the_attached_subnet_not_a_24() {
    // RFC 6081 §5.6 / RFC 4380 §5.2.8: "on our link" is a subnet the host is attached to.
    let mut net = Net::shared(Kind::PortRestricted, |_, c| c.hairpinning = false);
    assert!(net.a_calls_b(), "{}", net.trace);
    let ours = shipworm_wire::teredo_addr::TeredoAddr::decode(&net.addresses[0].unwrap()).unwrap().mapped;
    net.clients[0].set_attached_subnets(&[(Ipv4Addr::new(10, 1, 0, 0), 16)]);
    let neighbour = shipworm_wire::teredo_addr::TeredoAddr {
        prefix: 0x2001_0000,
        server: SERVER,
        flags: shipworm_wire::teredo_addr::Flags(0),
        mapped: SocketAddrV4::new(*ours.ip(), 4001),
    }
    .to_ipv6();
    let mut b = vec![0u8; 40];
    shipworm_wire::teredo_packet::emit_bubble(&neighbour, &shipworm_proto::local_discovery::ALL_NODES, 1, &mut b)
        .unwrap();
    // Another /24 of the attached /16: a neighbour, answered.
    let mut out = net.out(0);
    let from = SocketAddrV4::new(Ipv4Addr::new(10, 1, 7, 9), 4000);
    assert_eq!(net.clients[0].on_udp(net.now, Via::Discovery, from, &b, &mut out), Ok(Action::Answered));
    assert!(out.sent.iter().any(|s| s.to == from), "a bubble straight back");
    // Off the attached subnet: not on our link.
    let mut out = net.out(0);
    let from = SocketAddrV4::new(Ipv4Addr::new(10, 2, 0, 9), 4000);
    assert_eq!(
        net.clients[0].on_udp(net.now, Via::Discovery, from, &b, &mut out),
        Err(shipworm_proto::DropReason::SourceMismatch)
    );
}

/// Qualify both, then client `caller`'s host sends one packet to the other: true if
/// it reached the other's host at once, with no retry (before any timer ran).
fn first_packet_at_once(net: &mut Net, caller: usize) -> bool {
    net.pass(Duration::from_secs(3));
    net.host_sends(caller, b"first");
    net.received(1 - caller, b"first")
}

#[test]
fn a_caller_heard_on_the_link_but_not_hearing_back_sends_only_once_the_peer_took_it() {
    // Every announcement of the caller lost; it heard the callee's. The callee meets
    // the caller only through hairpinning's alternate address, and takes the caller's
    // packets from there only once the caller echoed the callee's own nonce: a bubble
    // of the callee's from its local address, echoing the caller's nonce, does not mean
    // it heard the caller. The caller's first packet waits for that echo and arrives.
    for caller in [0, 1] {
        let mut net = Net::shared(Kind::PortRestricted, |_, _| {});
        net.lose_announcements[caller] = u32::MAX;
        assert!(first_packet_at_once(&mut net, caller), "client {caller} calling:\n{}", net.trace);
    }
}

#[test]
fn clients_that_heard_each_other_on_the_link_meet_at_once() {
    // Both heard each other's announcements: the first packet goes on the link with no
    // retry, each side calling, with and without hairpinning.
    // Server Load Reduction off too: a neighbour's solicitation is answered anyway.
    for (hairpinning, slr) in [(true, true), (false, true), (true, false)] {
        for caller in [0, 1] {
            let mut net = Net::shared(Kind::PortRestricted, |_, c| {
                c.hairpinning = hairpinning;
                c.server_load_reduction = slr;
            });
            assert!(first_packet_at_once(&mut net, caller), "client {caller} calling:\n{}", net.trace);
            let data: Vec<&str> = net.trace.lines().filter(|l| l.contains(" data")).collect();
            assert!(data.iter().all(|l| l.ends_with("delivered on the local network")), "{}", net.trace);
        }
    }
}

/// Two clients behind one NAT, up for 3 s: A heard B on the link, B never heard A (every
/// announcement of A's lost).
fn heard_one_way() -> Net {
    let mut net = Net::shared(Kind::PortRestricted, |_, _| {});
    net.lose_announcements[0] = u32::MAX;
    net.pass(Duration::from_secs(3));
    net
}

/// A UDP packet from A's host to B carrying `body`.
fn a_to_b(net: &Net, body: &[u8]) -> Vec<u8> {
    let (a, b) = (net.addresses[0].unwrap(), net.addresses[1].unwrap());
    let mut p = vec![0u8; 40];
    Ipv6Repr { src_addr: a, dst_addr: b, next_header: 17, payload_len: body.len(), hop_limit: 64 }
        .emit(&mut p)
        .unwrap();
    p.extend_from_slice(body);
    p
}

/// A bubble from B to A with `trailers`, arriving at A from B's local address: what A
/// sends in answer.
fn bubble_b_to_a(net: &mut Net, trailers: &[u8]) -> Recorder {
    let (a, b) = (net.addresses[0].unwrap(), net.addresses[1].unwrap());
    let mut bytes = vec![0u8; 40];
    shipworm_wire::teredo_packet::emit_bubble(&b, &a, 0, &mut bytes).unwrap();
    bytes.extend_from_slice(trailers);
    let mut out = net.out(0);
    let _ = net.clients[0].on_udp(net.now, Via::Service, net.inside[1].0, &bytes, &mut out);
    out
}

/// The data packets (not bubbles) in `out`, in order: where each went, and its payload.
fn data_sent(out: &Recorder) -> Vec<(SocketAddrV4, Vec<u8>)> {
    out.sent
        .iter()
        .filter(|s| TeredoPacket::parse(&s.payload).is_ok_and(|t| !t.is_bubble()))
        .map(|s| (s.to, s.payload[40..].to_vec()))
        .collect()
}

#[test]
fn a_stale_nonce_bubble_from_a_neighbours_local_address_does_not_release_what_waits() {
    // A heard B on the link, B never heard A. A's host calls B and everything A sends
    // is lost; then a bubble of B's arrives from B's local address, echoing a nonce A
    // no longer expects (an answer to an older indirect bubble's alternate address). B
    // has not heard A: A's packet sent now would be refused, so A keeps it.
    let mut net = heard_one_way();
    let mut out = net.out(0);
    let _ = net.clients[0].on_tun(net.now, &a_to_b(&net, b"first"), &mut out);
    let out = bubble_b_to_a(&mut net, &[&[trailer_type::NONCE, 4][..], &0xdead_beef_u32.to_be_bytes()].concat());
    assert!(data_sent(&out).is_empty(), "A sent what waited to a neighbour that has not heard it");
}

#[test]
fn what_a_caller_holds_for_a_neighbour_stays_in_order_until_the_neighbour_takes_it() {
    // A heard B on the link, B never heard A. A's host sends; B's bubble echoing A's
    // nonce comes from B's local address (hairpinning), before B's indirect bubble: A
    // holds its packet. The host's next packet waits behind it, and so does everything
    // through another echo of the same kind; B's advertisement (it takes A's packets
    // there now) lets all go, in order, to B's local address.
    let mut net = heard_one_way();
    let mut out = net.out(0);
    let _ = net.clients[0].on_tun(net.now, &a_to_b(&net, b"first"), &mut out);
    let nonce = out
        .sent
        .iter()
        .filter_map(|s| TeredoPacket::parse(&s.payload).ok())
        .find_map(|t| match t.trailers.get(trailer_type::NONCE) {
            Some(TrailerRepr::Nonce(n)) if t.trailers.find(trailer_type::ALTERNATE_ADDRESS).is_some() => Some(n),
            _ => None,
        })
        .expect("A's indirect bubble with its nonce and local address");
    for _ in 0..2 {
        let out = bubble_b_to_a(&mut net, &[&[trailer_type::NONCE, 4][..], &nonce[..]].concat());
        assert!(data_sent(&out).is_empty(), "A let go of what waits on B's echo of A's nonce");
        let mut out = net.out(0);
        let _ = net.clients[0].on_tun(net.now, &a_to_b(&net, b"second"), &mut out);
        assert!(data_sent(&out).is_empty(), "A's next packet overtook what waits");
    }
    let out = bubble_b_to_a(&mut net, &[trailer_type::NEIGHBOR_DISCOVERY, 4, 1, 0, 0, 0]);
    let b_local = net.inside[1].0;
    let want: Vec<(SocketAddrV4, Vec<u8>)> =
        [&b"first"[..], b"second", b"second"].iter().map(|body| (b_local, body.to_vec())).collect();
    assert_eq!(data_sent(&out), want, "what waited goes to B's local address on its advertisement, in order");
}

#[test]
fn what_a_caller_holds_for_a_neighbour_goes_once_the_tries_run_out() {
    // B echoes every nonce of A's from its local address and nothing else: no indirect
    // bubble of its own, no answer to a solicitation (a peer that does not speak them).
    // A holds what waits, but not forever: once its tries run out it sends it, as it
    // would have without the wait, rather than keep the host's packets from a peer it
    // trusts.
    let mut net = heard_one_way();
    let nonce_of = |out: &Recorder| {
        out.sent.iter().filter_map(|s| TeredoPacket::parse(&s.payload).ok()).find_map(|t| {
            match t.trailers.get(trailer_type::NONCE) {
                Some(TrailerRepr::Nonce(n)) if t.trailers.find(trailer_type::ALTERNATE_ADDRESS).is_some() => Some(n),
                _ => None,
            }
        })
    };
    let b_local = net.inside[1].0;
    // What A sent to B's local address (not its requests to its server).
    let to_b = |out: &Recorder| -> Vec<Vec<u8>> {
        data_sent(out).into_iter().filter(|(to, _)| *to == b_local).map(|(_, body)| body).collect()
    };
    let mut out = net.out(0);
    let _ = net.clients[0].on_tun(net.now, &a_to_b(&net, b"first"), &mut out);
    let start = net.now;
    let mut nonce = nonce_of(&out).expect("A's indirect bubble");
    let mut sent_at = None;
    while sent_at.is_none() && net.now < start + Duration::from_secs(30) {
        let echoed = bubble_b_to_a(&mut net, &[&[trailer_type::NONCE, 4][..], &nonce[..]].concat());
        if !to_b(&echoed).is_empty() {
            sent_at = Some(net.now);
            break;
        }
        net.now += Duration::from_millis(100);
        let mut out = net.out(0);
        net.clients[0].on_timer(net.now, &mut out);
        if !to_b(&out).is_empty() {
            assert_eq!(to_b(&out), [b"first".to_vec()]);
            sent_at = Some(net.now);
        }
        nonce = nonce_of(&out).unwrap_or(nonce);
    }
    let waited = sent_at.map(|t| t - start).expect("A held what waits for 30 s");
    // Four tries 2 s apart, as for any peer that does not answer.
    let within = Duration::from_secs(2)..=Duration::from_secs(12);
    assert!(within.contains(&waited), "A sent what waits after {waited:?}, not after its tries");
}
