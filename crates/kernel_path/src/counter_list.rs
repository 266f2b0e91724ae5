// The one list of the programs' counters, in their order: the Rust `Counter` (maps.rs)
// and the C `enum counter` (build.rs writes OUT_DIR/counters.h, which bpf/shared.h
// includes) are both made from it. Each: the variant, the C name, and the labels
// (direction, outcome) metrics and status give it.
counters! {
    /// Decapsulated and handed to IPv6 forwarding (a relay's) or to the Teredo
    /// interface's receive path (a client's).
    DecapForwarded = ("DECAP_FORWARDED", "decap", "forwarded"),
    /// Their IPv6 bytes.
    DecapBytes = ("DECAP_BYTES", "decap", "bytes"),
    /// Up to the socket: the source is no trusted peer.
    DecapUnknownPeer = ("DECAP_UNKNOWN_PEER", "decap", "unknown_peer"),
    /// Up: a trusted peer's address from another mapping.
    DecapOtherMapping = ("DECAP_OTHER_MAPPING", "decap", "other_mapping"),
    /// Up: not a whole plain IPv6 packet (bubble, trailer, origin indication, fragment,
    /// malformed).
    DecapNotPlain = ("DECAP_NOT_PLAIN", "decap", "not_plain"),
    /// Up: a destination the relay's own rules must judge (a client's: not its
    /// address).
    DecapDestination = ("DECAP_DESTINATION", "decap", "destination"),
    /// Up: hop limit ≤ 1 (userland answers).
    DecapHopLimit = ("DECAP_HOP_LIMIT", "decap", "hop_limit"),
    /// Encapsulated and sent to the peer's mapping.
    EncapForwarded = ("ENCAP_FORWARDED", "encap", "forwarded"),
    /// Their IPv6 bytes.
    EncapBytes = ("ENCAP_BYTES", "encap", "bytes"),
    /// On to the TUN: no trusted peer.
    EncapUnknownPeer = ("ENCAP_UNKNOWN_PEER", "encap", "unknown_peer"),
    /// On: the peer was not heard from within its validity (userland bubbles).
    EncapStale = ("ENCAP_STALE", "encap", "stale"),
    /// On: its length is not its IPv6 header's (a train counts once, whole, in
    /// the forwarded ones).
    EncapNotPlain = ("ENCAP_NOT_PLAIN", "encap", "not_plain"),
    /// On: a source a routing-loop check must judge (a client's: not its address).
    EncapSource = ("ENCAP_SOURCE", "encap", "source"),
    /// On: no IPv4 route (or the path's MTU is too small).
    EncapNoRoute = ("ENCAP_NO_ROUTE", "encap", "no_route"),
    /// The kernel refused the encapsulation.
    EncapFailed = ("ENCAP_FAILED", "encap", "failed"),
    /// On: a client's native peer sent to for its silence without a word back
    /// (userland tests its relay again).
    EncapSilent = ("ENCAP_SILENT", "encap", "silent"),
    /// Of the decapsulated, those a direct relay sent out of their IPv6 route itself.
    DecapDirect = ("DECAP_DIRECT", "decap", "direct"),
    /// Of the encapsulated, those a direct relay took as they arrived.
    EncapDirect = ("ENCAP_DIRECT", "encap", "direct"),
    /// Up: its UDP checksum is still to be taken (a process on this host sent it
    /// through a veth, a tap or a bridge); decapsulated, that checksum would be written
    /// over the frame's type on the way out.
    DecapChecksumPending = ("DECAP_CHECKSUM_PENDING", "decap", "checksum_pending"),
    /// Dropped: something but IPv6 written into the Teredo interface (by a subverted
    /// daemon: the host forwards IPv4 arriving there).
    GuardNotIpv6 = ("GUARD_NOT_IPV6", "guard", "not_ipv6"),
}
