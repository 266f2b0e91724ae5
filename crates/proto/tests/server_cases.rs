//! The Teredo server against the black-box cases of the requirements reference (§11,
//! cases 1–23) and the admission rules of RFC 4380 §5.3, byte vectors in, actions out.

use shipworm_proto::server::{is_connectivity_test_echo, Local, Server, ServerConfig};
use shipworm_proto::transmit::{Recorder, Source};
use shipworm_proto::{DropReason, Outcome};
use shipworm_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use shipworm_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use shipworm_wire::teredo_addr::{RS_SOURCE_CONE, RS_SOURCE_RESTRICTED};
use shipworm_wire::teredo_auth::AuthRepr;
use shipworm_wire::teredo_packet::{emit_bubble, TeredoHeaderRepr, TeredoPacket};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::Duration;

const P: Ipv4Addr = Ipv4Addr::new(65, 54, 227, 120);
const P1: Ipv4Addr = Ipv4Addr::new(65, 54, 227, 121);
const NONCE: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}
fn sa(s: &str) -> SocketAddrV4 {
    s.parse().unwrap()
}

/// Client A: mapped 192.0.2.45:40000 via P. Client B: mapped 198.51.100.7:3544 via P.
const A_ADDR: &str = "2001:0:4136:e378:0:63bf:3fff:fdd2";
const A_MAPPED: &str = "192.0.2.45:40000";
const B_ADDR: &str = "2001:0:4136:e378:0:f227:39cc:9bf8";
const B_MAPPED: &str = "198.51.100.7:3544";

fn server() -> Server {
    Server::new(ServerConfig::new(P))
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// A Teredo payload: optional auth/origin, IPv6 header, ICMPv6 message.
fn icmp_payload(auth: Option<[u8; 8]>, src: Ipv6Addr, dst: Ipv6Addr, hop: u8, icmp: &Icmpv6Repr) -> Vec<u8> {
    let mut b = vec![0u8; 1500];
    let h = TeredoHeaderRepr { auth: auth.map(AuthRepr::with_nonce), origin: None };
    let at = h.emit(&mut b).unwrap();
    let n = icmp.buffer_len();
    Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: n, hop_limit: hop }
        .emit(&mut b[at..])
        .unwrap();
    icmp.emit(&src, &dst, &mut b[at + 40..]).unwrap();
    b.truncate(at + 40 + n);
    b
}

fn rs(auth: Option<[u8; 8]>, src: Ipv6Addr) -> Vec<u8> {
    icmp_payload(auth, src, a("ff02::2"), 255, &Icmpv6Repr::RouterSolicit)
}

fn bubble(src: &str, dst: &str) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    emit_bubble(&a(src), &a(dst), 0, &mut b).unwrap();
    b
}

fn echo(src: &str, dst: &str, data: &[u8]) -> Vec<u8> {
    icmp_payload(None, a(src), a(dst), 64, &Icmpv6Repr::EchoRequest { ident: 1, seq_no: 1, data })
}

/// What one input led to, as the cases state it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerAction {
    /// Nothing went out; the drop was counted under this reason.
    Drop(DropReason),
    /// One datagram of `len` bytes from `from`:3544 to `to`.
    Udp { from: Local, to: SocketAddrV4, len: usize },
    /// One packet of `len` bytes to the native side.
    Native { len: usize },
}

/// What the server sent, as its actions: each datagram (from which address, its TTL
/// the sockets' own) and each packet to the native side.
fn actions(w: &Recorder) -> Vec<(ServerAction, Vec<u8>)> {
    let sent = w.sent.iter().map(|d| {
        assert_eq!(d.ttl, None, "the server sends with its sockets' TTL");
        let from = match d.from {
            Source::Service => Local::Primary,
            Source::Secondary => Local::Secondary,
            other => panic!("the server sent from a socket it does not have: {other:?}"),
        };
        (ServerAction::Udp { from, to: d.to, len: d.payload.len() }, d.payload.clone())
    });
    let native = w.delivered.iter().map(|p| (ServerAction::Native { len: p.len() }, p.clone()));
    sent.chain(native).collect()
}

/// What `input` did to `s`: at most one output (the server answers or forwards once),
/// or the one drop it counted.
fn outcome(s: &mut Server, input: impl FnOnce(&mut Server, &mut Recorder) -> Outcome) -> (ServerAction, Vec<u8>) {
    let before = s.stats().drops.clone();
    let mut w = Recorder::default();
    let said = input(s, &mut w);
    let mut out = actions(&w);
    assert!(out.len() <= 1, "one input, one output at most: {:?}", out.iter().map(|o| o.0).collect::<Vec<_>>());
    if let Some(out) = out.pop() {
        assert_eq!(s.stats().drops, before, "sent and dropped");
        assert!(said.is_ok(), "sent, but the outcome says {said:?}");
        return out;
    }
    let counted: Vec<DropReason> =
        DropReason::ALL.iter().copied().filter(|&r| s.stats().drops.get(r) > before.get(r)).collect();
    assert_eq!(counted.len(), 1, "nothing sent: exactly one drop counted, got {counted:?}");
    assert_eq!(said, Err(counted[0]), "the outcome names the drop counted");
    (ServerAction::Drop(counted[0]), Vec::new())
}

