//! The client against the black-box cases 24–40 of the requirements reference, in
//! virtual time, with RAs made by shipworm's own server state machine (or crafted
//! when a case needs a malformed one).

use shipworm_proto::client::{Client, ClientConfig, ClientEvent, ClientState, NatKind, ServerAddrs, Via};
use shipworm_proto::server::{Local, Server, ServerConfig};
use shipworm_proto::DropReason;
use shipworm_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};
use shipworm_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use shipworm_wire::teredo_addr::TeredoAddr;
use shipworm_wire::teredo_packet::{emit_bubble, TeredoHeaderRepr, TeredoPacket};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::time::Duration;

const P: Ipv4Addr = Ipv4Addr::new(65, 54, 227, 120);
const P1: Ipv4Addr = Ipv4Addr::new(65, 54, 227, 121);
const Q: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 50);
const M: &str = "192.0.2.45:40000";
const MP: &str = "192.0.2.45:40001"; // the probe port's mapping

mod common;
use common::{ClientSends, Rng};
use shipworm_proto::transmit::{Recorder, Source};

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}
fn sa(s: &str) -> SocketAddrV4 {
    s.parse().unwrap()
}
fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

fn client(servers: &[Ipv4Addr]) -> Client<Rng> {
    let mut cfg = ClientConfig::new(servers.iter().map(|&p| ServerAddrs::new(p)).collect());
    // These cases count every datagram; local discovery's announcements have their own
    // (crates/proto/tests/same_nat.rs).
    cfg.local_discovery = false;
    Client::new(cfg, Rng(0x1234_5678_9abc_def0))
}

/// What server `primary` answers to `rs` arriving on `local` from `from`.
fn answer(primary: Ipv4Addr, local: Local, from: &str, rs: &[u8]) -> Option<(SocketAddrV4, Vec<u8>)> {
    let mut s = Server::new(ServerConfig::new(primary));
    let mut w = Recorder::default();
    let _ = s.on_udp(secs(1), local, sa(from), rs, &mut w);
    let sent = w.sent.pop()?;
    let from = match sent.from {
        Source::Service => Local::Primary,
        Source::Secondary => Local::Secondary,
        other => panic!("the server sent from {other:?}"),
    };
    Some((SocketAddrV4::new(s.address(from), 3544), sent.payload))
}

