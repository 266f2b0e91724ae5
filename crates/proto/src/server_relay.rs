//! A Teredo server that is also a relay (RFC 4380 §5.4.3: "the processing of incoming
//! packets should be a combination of the server processing rules defined in Section
//! 5.3.1, and the relay processing rules defined in Section 5.4.2"). One host, one
//! address and port 3544 for both: clients qualify with it and send their native
//! traffic to it, and native hosts' packets for Teredo clients reach it by the route
//! to the Teredo prefix.
//!
//! The server's rules come first. What a pure server refuses and a relay handles goes
//! to the relay: a datagram to the primary address for a native destination that is
//! not the connectivity test's echo request (data, and the clients' bubbles answering
//! the relay's). Everything from the IPv6 side is the relay's. The relay's indirect
//! bubble to a client of this very server never leaves the host: the server passes it
//! on as it would any relay's, with an origin indication naming its own address and
//! port, where it is the relay.

use crate::outcome::Outcome;
use crate::relay::{Relay, RelayConfig};
use crate::server::{Local, Server, ServerConfig};
use crate::transmit::{Source, Transmit};
use shipworm_wire::icmpv6::message;
use shipworm_wire::ip_protocol;
use shipworm_wire::ipv6::Ipv6AddrExt;
use shipworm_wire::teredo_addr::{TeredoAddr, TEREDO_PORT};
use shipworm_wire::teredo_packet::TeredoPacket;
use std::net::SocketAddrV4;
use std::time::Duration;

/// A server and a relay sharing the server's primary address and port.
pub struct ServerRelay {
    server: Server,
    relay: Relay,
}

impl ServerRelay {
    /// Both roles, each with its configuration (the relay's prefix is the server's).
    pub fn new(server: ServerConfig, mut relay: RelayConfig) -> ServerRelay {
        relay.prefix = server.prefix;
        ServerRelay { server: Server::new(server), relay: Relay::new(relay) }
    }

    /// The server part.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The relay part.
    pub fn relay(&self) -> &Relay {
        &self.relay
    }

    /// A datagram to `local`:3544 from `from`.
    pub fn on_udp(
        &mut self,
        now: Duration,
        local: Local,
        from: SocketAddrV4,
        datagram: &[u8],
        tx: &mut impl Transmit,
    ) -> Outcome {
        // Our own endpoint as the source is a loop or a forgery: the server part drops it.
        let own = from.port() == TEREDO_PORT
            && [self.server.config().primary, self.server.config().secondary].contains(from.ip());
        if local == Local::Primary && !own && self.is_for_relay(datagram) {
            let mut out = Loopback { server: &mut self.server, tx };
            return self.relay.on_udp(now, from, datagram, &mut out);
        }
        self.server.on_udp(now, local, from, datagram, tx)
    }

    /// An IPv6 packet from the native side, for a Teredo client.
    pub fn on_tun(&mut self, now: Duration, packet: &[u8], tx: &mut impl Transmit) -> Outcome {
        let mut out = Loopback { server: &mut self.server, tx };
        self.relay.on_tun(now, packet, &mut out)
    }

    /// Time passes (the relay's bubbles and expiries).
    pub fn on_timer(&mut self, now: Duration, tx: &mut impl Transmit) {
        let mut out = Loopback { server: &mut self.server, tx };
        self.relay.on_timer(now, &mut out);
    }

    /// When [`ServerRelay::on_timer`] next has something to do: the relay part's (the
    /// server part keeps no timer).
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.relay.poll_timeout()
    }

    /// What a pure server would refuse and a relay handles: well formed, an answer to
    /// the relay's bubbles or for a native destination, and not the echo request of a connectivity test (the server's to
    /// forward, RFC 4380 §5.3.1). An echo request past the server's forwarding cap is
    /// no test but a user's large ping: the relay's, as any data. What does not parse
    /// stays with the server, which counts it.
    fn is_for_relay(&self, datagram: &[u8]) -> bool {
        let Ok(pkt) = TeredoPacket::parse(datagram) else { return false };
        let ip = &pkt.ipv6;
        let dst = ip.dst_addr();
        // An answer to the relay part's bubbles comes addressed to their link-local
        // source (a pure server takes no bubble to a link-local address).
        if pkt.is_bubble() && dst.is_unicast_link_local() {
            return true;
        }
        if !dst.is_global_scope() || TeredoAddr::decode_with_prefix(&dst, self.server.config().prefix).is_some() {
            return false;
        }
        let connectivity_test = !pkt.is_bubble()
            && ip.next_header() == ip_protocol::ICMPV6
            && ip.payload().first() == Some(&message::ECHO_REQUEST)
            && ip.payload().len() <= self.server.config().max_forwarded_icmpv6;
        !connectivity_test
    }
}

/// The relay's output: to the world through the caller's, except what it sends to this
/// very server, which the server takes at once.
struct Loopback<'a, T: Transmit> {
    server: &'a mut Server,
    tx: &'a mut T,
}

impl<T: Transmit> Transmit for Loopback<'_, T> {
    fn send(&mut self, from: Source, to: SocketAddrV4, payload: &[u8], ttl: Option<u8>) {
        if to == SocketAddrV4::new(self.server.config().primary, TEREDO_PORT) {
            let _ = self.server.on_own_relay_bubble(payload, self.tx);
            return;
        }
        self.tx.send(from, to, payload, ttl);
    }

    fn deliver(&mut self, packet: &[u8]) {
        self.tx.deliver(packet);
    }
}