/// Run one datagram; return the action and the bytes it sent.
fn run(s: &mut Server, local: Local, from: &str, d: &[u8]) -> (ServerAction, Vec<u8>) {
    outcome(s, |s, w| s.on_udp(Duration::from_secs(1), local, sa(from), d, w))
}

fn assert_drop(s: &mut Server, local: Local, from: &str, d: &[u8], why: DropReason) {
    let (action, _) = run(s, local, from, d);
    assert_eq!(action, ServerAction::Drop(why));
}

#[test]
fn case10_restricted_rs_gets_one_ra_from_the_same_address() {
    let mut s = server();
    let (action, ra) = run(&mut s, Local::Primary, "198.51.100.7:40000", &rs(Some(NONCE), RS_SOURCE_RESTRICTED));
    assert_eq!(action, ServerAction::Udp { from: Local::Primary, to: sa("198.51.100.7:40000"), len: 117 });
    let p = TeredoPacket::parse(&ra).unwrap();
    let auth = p.auth_repr().unwrap();
    assert_eq!((auth.nonce, auth.confirmation), (NONCE, 0));
    assert_eq!(&ra[13..21], &[0x00, 0x00, 0x63, 0xbf, 0x39, 0xcc, 0x9b, 0xf8]);
    assert_eq!(p.origin, Some(sa("198.51.100.7:40000")));
    assert_eq!(p.ipv6.dst_addr(), RS_SOURCE_RESTRICTED);
    assert_eq!(p.ipv6.src_addr(), a("fe80::8000:f227:bec9:1c87"));
    assert_eq!(p.ipv6.hop_limit(), 255);
    let icmp = Icmpv6Packet::new_checked(p.ipv6.payload()).unwrap();
    let Icmpv6Repr::RouterAdvert(radv) = Icmpv6Repr::parse(&p.ipv6.src_addr(), &p.ipv6.dst_addr(), &icmp).unwrap()
    else {
        panic!("not an RA")
    };
    let pio = radv.prefix_info.unwrap();
    assert_eq!((pio.prefix, pio.prefix_len, radv.prefix_info_count), (a("2001:0:4136:e378::"), 64, 1));
    assert_eq!(radv.mtu, Some(1280));
    assert_eq!(s.stats().advertisements, 1);
}

#[test]
fn ra_bytes_match_the_reference_vector() {
    let mut s = server();
    let (_, ra) = run(&mut s, Local::Primary, "192.0.2.45:40000", &rs(Some(NONCE), RS_SOURCE_RESTRICTED));
    let want = hex("0001000001020304050607080000 0063bf3ffffdd2 6000000000383aff \
         fe800000000000008000f227bec91c87 fe800000000000000000ffffffffffff \
         8600954c00000000000000000000 07d0 03044040ffffffffffffffff00000000 \
         200100004136e3780000000000000000 0501000000000500");
    assert_eq!(ra, want);
}

#[test]
fn case11_cone_rs_is_answered_from_the_other_address() {
    let mut s = server();
    let (action, _) = run(&mut s, Local::Primary, "198.51.100.7:40000", &rs(Some(NONCE), RS_SOURCE_CONE));
    assert!(matches!(action, ServerAction::Udp { from: Local::Secondary, .. }), "{action:?}");
    let (action, _) = run(&mut s, Local::Secondary, "198.51.100.7:40000", &rs(Some(NONCE), RS_SOURCE_CONE));
    assert!(matches!(action, ServerAction::Udp { from: Local::Primary, .. }), "{action:?}");
}

#[test]
fn case12_restricted_rs_on_secondary_answers_from_secondary_with_primary_prefix() {
    let mut s = server();
    let (action, ra) = run(&mut s, Local::Secondary, "198.51.100.7:40000", &rs(Some(NONCE), RS_SOURCE_RESTRICTED));
    assert!(matches!(action, ServerAction::Udp { from: Local::Secondary, .. }), "{action:?}");
    assert_eq!(s.address(Local::Secondary), P1);
    // The PIO (last 40 bytes before the MTU option) embeds the primary address.
    let n = ra.len();
    assert_eq!(&ra[n - 24..n - 8], &a("2001:0:4136:e378::").octets());
}