/// Run qualification against server P with the NAT mapping the service port to
/// `m1` towards the primary and `m2` towards the secondary; `cone` says whether the
/// probe's RA gets through. Returns the events.
fn qualify(c: &mut Client<Rng>, now: Duration, m1: &str, m2: &str, cone: bool) -> Vec<ClientEvent> {
    let mut w = Recorder::default();
    c.on_timer(now, &mut w);
    let (to, rs) = w.pop_udp().expect("RS to the primary");
    assert_eq!(to, SocketAddrV4::new(P, 3544));
    let (pto, prs) = w.pop_probe().expect("cone RS from the probe port");
    assert_eq!(pto, SocketAddrV4::new(P, 3544));
    if cone {
        let (from, ra) = answer(P, Local::Primary, MP, &prs).unwrap();
        assert_eq!(from.ip(), &P1, "the cone RS is answered from the secondary");
        let _ = c.on_udp(now, Via::Probe, from, &ra, &mut w);
    }
    let (from, ra) = answer(P, Local::Primary, m1, &rs).unwrap();
    let _ = c.on_udp(now + ms(1), Via::Service, from, &ra, &mut w);
    let (to2, rs2) = w.pop_udp().expect("RS to the secondary");
    assert_eq!(to2, SocketAddrV4::new(P1, 3544));
    let (from2, ra2) = answer(P, Local::Secondary, m2, &rs2).unwrap();
    let _ = c.on_udp(now + ms(2), Via::Service, from2, &ra2, &mut w);
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn up_address(events: &[ClientEvent]) -> Ipv6Addr {
    match events.iter().find(|e| matches!(e, ClientEvent::Up { .. })) {
        Some(ClientEvent::Up { address, .. }) => *address,
        _ => panic!("no Up event in {events:?}"),
    }
}

fn qualified() -> (Client<Rng>, Ipv6Addr) {
    let mut c = client(&[P]);
    let ev = qualify(&mut c, secs(1), M, M, false);
    let addr = up_address(&ev);
    (c, addr)
}

#[test]
fn qualifies_restricted_with_an_rfc5991_address() {
    let mut c = client(&[P]);
    let ev = qualify(&mut c, secs(1), M, M, false);
    let addr = up_address(&ev);
    let t = TeredoAddr::decode(&addr).unwrap();
    assert_eq!((t.server, t.mapped), (P, sa(M)));
    assert!(!t.flags.cone(), "RFC 5991: cone bit clear");
    assert!(t.flags.conformance().is_rfc5991(), "random bits set: {:#x}", t.flags.0);
    assert!(matches!(ev[0], ClientEvent::Up { nat: NatKind::Restricted, mtu: 1280, .. }));
    assert_eq!(c.status().state, ClientState::Qualified);
}

#[test]
fn detects_a_cone_nat() {
    let mut c = client(&[P]);
    let ev = qualify(&mut c, secs(1), M, M, true);
    assert!(matches!(ev[0], ClientEvent::Up { nat: NatKind::Cone, .. }), "{ev:?}");
}

#[test]
fn case30_symmetric_nat_is_reported_and_no_address_claimed() {
    // RFC 4380 alone (Symmetric NAT Support off).
    let mut cfg = ClientConfig::new(vec![ServerAddrs::new(P)]);
    cfg.symmetric_nat_support = false;
    let mut c = Client::new(cfg, Rng(0x1234_5678_9abc_def0));
    let ev = qualify(&mut c, secs(1), M, "192.0.2.45:51234", false);
    assert_eq!(ev, vec![ClientEvent::Nat(NatKind::Symmetric)]);
    assert_eq!(c.address(), None);
    assert_eq!(c.status().nat, NatKind::Symmetric);
}

/// A client qualified behind a symmetric NAT (the secondary sees another port), which
/// it reports: its address.
fn qualified_symmetric() -> (Client<Rng>, Ipv6Addr) {
    let mut c = client(&[P]);
    let ev = qualify(&mut c, secs(1), M, "192.0.2.45:51234", false);
    assert!(matches!(ev[0], ClientEvent::Up { nat: NatKind::Symmetric, .. }), "{ev:?}");
    let addr = up_address(&ev);
    (c, addr)
}

#[test]
fn symmetric_nat_support_keeps_the_primary_servers_mapping() {
    // RFC 6081 §5.2: the address is built from the primary's RA, the NAT reported.
    let (mut c, addr) = qualified_symmetric();
    assert_eq!(TeredoAddr::decode(&addr).unwrap().mapped, sa(M), "the primary's mapping, not the secondary's");
    assert_eq!(c.status().state, ClientState::Qualified);
    // A relay behind its indirect bubble is answered from wherever the NAT maps us:
    // the direct bubble goes to the origin indication, so the relay learns that port.
    let mut w = Recorder::default();
    let relay = "2001:db8:1::10";
    let mut b = vec![0u8; 48];
    let at = TeredoHeaderRepr { auth: None, origin: Some(sa("192.0.2.10:3545")) }.emit(&mut b).unwrap();
    emit_bubble(&a(relay), &addr, 0, &mut b[at..]).unwrap();
    b.truncate(at + 40);
    let _ = c.on_udp(secs(2), Via::Service, SocketAddrV4::new(P, 3544), &b, &mut w);
    assert_eq!(w.udp().len(), 1);
    assert_eq!(w.udp()[0].0, sa("192.0.2.10:3545"));
    let sent = w.udp();
    let bubble = TeredoPacket::parse(&sent[0].1).unwrap();
    assert!(bubble.is_bubble());
    assert_eq!((bubble.ipv6.src_addr(), bubble.ipv6.dst_addr()), (addr, a(relay)));
}

#[test]
fn status_tells_the_nat_behaviour_and_the_extensions() {
    // Port kept towards the primary (M is :40000): a port-preserving symmetric NAT.
    let mut cfg = ClientConfig::new(vec![ServerAddrs::new(P)]);
    cfg.service_port = std::num::NonZeroU16::new(40000);
    let mut c = Client::new(cfg.clone(), Rng(7));
    qualify(&mut c, secs(1), M, "192.0.2.45:51234", false);
    let st = c.status();
    assert!(st.port_preserving);
    assert_eq!(st.port_prediction, "same port");
    assert!(
        st.extensions.contains(&"symmetric NAT support") && st.extensions.contains(&"hairpinning"),
        "{:?}",
        st.extensions
    );
    // Another port: counted out some other way, predicted by the Echo Test.
    cfg.service_port = std::num::NonZeroU16::new(3544);
    let mut c = Client::new(cfg.clone(), Rng(7));
    qualify(&mut c, secs(1), M, "192.0.2.45:51234", false);
    assert_eq!((c.status().port_preserving, c.status().port_prediction), (false, "echo test"));
    // Not symmetric: nothing to predict. RFC 4380 alone: no extension but SLR's.
    cfg.symmetric_nat_support = false;
    let mut c = Client::new(cfg, Rng(7));
    qualify(&mut c, secs(1), M, M, false);
    assert_eq!(c.status().port_prediction, "none");
    assert_eq!(c.status().extensions, vec!["server load reduction", "local discovery (RFC 4380)"]);
}

#[test]
fn forged_indirect_bubbles_cannot_open_unbounded_ports_or_answers() {
    // Behind a port-preserving symmetric NAT every new peer's nonce-carrying indirect
    // bubble would open a random port and draw answers: a flood of forged ones, each
    // from another Teredo source, must stay within the port table's cap and the shared
    // answer budget, and the ports must close again once nobody answers on them.
    let mut cfg = ClientConfig::new(vec![ServerAddrs::new(P)]);
    cfg.service_port = std::num::NonZeroU16::new(40000);
    let cap = cfg.random_ports;
    let mut c = Client::new(cfg, Rng(11));
    let me = up_address(&qualify(&mut c, secs(1), M, "192.0.2.45:51234", false));
    let mut w = Recorder::default();
    for i in 0..2000u32 {
        let src = TeredoAddr {
            prefix: 0x2001_0000,
            server: Q,
            flags: shipworm_wire::teredo_addr::Flags(0),
            mapped: SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, (i % 250) as u8 + 1), 1024 + i as u16),
        }
        .to_ipv6();
        let mut d = vec![0u8; 8];
        TeredoHeaderRepr { auth: None, origin: Some(sa("198.51.100.1:4000")) }.emit(&mut d).unwrap();
        d.extend_from_slice(&bubble(&src.to_string(), &me.to_string()));
        d.extend_from_slice(&[1, 4, 0xde, 0xad, 0xbe, (i as u8) | 1, 5, 2, 0x9c, 0x40]);
        let _ = c.on_udp(secs(2) + ms(u64::from(i)), Via::Service, SocketAddrV4::new(P, 3544), &d, &mut w);
    }
    assert!(w.most_open <= cap, "{} random ports open at once, cap {cap}", w.most_open);
    assert!(w.most_open > 0, "the flood did reach the port table");
    // One direct answer each at most, and indirect answers within the budget (50/s
    // over two seconds of flood, plus the burst).
    let indirect = w.udp().iter().filter(|(to, _)| *to == SocketAddrV4::new(Q, 3544)).count();
    assert!(indirect <= 50 * 3 + 50, "{indirect} indirect answers");
    assert!(w.udp().len() <= 2000 * 2 + indirect, "{} datagrams", w.udp().len());
    println!(
        "2000 forged bubbles: {} ports open at most, {indirect} indirect answers, {} datagrams",
        w.most_open,
        w.udp().len()
    );
    // Nobody answers on those ports: after a minute they are all closed.
    for t in 0..70 {
        c.on_timer(secs(5 + t), &mut w);
    }
    assert!(w.open.is_empty(), "{} ports still open", w.open.len());
}

