#![no_main]
//! Fuzz target: see `shipworm_side_wire::exercise::metrics_request` for what is checked.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shipworm_side_wire::exercise::metrics_request(data));
