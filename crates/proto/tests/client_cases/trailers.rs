//! RFC 6081 §5.1.2: how a client processes the trailers after the IPv6 packet.

use super::*;

const PEER: &str = "2001:0:4136:e378:0:f227:39cc:9bf8"; // mapped 198.51.100.7:3544

#[test]
fn a_packet_with_an_unknown_trailer_whose_top_bits_are_01_is_discarded_and_counted() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    let mut data = ipv6(PEER, &me.to_string(), 17, &[0; 8]);
    data.extend_from_slice(&[0x40, 1, 0]);
    assert_eq!(c.on_udp(secs(2), Via::Service, sa("198.51.100.7:3544"), &data, &mut w), Err(DropReason::BadTrailers));
    assert!(w.delivered.is_empty());
    assert_eq!(c.stats().drops.get(DropReason::BadTrailers), 1);
    // Other unknown types are skipped: the same packet with type 0x80 is delivered.
    let mut data = ipv6(PEER, &me.to_string(), 17, &[0; 8]);
    data.extend_from_slice(&[0x80, 1, 0]);
    let _ = c.on_udp(secs(3), Via::Service, sa("198.51.100.7:3544"), &data, &mut w);
    assert_eq!(w.delivered.len(), 1);
}

#[test]
fn a_nonce_before_a_malformed_trailer_still_counts() {
    let (mut c, me) = qualified();
    let mut w = Recorder::default();
    // The peer's indirect bubble through our server: a Nonce, then a TLV that runs past
    // the end. The nonce is kept and echoed in our direct answer.
    let mut datagram = vec![0u8; 8];
    TeredoHeaderRepr { auth: None, origin: Some(sa("198.51.100.7:3544")) }.emit(&mut datagram).unwrap();
    datagram.extend_from_slice(&bubble(PEER, &me.to_string()));
    datagram.extend_from_slice(&[1, 4, 0xde, 0xad, 0xbe, 0xef, 0x7f, 9]);
    let _ = c.on_udp(secs(2), Via::Service, SocketAddrV4::new(P, 3544), &datagram, &mut w);
    let direct = w.sent.iter().find(|s| s.to == sa("198.51.100.7:3544")).expect("a direct bubble to the peer");
    let pkt = TeredoPacket::parse(&direct.payload).unwrap();
    assert_eq!(
        pkt.trailers.get(shipworm_wire::teredo_trailer::trailer_type::NONCE),
        Some(shipworm_wire::teredo_trailer::TrailerRepr::Nonce([0xde, 0xad, 0xbe, 0xef])),
        "our direct bubble echoes the nonce that came before the malformed trailer"
    );
}
