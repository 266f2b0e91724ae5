//! The client's settings.

use super::*;

/// One Teredo server: its primary and secondary addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerAddrs {
    /// Primary address (embedded in the client's address).
    pub primary: Ipv4Addr,
    /// Secondary address (by convention primary + 1).
    pub secondary: Ipv4Addr,
}

impl ServerAddrs {
    /// A server at `primary` with the conventional secondary.
    pub fn new(primary: Ipv4Addr) -> Self {
        ServerAddrs { primary, secondary: Ipv4Addr::from_bits(primary.to_bits().wrapping_add(1)) }
    }
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Servers in order of preference: the first is used, the others on failure.
    pub servers: Vec<ServerAddrs>,
    /// Refresh interval (RFC 6081 §5.1.1: configurable, default 30 s).
    pub refresh: Duration,
    /// Most peers kept.
    pub peer_capacity: usize,
    /// Bytes queued per waiting peer.
    pub queue_bytes: usize,
    /// Most peers waiting at once (for bubbles or a connectivity test), whatever made
    /// them wait: with `queue_bytes`, the bound on memory held in queues.
    pub pending_capacity: usize,
    /// Secret keys for the peer table's hash.
    pub hash_keys: (u64, u64),
    /// How often to try going back to the first server while on another.
    pub home_check: Duration,
    /// Secure qualification: sign RSs and accept only RAs signed with this secret.
    pub credentials: Option<secure::Credentials>,
    /// What native hosts speaking first may hold while their test runs.
    pub first_contact: FirstContactLimits,
    /// Behind a symmetric NAT, keep the address from the primary server's mapping
    /// (RFC 6081 §5.2) rather than go offline (RFC 4380 §5.2.1), and speak the
    /// extension's nonces to peers. Off: plain RFC 4380, no trailers sent.
    pub symmetric_nat_support: bool,
    /// TTL of the opening bubble, the first direct bubble to a peer behind a restricted
    /// or symmetric NAT (0: no opening bubble, full TTL). It must pass our NAT and die
    /// before the peer's: see [`Client`]'s notes on Linux NATs.
    pub opening_bubble_ttl: u8,
    /// RFC 6081 §5.7, Server Load Reduction: a trusted peer silent for 30 s is asked
    /// with direct bubbles first (three, 2 s apart) before bubbles go through servers.
    /// Only peers that have sent an RFC 6081 trailer are asked: others never answer.
    /// A trusted peer's solicitation is answered whether or not this is on.
    pub server_load_reduction: bool,
    /// RFC 6081 §5.6, Hairpinning: indirect bubbles to peers not yet reached list our
    /// local address (Alternate Address trailer), and the addresses a peer lists get a
    /// direct bubble each, so two clients behind one NAT that does not hairpin meet on
    /// their own network. Needs `symmetric_nat_support` (the nonces prove the bubbles).
    pub hairpinning: bool,
    /// The service socket's local port, to tell a port-preserving NAT (not known: no
    /// port prediction).
    pub service_port: Option<NonZeroU16>,
    /// Peers reached through a random port of their own at once (RFC 6081 §5.4, §5.5):
    /// each is a socket.
    pub random_ports: usize,
    /// RFC 4380 §5.2.8 local discovery: announce ourselves on the link and reach peers
    /// heard there at their local address.
    pub local_discovery: bool,
    /// The daemon moves trusted peers' packets in the kernel (`DataPath`): the client
    /// keeps the kernel's peer list ([`crate::transmit::Transmit::kernel`]) to what it
    /// trusts.
    pub kernel_path: bool,
}

impl ClientConfig {
    /// Defaults for these servers.
    pub fn new(servers: Vec<ServerAddrs>) -> Self {
        ClientConfig {
            servers,
            refresh: Duration::from_secs(30),
            peer_capacity: 65536,
            queue_bytes: 4096,
            pending_capacity: 1024,
            hash_keys: (0, 0),
            home_check: Duration::from_secs(300),
            credentials: None,
            first_contact: FirstContactLimits::default(),
            symmetric_nat_support: true,
            opening_bubble_ttl: 2,
            server_load_reduction: true,
            hairpinning: true,
            service_port: None,
            random_ports: 64,
            local_discovery: true,
            kernel_path: false,
        }
    }
}