/// Drive to the first RS and return it.
fn first_rs(c: &mut Client<Rng>, w: &mut Recorder) -> Vec<u8> {
    c.on_timer(secs(1), w);
    w.pop_udp().unwrap().1
}

fn nonce_of(rs: &[u8]) -> [u8; 8] {
    TeredoPacket::parse(rs).unwrap().auth_repr().unwrap().nonce
}

/// A hand-made RA with `options` (raw ND option bytes) from server P's link-local.
fn crafted_ra(nonce: Option<[u8; 8]>, origin: Option<&str>, dst: &str, options: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 512];
    let h =
        TeredoHeaderRepr { auth: nonce.map(shipworm_wire::teredo_auth::AuthRepr::with_nonce), origin: origin.map(sa) };
    let at = h.emit(&mut b).unwrap();
    let src = shipworm_wire::teredo_addr::server_link_local(P);
    let dst = a(dst);
    let icmp_len = 16 + options.len();
    Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: icmp_len, hop_limit: 255 }
        .emit(&mut b[at..])
        .unwrap();
    let icmp = &mut b[at + 40..at + 40 + icmp_len];
    icmp[0] = 134;
    icmp[16..].copy_from_slice(options);
    Icmpv6Packet::new_unchecked(&mut icmp[..]).fill_checksum(&src, &dst);
    b.truncate(at + 40 + icmp_len);
    b
}