#[test]
fn case13_rs_from_non_global_sources_is_ignored() {
    let mut s = server();
    for from in ["10.0.0.5:40000", "224.1.1.1:40000", "255.255.255.255:40000", "127.0.0.1:1"] {
        assert_drop(&mut s, Local::Primary, from, &rs(Some(NONCE), RS_SOURCE_RESTRICTED), DropReason::SourceNotGlobal);
    }
    assert_eq!(s.stats().advertisements, 0);
}

#[test]
fn case14_rs_without_auth_gets_ra_without_auth() {
    let mut s = server();
    let (action, ra) = run(&mut s, Local::Primary, "198.51.100.7:40000", &rs(None, RS_SOURCE_RESTRICTED));
    assert!(matches!(action, ServerAction::Udp { len: 104, .. }), "{action:?}");
    let p = TeredoPacket::parse(&ra).unwrap();
    assert!(p.auth.is_none());
    assert_eq!(p.origin, Some(sa("198.51.100.7:40000")));
}

#[test]
fn invalid_solicitations_are_ignored() {
    let mut s = server();
    // Hop limit 64.
    let bad = icmp_payload(Some(NONCE), RS_SOURCE_RESTRICTED, a("ff02::2"), 64, &Icmpv6Repr::RouterSolicit);
    assert_drop(&mut s, Local::Primary, "198.51.100.7:1", &bad, DropReason::InvalidSolicitation);
    // Global source.
    let bad = rs(Some(NONCE), a("2001:db8::1"));
    assert_drop(&mut s, Local::Primary, "198.51.100.7:1", &bad, DropReason::InvalidSolicitation);
    // Broken checksum.
    let mut bad = rs(Some(NONCE), RS_SOURCE_RESTRICTED);
    let n = bad.len();
    bad[n - 5] ^= 0xff;
    assert_drop(&mut s, Local::Primary, "198.51.100.7:1", &bad, DropReason::BadChecksum);
    // Unicast destination.
    let bad = icmp_payload(None, RS_SOURCE_RESTRICTED, a("fe80::1"), 255, &Icmpv6Repr::RouterSolicit);
    assert_drop(&mut s, Local::Primary, "198.51.100.7:1", &bad, DropReason::InvalidSolicitation);
}

#[test]
fn case15_tcp_is_not_forwarded() {
    let mut s = server();
    let mut d = vec![0u8; 60];
    Ipv6Repr { src_addr: a(A_ADDR), dst_addr: a("2001:db8::1"), next_header: 6, payload_len: 20, hop_limit: 64 }
        .emit(&mut d)
        .unwrap();
    assert_drop(&mut s, Local::Primary, A_MAPPED, &d, DropReason::NotBubbleOrIcmpv6);
}

#[test]
fn case16_mapping_mismatch_is_ignored() {
    let mut s = server();
    assert_drop(
        &mut s,
        Local::Primary,
        "192.0.2.99:40000",
        &echo(A_ADDR, "2001:db8::1", b"nonce123"),
        DropReason::SourceMismatch,
    );
}

/// RFC 4380 §5.3.1 check 5, and the one exception RFC 6081 §6.1 needs: a client behind
/// a symmetric NAT, whose peer is ours while it uses another server, reaches us from a
/// port its address does not embed. Its indirect bubble is passed on when it comes from
/// the embedded IPv4 address, carries a Nonce and goes to one of our clients, with an
/// origin indication naming the real port, its Nonce and its Random Port (§6.4: the
/// predicted port of a sequential NAT; stripped before, the example failed across two
/// servers), never its Alternate Address; nothing else from such a port passes.
#[test]
fn a_symmetric_nat_peers_nonce_bubble_from_another_port_is_passed_on_and_nothing_else() {
    let mut s = server();
    // A peer of another server (192.0.2.1), mapped at 192.0.2.45:40000 there, reaching
    // our server from another port of that address.
    let peer = "2001:0:c000:201:0:63bf:3fff:fdd2";
    let from = "192.0.2.45:51234";
    let nonce = [0x01, 0x04, 0xde, 0xad, 0xbe, 0xef];
    let mut with_nonce = bubble(peer, B_ADDR);
    with_nonce.extend_from_slice(&nonce);
    // Its Alternate Address stays behind; its Random Port goes on, under the type it
    // came with.
    for random_port in [[0x05, 0x02, 0x9c, 0x40], [0x02, 0x02, 0x9c, 0x41]] {
        let mut with_nonce = with_nonce.clone();
        with_nonce.extend_from_slice(&[0x03, 0x08, 0, 0, 10, 0, 0, 5, 0, 53]);
        with_nonce.extend_from_slice(&random_port);
        let (action, out) = run(&mut s, Local::Primary, from, &with_nonce);
        assert_eq!(action, ServerAction::Udp { from: Local::Primary, to: sa(B_MAPPED), len: 8 + 40 + 6 + 4 });
        let origin = shipworm_wire::teredo_origin::parse(&out[..8]).unwrap();
        assert_eq!(origin, sa(from), "the origin is where it came from");
        assert_eq!(&out[8..48], &with_nonce[..40]);
        assert_eq!(&out[48..54], &nonce, "the Nonce");
        assert_eq!(&out[54..], &random_port, "the Random Port, as it came");
    }
    // A malformed Random Port is left behind, the Nonce still passed.
    let mut bad = with_nonce.clone();
    bad.extend_from_slice(&[0x05, 0x01, 0x9c]);
    let (action, out) = run(&mut s, Local::Primary, from, &bad);
    assert_eq!(action, ServerAction::Udp { from: Local::Primary, to: sa(B_MAPPED), len: 8 + 40 + 6 });
    assert_eq!(&out[48..], &nonce);
    // Without a nonce (RFC 4380 peers, Miredo's), from another address, to a client of
    // another server, from one of our own clients (its server saw its real mapping), or
    // not a bubble: check 5 as written.
    let mut plain = bubble(peer, B_ADDR);
    assert_drop(&mut s, Local::Primary, from, &plain, DropReason::SourceMismatch);
    plain.extend_from_slice(&nonce);
    assert_drop(&mut s, Local::Primary, "198.51.100.99:51234", &plain, DropReason::SourceMismatch);
    let other_servers = "2001:0:c000:201:0:f227:39cc:9bf8";
    let mut to_other = bubble(peer, other_servers);
    to_other.extend_from_slice(&nonce);
    assert_drop(&mut s, Local::Primary, from, &to_other, DropReason::SourceMismatch);
    let mut ours = bubble(A_ADDR, B_ADDR);
    ours.extend_from_slice(&nonce);
    assert_drop(&mut s, Local::Primary, from, &ours, DropReason::SourceMismatch);
    assert_drop(&mut s, Local::Primary, from, &echo(peer, B_ADDR, b"nonce123"), DropReason::SourceMismatch);
}

