// SPDX-License-Identifier: MIT OR Apache-2.0
//
// Route look-ups and the verdicts kept from them (a direct relay's, per peer, per
// destination and per mapping), voided by the generation userland moves.

#ifndef SHIPWORM_ROUTES_H
#define SHIPWORM_ROUTES_H

// The host's IPv6 route for `ip6`, looked up as its forwarding would for a packet that
// arrived on the interface the socket buffer arrived on, checked against `len` (the
// packet's length, or a train's largest piece's): anything but SUCCESS is the stack's.
// The next hop's link-layer address is left to the neighbour redirect (which, unlike
// a look-up here, revalidates a stale entry as the host's own output does).
static __always_inline long route6(struct __sk_buff *skb, struct bpf_fib_lookup *fib, const struct ipv6hdr *ip6,
				   __u32 len, const void *end)
{
	fib->family = AF_INET6;
	fib->l4_protocol = ip6->nexthdr;
	// The ports, for a multipath route that spreads flows by them
	// (`fib_multipath_hash_policy` 1): TCP's and UDP's right after the IPv6 header (the
	// host's forwarding also reads them behind extension headers, and other
	// transports'; only which next hop such a flow takes differs).
	const __be16 *ports = (const void *)(ip6 + 1);
	if ((ip6->nexthdr == IPPROTO_TCP || ip6->nexthdr == IPPROTO_UDP) && (const void *)(ports + 2) <= end) {
		fib->sport = ports[0];
		fib->dport = ports[1];
	}
	fib->tot_len = len;
	fib->ifindex = skb->ingress_ifindex;
	fib->flowinfo = *(const __be32 *)ip6 & bpf_htonl(0x0fffffff);
	__builtin_memcpy(fib->ipv6_src, &ip6->saddr, sizeof(ip6->saddr));
	__builtin_memcpy(fib->ipv6_dst, &ip6->daddr, sizeof(ip6->daddr));
	return bpf_fib_lookup(skb, fib, sizeof(*fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
}

// The next hop the route look-up `fib` chose (of the family the route gives: an IPv4
// route may have an IPv6 gateway).
static __always_inline void next_hop(const struct bpf_fib_lookup *fib, struct bpf_redir_neigh *nh)
{
	if (fib->family == AF_INET6) {
		nh->nh_family = AF_INET6;
		__builtin_memcpy(nh->ipv6_nh, fib->ipv6_dst, sizeof(nh->ipv6_nh));
	} else {
		nh->nh_family = AF_INET;
		nh->ipv4_nh = fib->ipv4_dst;
	}
}

// The largest piece of a train (segments the kernel joined: `gso_size` bytes of payload
// each) of the IPv6 packet at `l3`, headers included, or 0 if its transport is neither
// TCP nor UDP (behind no extension header), whose pieces cannot be told.
static __always_inline __u32 train_piece(struct __sk_buff *skb, __u32 l3, __u8 nexthdr)
{
	__u32 transport = l3 + sizeof(struct ipv6hdr);
	if (nexthdr == IPPROTO_UDP)
		return sizeof(struct ipv6hdr) + sizeof(struct udphdr) + skb->gso_size;
	__u8 offset = 0;
	if (nexthdr != IPPROTO_TCP || bpf_skb_load_bytes(skb, transport + 12, &offset, 1))
		return 0;
	return sizeof(struct ipv6hdr) + (offset >> 4) * 4 + skb->gso_size;
}

// A direct relay's route verdict for a peer, kept in its entry so that its packets
// need no IPv6 route look-up (the IPv4 one out is kept per mapping, below): as of
// generation `routes` of the host's routes, a packet to the peer arriving on interface `iif`
// (16 bits: a larger index is never kept) is routed into the Teredo interface, whose
// route's MTU is `mtu`. A route that changes without a notification (a path MTU the
// host learns, an MTU set by sysctl) is seen within the second userland waits at most
// before it moves the generation anyway.
static __always_inline __u64 route_stamp(__u32 routes, __u32 iif, __u16 mtu)
{
	return ((__u64)routes << 32) | ((__u64)(iif & 0xffff) << 16) | mtu;
}

// Whether `stamp` is a verdict of generation `routes` for packets arriving on `iif`
// of at most `len` bytes.
static __always_inline int stamp_holds(__u64 stamp, __u32 routes, __u32 iif, __u32 len)
{
	return stamp >> 16 == route_stamp(routes, iif, 0) >> 16 && len <= (stamp & 0xffff);
}

// The slot of destination `a` (its four words) in a CPU's verdicts, by a hash seeded
// with a secret: which destinations share a slot is not known outside (a collision
// only costs the second destination the look-up it paid without the slots).
static __always_inline __u32 destination_slot(const __u32 *a, const struct config *cfg)
{
	__u64 h = ((__u64)frozen.slot_key[0] << 32) | frozen.slot_key[1];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		h = (h ^ a[i]) * 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	return (__u32)(h >> 32) & frozen.slot_mask;
}

// The slot of a mapping's IPv4 address `a` in a CPU's verdicts, by the same keyed hash.
static __always_inline __u32 mapping_slot(__u32 a, const struct config *cfg)
{
	__u64 h = ((__u64)frozen.slot_key[0] << 32) | frozen.slot_key[1];
	h = (h ^ a) * 0x9e3779b97f4a7c15ULL;
	h ^= h >> 29;
	return (__u32)(h >> 32) & frozen.slot_mask;
}

#endif // SHIPWORM_ROUTES_H