fn pio(prefix: &str, len: u8) -> Vec<u8> {
    let mut o = vec![3, 4, len, 0x40, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
    o.extend_from_slice(&a(prefix).octets());
    o
}

fn still_qualifying(c: &mut Client<Rng>, w: &mut Recorder) {
    assert!(c.poll_event().is_none());
    assert_eq!(c.status().state, ClientState::Qualifying);
    assert!(w.udp().is_empty(), "no RS to the secondary: the RA was not accepted");
}

#[test]
fn case24_to_28_bad_ras_are_ignored() {
    let good_prefix = "2001:0:4136:e378::";
    type MakeRa = Box<dyn Fn([u8; 8]) -> Vec<u8>>;
    let cases: Vec<(&str, MakeRa)> = vec![
        (
            "24 wrong nonce",
            Box::new(|_| crafted_ra(Some([9; 8]), Some(M), "fe80::ffff:ffff:ffff", &pio(good_prefix, 64))),
        ),
        ("25 no origin", Box::new(|n| crafted_ra(Some(n), None, "fe80::ffff:ffff:ffff", &pio(good_prefix, 64)))),
        (
            "26 two PIOs",
            Box::new(|n| {
                crafted_ra(
                    Some(n),
                    Some(M),
                    "fe80::ffff:ffff:ffff",
                    &[pio(good_prefix, 64), pio(good_prefix, 64)].concat(),
                )
            }),
        ),
        ("26 no PIO", Box::new(|n| crafted_ra(Some(n), Some(M), "fe80::ffff:ffff:ffff", &[5, 1, 0, 0, 0, 0, 5, 0]))),
        ("26 /48", Box::new(|n| crafted_ra(Some(n), Some(M), "fe80::ffff:ffff:ffff", &pio(good_prefix, 48)))),
        (
            "26 other server",
            Box::new(|n| crafted_ra(Some(n), Some(M), "fe80::ffff:ffff:ffff", &pio("2001:0:a00:1::", 64))),
        ),
        ("27 wrong destination", Box::new(|n| crafted_ra(Some(n), Some(M), "fe80::1", &pio(good_prefix, 64)))),
        (
            "28 zero-length option",
            Box::new(|n| {
                crafted_ra(
                    Some(n),
                    Some(M),
                    "fe80::ffff:ffff:ffff",
                    &[pio(good_prefix, 64), vec![5, 0, 0, 0, 0, 0, 0, 0]].concat(),
                )
            }),
        ),
        (
            "MTU below 1280",
            Box::new(|n| {
                crafted_ra(
                    Some(n),
                    Some(M),
                    "fe80::ffff:ffff:ffff",
                    &[pio(good_prefix, 64), vec![5, 1, 0, 0, 0, 0, 4, 0]].concat(),
                )
            }),
        ),
    ];
    for (name, make) in cases {
        let mut c = client(&[P]);
        let mut w = Recorder::default();
        let n = nonce_of(&first_rs(&mut c, &mut w));
        w = Recorder::default();
        let _ = c.on_udp(secs(1), Via::Service, SocketAddrV4::new(P, 3544), &make(n), &mut w);
        still_qualifying(&mut c, &mut w);
        // The crafted RA itself is right once the flaw is removed (the test is sound).
        if name == "24 wrong nonce" {
            let ok = crafted_ra(Some(n), Some(M), "fe80::ffff:ffff:ffff", &pio(good_prefix, 64));
            let _ = c.on_udp(secs(1), Via::Service, SocketAddrV4::new(P, 3544), &ok, &mut w);
            assert_eq!(w.udp().len(), 1, "a correct crafted RA moves on to the secondary probe");
        }
    }
}

#[test]
fn ra_from_the_wrong_address_or_port_is_ignored() {
    let mut c = client(&[P]);
    let mut w = Recorder::default();
    let rs = first_rs(&mut c, &mut w);
    let (_, ra) = answer(P, Local::Primary, M, &rs).unwrap();
    let _ = c.on_udp(secs(1), Via::Service, sa("65.54.227.120:3545"), &ra, &mut w);
    let _ = c.on_udp(secs(1), Via::Service, SocketAddrV4::new(Q, 3544), &ra, &mut w);
    still_qualifying(&mut c, &mut w);
}

#[test]
fn case29_three_rs_four_seconds_apart_then_offline() {
    let mut c = client(&[P]);
    let mut w = Recorder::default();
    let mut times = Vec::new();
    for t in (1000..30_000u64).step_by(250) {
        let before = w.udp().len();
        c.on_timer(ms(t), &mut w);
        if w.udp().len() > before {
            times.push(t / 1000);
        }
        if t == 14_000 {
            assert_eq!(c.status().state, ClientState::Offline);
        }
    }
    assert_eq!(&times[..3], &[1, 5, 9]);
    assert!(c.poll_event().is_none(), "no address ever configured");
    // Backing off: the next attempt comes 10 s later, not at once.
    assert_eq!(times.get(3), Some(&23));
}

#[test]
fn failover_to_the_next_server_and_back_home() {
    let mut c = client(&[P, Q]);
    let mut w = Recorder::default();
    for t in (1000..13_500u64).step_by(250) {
        c.on_timer(ms(t), &mut w);
    }
    // Three RSs to P, then one to Q.
    let to: Vec<Ipv4Addr> = w.udp().iter().map(|(t, _)| *t.ip()).collect();
    assert_eq!(to, vec![P, P, P, Q]);
    let rs = w.pop_udp().unwrap().1;
    let (from, ra) = answer(Q, Local::Primary, M, &rs).unwrap();
    let _ = c.on_udp(ms(13_500), Via::Service, from, &ra, &mut w);
    let rs2 = w.pop_udp().unwrap().1;
    let (from2, ra2) = answer(Q, Local::Secondary, M, &rs2).unwrap();
    let _ = c.on_udp(ms(13_501), Via::Service, from2, &ra2, &mut w);
    let ev: Vec<ClientEvent> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(matches!(ev[0], ClientEvent::Up { server, .. } if server == Q), "{ev:?}");
    // On the fallback, the first server is tried again; when it answers, we go home.
    w = Recorder::default();
    c.on_timer(ms(14_000), &mut w);
    let home = w.udp().iter().find(|(t, _)| *t.ip() == P).expect("home check").1.clone();
    let (from, ra) = answer(P, Local::Primary, M, &home).unwrap();
    let _ = c.on_udp(ms(14_100), Via::Service, from, &ra, &mut w);
    assert_eq!(c.status().state, ClientState::Qualifying);
    assert_eq!(c.status().server, Some(P));
}

#[test]
fn case31_new_mapping_means_new_address_and_fresh_peers() {
    let (mut c, old) = qualified();
    // A peer is known.
    let mut w = Recorder::default();
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8";
    let _ = c.on_udp(secs(2), Via::Service, sa("198.51.100.7:3544"), &bubble(peer, &old.to_string()), &mut w);
    assert_eq!(c.status().peers, 1);
    // Refresh: nothing from the server for the randomized interval (22.5–30 s).
    w = Recorder::default();
    for t in (3..40u64).map(secs) {
        c.on_timer(t, &mut w);
        if !w.udp().is_empty() {
            break;
        }
    }
    let (to, rs) = w.pop_udp().expect("maintenance RS");
    assert_eq!(to, SocketAddrV4::new(P, 3544));
    // The NAT now maps us to another port: a new address after a new NAT check.
    let (from, ra) = answer(P, Local::Primary, "192.0.2.45:40123", &rs).unwrap();
    let _ = c.on_udp(secs(40), Via::Service, from, &ra, &mut w);
    let ev = qualify_rest(&mut c, &mut w, "192.0.2.45:40123");
    let new = up_address(&ev);
    assert_ne!(new, old);
    let (t_old, t_new) = (TeredoAddr::decode(&old).unwrap(), TeredoAddr::decode(&new).unwrap());
    assert_eq!(t_new.mapped, sa("192.0.2.45:40123"));
    assert_ne!(t_old.flags.random_bits(), t_new.flags.random_bits(), "new random bits with the new mapping");
    assert_eq!(c.status().peers, 0, "peer list reset");
}

/// After a re-qualification's primary RA was fed: answer the RSs that follow.
fn qualify_rest(c: &mut Client<Rng>, w: &mut Recorder, mapping: &str) -> Vec<ClientEvent> {
    // The re-qualification starts over: RS to primary (and probe), then secondary.
    if let Some((to, rs)) = w.pop_udp() {
        let local = if *to.ip() == P { Local::Primary } else { Local::Secondary };
        let (from, ra) = answer(P, local, mapping, &rs).unwrap();
        let _ = c.on_udp(secs(41), Via::Service, from, &ra, w);
    }
    if let Some((to, rs)) = w.pop_udp() {
        let local = if *to.ip() == P { Local::Primary } else { Local::Secondary };
        let (from, ra) = answer(P, local, mapping, &rs).unwrap();
        let _ = c.on_udp(secs(42), Via::Service, from, &ra, w);
    }
    std::iter::from_fn(|| c.poll_event()).collect()
}

#[test]
fn maintenance_with_the_same_mapping_keeps_the_address() {
    let (mut c, old) = qualified();
    let mut w = Recorder::default();
    for t in (3..40u64).map(secs) {
        c.on_timer(t, &mut w);
        if !w.udp().is_empty() {
            break;
        }
    }
    let (_, rs) = w.pop_udp().unwrap();
    let (from, ra) = answer(P, Local::Primary, M, &rs).unwrap();
    let _ = c.on_udp(secs(40), Via::Service, from, &ra, &mut w);
    assert_eq!(c.address(), Some(old));
    assert!(w.udp().is_empty(), "no re-qualification");
}

#[test]
fn network_change_requalifies_at_once() {
    let (mut c, old) = qualified();
    let mut w = Recorder::default();
    c.on_network_change(secs(5), &mut w);
    assert_eq!(w.udp().len(), 1, "RS sent immediately");
    let ev = qualify_rest(&mut c, &mut w, "203.0.113.77:6000");
    let new = up_address(&ev);
    assert_ne!(new, old);
    assert_eq!(TeredoAddr::decode(&new).unwrap().mapped, sa("203.0.113.77:6000"));
}

#[test]
fn requalifying_with_the_same_mapping_keeps_peers_and_traffic_flowing() {
    // A network event that leaves the mapping as it was (a new DHCP lease, a second
    // route) must not cost the peers their trust, nor the host its packets meanwhile.
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8"; // mapped 198.51.100.7:3544
    let _ = c.on_udp(secs(2), Via::Service, sa("198.51.100.7:3544"), &ipv6(peer, &me.to_string(), 17, &[0; 8]), &mut w);
    c.on_network_change(secs(5), &mut w);
    assert_eq!(c.address(), Some(me), "the interface keeps its address while we ask again");
    // Meanwhile the host's packet goes straight to the trusted peer, not back as
    // unreachable.
    let mut w = Recorder::default();
    let _ = c.on_tun(secs(5), &ipv6(&me.to_string(), peer, 17, &[1; 8]), &mut w);
    assert_eq!(w.udp().iter().filter(|(to, _)| *to == sa("198.51.100.7:3544")).count(), 1);
    assert!(w.delivered.is_empty(), "no ICMPv6 error to the host");
    // The RA gives the same mapping: same address, no new Up, the peer still trusted.
    let mut w = Recorder::default();
    c.on_network_change(secs(6), &mut w);
    let ev = qualify_rest(&mut c, &mut w, M);
    assert!(!ev.iter().any(|e| matches!(e, ClientEvent::Up { address, .. } if *address != me)), "{ev:?}");
    assert_eq!(c.address(), Some(me));
    assert_eq!(c.stats().addresses, 1, "no address change counted");
    let mut w = Recorder::default();
    let _ =
        c.on_udp(secs(43), Via::Service, sa("198.51.100.7:3544"), &ipv6(peer, &me.to_string(), 17, &[2; 8]), &mut w);
    let _ = c.on_tun(secs(43), &ipv6(&me.to_string(), peer, 17, &[3; 8]), &mut w);
    let bubbles = w.udp().iter().filter(|(_, p)| TeredoPacket::parse(p).unwrap().is_bubble()).count();
    assert_eq!((w.udp().len(), bubbles), (1, 0), "straight to the peer, no bubbles: it is still trusted");
}

fn bubble(src: &str, dst: &str) -> Vec<u8> {
    let mut b = vec![0u8; 40];
    emit_bubble(&a(src), &a(dst), 0, &mut b).unwrap();
    b
}

fn ipv6(src: &str, dst: &str, nh: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 40];
    Ipv6Repr { src_addr: a(src), dst_addr: a(dst), next_header: nh, payload_len: payload.len(), hop_limit: 64 }
        .emit(&mut v)
        .unwrap();
    v.extend_from_slice(payload);
    v
}

