//! A server that also relays (RFC 4380 §5.4.3): its packets from native hosts are a
//! relay's to the client, and shipworm's combined server and relay carries a client's
//! traffic both ways.

use super::*;

/// RFC 4380 §5.4.3: a server may relay too, from its own address and port 3544. The
/// echo reply of a connectivity test coming back from there proves the server as the
/// host's relay (the queued packet goes to it, nothing reaches the host); the host's
/// data from there is delivered; a host calling first through it is tested, not
/// delivered unproven.
#[test]
fn a_server_that_also_relays_is_the_relay_of_the_hosts_it_serves() {
    let (mut c, me) = qualified();
    let me_s = me.to_string();
    let server = SocketAddrV4::new(P, 3544);
    let mut w = Recorder::default();
    let data = ipv6(&me_s, "2001:db8::1", 17, &[7; 8]);
    let _ = c.on_tun(secs(2), &data, &mut w);
    let (_, echo) = w.pop_udp().unwrap();
    let ip = Ipv6Packet::new_checked(&echo[..]).unwrap();
    let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
    let Icmpv6Repr::EchoRequest { ident, seq_no, data: nonce } =
        Icmpv6Repr::parse(&me, &a("2001:db8::1"), &icmp).unwrap()
    else {
        panic!("not an echo request")
    };
    let r = Icmpv6Repr::EchoReply { ident, seq_no, data: nonce };
    let mut reply = vec![0u8; 40 + r.buffer_len()];
    Ipv6Repr { src_addr: a("2001:db8::1"), dst_addr: me, next_header: 58, payload_len: r.buffer_len(), hop_limit: 60 }
        .emit(&mut reply)
        .unwrap();
    r.emit(&a("2001:db8::1"), &me, &mut reply[40..]).unwrap();
    assert_eq!(c.on_udp(secs(3), Via::Service, server, &reply, &mut w), Ok(shipworm_proto::Action::Consumed));
    assert_eq!(w.udp(), vec![(server, data.clone())]);
    assert!(w.delivered.is_empty(), "the test's reply is the client's own");
    // From now on the host's packets go there, and its answers come from there.
    w.sent.clear();
    assert_eq!(c.on_tun(secs(4), &data, &mut w), Ok(shipworm_proto::Action::Forwarded));
    assert_eq!(w.udp(), vec![(server, data)]);
    let answer = ipv6("2001:db8::1", &me_s, 17, &[8; 8]);
    assert_eq!(c.on_udp(secs(4), Via::Service, server, &answer, &mut w), Ok(shipworm_proto::Action::Forwarded));
    assert_eq!(w.delivered, vec![answer]);
    // Another host calling first through the server is held and tested.
    w.delivered.clear();
    w.sent.clear();
    let first = ipv6("2001:db8::2", &me_s, 17, &[9; 8]);
    assert_eq!(c.on_udp(secs(5), Via::Service, server, &first, &mut w), Ok(shipworm_proto::Action::Queued));
    assert!(w.delivered.is_empty());
    let tested = w.udp().iter().any(|(to, b)| {
        let ip = Ipv6Packet::new_checked(&b[..]).unwrap();
        *to == server && ip.dst_addr() == a("2001:db8::2") && ip.next_header() == 58
    });
    assert!(tested, "no connectivity test to the calling host: {:?}", w.udp());
}

