//! Bounded runs of the role fuzz harness (`shipworm_proto::exercise::world`) on every
//! `cargo test`: a server, a relay and a client wired together, driven by arbitrary
//! scripts, keep every cap and never panic. The cargo-fuzz target `world` runs the same
//! harness for long. `PROPTEST_CASES` raises the count.

use proptest::prelude::*;
use shipworm_proto::exercise::{self, Reached};

/// A script that plays the protocol straight: deliver everything, step time now and
/// then, and have the host ping the native host once qualified.
fn straight_script(rounds: usize) -> Vec<u8> {
    let mut s = vec![0x5e, 0xed, 0x00, 0x01];
    for i in 0..rounds {
        s.extend([0u8; 12]);
        s.extend([3u8; 6]);
        if i % 4 == 3 {
            s.extend([7u8, 0, 8]);
        }
        s.extend([8u8, 0, i as u8]);
    }
    s
}

#[test]
fn the_world_reaches_qualification_trusted_peers_and_echo_replies() {
    let r: Reached = exercise::world(&straight_script(40));
    assert!(r.qualified, "{r:?}");
    assert!(r.relay_peers >= 1, "{r:?}");
    assert!(r.host_packets >= 1, "{r:?}");
}

/// Made-up clients' first packets (op 9, forged from the mappings their addresses
/// embed) empty the relay's client-first budget in a world whose seed asks for a small
/// one: the next draw cookies, so the harness reaches that path.
#[test]
fn forged_first_packets_draw_cookies_once_the_budget_is_spent() {
    let mut s = vec![0x5e, 0xed, 0x00, 0x00];
    for k in 1..=8u8 {
        s.extend([9u8, k, 0, k]);
    }
    let r: Reached = exercise::world(&s);
    assert!(r.relay_cookies.0 >= 1, "{r:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_scripts_keep_every_cap(script in proptest::collection::vec(any::<u8>(), 0..4096)) {
        exercise::world(&script);
    }

    #[test]
    fn a_straight_run_with_noise_spliced_in_keeps_every_cap(
        noise in proptest::collection::vec((0usize..2000, proptest::collection::vec(any::<u8>(), 1..64)), 0..16)
    ) {
        let mut s = straight_script(40);
        for (at, bytes) in noise {
            let at = at.min(s.len());
            s.splice(at..at, bytes);
        }
        exercise::world(&s);
    }
}