#[test]
fn case32_matching_teredo_source_is_delivered_and_trusted() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8"; // mapped 198.51.100.7:3544
    let data = ipv6(peer, &me.to_string(), 17, &[0; 8]);
    let _ = c.on_udp(secs(2), Via::Service, sa("198.51.100.7:3544"), &data, &mut w);
    assert_eq!(w.delivered, vec![data]);
    // Trusted: the host's answer goes straight to the mapping.
    w = Recorder::default();
    let _ = c.on_tun(secs(3), &ipv6(&me.to_string(), peer, 17, &[1; 8]), &mut w);
    assert_eq!(w.udp().len(), 1);
    assert_eq!(w.udp()[0].0, sa("198.51.100.7:3544"));
}

#[test]
fn case33_mismatched_source_is_not_delivered() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8";
    let _ =
        c.on_udp(secs(2), Via::Service, sa("198.51.100.99:3544"), &ipv6(peer, &me.to_string(), 17, &[0; 8]), &mut w);
    assert!(w.delivered.is_empty());
}

#[test]
fn case34_35_connectivity_test_through_the_server() {
    let (mut c, me) = qualified();
    let me_s = me.to_string();
    let mut w = Recorder::default();
    let data = ipv6(&me_s, "2001:db8::1", 17, &[7; 8]);
    let _ = c.on_tun(secs(2), &data, &mut w);
    // An echo request with an 8-byte unpredictable payload goes to our server; no data.
    assert_eq!(w.udp().len(), 1);
    let (to, echo) = w.pop_udp().unwrap();
    assert_eq!(to, SocketAddrV4::new(P, 3544));
    let ip = Ipv6Packet::new_checked(&echo[..]).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (me, a("2001:db8::1")));
    let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
    let Icmpv6Repr::EchoRequest { ident, seq_no, data: nonce } =
        Icmpv6Repr::parse(&me, &a("2001:db8::1"), &icmp).unwrap()
    else {
        panic!("not an echo request")
    };
    assert!(nonce.len() >= 8);
    let reply = |data: &[u8]| {
        let r = Icmpv6Repr::EchoReply { ident, seq_no, data };
        let mut b = vec![0u8; 40 + r.buffer_len()];
        Ipv6Repr {
            src_addr: a("2001:db8::1"),
            dst_addr: me,
            next_header: 58,
            payload_len: r.buffer_len(),
            hop_limit: 60,
        }
        .emit(&mut b)
        .unwrap();
        r.emit(&a("2001:db8::1"), &me, &mut b[40..]).unwrap();
        b
    };
    // Case 35: a reply with the wrong nonce from a relay is ignored…
    let _ = c.on_udp(secs(3), Via::Service, sa("203.0.113.9:5555"), &reply(&[0u8; 8]), &mut w);
    assert!(w.udp().is_empty() && w.delivered.is_empty());
    // …the right one makes the relay trusted and releases the queued packet to it.
    let _ = c.on_udp(secs(3), Via::Service, sa("203.0.113.9:5555"), &reply(nonce), &mut w);
    assert_eq!(w.udp(), vec![(sa("203.0.113.9:5555"), data)]);
    // The reply with the wrong nonce came from a relay the client did not know: held
    // as a first contact, and delivered now that the relay is proven. The matching
    // reply is the client's own, not the host's.
    assert_eq!(w.delivered, vec![reply(&[0u8; 8])]);
}

