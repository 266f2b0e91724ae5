#![no_main]
//! Fuzz target: the first 32 bytes are the pseudo-header addresses, the rest the
//! message; see `shipworm_wire::exercise::icmpv6`.
use libfuzzer_sys::fuzz_target;
use std::net::Ipv6Addr;

fuzz_target!(|data: &[u8]| {
    if data.len() < 32 {
        return;
    }
    let src = Ipv6Addr::from(<[u8; 16]>::try_from(&data[..16]).unwrap());
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&data[16..32]).unwrap());
    shipworm_wire::exercise::icmpv6(&src, &dst, &data[32..]);
});
