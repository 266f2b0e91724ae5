//! The fuzz harnesses over bounded random inputs, on every `cargo test`, and over every
//! seed of their fuzz targets.

use proptest::prelude::*;
use shipworm_side_wire::exercise;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn bird_replies_never_panic(mut data in proptest::collection::vec(any::<u8>(), 0..40)) {
        // Mostly near-valid: four digits first.
        if data.len() >= 5 && data[0] % 2 == 0 {
            for b in &mut data[..4] {
                *b = b'0' + *b % 10;
            }
        }
        exercise::bird_reply(&data);
    }

    #[test]
    fn helper_requests_never_panic(mut data in proptest::collection::vec(any::<u8>(), 0..40), up in any::<bool>()) {
        // Mostly near-valid: 24 bytes, an up request under the Teredo prefix.
        if data.len() >= 24 && up {
            data.truncate(24);
            data[..4].copy_from_slice(&[1, 0, 0, 0]);
            data[4..8].copy_from_slice(&1280u32.to_be_bytes());
            data[8..12].copy_from_slice(&[0x20, 0x01, 0, 0]);
        }
        exercise::helper_request(&data);
    }

    #[test]
    fn metrics_requests_never_panic(data in proptest::collection::vec(any::<u8>(), 0..40), get in any::<bool>()) {
        let mut d = if get { b"GET /metrics".to_vec() } else { Vec::new() };
        d.extend(data);
        exercise::metrics_request(&d);
    }

    #[test]
    fn gateway_answers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200), kind in 0u8..3) {
        let head: &[u8] = match kind {
            0 => b"HTTP/1.1 200 OK\r\nLOCATION: http://192.168.1.1:5000/",
            1 => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            _ => b"",
        };
        let mut d = head.to_vec();
        d.extend(data);
        exercise::ssdp_answer(&d);
    }
}

/// Every seed of these fuzz targets, through the harness of the same name.
#[test]
fn every_fuzz_seed_passes_its_harness() {
    let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    type Harness = fn(&[u8]);
    let harnesses: [(&str, Harness); 4] = [
        ("bird_reply", exercise::bird_reply),
        ("helper_request", exercise::helper_request),
        ("metrics_request", exercise::metrics_request),
        ("ssdp_answer", exercise::ssdp_answer),
    ];
    let mut ran = 0;
    for (target, harness) in harnesses {
        let dir = std::fs::read_dir(seeds.join(target)).unwrap_or_else(|e| panic!("seeds of {target}: {e}"));
        for entry in dir {
            harness(&std::fs::read(entry.unwrap().path()).unwrap());
            ran += 1;
        }
    }
    assert!(ran >= 8, "{ran} seeds");
}