#[test]
fn case17_bubble_to_our_client_gets_an_origin_indication() {
    let mut s = server();
    let b = bubble(A_ADDR, B_ADDR);
    let (action, out) = run(&mut s, Local::Primary, A_MAPPED, &b);
    assert_eq!(action, ServerAction::Udp { from: Local::Primary, to: sa(B_MAPPED), len: 48 });
    assert_eq!(&out[..8], &[0, 0, 0x63, 0xbf, 0x3f, 0xff, 0xfd, 0xd2]);
    assert_eq!(&out[8..], &b[..]);
    // Case 23: that bubble had hop limit 0 and was still forwarded, unchanged.
    assert_eq!(out[8 + 7], 0);
    assert_eq!(s.stats().forwarded_udp, 1);
    // The IPv6 packet's bytes, not the origin indication's.
    assert_eq!(s.stats().forwarded_udp_bytes, 40);
}

#[test]
fn case8_trailers_are_forwarded_intact() {
    let mut s = server();
    let mut b = bubble(A_ADDR, B_ADDR);
    b.extend_from_slice(&[3, 4, 0, 0, 0, 0]);
    let (_, out) = run(&mut s, Local::Primary, A_MAPPED, &b);
    assert_eq!(&out[8..], &b[..]);
}

#[test]
fn case18_non_global_embedded_destinations_are_not_sent_to() {
    let mut s = server();
    // ~192.168.1.1 = 3f57:fefe, ~127.0.0.1 = 80ff:fffe
    for dst in ["2001:0:4136:e378:0:f227:3f57:fefe", "2001:0:4136:e378:0:f227:80ff:fffe"] {
        assert_drop(&mut s, Local::Primary, A_MAPPED, &bubble(A_ADDR, dst), DropReason::DestinationMappingNotGlobal);
    }
    // Our own address embedded as a mapping: no loop.
    let own = "2001:0:4136:e378:0:f227:bec9:1c87";
    assert_drop(&mut s, Local::Primary, A_MAPPED, &bubble(A_ADDR, own), DropReason::DestinationMappingNotGlobal);
}

#[test]
fn case19_other_servers_clients_get_no_origin_indication() {
    let mut s = server();
    // Server 192.0.2.1 (c000:201), client mapped 198.51.100.7:3544.
    let dst = "2001:0:c000:201:0:f227:39cc:9bf8";
    let b = bubble(A_ADDR, dst);
    let (action, out) = run(&mut s, Local::Primary, A_MAPPED, &b);
    assert_eq!(action, ServerAction::Udp { from: Local::Primary, to: sa(B_MAPPED), len: 40 });
    assert_eq!(out, b);
}

