//! Bounded property runs of every parser, on every `cargo test`: arbitrary bytes never
//! panic, and structured values survive emit → parse. The same harnesses back the
//! cargo-fuzz targets in `fuzz/` for long runs. `PROPTEST_CASES` raises the count.

use proptest::prelude::*;
use shipworm_wire::exercise;
use shipworm_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr, RouterAdvertRepr};
use shipworm_wire::ipv6::{Ipv6Packet, Ipv6Repr};
use shipworm_wire::ndisc_option::PrefixInfo;
use shipworm_wire::teredo_addr::{Flags, TeredoAddr};
use shipworm_wire::teredo_auth::AuthRepr;
use shipworm_wire::teredo_packet::{emit_bubble, TeredoHeaderRepr, TeredoPacket};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

fn ipv6() -> impl Strategy<Value = Ipv6Addr> {
    any::<u128>().prop_map(Ipv6Addr::from)
}

fn sockaddr() -> impl Strategy<Value = SocketAddrV4> {
    (any::<u32>(), any::<u16>()).prop_map(|(a, p)| SocketAddrV4::new(Ipv4Addr::from(a), p))
}

/// A valid RS or bubble with random headers in front, then random mutations: parsers
/// see inputs close to real traffic rather than only noise.
fn near_valid_payload() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::option::of(any::<[u8; 8]>()),
        proptest::option::of(sockaddr()),
        ipv6(),
        ipv6(),
        proptest::collection::vec(any::<u8>(), 0..24),
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
    )
        .prop_map(|(nonce, origin, src, dst, trailer, flips)| {
            let mut buf = vec![0u8; 256];
            let h = TeredoHeaderRepr { auth: nonce.map(AuthRepr::with_nonce), origin };
            let mut at = h.emit(&mut buf).unwrap();
            at += emit_bubble(&src, &dst, 0, &mut buf[at..]).unwrap();
            buf.truncate(at);
            buf.extend_from_slice(&trailer);
            for (i, v) in flips {
                let n = buf.len();
                buf[i % n] ^= v;
            }
            buf
        })
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn teredo_payload_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        exercise::teredo_payload(&data);
    }

    #[test]
    fn near_valid_teredo_payload_never_panics(data in near_valid_payload()) {
        exercise::teredo_payload(&data);
    }

    #[test]
    fn ipv6_packet_never_panics(mut data in proptest::collection::vec(any::<u8>(), 40..200), nh in prop::sample::select(vec![0u8, 43, 44, 50, 51, 58, 59, 60])) {
        // Make the header plausible so the walk and ICMPv6 code are reached.
        data[0] = 0x60;
        data[6] = nh;
        let plen = (data.len() - 40) as u16;
        data[4..6].copy_from_slice(&plen.to_be_bytes());
        exercise::ipv6_packet(&data);
    }

    #[test]
    fn icmpv6_never_panics(src in ipv6(), dst in ipv6(), data in proptest::collection::vec(any::<u8>(), 0..120), t in prop::sample::select(vec![1u8, 2, 3, 4, 128, 129, 133, 134, 200])) {
        let mut data = data;
        if let Some(b) = data.first_mut() { *b = t; }
        if data.len() > 1 { data[1] = 0; }
        // Fix the checksum so the representation code runs, not just the check.
        if data.len() >= 4 {
            Icmpv6Packet::new_unchecked(&mut data[..]).fill_checksum(&src, &dst);
        }
        exercise::icmpv6(&src, &dst, &data);
    }

    #[test]
    fn nd_options_never_panic(data in proptest::collection::vec(any::<u8>(), 0..100)) {
        exercise::nd_options(&data);
    }

    #[test]
    fn trailers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
        exercise::trailers(&data);
    }

    #[test]
    fn pcp_responses_never_panic(mut data in proptest::collection::vec(any::<u8>(), 0..120)) {
        // Mostly near-valid: a version-2 MAP or PEER response with an IPv4-mapped address.
        if data.len() >= 80 && data[0] % 4 != 0 {
            data[0] = 2;
            data[1] = 0x80 | (1 + data[1] % 2);
            data[24 + 20..24 + 30].fill(0);
            data[24 + 30..24 + 32].fill(0xff);
            data[24 + 38..24 + 40].fill(0);
            data[24 + 40..24 + 50].fill(0);
            data[24 + 50..24 + 52].fill(0xff);
        }
        exercise::pcp(&data);
    }

    #[test]
    fn ipv4_udp_never_panics(data in proptest::collection::vec(any::<u8>(), 0..120)) {
        let mut data = data;
        if data.len() >= 20 {
            data[0] = 0x45;
            data[9] = 17;
            let total = data.len() as u16;
            data[2..4].copy_from_slice(&total.to_be_bytes());
            data[6] = 0;
            data[7] = 0;
            shipworm_wire::ipv4::Ipv4Packet::new_unchecked(&mut data[..]).fill_checksum();
        }
        exercise::ipv4_udp(&data);
    }

    #[test]
    fn teredo_address_round_trips(bits in any::<u128>()) {
        exercise::teredo_address(&bits.to_be_bytes());
    }
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn teredo_address_encode_decode(server in any::<u32>(), cone in any::<bool>(), random in 0u16..0x1000, mapped in sockaddr()) {
        let t = TeredoAddr {
            prefix: shipworm_wire::teredo_addr::PREFIX,
            server: Ipv4Addr::from(server),
            flags: Flags::new(cone, random),
            mapped,
        };
        let back = TeredoAddr::decode(&t.to_ipv6()).unwrap();
        prop_assert_eq!(back, t);
        prop_assert_eq!(back.flags.random_bits(), random);
        prop_assert_eq!(back.flags.cone(), cone);
        prop_assert!(!back.flags.has_ug_bits());
    }

    #[test]
    fn encapsulated_echo_round_trips(
        nonce in proptest::option::of(any::<[u8; 8]>()),
        origin in proptest::option::of(sockaddr()),
        src in ipv6(), dst in ipv6(),
        ident in any::<u16>(), seq in any::<u16>(),
        data in proptest::collection::vec(any::<u8>(), 0..64),
        trailer in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let echo = Icmpv6Repr::EchoRequest { ident, seq_no: seq, data: &data };
        let h = TeredoHeaderRepr { auth: nonce.map(AuthRepr::with_nonce), origin };
        let mut buf = vec![0u8; 256];
        let at = h.emit(&mut buf).unwrap();
        let ip = Ipv6Repr { src_addr: src, dst_addr: dst, next_header: 58, payload_len: echo.buffer_len(), hop_limit: 64 };
        ip.emit(&mut buf[at..]).unwrap();
        let n = echo.emit(&src, &dst, &mut buf[at + 40..]).unwrap();
        buf.truncate(at + 40 + n);
        buf.extend_from_slice(&trailer);

        let p = TeredoPacket::parse(&buf).unwrap();
        prop_assert_eq!(p.auth_repr(), h.auth);
        prop_assert_eq!(p.origin, origin);
        prop_assert_eq!(Ipv6Repr::parse(&p.ipv6), ip);
        prop_assert_eq!(p.trailers.as_bytes(), &trailer[..]);
        let icmp = Icmpv6Packet::new_checked(p.ipv6.payload()).unwrap();
        prop_assert_eq!(Icmpv6Repr::parse(&src, &dst, &icmp).unwrap(), echo);
        let v6 = Ipv6Packet::new_checked(p.ipv6.packet()).unwrap();
        prop_assert!(!v6.is_bubble());
    }

    #[test]
    fn router_advert_round_trips(src in ipv6(), dst in ipv6(), hop in any::<u8>(), flags in any::<u8>(),
        lifetime in any::<u16>(), reach in any::<u32>(), retrans in any::<u32>(),
        prefix in proptest::option::of((ipv6(), any::<u8>(), any::<bool>(), any::<bool>(), any::<u32>(), any::<u32>())),
        mtu in proptest::option::of(any::<u32>())) {
        let ra = RouterAdvertRepr {
            cur_hop_limit: hop, flags, router_lifetime: lifetime, reachable_time: reach, retrans_time: retrans,
            prefix_info: prefix.map(|(p, len, l, a, v, pr)| PrefixInfo { prefix_len: len, on_link: l, autonomous: a, valid_lifetime: v, preferred_lifetime: pr, prefix: p }),
            prefix_info_count: u8::from(prefix.is_some()),
            mtu,
        };
        let repr = Icmpv6Repr::RouterAdvert(ra);
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&src, &dst, &mut buf).unwrap();
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(Icmpv6Repr::parse(&src, &dst, &p).unwrap(), repr);
    }
}

