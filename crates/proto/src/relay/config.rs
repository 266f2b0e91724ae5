//! What a relay is told (its settings) and what it counts.

use super::BUBBLES_PER_TARGET;
use crate::drop_reason::DropCounters;
use shipworm_wire::teredo_addr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// Which IPv6 destinations the relay delivers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// A relay: every global, non-Teredo destination.
    AnyGlobal,
    /// A host-specific relay: only these addresses (the host's own).
    Only(Vec<Ipv6Addr>),
}

/// Relay settings.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// The Teredo prefix (first 32 bits).
    pub prefix: u32,
    /// Destinations served on the IPv6 side.
    pub served: Served,
    /// Also send direct bubbles (Miredo's `restricted` relay type).
    pub direct_bubbles: bool,
    /// Most peers kept (over all shards).
    pub capacity: usize,
    /// Most peers waiting for a bubble answer at once (over all shards), whatever made
    /// them wait: with `queue_bytes`, the bound on memory held in queues.
    pub pending_capacity: usize,
    /// Most peers embedding any one IPv4 address (over all shards, shared out): one
    /// endpoint answering bubbles for many addresses cannot fill the table.
    pub per_address: usize,
    /// Bytes queued per waiting peer.
    pub queue_bytes: usize,
    /// Trusted peers silent this long are forgotten.
    pub idle: Duration,
    /// Source of ICMPv6 errors sent back to the IPv6 side (none: no errors).
    pub icmp_source: Option<Ipv6Addr>,
    /// ICMPv6 errors per second.
    pub icmp_rate: u32,
    /// Bubbles a second to one IPv4 target, and the burst.
    pub bubbles_per_target: (u32, u32),
    /// The directed-broadcast addresses of the subnets the relay host is attached to
    /// (RFC 4380 §5.2.4): never a mapping or a server, whatever the address embeds.
    pub local_broadcasts: Vec<Ipv4Addr>,
    /// The relay host's own IPv4 addresses: never a mapping, and the ones whose 6to4 and
    /// ISATAP forms would make a routing loop (RFC 6324 §3.3).
    pub own_ipv4: Vec<Ipv4Addr>,
    /// Secret keys for the peer table's hash.
    pub hash_keys: (u64, u64),
    /// New peers a second that a client's own packet may enter (RFC 4380 §5.4.2's
    /// embedded-mapping rule: relays sharing an anycast address take over each other's
    /// clients that way). Anyone able to forge a UDP source can use it, so its rate is
    /// bounded: with idle peers forgotten, forged entries stay a small part of the table.
    /// One public address gets a twentieth of it (a tenth in a burst).
    pub client_first_per_s: u32,
    /// The daemon moves trusted peers' packets in the kernel (`DataPath`): the relay
    /// keeps the kernel's peer list ([`Transmit::kernel`]) to what it trusts. A
    /// host-specific relay never does (the kernel cannot tell its served addresses).
    pub kernel_path: bool,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            prefix: teredo_addr::PREFIX,
            served: Served::AnyGlobal,
            direct_bubbles: false,
            capacity: 1 << 20,
            pending_capacity: 4096,
            per_address: 4096,
            queue_bytes: 4096,
            idle: Duration::from_secs(300),
            icmp_source: None,
            icmp_rate: 10,
            bubbles_per_target: BUBBLES_PER_TARGET,
            local_broadcasts: Vec::new(),
            own_ipv4: Vec::new(),
            hash_keys: (0, 0),
            client_first_per_s: 1000,
            kernel_path: false,
        }
    }
}

/// Counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Packets sent to Teredo clients.
    pub to_teredo: u64,
    /// Packets delivered to the IPv6 side.
    pub to_ipv6: u64,
    /// IPv6 bytes of the packets sent to Teredo clients.
    pub to_teredo_bytes: u64,
    /// IPv6 bytes of the packets delivered to the IPv6 side.
    pub to_ipv6_bytes: u64,
    /// Bubbles sent.
    pub bubbles: u64,
    /// Bubbles withheld: the peer had its 4 of the kind in the last 300 s without
    /// answering (RFC 4380 §5.2.6), however often its entry was made anew.
    pub bubbles_withheld: u64,
    /// Peers given up after their bubbles went unanswered.
    pub unreachable_peers: u64,
    /// ICMPv6 errors sent.
    pub icmp_errors: u64,
    /// Cookie bubbles sent to clients whose first packet the client-first budget
    /// refused, and clients entered by echoing one.
    pub cookies_sent: u64,
    /// See [`RelayStats::cookies_sent`].
    pub cookies_proved: u64,
    /// Drops by reason.
    pub drops: DropCounters,
}

impl RelayStats {
    /// Add `other`'s counts to these (the daemon sums its workers').
    pub fn add(&mut self, other: &RelayStats) {
        self.to_teredo += other.to_teredo;
        self.to_ipv6 += other.to_ipv6;
        self.to_teredo_bytes += other.to_teredo_bytes;
        self.to_ipv6_bytes += other.to_ipv6_bytes;
        self.bubbles += other.bubbles;
        self.bubbles_withheld += other.bubbles_withheld;
        self.unreachable_peers += other.unreachable_peers;
        self.icmp_errors += other.icmp_errors;
        self.cookies_sent += other.cookies_sent;
        self.cookies_proved += other.cookies_proved;
        self.drops.add(&other.drops);
    }
}
