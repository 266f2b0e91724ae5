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

use shipworm_proto::transmit::{Recorder, Source};
use std::net::SocketAddrV4;

/// The client's datagrams as the cases read them: those of its service socket and
/// random ports (`udp`), apart from the probe socket's (`probe`). The recorder keeps
/// each one whole (socket, TTL); these are views over it.
#[allow(dead_code)]
pub trait ClientSends {
    /// Every datagram but the probe socket's, as (destination, payload), in order.
    fn udp(&self) -> Vec<(SocketAddrV4, Vec<u8>)>;
    /// Take the last datagram that did not leave from the probe socket.
    fn pop_udp(&mut self) -> Option<(SocketAddrV4, Vec<u8>)>;
    /// Take the last datagram that left from the probe socket.
    fn pop_probe(&mut self) -> Option<(SocketAddrV4, Vec<u8>)>;
}

impl ClientSends for Recorder {
    fn udp(&self) -> Vec<(SocketAddrV4, Vec<u8>)> {
        self.sent.iter().filter(|s| s.from != Source::Probe).map(|s| (s.to, s.payload.clone())).collect()
    }

    fn pop_udp(&mut self) -> Option<(SocketAddrV4, Vec<u8>)> {
        let i = self.sent.iter().rposition(|s| s.from != Source::Probe)?;
        let s = self.sent.remove(i);
        Some((s.to, s.payload))
    }

    fn pop_probe(&mut self) -> Option<(SocketAddrV4, Vec<u8>)> {
        let i = self.sent.iter().rposition(|s| s.from == Source::Probe)?;
        let s = self.sent.remove(i);
        Some((s.to, s.payload))
    }
}
