//! What the client tells the daemon: interface events, its status and its counters.

use super::*;

/// What qualification learned about the NAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatKind {
    /// Not known (yet, or the secondary address did not answer).
    Unknown,
    /// Full cone: anyone may send in once the mapping exists.
    Cone,
    /// Address- or port-restricted cone: one mapping, filtered inbound.
    Restricted,
    /// Symmetric: a new mapping per destination.
    Symmetric,
}

impl NatKind {
    /// Lower-case name for logs, status and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            NatKind::Unknown => "unknown",
            NatKind::Cone => "cone",
            NatKind::Restricted => "restricted",
            NatKind::Symmetric => "symmetric",
        }
    }
}

/// What the daemon must do to the interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// Configure this address (replacing any other) and MTU; the tunnel is usable.
    Up {
        /// The Teredo address.
        address: Ipv6Addr,
        /// Link MTU from the RA.
        mtu: u32,
        /// The server qualified with.
        server: Ipv4Addr,
        /// The NAT kind detected.
        nat: NatKind,
    },
    /// Remove the address: no Teredo connectivity, for this reason.
    Down(&'static str),
    /// The NAT kind became known or changed (no address change).
    Nat(NatKind),
    /// Secure qualification: `server` says, in an advertisement signed with our key,
    /// that the key is retired (RFC 4380 §5.3.2); the client goes on soliciting, but
    /// the operator must get it a new one.
    KeyRetired {
        /// The server that said so.
        server: Ipv4Addr,
    },
}

/// Where qualification stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientState {
    /// No server yet: their names are being looked up.
    Resolving,
    /// Waiting before trying again (every server failed).
    Offline,
    /// Soliciting the primary address.
    Qualifying,
    /// Soliciting the secondary address (NAT kind detection).
    Probing,
    /// Holding a Teredo address.
    Qualified,
}

impl ClientState {
    /// Lower-case name for logs, status and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientState::Resolving => "resolving",
            ClientState::Offline => "offline",
            ClientState::Qualifying => "qualifying",
            ClientState::Probing => "probing",
            ClientState::Qualified => "qualified",
        }
    }
}

/// What the client is doing, for `shipworm status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientStatus {
    /// Where qualification stands.
    pub state: ClientState,
    /// The Teredo address, when qualified.
    pub address: Option<Ipv6Addr>,
    /// The server in use or being tried.
    pub server: Option<Ipv4Addr>,
    /// The mapping the server saw.
    pub mapped: Option<SocketAddrV4>,
    /// NAT kind.
    pub nat: NatKind,
    /// Link MTU.
    pub mtu: u32,
    /// Peers in the table.
    pub peers: usize,
    /// Native hosts that spoke first, waiting for their connectivity test.
    pub first_contacts: usize,
    /// Behind a symmetric NAT: whether it kept our port towards the primary server
    /// (RFC 6081 §5.4.3), which decides how random ports are predicted.
    pub port_preserving: bool,
    /// How our external port for a peer's random port is predicted: `same port`
    /// (port-preserving NAT), `echo test` (any other symmetric NAT), or `none`.
    pub port_prediction: &'static str,
    /// Random ports open for peers, and peers reached through one.
    pub random_ports: usize,
    /// Peers reached through one of our random ports.
    pub random_port_peers: usize,
    /// The RFC 6081 extensions switched on, by the RFC's names.
    pub extensions: Vec<&'static str>,
    /// Our address embeds the NAT's port mapping (anyone can reach it).
    pub mapped_inbound: bool,
    /// Secure qualification: the server that said our key is retired, until an
    /// advertisement qualifies.
    pub key_retired: Option<Ipv4Addr>,
}

/// Counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Router solicitations sent.
    pub solicitations: u64,
    /// Valid advertisements accepted.
    pub advertisements: u64,
    /// Times an address was configured or changed.
    pub addresses: u64,
    /// Packets sent to peers (bubbles excluded).
    pub sent: u64,
    /// Packets delivered to the host.
    pub delivered: u64,
    /// IPv6 bytes of the packets sent to peers.
    pub sent_bytes: u64,
    /// IPv6 bytes of the packets delivered to the host.
    pub delivered_bytes: u64,
    /// Bubbles sent.
    pub bubbles: u64,
    /// Bubbles a try would have sent, withheld: the peer had its 4 of the kind in the
    /// last 300 s without answering (RFC 4380 §5.2.6).
    pub bubbles_withheld: u64,
    /// Server Load Reduction: direct bubbles soliciting a silent peer (RFC 6081 §5.7).
    pub peer_solicitations: u64,
    /// Server Load Reduction: peers' solicitations answered with an advertisement.
    pub peer_advertisements: u64,
    /// Echo Tests run to predict a sequential NAT's port (RFC 6081 §5.5).
    pub echo_tests: u64,
    /// Connectivity-test echoes sent.
    pub echoes: u64,
    /// Connectivity tests started because a native host spoke first.
    pub first_contacts: u64,
    /// Connectivity tests started again because a native host we sent to fell silent
    /// (its relay may have gone).
    pub silent_retests: u64,
    /// Packets delivered after their first contact's test.
    pub first_contact_delivered: u64,
    /// Drops by reason.
    pub drops: DropCounters,
}
