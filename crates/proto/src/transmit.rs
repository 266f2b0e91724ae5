//! Where a state machine's output goes. The daemon implements it over its sockets and
//! TUN (batching as it likes); tests record into vectors.

use std::net::SocketAddrV4;

/// Output of the relay and client state machines.
pub trait Transmit {
    /// Send a UDP datagram whose payload is `payload` to `to`, from the service port.
    fn udp(&mut self, to: SocketAddrV4, payload: &[u8]);
    /// Write an IPv6 packet to the TUN side (the host stack, or the native network).
    fn tun(&mut self, packet: &[u8]);
    /// Send from the client's second, probe-only socket (NAT kind detection). Only the
    /// client uses it.
    fn probe(&mut self, to: SocketAddrV4, payload: &[u8]) {
        let _ = (to, payload);
    }
}

/// Unpredictable bytes (nonces, random address bits, timer jitter). The daemon reads
/// them from the OS; tests use a fixed sequence.
pub trait Random {
    /// Fill `buf`.
    fn fill(&mut self, buf: &mut [u8]);

    /// A uniform value in `0..n` (n > 0), good enough for jitter.
    fn below(&mut self, n: u64) -> u64 {
        let mut b = [0u8; 8];
        self.fill(&mut b);
        u64::from_le_bytes(b) % n.max(1)
    }
}
