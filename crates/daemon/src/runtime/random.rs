//! Randomness from the kernel for nonces, address bits and the tables' hash keys,
//! through /dev/urandom opened before privileges go.

use crate::runtime::Failure;
use shipworm_proto::transmit::Random;
use std::io::Read;

/// /dev/urandom, open.
pub struct OsRandom(std::fs::File);

impl OsRandom {
    /// Open /dev/urandom.
    pub fn open() -> Result<OsRandom, Failure> {
        std::fs::File::open("/dev/urandom")
            .map(OsRandom)
            .map_err(|e| Failure::runtime(format!("cannot open /dev/urandom: {e}")))
    }

    /// Another handle on the same file (needs no privilege once root is gone).
    pub fn try_clone(&self) -> Result<OsRandom, Failure> {
        self.0.try_clone().map(OsRandom).map_err(|e| Failure::runtime(format!("/dev/urandom: {e}")))
    }

    /// Two secret keys for a SipHash table keyed against attacker-chosen addresses.
    pub fn hash_keys(&mut self) -> (u64, u64) {
        let mut b = [0u8; 16];
        self.fill(&mut b);
        let (k0, k1) = b.split_at(8);
        (u64::from_le_bytes(k0.try_into().expect("8 bytes")), u64::from_le_bytes(k1.try_into().expect("8 bytes")))
    }
}

impl Random for OsRandom {
    fn fill(&mut self, buf: &mut [u8]) {
        self.0.read_exact(buf).expect("/dev/urandom never runs dry");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_between_draws() {
        let mut r = OsRandom::open().unwrap();
        assert_ne!(r.hash_keys(), r.try_clone().unwrap().hash_keys());
    }
}
