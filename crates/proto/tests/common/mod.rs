//! What the state-machine test files share.

use shipworm_proto::transmit::Random;

/// A fixed xorshift sequence: the tests' randomness, the same on every run.
pub struct Rng(pub u64);
impl Random for Rng {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *b = self.0 as u8;
        }
    }
}
