//! Two clients behind model NATs of different kinds ([`two_clients`]): RFC 6081's
//! Symmetric NAT Support exchange, port prediction, Server Load Reduction, and the
//! opening bubble that lets two clients behind Linux NATs meet, packet by packet. Each
//! case also runs with the mechanism off and shows the exchange failing, so a pass is
//! the mechanism's doing.

mod common;
mod two_clients;

use shipworm_proto::client::{ClientConfig, Via};
use shipworm_wire::ipv6::Ipv6Repr;
use shipworm_wire::teredo_trailer::trailer_type;
use std::collections::VecDeque;
use std::net::SocketAddrV4;
use std::time::Duration;
use two_clients::*;

#[test]
fn two_linux_nats_meet_through_the_opening_bubble() {
    let mut net = Net::new([Kind::PortRestricted, Kind::PortRestricted], |_, _| {});
    assert!(net.a_calls_b(), "A and B behind masquerading NATs must meet:\n{}", net.trace);
    // The opening bubble died at the router, so B's NAT kept B's port for A.
    assert!(net.trace.contains("sent with TTL 2: TTL ran out at the router"), "{}", net.trace);
    let service = net.inside[1].0;
    let ports =
        |n: &Net| n.nats[1].out.iter().filter(|((from, _), _)| *from == service).map(|(_, &p)| p).collect::<Vec<_>>();
    assert!(ports(&net).iter().all(|&p| p == 40000), "B kept its port: {:?}", net.nats[1].out);
    // A full-TTL first bubble (RFC 4380 as written, Miredo) leaves an entry at B's NAT
    // that moves B's answer to another port, which A's NAT refuses.
    let mut net = Net::new([Kind::PortRestricted, Kind::PortRestricted], |_, c| c.opening_bubble_ttl = 0);
    assert!(!net.a_calls_b(), "without the opening bubble:\n{}", net.trace);
    assert!(ports(&net).iter().any(|&p| p != 40000), "B's answer left from another port");
}

#[test]
fn a_client_behind_a_symmetric_nat_calls_first() {
    // RFC 6081 §6.1: A behind a port-symmetric NAT, B behind an address-restricted one.
    let mut net = Net::new([Kind::Symmetric, Kind::AddressRestricted], |_, _| {});
    assert!(net.a_calls_b(), "A symmetric calling B:\n{}", net.trace);
    // B took A's direct bubble from a port A's address does not embed, on the nonce of
    // B's own indirect bubble.
    let echoed = net.trace.lines().any(|l| {
        l.contains("NAT A") && l.contains("→ NAT B") && l.contains("bubble nonce") && l.ends_with("delivered")
    });
    assert!(echoed, "A's nonce-carrying direct bubble reached B:\n{}", net.trace);
    // With B speaking RFC 4380 alone, B never trusts that port.
    let mut net = Net::new([Kind::Symmetric, Kind::AddressRestricted], |i, c| c.symmetric_nat_support = i == 0);
    assert!(!net.a_calls_b(), "without nonces:\n{}", net.trace);
}

#[test]
fn a_forged_nonce_does_not_move_a_peer() {
    // A direct bubble from an unexpected port with the wrong nonce is dropped (RFC 6081
    // §5.2.4.4 c), and so is a replay of the nonce that proved A once: run the symmetric
    // exchange, then send B bubbles "from A" through another port.
    let mut net = Net::new([Kind::Symmetric, Kind::AddressRestricted], |_, _| {});
    assert!(net.a_calls_b());
    let (a, b) = (net.addresses[0].unwrap(), net.addresses[1].unwrap());
    // The nonce B's indirect bubble carried, which A's direct bubble echoed to B.
    let proven = net
        .trace
        .lines()
        .find(|l| l.contains("NAT A") && l.contains("→ NAT B") && l.contains("bubble nonce"))
        .and_then(|l| l.split("nonce ").nth(1))
        .and_then(|w| u32::from_str_radix(&w[..8], 16).ok())
        .expect("A echoed B's nonce");
    let forger = SocketAddrV4::new(net.nats[0].public, 1);
    for nonce in [0xdead_beef_u32, proven] {
        let mut bytes = vec![0u8; 40];
        shipworm_wire::teredo_packet::emit_bubble(&a, &b, 0, &mut bytes).unwrap();
        bytes.extend_from_slice(&[trailer_type::NONCE, 4]);
        bytes.extend_from_slice(&nonce.to_be_bytes());
        let mut out = net.out(1);
        let _ = net.clients[1].on_udp(net.now, Via::Service, forger, &bytes, &mut out);
        net.collect(1, out, &mut VecDeque::new());
        // B's host answers A again: it must go where it went before, not to the forger.
        let mut p = vec![0u8; 40];
        Ipv6Repr { src_addr: b, dst_addr: a, next_header: 17, payload_len: 3, hop_limit: 64 }.emit(&mut p).unwrap();
        p.extend_from_slice(b"bye");
        let mut out = net.out(1);
        let _ = net.clients[1].on_tun(net.now, &p, &mut out);
        assert_eq!(out.sent.len(), 1);
        assert_ne!(out.sent[0].to, forger, "nonce {nonce:08x} moved the peer to the forger");
    }
}

/// After `a_calls_b`, both silent for 40 s; then A's host sends again. True if B got it.
fn after_silence(net: &mut Net) -> bool {
    net.pass(Duration::from_secs(40));
    net.trace.clear();
    net.host_sends(0, b"again");
    net.pass(Duration::from_secs(10));
    net.received(1, b"again")
}