#[test]
fn case20_echo_to_native_goes_out_natively_as_a_router() {
    let mut s = server();
    let e = echo(A_ADDR, "2001:db8::1", b"12345678");
    let (action, out) = run(&mut s, Local::Primary, A_MAPPED, &e);
    assert_eq!(action, ServerAction::Native { len: e.len() });
    let p = Ipv6Packet::new_checked(&out[..]).unwrap();
    assert_eq!(p.hop_limit(), 63);
    assert_eq!(p.payload(), &e[40..]);
    assert_eq!(s.stats().forwarded_native, 1);
    assert_eq!(s.stats().forwarded_native_bytes, e.len() as u64);
}

#[test]
fn only_echo_requests_go_native() {
    let mut s = server();
    let reply =
        icmp_payload(None, a(A_ADDR), a("2001:db8::1"), 64, &Icmpv6Repr::EchoReply { ident: 1, seq_no: 1, data: b"x" });
    assert_drop(&mut s, Local::Primary, A_MAPPED, &reply, DropReason::Icmpv6TypeNotForwarded);
    let unreach = icmp_payload(
        None,
        a(A_ADDR),
        a("2001:db8::1"),
        64,
        &Icmpv6Repr::DstUnreachable { code: 3, invoking: &[0x60; 48] },
    );
    assert_drop(&mut s, Local::Primary, A_MAPPED, &unreach, DropReason::Icmpv6TypeNotForwarded);
    assert_drop(&mut s, Local::Primary, A_MAPPED, &bubble(A_ADDR, "2001:db8::1"), DropReason::NotBubbleOrIcmpv6);
    let big = echo(A_ADDR, "2001:db8::1", &[0u8; 1300]);
    assert_drop(&mut s, Local::Primary, A_MAPPED, &big, DropReason::Icmpv6TooLarge);
    let mut last_hop = echo(A_ADDR, "2001:db8::1", b"x");
    last_hop[7] = 1;
    assert_drop(&mut s, Local::Primary, A_MAPPED, &last_hop, DropReason::HopLimitExceeded);
    let mut damaged = echo(A_ADDR, "2001:db8::1", b"x");
    damaged[43] ^= 1;
    assert_drop(&mut s, Local::Primary, A_MAPPED, &damaged, DropReason::BadChecksum);
    // Code 1, checksum right: no echo request, and not one the raw socket would carry.
    let mut coded = echo(A_ADDR, "2001:db8::1", b"x");
    coded[41] = 1;
    Icmpv6Packet::new_checked(&mut coded[40..]).unwrap().fill_checksum(&a(A_ADDR), &a("2001:db8::1"));
    assert_drop(&mut s, Local::Primary, A_MAPPED, &coded, DropReason::Icmpv6TypeNotForwarded);
}

/// #40, 11: what the raw socket's holder lets out. The server's own native packet
/// passes; each change below makes it something else the raw socket could carry (with
/// its checksum made right again, so that only the change decides), and is refused.
#[test]
fn the_raw_socket_carries_connectivity_test_echoes_and_nothing_else() {
    let mut s = server();
    let (_, good) = run(&mut s, Local::Primary, A_MAPPED, &echo(A_ADDR, "2001:db8::1", b"12345678"));
    let cfg = s.config().clone();
    assert!(is_connectivity_test_echo(&cfg, &good));
    let refit = |mut p: Vec<u8>| {
        let ip = Ipv6Packet::new_checked(&p[..]).unwrap();
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        Icmpv6Packet::new_checked(&mut p[40..]).unwrap().fill_checksum(&src, &dst);
        p
    };
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut p = good.clone();
        f(&mut p);
        refit(p)
    };
    let set_src = |p: &mut Vec<u8>, s: &str| p[8..24].copy_from_slice(&a(s).octets());
    let set_dst = |p: &mut Vec<u8>, s: &str| p[24..40].copy_from_slice(&a(s).octets());
    let refused: Vec<(&str, Vec<u8>)> = vec![
        // A router advertisement from a link-local source, hop limit 255.
        (
            "router advertisement",
            with(&|p| {
                p[40] = 134;
                p[7] = 255;
                set_src(p, "fe80::1");
                set_dst(p, "ff02::1");
            }),
        ),
        ("router advertisement from a Teredo source", with(&|p| p[40] = 134)),
        ("echo reply", with(&|p| p[40] = 129)),
        ("destination unreachable", with(&|p| p[40] = 1)),
        ("echo request, code 1", with(&|p| p[41] = 1)),
        ("spoofed native source", with(&|p| set_src(p, "2001:db8::66"))),
        ("to a Teredo address", with(&|p| set_dst(p, B_ADDR))),
        ("to multicast", with(&|p| set_dst(p, "ff0e::1"))),
        ("to link-local", with(&|p| set_dst(p, "fe80::1"))),
        ("to our own 6to4 address", with(&|p| set_dst(p, "2002:4136:e378::1"))),
        ("UDP", with(&|p| p[6] = 17)),
        ("TCP", with(&|p| p[6] = 6)),
        ("bytes after the packet", with(&|p| p.push(0))),
        ("hop limit 0", with(&|p| p[7] = 0)),
        (
            "too large",
            refit({
                let mut p = echo(A_ADDR, "2001:db8::1", &[0u8; 1300]);
                p[7] = 63;
                p
            }),
        ),
        ("bad checksum", {
            let mut p = good.clone();
            p[43] ^= 1;
            p
        }),
        ("truncated", good[..44].to_vec()),
        ("nothing", Vec::new()),
    ];
    for (what, p) in refused {
        assert!(!is_connectivity_test_echo(&cfg, &p), "{what} would leave through the raw socket");
    }
}

