//! Why a packet was dropped, and the counters the daemon exposes per reason. Bad input
//! on the wire is never an error to log one by one: it is dropped and counted.

use shipworm_wire::Error as WireError;

/// Why a packet was not forwarded or answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Not a well-formed Teredo payload: truncated.
    MalformedTruncated,
    /// Not a well-formed Teredo payload: not IPv6 (or IPv4 header not 4).
    MalformedVersion,
    /// Not a well-formed Teredo payload: inconsistent length field.
    MalformedLength,
    /// Unknown Teredo indicator, or indicators out of order.
    MalformedIndicator,
    /// A neighbor-discovery option of length 0 or past the end.
    MalformedOption,
    /// A malformed extension-header chain.
    MalformedChain,
    /// A checksum that does not verify.
    BadChecksum,
    /// A field with a value the protocol does not allow.
    BadValue,
    /// The packet does not fit the output buffer.
    TooBig,
    /// The outer source is one of our own addresses with port 3544 (UDP loop guard).
    LoopGuard,
    /// The outer IPv4 source is not global unicast.
    SourceNotGlobal,
    /// Neither a bubble nor an ICMPv6 message (a pure server forwards nothing else).
    NotBubbleOrIcmpv6,
    /// ICMPv6 behind extension headers: control messages must stand alone.
    ExtensionHeaders,
    /// An ICMPv6 type this role does not forward.
    Icmpv6TypeNotForwarded,
    /// An ICMPv6 message above the configured forwarding size cap.
    Icmpv6TooLarge,
    /// A router solicitation that fails a check (hop limit, source, destination, code).
    InvalidSolicitation,
    /// The IPv6 source is neither a Teredo address matching the outer source, nor a
    /// native address writing to one of our clients.
    SourceMismatch,
    /// The IPv6 destination is link-local, multicast or otherwise not global.
    DestinationNotGlobal,
    /// A Teredo destination whose embedded IPv4 is not global unicast, or is ours.
    DestinationMappingNotGlobal,
    /// A packet for the server itself that it does not answer.
    LocalDestination,
    /// Native packet for an address this server did not issue.
    NotOurClient,
    /// The hop limit would reach zero.
    HopLimitExceeded,
    /// Secure qualification is required and the solicitation is not authenticated.
    AuthenticationFailed,
    /// The peer table is full of peers in use.
    TableFull,
    /// A waiting peer's queue is full, or the peer gave its place on the waiting list
    /// to newer ones (the list and the bytes it holds are capped).
    QueueFull,
    /// A relay's entries for the IPv4 address the destination embeds are at their cap.
    AddressFull,
    /// A Teredo source the relay has no entry for (it never bubbled it).
    NoPeerEntry,
    /// An IPv6 destination outside what this relay serves.
    NotServed,
    /// A first contact from a native source over the client's shared budget (sources
    /// waiting for their connectivity test, or the bytes they hold together).
    FirstContactBudget,
    /// Held for a connectivity test that got no answer (or proved another relay).
    ConnectivityTestFailed,
    /// RFC 6081 trailers a server would have forwarded that do not parse (a TLV runs
    /// past the end or holds a bad value), or more of them than any node sends; at a
    /// client, a trailer of a type it does not know whose two top bits are 01, which
    /// asks that the packet be discarded (§4.1).
    BadTrailers,
    /// Over a per-address rate: router solicitations from one IPv4 source (server), or
    /// bubbles to one IPv4 target (relay), past what any real exchange needs.
    RateLimited,
    /// A Teredo address embedding a host of a subnet this host is attached to, or its
    /// directed broadcast (CVE-2006-6264: a way into the site from outside).
    AttachedSubnet,
    /// An IPv6 address embedding one of this node's own IPv4 addresses in a 6to4 or
    /// ISATAP form, as the destination of a packet leaving the tunnel or the source of
    /// one entering it: a routing loop between tunnels (RFC 6324 §3.3).
    RoutingLoop,
    /// Secure qualification: a router solicitation naming a client identifier the
    /// server holds no key for (RFC 4380 §5.3.1 check 4).
    UnknownClientId,
    /// Secure qualification: a router advertisement, signed with our key, whose
    /// confirmation byte says the server retired that key (RFC 4380 §5.3.2).
    KeyRetired,
    /// A client's packet the relay held while the client proved the port it came from,
    /// let go unproved (no echo of the relay's nonce in time).
    PortNotProved,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 37] = [
        DropReason::MalformedTruncated,
        DropReason::MalformedVersion,
        DropReason::MalformedLength,
        DropReason::MalformedIndicator,
        DropReason::MalformedOption,
        DropReason::MalformedChain,
        DropReason::BadChecksum,
        DropReason::BadValue,
        DropReason::TooBig,
        DropReason::LoopGuard,
        DropReason::SourceNotGlobal,
        DropReason::NotBubbleOrIcmpv6,
        DropReason::ExtensionHeaders,
        DropReason::Icmpv6TypeNotForwarded,
        DropReason::Icmpv6TooLarge,
        DropReason::InvalidSolicitation,
        DropReason::SourceMismatch,
        DropReason::DestinationNotGlobal,
        DropReason::DestinationMappingNotGlobal,
        DropReason::LocalDestination,
        DropReason::NotOurClient,
        DropReason::HopLimitExceeded,
        DropReason::AuthenticationFailed,
        DropReason::TableFull,
        DropReason::QueueFull,
        DropReason::AddressFull,
        DropReason::NoPeerEntry,
        DropReason::NotServed,
        DropReason::FirstContactBudget,
        DropReason::ConnectivityTestFailed,
        DropReason::BadTrailers,
        DropReason::RateLimited,
        DropReason::AttachedSubnet,
        DropReason::RoutingLoop,
        DropReason::UnknownClientId,
        DropReason::KeyRetired,
        DropReason::PortNotProved,
    ];

    /// A stable name for metrics and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::MalformedTruncated => "malformed_truncated",
            DropReason::MalformedVersion => "malformed_version",
            DropReason::MalformedLength => "malformed_length",
            DropReason::MalformedIndicator => "malformed_indicator",
            DropReason::MalformedOption => "malformed_nd_option",
            DropReason::MalformedChain => "malformed_extension_chain",
            DropReason::BadChecksum => "bad_checksum",
            DropReason::BadValue => "bad_value",
            DropReason::TooBig => "too_big",
            DropReason::LoopGuard => "loop_guard",
            DropReason::SourceNotGlobal => "source_not_global",
            DropReason::NotBubbleOrIcmpv6 => "not_bubble_or_icmpv6",
            DropReason::ExtensionHeaders => "extension_headers",
            DropReason::Icmpv6TypeNotForwarded => "icmpv6_type_not_forwarded",
            DropReason::Icmpv6TooLarge => "icmpv6_too_large",
            DropReason::InvalidSolicitation => "invalid_solicitation",
            DropReason::SourceMismatch => "source_mismatch",
            DropReason::DestinationNotGlobal => "destination_not_global",
            DropReason::DestinationMappingNotGlobal => "destination_mapping_not_global",
            DropReason::LocalDestination => "local_destination",
            DropReason::NotOurClient => "not_our_client",
            DropReason::HopLimitExceeded => "hop_limit_exceeded",
            DropReason::AuthenticationFailed => "authentication_failed",
            DropReason::TableFull => "peer_table_full",
            DropReason::QueueFull => "queue_full",
            DropReason::AddressFull => "peer_address_full",
            DropReason::NoPeerEntry => "no_peer_entry",
            DropReason::NotServed => "destination_not_served",
            DropReason::FirstContactBudget => "first_contact_budget",
            DropReason::ConnectivityTestFailed => "connectivity_test_failed",
            DropReason::BadTrailers => "bad_trailers",
            DropReason::RateLimited => "rate_limited",
            DropReason::AttachedSubnet => "attached_subnet",
            DropReason::RoutingLoop => "routing_loop",
            DropReason::UnknownClientId => "unknown_client_id",
            DropReason::KeyRetired => "key_retired",
            DropReason::PortNotProved => "port_not_proved",
        }
    }
}