#[test]
fn case36_never_send_to_a_private_embedded_address() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    // C=1, mapped ~10.1.2.3 = f5fe:fdfc.
    let _ = c.on_tun(secs(2), &ipv6(&me.to_string(), "2001:0:4136:e378:8000:f227:f5fe:fdfc", 17, &[0; 8]), &mut w);
    assert!(w.udp().is_empty());
}

#[test]
fn case37_bubbles_at_0_2_4_6_then_unreachable() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8";
    for _ in 0..20 {
        let _ = c.on_tun(secs(10), &ipv6(&me.to_string(), peer, 17, &[0; 600]), &mut w);
    }
    let mut times = vec![];
    let mut last = 0;
    for t in (10_000..30_000u64).step_by(250) {
        c.on_timer(ms(t), &mut w);
        if w.udp().len() != last {
            times.push((t / 1000, w.udp().len() - last));
            last = w.udp().len();
        }
    }
    // Two bubbles each time (direct to the mapping, indirect via the peer's server).
    assert_eq!(w.udp().iter().filter(|(t, _)| *t == sa("198.51.100.7:3544")).count(), 4);
    let bubbles_via_server = w
        .udp()
        .iter()
        .filter(|(t, p)| *t == SocketAddrV4::new(P, 3544) && TeredoPacket::parse(p).unwrap().is_bubble())
        .count();
    assert_eq!(bubbles_via_server, 4);
    // t = 0, 2, 4, 6 s after the first packet (at 10 s), two bubbles each time.
    assert_eq!(
        times.iter().take(4).copied().collect::<Vec<_>>(),
        vec![(10, 2), (12, 2), (14, 2), (16, 2)],
        "{times:?}"
    );
    // Then the host hears the destination is unreachable; the queue was bounded (4 KiB).
    assert!(!w.delivered.is_empty() && w.delivered.len() <= 6, "{} errors", w.delivered.len());
}

#[test]
fn case38_indirect_bubble_is_answered_directly_to_the_origin() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let relay_src = "2001:db8::10";
    let mut d = vec![0u8; 48];
    TeredoHeaderRepr { auth: None, origin: Some(sa("203.0.113.9:5555")) }.emit(&mut d).unwrap();
    emit_bubble(&a(relay_src), &me, 0, &mut d[8..]).unwrap();
    let _ = c.on_udp(secs(2), Via::Service, SocketAddrV4::new(P, 3544), &d, &mut w);
    assert_eq!(w.udp().len(), 1);
    let (to, b) = &w.udp()[0];
    assert_eq!(*to, sa("203.0.113.9:5555"));
    let p = TeredoPacket::parse(b).unwrap();
    assert!(p.is_bubble());
    assert_eq!((p.ipv6.src_addr(), p.ipv6.dst_addr()), (me, a(relay_src)));
    assert!(w.delivered.is_empty(), "nothing delivered");
}