#[test]
fn icmpv6_behind_extension_headers_is_not_forwarded() {
    let mut s = server();
    let mut d = vec![0u8; 40];
    Ipv6Repr { src_addr: a(A_ADDR), dst_addr: a("2001:db8::1"), next_header: 60, payload_len: 16, hop_limit: 64 }
        .emit(&mut d)
        .unwrap();
    d.extend_from_slice(&[58, 0, 1, 4, 0, 0, 0, 0, 128, 0, 0, 0, 0, 1, 0, 1]);
    assert_drop(&mut s, Local::Primary, A_MAPPED, &d, DropReason::ExtensionHeaders);
}

#[test]
fn case21_link_local_and_multicast_destinations_are_not_forwarded() {
    let mut s = server();
    for dst in ["fe80::1", "ff0e::1"] {
        assert_drop(&mut s, Local::Primary, A_MAPPED, &echo(A_ADDR, dst, b"x"), DropReason::DestinationNotGlobal);
    }
}

#[test]
fn case22_loop_guard() {
    let mut s = server();
    for from in ["65.54.227.120:3544", "65.54.227.121:3544"] {
        assert_drop(&mut s, Local::Primary, from, &bubble(A_ADDR, B_ADDR), DropReason::LoopGuard);
    }
}

#[test]
fn relay_bubble_from_native_source_reaches_our_client() {
    // Check 6: a relay's indirect bubble (native source) to one of our clients.
    let mut s = server();
    let b = bubble("2001:db8::5", B_ADDR);
    let (action, out) = run(&mut s, Local::Primary, "203.0.113.9:5555", &b);
    assert_eq!(action, ServerAction::Udp { from: Local::Primary, to: sa(B_MAPPED), len: 48 });
    assert_eq!(&out[..8], &[0, 0, 0xea, 0x4c, 0x34, 0xff, 0x8e, 0xf6]);
    // A native source to someone else's client or to a native host: refused.
    assert_drop(
        &mut s,
        Local::Primary,
        "203.0.113.9:5555",
        &bubble("2001:db8::5", "2001:0:c000:201:0:f227:39cc:9bf8"),
        DropReason::SourceMismatch,
    );
    assert_drop(
        &mut s,
        Local::Primary,
        "203.0.113.9:5555",
        &echo("2001:db8::5", "2001:db8::6", b"x"),
        DropReason::SourceMismatch,
    );
}

#[test]
fn cases1_to_9_malformed_payloads_are_dropped_silently() {
    let mut s = server();
    let good = bubble(A_ADDR, B_ADDR);
    let mut v = vec![0, 2];
    v.extend_from_slice(&good);
    let mut version4 = good.clone();
    version4[0] = 0x45;
    let mut short = good.clone();
    short[5] = 100;
    short.extend_from_slice(&[0; 20]);
    let mut nh59 = good.clone();
    nh59[5] = 8;
    nh59.extend_from_slice(&[0; 8]);
    let cases: Vec<(Vec<u8>, DropReason)> = vec![
        (vec![], DropReason::MalformedTruncated),
        (vec![0x60], DropReason::MalformedTruncated),
        (v, DropReason::MalformedIndicator),
        (vec![0, 0, 0x63, 0xbf, 0x3f], DropReason::MalformedTruncated),
        (
            {
                let mut b = vec![0u8; 60];
                b[1] = 1;
                b[2] = 200;
                b
            },
            DropReason::MalformedTruncated,
        ),
        (version4, DropReason::MalformedVersion),
        (short, DropReason::MalformedTruncated),
        (nh59, DropReason::NotBubbleOrIcmpv6),
    ];
    for (d, why) in cases {
        assert_drop(&mut s, Local::Primary, A_MAPPED, &d, why);
    }
    assert_eq!(s.stats().drops.total(), 8);
    assert_eq!(s.stats().forwarded_udp + s.stats().forwarded_native + s.stats().advertisements, 0);
}

