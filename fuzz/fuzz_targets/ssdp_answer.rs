#![no_main]
//! Fuzz target: see `shipworm_side_wire::exercise::ssdp_answer` for what is checked.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shipworm_side_wire::exercise::ssdp_answer(data));