impl From<WireError> for DropReason {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Truncated => DropReason::MalformedTruncated,
            WireError::BadVersion => DropReason::MalformedVersion,
            WireError::BadLength => DropReason::MalformedLength,
            WireError::BadIndicator => DropReason::MalformedIndicator,
            WireError::BadOption => DropReason::MalformedOption,
            WireError::BadChain => DropReason::MalformedChain,
            WireError::BadChecksum => DropReason::BadChecksum,
            WireError::BadValue => DropReason::BadValue,
            WireError::BufferTooSmall => DropReason::TooBig,
        }
    }
}

/// One counter per drop reason: a fixed array, no allocation on the packet path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropCounters {
    counts: [u64; DropReason::ALL.len()],
}

impl Default for DropCounters {
    fn default() -> Self {
        DropCounters { counts: [0; DropReason::ALL.len()] }
    }
}

impl DropCounters {
    /// Count one drop.
    #[inline]
    pub fn count(&mut self, reason: DropReason) {
        self.counts[reason as usize] += 1;
    }
    /// Count `n` drops at once (a queue given up).
    #[inline]
    pub fn count_n(&mut self, reason: DropReason, n: usize) {
        self.counts[reason as usize] += n as u64;
    }
    /// Drops so far for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason as usize]
    }
    /// All drops so far.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
    /// Add `other`'s counts to these (summing per-worker counters).
    pub fn add(&mut self, other: &DropCounters) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }
    /// Every reason with a non-zero count.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|&r| (r, self.get(r))).filter(|&(_, n)| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_discriminant_order() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
        }
    }

    #[test]
    fn counters_count_by_reason() {
        let mut c = DropCounters::default();
        c.count(DropReason::LoopGuard);
        c.count(DropReason::LoopGuard);
        c.count(WireError::Truncated.into());
        assert_eq!(c.get(DropReason::LoopGuard), 2);
        assert_eq!(c.get(DropReason::MalformedTruncated), 1);
        assert_eq!(c.total(), 3);
        assert_eq!(c.nonzero().count(), 2);
        let mut sum = c.clone();
        sum.add(&c);
        assert_eq!((sum.get(DropReason::LoopGuard), sum.total()), (4, 6));
    }
}