#[test]
fn native_echo_reply_goes_back_to_our_client() {
    let mut s = server();
    let mut p = vec![0u8; 1500];
    let data = b"nonce-123";
    let icmp = Icmpv6Repr::EchoReply { ident: 1, seq_no: 2, data };
    let (src, dst) = (a("2001:db8::1"), a(B_ADDR));
    Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: icmp.buffer_len(), hop_limit: 60 }
        .emit(&mut p)
        .unwrap();
    let n = icmp.emit(&src, &dst, &mut p[40..]).unwrap();
    p.truncate(40 + n);
    let (action, out) = outcome(&mut s, |s, w| s.on_native(&p, w));
    assert_eq!(action, ServerAction::Udp { from: Local::Primary, to: sa(B_MAPPED), len: p.len() });
    assert_eq!(out[7], 59);
    // Not our client: refused.
    let other = a("2001:0:c000:201:0:f227:39cc:9bf8");
    p[24..40].copy_from_slice(&other.octets());
    assert_eq!(outcome(&mut s, |s, w| s.on_native(&p, w)).0, ServerAction::Drop(DropReason::NotOurClient));
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, failure_persistence: None, ..ProptestConfig::default() })]

        /// Arbitrary datagrams never panic, and each leads to one output or one counted drop.
        #[test]
        fn server_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300), ip in any::<u32>(), port in any::<u16>(), flip in any::<bool>()) {
            let mut s = server();
            let mut d = data;
            // Half the time, start from a valid bubble between clients so deep paths run.
            if flip && d.len() >= 40 {
                d[..40].copy_from_slice(&bubble(A_ADDR, B_ADDR));
            }
            let from = SocketAddrV4::new(Ipv4Addr::from(ip), port);
            let _ = outcome(&mut s, |s, w| s.on_udp(Duration::from_secs(1), Local::Primary, from, &d, w));
            let _ = outcome(&mut s, |s, w| s.on_native(&d, w));
        }
    }
}

#[test]
fn forwarded_trailers_are_what_nodes_send_and_never_kilobytes_of_anything() {
    let mut s = server();
    // Nonce, alternate address, random port: 36 bytes, forwarded intact.
    let mut b = bubble(A_ADDR, B_ADDR);
    b.extend_from_slice(&hex("01 04 01020304  03 0e 0000 c0a8010a 1000 c6336407 1388  05 02 04b1  04 04 00 000000"));
    let (action, out) = run(&mut s, Local::Primary, A_MAPPED, &b);
    assert!(matches!(action, ServerAction::Udp { .. }), "{action:?}");
    assert_eq!(&out[8..], &b[..]);
    // A bubble or an echo followed by 4000 bytes dressed as one unknown trailer after
    // another: nothing of it is reflected.
    let mut junk = Vec::new();
    while junk.len() < 4000 {
        junk.extend_from_slice(&[0x99, 0x3e]);
        junk.extend_from_slice(&[0x41; 0x3e]);
    }
    for base in [bubble(A_ADDR, B_ADDR), echo(A_ADDR, B_ADDR, b"ping")] {
        let mut b = base;
        b.extend_from_slice(&junk);
        assert_drop(&mut s, Local::Primary, A_MAPPED, &b, DropReason::BadTrailers);
    }
    // Malformed: a TLV runs past the end.
    let mut b = bubble(A_ADDR, B_ADDR);
    b.extend_from_slice(&[0x01, 0x04, 0xaa]);
    assert_drop(&mut s, Local::Primary, A_MAPPED, &b, DropReason::BadTrailers);
}

#[test]
fn echoes_to_site_and_tunnel_addresses_are_not_forwarded() {
    let mut s = server();
    for dst in ["fd00::1", "fc00:1::2", "::ffff:192.0.2.7", "fec0::1"] {
        assert_drop(&mut s, Local::Primary, A_MAPPED, &echo(A_ADDR, dst, b"x"), DropReason::DestinationNotGlobal);
    }
}

/// RFC 4380 §5.2.9: a client's connectivity test to a 6to4 host goes out natively and
/// its reply comes back; RFC 6324 §3.3: not to or from the server's own 6to4 or ISATAP
/// addresses (either of its two IPv4 addresses), which would loop.
#[test]
fn a_sixtofour_host_is_tested_like_any_native_host_but_a_loop_is_refused() {
    let mut s = server();
    let host = "2002:c633:6401::5";
    let e = echo(A_ADDR, host, b"12345678");
    assert_eq!(run(&mut s, Local::Primary, A_MAPPED, &e).0, ServerAction::Native { len: e.len() });
    for own in ["2002:4136:e378::1", "2002:4136:e379:5::1", "2001:db8:7::5efe:4136:e378"] {
        assert_drop(&mut s, Local::Primary, A_MAPPED, &echo(A_ADDR, own, b"x"), DropReason::RoutingLoop);
    }
    let reply = |src: &str| {
        let (src, dst) = (a(src), a(B_ADDR));
        let icmp = Icmpv6Repr::EchoReply { ident: 1, seq_no: 2, data: b"12345678" };
        let mut p = vec![0u8; 40 + icmp.buffer_len()];
        Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: icmp.buffer_len(), hop_limit: 60 }
            .emit(&mut p)
            .unwrap();
        icmp.emit(&src, &dst, &mut p[40..]).unwrap();
        p
    };
    let p = reply(host);
    let to_client = ServerAction::Udp { from: Local::Primary, to: sa(B_MAPPED), len: p.len() };
    assert_eq!(outcome(&mut s, |s, w| s.on_native(&p, w)).0, to_client);
    let p = reply("2002:4136:e378::1");
    assert_eq!(outcome(&mut s, |s, w| s.on_native(&p, w)).0, ServerAction::Drop(DropReason::RoutingLoop));
    assert_eq!(s.stats().drops.get(DropReason::RoutingLoop), 4);
}