#[test]
fn indirect_bubble_from_a_link_local_source_is_answered_too() {
    // Miredo's relay sends its bubbles from a link-local address.
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let mut d = vec![0u8; 48];
    TeredoHeaderRepr { auth: None, origin: Some(sa("192.0.2.10:3545")) }.emit(&mut d).unwrap();
    emit_bubble(&a("fe80::81:fc12:b00d:c42d"), &me, 0, &mut d[8..]).unwrap();
    let _ = c.on_udp(secs(2), Via::Service, SocketAddrV4::new(P, 3544), &d, &mut w);
    assert_eq!(w.udp().len(), 1);
    assert_eq!(w.udp()[0].0, sa("192.0.2.10:3545"));
    assert!(w.delivered.is_empty());
    // A link-local non-bubble relayed by the server is still not delivered.
    let mut d = vec![0u8; 8];
    TeredoHeaderRepr { auth: None, origin: Some(sa("192.0.2.10:3545")) }.emit(&mut d).unwrap();
    d.extend_from_slice(&ipv6("fe80::1", &me.to_string(), 58, &[129, 0, 0, 0, 0, 0, 0, 0]));
    let _ = c.on_udp(secs(2), Via::Service, SocketAddrV4::new(P, 3544), &d, &mut w);
    assert!(w.delivered.is_empty());
}

