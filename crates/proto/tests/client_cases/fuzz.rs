use super::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn client_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200), port in any::<u16>(), which in 0u8..4) {
        let (mut c, me) = qualified();
        let mut w = Recorder::default();
        let mut d = data;
        if which == 1 && d.len() >= 40 {
            d[..40].copy_from_slice(&bubble("2001:0:4136:e378:0:f227:39cc:9bf8", &me.to_string()));
        }
        let before = c.stats().drops.clone();
        let outcome = match which {
            0 | 1 => c.on_udp(secs(2), Via::Service, SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), port), &d, &mut w),
            2 => c.on_udp(secs(2), Via::Service, SocketAddrV4::new(P, 3544), &d, &mut w),
            _ => c.on_tun(secs(2), &d, &mut w),
        };
        if let Err(reason) = outcome {
            prop_assert!(c.stats().drops.get(reason) > before.get(reason), "dropped for {:?} but not counted", reason);
        }
        c.on_timer(secs(5), &mut w);
    }
}