#[test]
fn one_address_gets_advertisements_at_a_bounded_rate_and_others_still_get_theirs() {
    let mut s = server();
    let (rate, burst) = shipworm_proto::server::DEFAULT_SOLICITATIONS_PER_ADDRESS;
    let solicit = rs(None, a("fe80::ffff:ffff:ffff"));
    let mut answered = 0;
    // Forged solicitations naming one victim, 10 000 a second for 2 s.
    for i in 0..20_000u64 {
        let mut w = Recorder::default();
        let now = Duration::from_secs(10) + Duration::from_micros(i * 100);
        let _ = s.on_udp(now, Local::Primary, sa("198.51.100.99:53"), &solicit, &mut w);
        answered += actions(&w).len();
    }
    let most = (burst + 2 * rate) as usize + 1;
    assert!(answered <= most && answered >= burst as usize, "{answered} answered, at most {most}");
    assert_eq!(s.stats().drops.get(DropReason::RateLimited), 20_000 - answered as u64);
    // Meanwhile a client elsewhere qualifies as ever.
    let mut w = Recorder::default();
    let _ = s.on_udp(Duration::from_secs(12), Local::Primary, sa(A_MAPPED), &solicit, &mut w);
    assert_eq!(actions(&w).len(), 1);
}

#[test]
fn an_echo_request_to_the_servers_link_local_address_is_answered_from_it() {
    // RFC 4380 §5.3.1: the server processes Echo Requests sent to its link-local address.
    let mut s = server();
    let ll = shipworm_wire::teredo_addr::server_link_local(P);
    let req = echo(A_ADDR, &ll.to_string(), b"are you there");
    let (action, out) = run(&mut s, Local::Secondary, A_MAPPED, &req);
    assert_eq!(action, ServerAction::Udp { from: Local::Secondary, to: sa(A_MAPPED), len: out.len() });
    let p = TeredoPacket::parse(&out).unwrap();
    assert_eq!((p.ipv6.src_addr(), p.ipv6.dst_addr()), (ll, a(A_ADDR)));
    let icmp = Icmpv6Packet::new_checked(p.ipv6.payload()).unwrap();
    assert_eq!(
        Icmpv6Repr::parse(&ll, &a(A_ADDR), &icmp),
        Ok(Icmpv6Repr::EchoReply { ident: 1, seq_no: 1, data: b"are you there" })
    );
    // Only from a client at its own mapping; nothing else at that address is answered.
    assert_drop(&mut s, Local::Primary, "192.0.2.45:51234", &req, DropReason::SourceMismatch);
    assert_drop(&mut s, Local::Primary, A_MAPPED, &bubble(A_ADDR, &ll.to_string()), DropReason::LocalDestination);
}

#[test]
fn echo_requests_to_the_link_local_address_are_answered_within_the_solicitations_rate() {
    // A spoofed source passes check 5 when its Teredo address embeds the victim it names:
    // the answers such a flood draws stay within the per-address rate, and are no larger
    // than the requests.
    let mut s = server();
    let (rate, burst) = shipworm_proto::server::DEFAULT_SOLICITATIONS_PER_ADDRESS;
    let ll = shipworm_wire::teredo_addr::server_link_local(P);
    let req = echo(A_ADDR, &ll.to_string(), &[7u8; 1000]);
    let mut answered = 0;
    for i in 0..20_000u64 {
        let mut w = Recorder::default();
        let now = Duration::from_secs(10) + Duration::from_micros(i * 100);
        let _ = s.on_udp(now, Local::Primary, sa(A_MAPPED), &req, &mut w);
        for (_, bytes) in actions(&w) {
            assert!(bytes.len() <= req.len(), "an answer larger than its request: {} > {}", bytes.len(), req.len());
            answered += 1;
        }
    }
    let most = (burst + 2 * rate) as usize + 1;
    assert!(answered <= most && answered >= burst as usize, "{answered} answered, at most {most}");
    assert_eq!(s.stats().drops.get(DropReason::RateLimited), 20_000 - answered as u64);
}