#[test]
fn server_load_reduction_asks_a_silent_peer_directly() {
    // RFC 6081 §5.7: a trusted peer silent for 30 s is solicited with a direct bubble;
    // its advertisement re-opens the path without a bubble through the server.
    let mut net = Net::new([Kind::PortRestricted, Kind::AddressRestricted], |_, _| {});
    assert!(net.a_calls_b(), "{}", net.trace);
    assert!(after_silence(&mut net), "{}", net.trace);
    assert!(
        net.trace.contains("solicitation: delivered") && net.trace.contains("advertisement: delivered"),
        "{}",
        net.trace
    );
    assert!(
        !net.trace.lines().any(|l| l.contains("bubble") && l.contains("→ server")),
        "no bubble through the server:\n{}",
        net.trace
    );
    assert_eq!(net.clients[0].stats().peer_solicitations, 1);
    assert_eq!(net.clients[1].stats().peer_advertisements, 1);
}

#[test]
fn server_load_reduction_falls_back_after_three_solicitations() {
    // B's NAT forgot A (its filter entry expired): three solicitations 2 s apart are
    // dropped, then A starts over with the indirect bubble (§5.7.2).
    let mut net = Net::new([Kind::PortRestricted, Kind::PortRestricted], |_, _| {});
    assert!(net.a_calls_b(), "{}", net.trace);
    net.pass(Duration::from_secs(40));
    let a_public = net.nats[0].public;
    net.nats[1].contacted.retain(|(_, r)| *r.ip() != a_public);
    net.trace.clear();
    net.host_sends(0, b"again");
    net.pass(Duration::from_secs(10));
    assert!(net.received(1, b"again"), "{}", net.trace);
    let dropped = net.trace.lines().filter(|l| l.contains("solicitation: dropped by the NAT")).count();
    assert_eq!(dropped, 3, "{}", net.trace);
    // Solicitations at 0, 2 and 4 s, and the indirect bubble with the third (§5.7.2:
    // when the count reaches three), not a retry period later.
    let at = |what: &dyn Fn(&str) -> bool| -> f64 {
        let line = net.trace.lines().find(|l| what(l)).expect("in the trace");
        line.split_whitespace().next().and_then(|t| t.parse().ok()).expect("a time")
    };
    let first = at(&|l| l.contains("solicitation"));
    let indirect = at(&|l| l.contains("→ server") && l.contains("bubble nonce"));
    assert!(
        (indirect - first - 4.0).abs() < 0.05,
        "indirect bubble {:.1} s after the first solicitation:\n{}",
        indirect - first,
        net.trace
    );
}

#[test]
fn server_load_reduction_spares_peers_without_rfc6081() {
    // A peer that never sent a trailer (Miredo) would not answer: no solicitation, the
    // indirect bubble at once.
    let mut net = Net::new([Kind::PortRestricted, Kind::AddressRestricted], |i, c| {
        c.symmetric_nat_support = i == 0;
        c.server_load_reduction = i == 0;
    });
    assert!(net.a_calls_b(), "{}", net.trace);
    assert!(after_silence(&mut net), "{}", net.trace);
    assert!(!net.trace.contains("solicitation"), "{}", net.trace);
}

fn with_service_port(_: usize, c: &mut ClientConfig) {
    c.service_port = std::num::NonZeroU16::new(40000);
}

#[test]
fn port_preserving_nat_reaches_a_port_restricted_one() {
    // RFC 6081 §5.4: a random port per peer, announced in the indirect bubble; the
    // port-restricted peer's bubble to it passes the mapping our bubble from it opened.
    let mut net = Net::new([Kind::PortPreserving, Kind::PortRestricted], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
    assert!(net.trace.contains("random port 50001"), "the random port was announced:\n{}", net.trace);
    // Without random ports, RFC 6081 §3 Figure 1 says no.
    let mut net = Net::new([Kind::PortPreserving, Kind::PortRestricted], |i, c| {
        with_service_port(i, c);
        c.random_ports = 0;
    });
    assert!(!net.a_calls_b(), "{}", net.trace);
}

#[test]
fn port_restricted_nat_reaches_a_port_preserving_one() {
    let mut net = Net::new([Kind::PortRestricted, Kind::PortPreserving], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
}

#[test]
fn two_port_preserving_nats_meet() {
    // RFC 6081 §6.3: both announce a random port; the second round of bubbles passes.
    let mut net = Net::new([Kind::PortPreserving, Kind::PortPreserving], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
}

#[test]
fn sequential_nat_predicts_its_port_with_the_echo_test() {
    // RFC 6081 §5.5, §6.4: two solicitations from the random port bracket the bubble
    // sent between them; the peer tries the midpoint.
    let mut net = Net::new([Kind::Sequential, Kind::PortRestricted], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
    assert_eq!(net.clients[0].stats().echo_tests, 1, "{}", net.trace);
    let mut net = Net::new([Kind::Sequential, Kind::PortRestricted], |i, c| {
        with_service_port(i, c);
        c.random_ports = 0;
    });
    assert!(!net.a_calls_b(), "{}", net.trace);
}

#[test]
fn port_restricted_nat_reaches_a_sequential_one() {
    let mut net = Net::new([Kind::PortRestricted, Kind::Sequential], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
}

#[test]
fn two_clients_with_mapped_ports_behind_symmetric_nats_meet() {
    // RFC 6081 §5.3 (UPnP-enabled symmetric NATs), reached with PCP: each address embeds
    // the mapped port, open to anyone; each sends to the other's embedded mapping.
    let mut net = Net::new([Kind::SymmetricMapped, Kind::SymmetricMapped], with_service_port);
    assert!(net.a_calls_b(), "{}", net.trace);
    // Without the mappings they are two plain symmetric NATs: RFC 6081 Figure 1 says no.
    let mut net = Net::new([Kind::Symmetric, Kind::Symmetric], with_service_port);
    assert!(!net.a_calls_b(), "{}", net.trace);
}