/// Our client with our combined server and relay (RFC 4380 §5.4.3), packet by packet:
/// the host's first packet to a native host starts the connectivity test through the
/// server; the reply comes back through the relay function, which bubbles the client
/// through its own server part (origin: the server's endpoint); the client's answer
/// proves it, the reply completes the test, and data flows both ways through the
/// server's address and port.
#[test]
fn a_combined_server_and_relay_carries_a_clients_traffic_both_ways() {
    use shipworm_proto::relay::RelayConfig;
    use shipworm_proto::server_relay::ServerRelay;
    let (mut c, me) = qualified();
    let (me_s, host, server, mapped) = (me.to_string(), "2001:db8::1", SocketAddrV4::new(P, 3544), sa(M));
    let mut sr =
        ServerRelay::new(ServerConfig::new(P), RelayConfig { own_ipv4: vec![P, P1], ..RelayConfig::default() });
    let (mut wc, mut ws) = (Recorder::default(), Recorder::default());
    let data = ipv6(&me_s, host, 17, &[7; 8]);
    let _ = c.on_tun(secs(2), &data, &mut wc);
    let (to, echo) = wc.pop_udp().unwrap();
    assert_eq!(to, server);
    // The server part forwards the test's echo natively; the host answers it.
    let _ = sr.on_udp(secs(2), Local::Primary, mapped, &echo, &mut ws);
    let out = ws.delivered.pop().expect("the echo request, natively");
    let ip = Ipv6Packet::new_checked(&out[..]).unwrap();
    let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
    let Icmpv6Repr::EchoRequest { ident, seq_no, data: nonce } = Icmpv6Repr::parse(&me, &a(host), &icmp).unwrap()
    else {
        panic!("not an echo request")
    };
    let r = Icmpv6Repr::EchoReply { ident, seq_no, data: nonce };
    let mut reply = vec![0u8; 40 + r.buffer_len()];
    Ipv6Repr { src_addr: a(host), dst_addr: me, next_header: 58, payload_len: r.buffer_len(), hop_limit: 60 }
        .emit(&mut reply)
        .unwrap();
    r.emit(&a(host), &me, &mut reply[40..]).unwrap();
    // The reply reaches the relay part, which bubbles the client through the server
    // part: one datagram, to the client's mapping, with the server's endpoint as origin.
    assert_eq!(sr.on_tun(secs(2), &reply, &mut ws), Ok(shipworm_proto::Action::Queued));
    assert_eq!(ws.sent.len(), 1, "{:?}", ws.sent);
    let bubble = ws.sent.pop().unwrap();
    assert_eq!(bubble.to, mapped);
    let p = TeredoPacket::parse(&bubble.payload).unwrap();
    assert!(p.is_bubble());
    assert_eq!(p.origin, Some(server));
    // The client answers at the origin; the relay part trusts it and sends the reply.
    let _ = c.on_udp(secs(2), Via::Service, server, &bubble.payload, &mut wc);
    let (to, answer) = wc.pop_udp().expect("the client's direct bubble");
    assert_eq!(to, server);
    assert_eq!(sr.on_udp(secs(2), Local::Primary, mapped, &answer, &mut ws), Ok(shipworm_proto::Action::Consumed));
    let sent = ws.sent.pop().unwrap();
    assert_eq!((sent.from, sent.to, &sent.payload), (Source::Service, mapped, &reply));
    // The reply, from the server's endpoint, completes the test and releases the data.
    assert_eq!(c.on_udp(secs(2), Via::Service, server, &sent.payload, &mut wc), Ok(shipworm_proto::Action::Consumed));
    assert_eq!(wc.udp(), vec![(server, data.clone())]);
    assert!(wc.delivered.is_empty(), "the test's reply is the client's own");
    assert_eq!(sr.on_udp(secs(3), Local::Primary, mapped, &data, &mut ws), Ok(shipworm_proto::Action::Forwarded));
    assert_eq!(ws.delivered.pop(), Some(data));
    // And the host's answer comes back the same way.
    let back = ipv6(host, &me_s, 17, &[8; 8]);
    assert_eq!(sr.on_tun(secs(3), &back, &mut ws), Ok(shipworm_proto::Action::Forwarded));
    let s = ws.sent.pop().unwrap();
    assert_eq!(c.on_udp(secs(3), Via::Service, server, &s.payload, &mut wc), Ok(shipworm_proto::Action::Forwarded));
    assert_eq!(wc.delivered.last(), Some(&back));
    // A user's large ping (an echo request past the server's forwarding cap, which is
    // for connectivity tests): the relay part carries it as any data.
    let r = Icmpv6Repr::EchoRequest { ident: 9, seq_no: 1, data: &[0x5a; 1400] };
    let mut ping = vec![0u8; 40 + r.buffer_len()];
    Ipv6Repr { src_addr: me, dst_addr: a(host), next_header: 58, payload_len: r.buffer_len(), hop_limit: 64 }
        .emit(&mut ping)
        .unwrap();
    r.emit(&me, &a(host), &mut ping[40..]).unwrap();
    let _ = c.on_tun(secs(4), &ping, &mut wc);
    let (to, sent) = wc.pop_udp().expect("the ping, to the relay");
    assert_eq!(to, server);
    assert_eq!(sr.on_udp(secs(4), Local::Primary, mapped, &sent, &mut ws), Ok(shipworm_proto::Action::Forwarded));
    assert_eq!(ws.delivered.pop(), Some(ping));
}