/// A TCP or UDP super-packet as a device with offloads hands it over: valid enough to
/// be cut, with arbitrary flags, options, sizes and payload.
fn super_packet() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        prop_oneof![Just(0x10u8), Just(0x18u8), any::<u8>()],
        0usize..4,
        1u16..1400,
        proptest::collection::vec(any::<u8>(), 1..6000),
        any::<[u8; 32]>(),
    )
        .prop_map(|(tcp, flags, opt_words, gso_size, payload, addrs)| {
            let l4_len = if tcp { 20 + 4 * opt_words } else { 8 };
            let mut v = vec![0u8; 10 + 40 + l4_len];
            v[0] = 1; // NEEDS_CSUM
            v[1] = if tcp { 4 } else { 5 };
            v[4..6].copy_from_slice(&gso_size.to_le_bytes());
            v[6] = 40;
            v[8] = if tcp { 16 } else { 6 };
            v[10] = 0x60;
            v[16] = if tcp { 6 } else { 17 };
            v[17] = 64;
            v[18..50].copy_from_slice(&addrs);
            if tcp {
                v[50 + 12] = ((l4_len / 4) as u8) << 4;
                v[50 + 13] = flags;
                v[50 + 4] = flags; // some sequence number
            }
            v.extend_from_slice(&payload);
            // Whatever the kernel left in the checksum field (the pseudo-header's sum).
            let at = 50 + if tcp { 16 } else { 6 };
            v[at] = addrs[0];
            v[at + 1] = addrs[31];
            v
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn super_packets_cut_join_and_cut_back_byte_for_byte(data in super_packet()) {
        exercise::offload(&data);
    }

    #[test]
    fn offload_code_takes_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        exercise::offload(&data);
    }
}