#[test]
fn case39_link_local_from_a_peer_never_reaches_the_host() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let forged = ipv6("fe80::1", &me.to_string(), 58, &[134, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let _ = c.on_udp(secs(2), Via::Service, sa("198.51.100.7:3544"), &forged, &mut w);
    assert!(w.delivered.is_empty());
}

#[test]
fn case40_discovery_bubbles_are_ignored() {
    let (mut c, me) = qualified();
    let _ = me;
    let mut w = Recorder::default();
    let mut b = vec![0u8; 40];
    emit_bubble(&a("2001:0:4136:e378:0:f227:39cc:9bf8"), &a("ff02::1"), 1, &mut b).unwrap();
    let _ = c.on_udp(secs(2), Via::Service, sa("198.51.100.7:3544"), &b, &mut w);
    assert!(w.delivered.is_empty() && w.udp().is_empty());
}

#[test]
fn unqualified_client_answers_the_host_with_unreachable() {
    let mut c = client(&[P]);
    let mut w = Recorder::default();
    let _ = c.on_tun(secs(1), &ipv6("2001:0:4136:e378::1", "2001:db8::1", 17, &[0; 8]), &mut w);
    assert_eq!(w.delivered.len(), 1);
    let ip = Ipv6Packet::new_checked(&w.delivered[0][..]).unwrap();
    assert_eq!(ip.payload()[0], 1, "destination unreachable");
}

#[path = "client_cases/bubble_budget.rs"]
mod bubble_budget;
#[path = "client_cases/deadlines.rs"]
mod deadlines;
#[path = "client_cases/fuzz.rs"]
mod fuzz;

#[path = "client_cases/lossy_link.rs"]
mod lossy_link;
#[path = "client_cases/relay_cookie.rs"]
mod relay_cookie;
#[path = "client_cases/secure_qualification.rs"]
mod secure_qualification;
#[path = "client_cases/server_list.rs"]
mod server_list;
#[path = "client_cases/server_that_relays.rs"]
mod server_that_relays;
#[path = "client_cases/trailers.rs"]
mod trailers;

#[test]
fn first_connectivity_test_goes_at_once_right_after_start() {
    let mut c = client(&[P]);
    let ev = qualify(&mut c, ms(100), M, M, false);
    let me = up_address(&ev);
    let mut w = Recorder::default();
    let _ = c.on_tun(ms(200), &ipv6(&me.to_string(), "2001:db8::1", 17, &[0; 8]), &mut w);
    assert_eq!(w.udp().len(), 1, "the echo request leaves at once");
    let _ = c.on_tun(ms(250), &ipv6(&me.to_string(), "2001:0:4136:e378:0:f227:39cc:9bf8", 17, &[0; 8]), &mut w);
    assert_eq!(w.udp().len(), 3, "and the first bubbles too");
}

/// Cold first contacts from native hosts (RFC 4380 §5.2.3 case 6, §5.2.9): held, tested
/// through the server, delivered once the echo reply names the relay.
#[path = "client_cases/native_speaks_first.rs"]
mod native_speaks_first;

#[test]
fn peers_the_host_calls_wait_within_a_cap_and_so_do_their_queued_bytes() {
    // A program on the host (a web page, say) sends to thousands of Teredo addresses
    // that never answer: each waits with a queue. The list is capped, the oldest gives way.
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let cap = 1024;
    for i in 0..5000u32 {
        let b = i.to_be_bytes();
        // Teredo addresses behind global mappings (198.51.100.x / 203.0.113.x), never answering.
        let last = if i % 2 == 0 { [!198, !51, !100, b[3]] } else { [!203, !0, !113, b[3]] };
        let dst = Ipv6Addr::new(
            0x2001,
            0,
            0x4136,
            0xe378,
            0,
            u16::from_be_bytes([b[1], b[2]]),
            u16::from_be_bytes([last[0], last[1]]),
            u16::from_be_bytes([last[2], last[3] | 1]),
        );
        let p = ipv6(&me.to_string(), &dst.to_string(), 17, &[0u8; 1000]);
        for _ in 0..3 {
            let _ = c.on_tun(secs(2), &p, &mut w);
        }
    }
    assert!(c.waiting_peers() <= cap, "waiting: {}", c.waiting_peers());
    assert!(c.queued_bytes() <= cap * 4096, "queued: {} bytes", c.queued_bytes());
    let lost = c.stats().drops.get(shipworm_proto::DropReason::QueueFull);
    assert!(lost > 0, "the peers that gave way lost their packets, counted");
}

#[test]
fn icmpv6_from_the_server_reaches_the_host_only_from_internet_sources() {
    let (mut c, me) = qualified();
    let me = me.to_string();
    let server = SocketAddrV4::new(P, 3544);
    let echo = [128, 0, 0, 0, 0, 1, 0, 1];
    let mut w = Recorder::default();
    for src in ["::1", "fec0::1", "fd00::1", "::ffff:192.0.2.1", "fe80::1", "ff02::1"] {
        let _ = c.on_udp(secs(2), Via::Service, server, &ipv6(src, &me, 58, &echo), &mut w);
        assert!(w.delivered.is_empty(), "{src} reached the host");
    }
    // An echo relayed by the server from another Teredo client does.
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8";
    let ok = ipv6(peer, &me, 58, &echo);
    let _ = c.on_udp(secs(2), Via::Service, server, &ok, &mut w);
    assert_eq!(w.delivered, vec![ok.clone()]);
    // Nothing but echoes: a server forwards no other ICMPv6, so a Destination
    // Unreachable or a Packet Too Big "from the server" is forged (#40, 7).
    for forged in [[1u8, 4, 0, 0, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0, 5, 0]] {
        let v = c.on_udp(secs(2), Via::Service, server, &ipv6(peer, &me, 58, &forged), &mut w);
        assert_eq!(v, Err(DropReason::Icmpv6TypeNotForwarded));
    }
    assert_eq!(w.delivered, vec![ok]);
}

#[test]
fn a_peer_embedding_a_host_of_our_own_subnet_is_never_sent_to_nor_trusted() {
    let (mut c, me) = qualified();
    let me = me.to_string();
    c.set_attached_subnets(&[("198.51.100.0".parse().unwrap(), 24)]);
    let mut w = Recorder::default();
    let inside = "2001:0:4136:e378:0:f227:39cc:9bf8"; // mapped 198.51.100.7:3544
    let _ = c.on_tun(secs(2), &ipv6(&me, inside, 17, &[0; 8]), &mut w);
    assert!(w.udp().is_empty(), "sent {:?}", w.udp());
    assert_eq!(c.stats().drops.get(DropReason::AttachedSubnet), 1);
    // Its broadcast, as a server field: the same.
    let via_bcast = "2001:0:c633:64ff:0:f227:34ff:8ef8"; // server 198.51.100.255
    let _ = c.on_tun(secs(2), &ipv6(&me, via_bcast, 17, &[0; 8]), &mut w);
    assert!(w.udp().is_empty(), "sent {:?}", w.udp());
    // A packet from the address it embeds is not taken as proof.
    let _ = c.on_udp(secs(3), Via::Service, sa("198.51.100.7:3544"), &ipv6(inside, &me, 17, &[0; 8]), &mut w);
    assert!(w.delivered.is_empty());
    assert!(w.udp().iter().all(|(to, _)| !to.ip().octets().starts_with(&[198, 51, 100])), "{:?}", w.udp());
    // A peer elsewhere, as ever (case 32).
    let outside = "2001:0:4136:e378:0:f227:34ff:8ef8"; // mapped 203.0.113.7:3544
    let data = ipv6(outside, &me, 17, &[0; 8]);
    let _ = c.on_udp(secs(3), Via::Service, sa("203.0.113.7:3544"), &data, &mut w);
    assert_eq!(w.delivered, vec![data]);
}

#[test]
fn with_its_port_mapped_a_client_sends_nothing_direct_before_the_peer_spoke() {
    // Behind a symmetric NAT whose gateway maps our port (PCP/UPnP): anyone reaches us at
    // our address's endpoint. A direct bubble of ours would open a session of our NAT on
    // a random port, and the peer's answer to the mapped port would clash with it (Linux
    // drops it or moves it to another port): only the indirect bubble goes.
    let (mut c, me) = qualified_symmetric();
    c.set_port_mapping(Some(sa(M)));
    let peer = "2001:0:4136:e378:0:f227:39cc:9bf8"; // mapped 198.51.100.7:3544, server P
    let mut w = Recorder::default();
    let _ = c.on_tun(secs(2), &ipv6(&me.to_string(), peer, 17, &[1; 8]), &mut w);
    c.on_timer(secs(5), &mut w);
    assert!(!w.udp().is_empty(), "the indirect bubble goes");
    assert!(w.udp().iter().all(|(to, _)| *to.ip() == P), "only to the server: {:?}", w.udp());
    // The peer's direct bubble arrives through the mapping: from then on we answer it
    // directly, and the host's packet follows.
    let mut w = Recorder::default();
    let _ = c.on_udp(secs(6), Via::Service, sa("198.51.100.7:3544"), &bubble(peer, &me.to_string()), &mut w);
    assert!(w.udp().iter().any(|(to, _)| *to == sa("198.51.100.7:3544")), "{:?}", w.udp());
    // Without a mapping the direct (opening) bubble goes at once, as before.
    let (mut c, me) = qualified_symmetric();
    let mut w = Recorder::default();
    let _ = c.on_tun(secs(2), &ipv6(&me.to_string(), peer, 17, &[1; 8]), &mut w);
    assert!(w.udp().iter().any(|(to, _)| *to == sa("198.51.100.7:3544")), "{:?}", w.udp());
}
