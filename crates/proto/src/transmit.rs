//! Where a state machine's output goes: the one output style of every role (server,
//! relay, client). A state machine calls it while it handles an input, as many times
//! as that input asks (a relay's flushed queue, a client's two bubbles); the daemon
//! implements it over its sockets and TUN, batching as it likes, and tests record
//! into vectors.

use std::net::SocketAddrV4;

/// Output of the server, relay and client state machines.
pub trait Transmit {
    /// Send a UDP datagram whose payload is `payload` to `to`, from the service socket
    /// (the server's primary address).
    fn udp(&mut self, to: SocketAddrV4, payload: &[u8]);
    /// As [`udp`](Self::udp), with the IPv4 TTL limited to `ttl` hops: the client's
    /// opening bubble, which must pass its own NAT (and open it) but die before it
    /// reaches the peer's. Only the client sends these.
    fn udp_hop_limited(&mut self, to: SocketAddrV4, payload: &[u8], ttl: u8) {
        let _ = ttl;
        self.udp(to, payload);
    }
    /// Write an IPv6 packet to the IPv6 side: the host stack (client), the native
    /// network (relay, and the server's connectivity-test echoes).
    fn tun(&mut self, packet: &[u8]);
    /// Send from the node's second socket: the client's probe-only port (NAT kind
    /// detection), the server's secondary address (the cone test). The relay has none.
    fn udp_second(&mut self, to: SocketAddrV4, payload: &[u8]) {
        let _ = (to, payload);
    }
    /// Open a UDP socket on a new random local port: a client's port for one peer (RFC
    /// 6081 §5.4). Its number, or `None` when none can be opened; datagrams to it come
    /// back as `Via::Port`. Only the client asks.
    fn open_port(&mut self) -> Option<u16> {
        None
    }
    /// Close a port [`open_port`](Self::open_port) gave.
    fn close_port(&mut self, port: u16) {
        let _ = port;
    }
    /// Send from a port [`open_port`](Self::open_port) gave, the TTL limited to `ttl`
    /// hops if given.
    fn udp_from(&mut self, port: u16, to: SocketAddrV4, payload: &[u8], ttl: Option<u8>) {
        let _ = (port, to, payload, ttl);
    }
}

/// Send from the service socket (`port` 0) or from a client's random port.
pub fn udp_via(tx: &mut impl Transmit, port: u16, to: SocketAddrV4, payload: &[u8]) {
    if port == 0 {
        tx.udp(to, payload);
    } else {
        tx.udp_from(port, to, payload, None);
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
