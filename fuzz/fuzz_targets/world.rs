#![no_main]
//! Fuzz target: a server, a relay and a client driven by a script; see
//! `shipworm_proto::exercise::world` for the steps and the caps checked.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shipworm_proto::exercise::world(data);
});
