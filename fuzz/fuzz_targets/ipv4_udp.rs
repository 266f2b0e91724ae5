#![no_main]
//! Fuzz target: see `shipworm_wire::exercise::ipv4_udp` for what is checked.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shipworm_wire::exercise::ipv4_udp(data));