/// Every seed of the fuzz targets, through the harness of the same name: the reference
/// vectors, and what long fuzzing found (kept as seeds, so a finding stays fixed).
#[test]
fn every_fuzz_seed_passes_its_harness() {
    let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    type Harness = fn(&[u8]);
    let harnesses: [(&str, Harness); 8] = [
        ("teredo_payload", exercise::teredo_payload),
        ("ipv6_packet", exercise::ipv6_packet),
        ("nd_options", exercise::nd_options),
        ("trailers", exercise::trailers),
        ("ipv4_udp", exercise::ipv4_udp),
        ("teredo_address", exercise::teredo_address),
        ("pcp", exercise::pcp),
        ("offload", exercise::offload),
    ];
    let mut ran = 0;
    for (target, harness) in harnesses {
        // ipv4_udp starts from nothing (its inputs are whole IPv4 packets of any kind).
        let Ok(dir) = std::fs::read_dir(seeds.join(target)) else { continue };
        for entry in dir {
            harness(&std::fs::read(entry.unwrap().path()).unwrap());
            ran += 1;
        }
    }
    assert!(ran >= 8, "{ran} seeds");
}

#[test]
fn the_longest_encapsulation_headers_emit_back() {
    // Found by fuzzing: 255-byte client identifier and authentication value with an
    // origin indication (531 bytes) did not fit the harness's buffer.
    let (id, value) = ([7u8; 255], [9u8; 255]);
    let auth = AuthRepr { client_id: &id, auth_value: &value, ..AuthRepr::with_nonce([1; 8]) };
    let h = TeredoHeaderRepr { auth: Some(auth), origin: Some(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 3544)) };
    assert_eq!(h.buffer_len(), TeredoHeaderRepr::MAX_LEN);
    let mut buf = vec![0u8; TeredoHeaderRepr::MAX_LEN + 40];
    let at = h.emit(&mut buf).unwrap();
    emit_bubble(&Ipv6Addr::LOCALHOST, &Ipv6Addr::LOCALHOST, 0, &mut buf[at..]).unwrap();
    exercise::teredo_payload(&buf);
}
