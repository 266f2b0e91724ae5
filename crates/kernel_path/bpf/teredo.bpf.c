// SPDX-License-Identifier: MIT OR Apache-2.0
//
// shipworm's kernel data path: packets of peers the relay's or the client's state
// machine already trusts, moved without leaving the kernel. Every decision stays in
// userland; these programs only look a peer up in the map userland fills, check that
// the packet is the plainest kind (a whole IPv6 packet, no trailers, no bubble, a
// destination the role may serve without more thought), and move it. Anything else
// goes on, untouched, to the socket or the TUN, where the daemon handles it as if these
// programs were not there.
//
// Layouts shared with crates/kernel_path/src/maps.rs: change both together.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <stddef.h>

// RFC 4380 §5.2.4: a peer is valid while heard from within 30 s.
#define VALIDITY_NS (30ULL * 1000 * 1000 * 1000)
// A peer's last-heard time is written at most this often (a write per packet would
// move the map's cache line between cores on every packet).
#define HEARD_GRAIN_NS (100ULL * 1000 * 1000)
// The client's `RELAY_SILENCE`: a native peer sent to for this long without a word back
// is tested again by userland (its relay may be gone), so its packets go up.
#define SILENCE_NS (1000ULL * 1000 * 1000)
#define OUTER_LEN (sizeof(struct iphdr) + sizeof(struct udphdr))
// BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (Linux 6.3), which older uapi headers lack: the packet's
// protocol becomes IPv6 with the outer headers gone.
#define ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)
#define AF_INET 2
#define AF_INET6 10

// One trusted peer, keyed by its IPv6 address.
struct peer {
	__be32 ip;     // its mapping: where its packets come from and go to
	__be16 port;
	__u16 spare;
	__u64 heard;   // last reception, CLOCK_MONOTONIC ns (either path writes it)
	union {
		__u64 sent;  // a client's: the first transmission since `heard` (later than
		             // `heard` while unanswered)
		__u64 route; // a direct relay's: the host's route verdict for the peer, kept
		             // (`route_stamp`)
	};
};

struct config {
	__be32 local[4]; // the IPv4 addresses the service socket receives on (0: unused)
	__be32 source;   // the encapsulation's source (0: the route's preferred source)
	__be16 port;     // the service port
	__u8 ttl;
	__u8 enabled;    // 0: every packet goes to userland
	__u8 prefix[4];  // the relay's Teredo prefix (its first 32 bits)
	__u8 l2;         // bytes before the IPv6 header at the Teredo interface (a TUN: 0)
	__u8 client;     // 1: a client's (`own` is its address, `tun` its interface)
	__u8 direct;     // 1: a relay forwards straight between interfaces, past the
	                 // host's IPv6 stack (`KernelForward direct`)
	__u8 single_path; // 1: no route of the host splits flows among next hops, so a
	                  // native destination's route verdict may be kept too
	__u32 tun;       // the Teredo interface's index: where a client's packets arrive;
	                 // a relay's, whose routes mark Teredo destinations (a direct
	                 // relay's) and whose egress encapsulates
	__u8 own[16];    // the client's Teredo address (zero while it has none)
	__u32 routes;    // the generation of the host's IPv6 routes: userland moves it on
	                 // every change of them (and at least every second), which voids
	                 // every verdict kept under an earlier one (0: keep none)
	__u32 slot_key[2]; // the destinations' slot hash's secret key (random at load)
	__u32 slot_mask;   // a CPU's destination slots less one (a power of two less one)
	__u32 routes4;     // the generation of the host's IPv4 routes, as `routes` is of the
	                   // IPv6 ones: a relay's verdicts on the routes to clients'
	                   // mappings (0: keep none)
};

enum counter {
	DECAP_FORWARDED,
	DECAP_BYTES,
	DECAP_UNKNOWN_PEER,
	DECAP_OTHER_MAPPING,
	DECAP_NOT_PLAIN,
	DECAP_DESTINATION,
	DECAP_HOP_LIMIT,
	ENCAP_FORWARDED,
	ENCAP_BYTES,
	ENCAP_UNKNOWN_PEER,
	ENCAP_STALE,
	ENCAP_NOT_PLAIN,
	ENCAP_SOURCE,
	ENCAP_NO_ROUTE,
	ENCAP_FAILED,
	ENCAP_SILENT,
	DECAP_DIRECT,
	ENCAP_DIRECT,
	DECAP_CHECKSUM_PENDING,
	COUNTERS,
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1024); // set by the loader from the relay's peer cap
	__type(key, struct in6_addr);
	__type(value, struct peer);
} peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

// A direct relay's route verdict for a native destination, kept as a client's is
// (`route_stamp`): the destination, where the host's route for it leaves, and by which
// next hop.
struct destination {
	__u64 stamp;
	__u64 addr[2];
	__u32 ifindex;
	struct bpf_redir_neigh nh;
};

// Each CPU's route verdicts for the native destinations its packets went to, a slot a
// destination by a keyed hash (two on one slot: the generation's first verdict stays,
// the other destination is looked up). Per CPU, because only one program runs at a
// time on a CPU: a verdict is never read half written by another core's update (an
// LRU map's freed entry is reused at once, with readers still on it), and no cache
// line moves between cores.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1); // set by the loader: a direct relay's slots (`slot_mask` + 1)
	__type(key, __u32);
	__type(value, struct destination);
} destinations SEC(".maps");

// A relay's route verdict for the IPv4 address of a client's mapping, kept as a
// destination's is (`route_stamp`, with no arriving interface: the encapsulation's
// look-up is always made as if from the Teredo interface): the address, the route's
// way out, next hop and preferred source.
struct mapping_route {
	__u64 stamp;
	__be32 addr;
	__be32 source;
	__u32 ifindex;
	struct bpf_redir_neigh nh;
};

// Each CPU's verdicts for the mappings its packets went to, a slot an address by the
// destinations' keyed hash, per CPU for the same reasons.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1); // set by the loader: a relay's slots (`slot_mask` + 1)
	__type(key, __u32);
	__type(value, struct mapping_route);
} mapping_routes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 which, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		*c += n;
}

// The destinations the relay's own rules let out of the tunnel without more thought:
// global unicast, not Teredo (ours or the standard prefix), and no tunnel format whose
// embedded IPv4 address userland must compare with its own (6to4, ISATAP). The rest
// goes up, where the relay decides.
static __always_inline int plain_destination(const struct in6_addr *a, const struct config *cfg)
{
	const __u8 *o = a->s6_addr;
	if ((o[0] & 0xe0) != 0x20) // only 2000::/3 (no ::, ::1, fc00::/7, fe80::/10, ff00::/8)
		return 0;
	if (o[0] == 0x20 && o[1] == 0x01 && o[2] == 0 && o[3] == 0)
		return 0;
	if (o[0] == cfg->prefix[0] && o[1] == cfg->prefix[1] && o[2] == cfg->prefix[2] && o[3] == cfg->prefix[3])
		return 0;
	if (o[0] == 0x20 && o[1] == 0x02)
		return 0;
	if ((o[8] & ~0x02) == 0 && o[9] == 0 && o[10] == 0x5e && o[11] == 0xfe)
		return 0;
	return 1;
}

// A source the relay may carry into the tunnel unchecked: none a loop check needs.
static __always_inline int plain_source(const struct in6_addr *a)
{
	const __u8 *o = a->s6_addr;
	if (o[0] == 0x20 && o[1] == 0x02)
		return 0;
	if ((o[8] & ~0x02) == 0 && o[9] == 0 && o[10] == 0x5e && o[11] == 0xfe)
		return 0;
	return 1;
}

static __always_inline int is_local(const struct config *cfg, __be32 a)
{
	return a && (a == cfg->local[0] || a == cfg->local[1] || a == cfg->local[2] || a == cfg->local[3]);
}

static __always_inline void heard(struct peer *p, const struct config *cfg)
{
	__u64 now = bpf_ktime_get_ns();
	// An answer to a client's unanswered packet is written at once: the grain would
	// leave the packet unanswered in the map's eyes, and the peer silent.
	if (now - p->heard > HEARD_GRAIN_NS || (cfg->client && p->sent > p->heard))
		p->heard = now;
}

static __always_inline __u16 ipv4_checksum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

// What a frame from the IPv4 side is to the decapsulation: not ours (not counted),
// ours but for userland (a counter says why), or a trusted client's plain packet to
// move (its peer's last-heard time is then updated).
#define MOVE COUNTERS

// `data` points at the Ethernet header, `end` at the end of what can be read directly,
// and the frame is `frame_len` bytes long (a socket buffer's may lie partly beyond
// `end`). Returns MOVE, a counter (left to userland) or -1 (not a Teredo datagram for
// us); `inner` gets the IPv6 packet's length.
// Whether `a` is the client's address `b` (never while it has none: `b` is then zero).
static __always_inline int same_address(const struct in6_addr *a, const __u8 *b)
{
	if (b[0] == 0)
		return 0; // no address (Teredo addresses begin 2001: or 3ffe:)
	const __u8 *o = a->s6_addr;
	int same = 1;
#pragma unroll
	for (int i = 0; i < 16; i++)
		same &= o[i] == b[i];
	return same;
}

// A peer the client watches for silence: native (under neither Teredo prefix, nor
// the client's own).
static __always_inline int native(const struct in6_addr *a, const struct config *cfg)
{
	const __u8 *o = a->s6_addr;
	if (o[0] == 0x20 && o[1] == 0x01 && o[2] == 0 && o[3] == 0)
		return 0;
	if (o[0] == 0x3f && o[1] == 0xfe && o[2] == 0x83 && o[3] == 0x1f)
		return 0;
	return !(o[0] == cfg->prefix[0] && o[1] == cfg->prefix[1] && o[2] == cfg->prefix[2] && o[3] == cfg->prefix[3]);
}

// A source the direct path may forward: global unicast (the host's forwarding would
// refuse a link-local one with an error, which only the stack sends).
static __always_inline int global_source(const struct in6_addr *a)
{
	return (a->s6_addr[0] & 0xe0) == 0x20;
}

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

// Whether the UDP checksum of `ip4`'s datagram `udp` is still to be taken
// (CHECKSUM_PARTIAL): a datagram a process on this host sent through a veth, a tap or a
// bridge, which pass it on so. Decapsulated, its checksum's start would point into the
// new Ethernet header, and whatever finishes the sum on the way out (the kernel in
// software, or a NIC) would write it over the frame's type. BPF can neither see nor
// clear that state; the checksum field tells it: a sum still to be taken holds the
// pseudo-header's sum alone (address translation on the way keeps it so). A finished
// checksum equals it by chance for about one flow and datagram size in 65,535 (the
// inner packet's own checksum makes them sum alike): those go to the socket too,
// slower, never wrong. A checksum of zero is none.
static __always_inline int checksum_pending(const struct iphdr *ip4, const struct udphdr *udp)
{
	__u32 sum = (bpf_ntohl(ip4->saddr) >> 16) + (bpf_ntohl(ip4->saddr) & 0xffff) +
		    (bpf_ntohl(ip4->daddr) >> 16) + (bpf_ntohl(ip4->daddr) & 0xffff) + IPPROTO_UDP +
		    bpf_ntohs(udp->len);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return udp->check && bpf_ntohs(udp->check) == sum;
}

// Makes the first `headers` bytes of the frame directly readable, or the whole frame
// if it is shorter (the payload may stay in the buffer's fragments).
static __always_inline void pull_headers(struct __sk_buff *skb, __u32 headers)
{
	if ((void *)(long)skb->data + headers > (void *)(long)skb->data_end)
		bpf_skb_pull_data(skb, skb->len < headers ? skb->len : headers);
}

static __always_inline int classify(void *data, void *end, __u32 frame_len, __u32 *inner, struct config **config_out)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	struct iphdr *ip4 = (void *)(eth + 1);
	if ((void *)(ip4 + 1) > end || ip4->ihl != 5 || ip4->version != 4 || ip4->protocol != IPPROTO_UDP)
		return -1;
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || !cfg->enabled || !is_local(cfg, ip4->daddr))
		return -1;
	*config_out = cfg;
	struct udphdr *udp = (void *)(ip4 + 1);
	if ((void *)(udp + 1) > end || udp->dest != cfg->port)
		return -1;

	// A Teredo datagram for us: from here on every outcome is counted. Its IPv4
	// header as the kernel's own receive would check it (the sum over it, its
	// checksum included, is all ones).
	struct ipv6hdr *ip6 = (void *)(udp + 1);
	if ((void *)(ip6 + 1) > end || ipv4_checksum(ip4) != 0)
		return DECAP_NOT_PLAIN;
	__u32 udp_len = bpf_ntohs(udp->len);
	*inner = bpf_ntohs(ip6->payload_len) + sizeof(struct ipv6hdr);
	// Whole and alone: no fragment, no origin indication or trailer, no bubble.
	if ((ip4->frag_off & bpf_htons(0x3fff)) || bpf_ntohs(ip4->tot_len) != sizeof(struct iphdr) + udp_len ||
	    ip6->version != 6 || udp_len != sizeof(struct udphdr) + *inner || ip6->payload_len == 0 ||
	    ETH_HLEN + OUTER_LEN + *inner > frame_len)
		return DECAP_NOT_PLAIN;
	if (cfg->client) {
		// The client takes only what is addressed to it; the host stack judges the
		// hop limit.
		if (!same_address(&ip6->daddr, cfg->own))
			return DECAP_DESTINATION;
	} else {
		if (ip6->hop_limit <= 1)
			return DECAP_HOP_LIMIT;
		if (!plain_destination(&ip6->daddr, cfg))
			return DECAP_DESTINATION;
	}
	struct peer *p = bpf_map_lookup_elem(&peers, &ip6->saddr);
	if (!p)
		return DECAP_UNKNOWN_PEER;
	if (p->ip != ip4->saddr || p->port != udp->source)
		return DECAP_OTHER_MAPPING;
	if (checksum_pending(ip4, udp))
		return DECAP_CHECKSUM_PENDING;
	heard(p, cfg);
	return MOVE;
}

// From a trusted client to the native IPv6 network, in the driver (XDP): the outer
// IPv4 and UDP headers go, the Ethernet header stays (its type becomes IPv6), and the
// kernel forwards the IPv6 packet as if it had arrived so.
SEC("xdp")
int teredo_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 inner = 0;
	struct config *cfg = 0;
	int what = classify(data, end, (__u32)(end - data), &inner, &cfg);
	// A client's packets go into its Teredo interface, which only tc can reach.
	if (what < 0 || !cfg || cfg->client)
		return XDP_PASS;
	if (what != MOVE) {
		count(what, 1);
		return XDP_PASS;
	}
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	unsigned char dst[ETH_ALEN], src[ETH_ALEN];
	__builtin_memcpy(dst, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(src, eth->h_source, ETH_ALEN);
	if (bpf_xdp_adjust_head(ctx, (int)OUTER_LEN)) {
		count(DECAP_NOT_PLAIN, 1);
		return XDP_PASS;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_DROP; // cannot happen: the packet only got shorter at its head
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	count(DECAP_FORWARDED, 1);
	count(DECAP_BYTES, inner);
	return XDP_PASS;
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
	__u64 h = ((__u64)cfg->slot_key[0] << 32) | cfg->slot_key[1];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		h = (h ^ a[i]) * 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	return (__u32)(h >> 32) & cfg->slot_mask;
}

// The slot of a mapping's IPv4 address `a` in a CPU's verdicts, by the same keyed hash.
static __always_inline __u32 mapping_slot(__u32 a, const struct config *cfg)
{
	__u64 h = ((__u64)cfg->slot_key[0] << 32) | cfg->slot_key[1];
	h = (h ^ a) * 0x9e3779b97f4a7c15ULL;
	h ^= h >> 29;
	return (__u32)(h >> 32) & cfg->slot_mask;
}

// Puts IPv4 and UDP headers, from the service socket's address and port to peer `p`'s
// mapping, on the IPv6 packet at `l2` (`len` bytes; `piece`: its largest piece if it is
// a train the kernel joined, to be cut again after with outer headers each, else
// `len`), and sends it by the IPv4 route, looked up as if it arrived on the Teredo
// interface `via`. `head6`, if given, is the packet's first 8 bytes with its hop limit
// taken down, written with the outer headers. Without that route, or over its MTU, the
// packet goes on untouched (TC_ACT_OK); `quiet`: a program further on counts what
// becomes of it.
static __always_inline int encapsulate(struct __sk_buff *skb, const struct config *cfg, struct peer *p, __u32 l2,
				       __u32 len, __u32 piece, __u64 now, const __u8 *head6, __u32 via, int quiet)
{
	__be32 to = p->ip;
	__be16 to_port = p->port;
	__u32 out_len = piece + OUTER_LEN;

	// A relay's verdict for the mapping, kept while the host's IPv4 routes stand
	// (generation `routes4`): the look-up's every input but the address is the same
	// for each packet (the Teredo interface, the service socket's address, no ports,
	// no mark), so its answer depends on the address and the routing alone (userland
	// keeps none while a route shares flows among next hops, whose choice also
	// follows the neighbours' state). Read before the look-up: a change during it
	// voids what it found.
	__u32 routes = *(volatile __u32 *)&cfg->routes4;
	struct mapping_route *m = 0;
	__u32 out;
	__be32 source;
	struct bpf_redir_neigh nh = {};
	if (routes && !cfg->client && via == cfg->tun) {
		__u32 slot = mapping_slot(to, cfg);
		m = bpf_map_lookup_elem(&mapping_routes, &slot);
		if (m && m->addr == to && stamp_holds(m->stamp, routes, 0, out_len)) {
			out = m->ifindex;
			source = m->source;
			nh = m->nh;
			goto routed;
		}
	}
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET;
	fib.ipv4_dst = to;
	fib.ipv4_src = cfg->source;
	// The route's MTU against the packet, or a train's largest piece, with its outer
	// headers.
	fib.tot_len = out_len;
	// Looked up as if the packet arrived on the Teredo interface (which is why the
	// loader turns IPv4 forwarding on for that interface alone): the route out, and
	// the route's preferred source when the service socket has no address of its own.
	fib.ifindex = via;
	__u32 flags = BPF_FIB_LOOKUP_SKIP_NEIGH | (cfg->source ? 0 : BPF_FIB_LOOKUP_SRC);
	long found = bpf_fib_lookup(skb, &fib, sizeof(fib), flags);
	if (found != BPF_FIB_LKUP_RET_SUCCESS) {
		if (!quiet)
			count(ENCAP_NO_ROUTE, 1);
		return TC_ACT_OK;
	}
	out = fib.ifindex;
	source = fib.ipv4_src;
	next_hop(&fib, &nh);
	// Kept by the generation's first verdict for the slot only, as a destination's,
	// with the route's MTU (which the kernel gives back in place of the length asked).
	if (m && m->stamp >> 32 != routes) {
		m->stamp = route_stamp(routes, 0, fib.mtu_result);
		m->addr = to;
		m->source = source;
		m->ifindex = out;
		m->nh = nh;
	}

routed:
	// A train's pieces keep their size: the outer headers go on top, as the service
	// socket would send each.
	// A refusal is counted wherever it happens: it is the kernel's, and rare.
	if (bpf_skb_adjust_room(skb, OUTER_LEN, BPF_ADJ_ROOM_MAC,
				BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_UDP | BPF_F_ADJ_ROOM_FIXED_GSO)) {
		count(ENCAP_FAILED, 1);
		return TC_ACT_OK;
	}
	struct {
		struct iphdr ip;
		struct udphdr udp;
		__u8 ip6[8]; // with `head6`: in one write with the outer headers
	} h = {};
	h.ip.version = 4;
	h.ip.ihl = 5;
	h.ip.tot_len = bpf_htons(len + OUTER_LEN);
	// Sent without Don't Fragment, as the service socket sends (RFC 4380 §5.1.1), so
	// the identification must vary.
	h.ip.id = (__be16)bpf_get_prandom_u32();
	h.ip.ttl = cfg->ttl;
	h.ip.protocol = IPPROTO_UDP;
	h.ip.saddr = cfg->source ? cfg->source : source;
	h.ip.daddr = to;
	h.ip.check = ipv4_checksum(&h.ip);
	h.udp.source = cfg->port;
	h.udp.dest = to_port;
	h.udp.len = bpf_htons(len + sizeof(struct udphdr));
	// No UDP checksum (RFC 768 allows it over IPv4): the IPv6 packet's own transport
	// checksum covers what it carries end to end.
	h.udp.check = 0;
	__u32 size = OUTER_LEN;
	if (head6) {
		__builtin_memcpy(h.ip6, head6, sizeof(h.ip6));
		size = sizeof(h);
	}
	// Written with the receive checksum kept right: a packet that arrived on an
	// interface may carry the sum its NIC took, which the next receiver trusts.
	if (bpf_skb_store_bytes(skb, l2, &h, size, BPF_F_RECOMPUTE_CSUM)) {
		count(ENCAP_FAILED, 1);
		return TC_ACT_SHOT; // headers half written: nothing sensible can go on
	}
	// A blank Ethernet header for the Teredo interface's packet (which has none): the
	// neighbour redirect takes it off before it resolves the next hop and puts the
	// real one on.
	if (!l2 && bpf_skb_change_head(skb, ETH_HLEN, 0)) {
		count(ENCAP_FAILED, 1);
		return TC_ACT_SHOT;
	}
	if (cfg->client && p->sent <= p->heard)
		p->sent = now;
	count(ENCAP_FORWARDED, 1);
	count(ENCAP_BYTES, len);
	return bpf_redirect_neigh(out, &nh, sizeof(nh), 0);
}

// A direct relay's way out for a client's IPv6 packet `ip6` of `len` bytes, arriving
// on the socket buffer's interface: 1 with `ifindex` and `nh` filled when the host's
// route for it leaves by an interface other than the Teredo one, within its MTU; 0
// when the stack is to handle it. While the host's routing depends on the destination
// alone and no route splits flows (userland says so), the verdict is kept per
// destination, as a client's is: the next packet to it takes a slot's read instead of
// the route look-up.
static __always_inline int route_out(struct __sk_buff *skb, const struct config *cfg, const struct ipv6hdr *ip6,
				     __u32 len, const void *end, __u32 *ifindex, struct bpf_redir_neigh *nh)
{
	// Read before the look-up: a change during it voids what it found.
	__u32 routes = *(volatile __u32 *)&cfg->routes;
	__u32 iif = skb->ingress_ifindex;
	struct destination *d = 0;
	union {
		__u64 d[2];
		__u32 w[4];
	} to;
	__builtin_memcpy(&to, &ip6->daddr, sizeof(to));
	if (routes && cfg->single_path && iif <= 0xffff) {
		__u32 slot = destination_slot(to.w, cfg);
		d = bpf_map_lookup_elem(&destinations, &slot);
		if (d && d->addr[0] == to.d[0] && d->addr[1] == to.d[1] && stamp_holds(d->stamp, routes, iif, len)) {
			*ifindex = d->ifindex;
			*nh = d->nh;
			return 1;
		}
	}
	struct bpf_fib_lookup fib = {};
	if (route6(skb, &fib, ip6, len, end) != BPF_FIB_LKUP_RET_SUCCESS || fib.ifindex == cfg->tun)
		return 0;
	*ifindex = fib.ifindex;
	next_hop(&fib, nh);
	// Kept by the generation's first verdict for the slot only, as a client's.
	if (d && d->stamp >> 32 != routes) {
		d->stamp = route_stamp(routes, iif, fib.mtu_result);
		d->addr[0] = to.d[0];
		d->addr[1] = to.d[1];
		d->ifindex = fib.ifindex;
		d->nh = *nh;
	}
	return 1;
}

// A native IPv6 packet arriving at a relay that forwards directly (`KernelForward
// direct`): for a trusted client heard from within 30 s, whose route is the Teredo
// interface, encapsulated here and sent out of the IPv4 route, as the host's forwarding
// and `teredo_encap` would have together. Anything else goes on to the host's stack.
static __always_inline int encap_at_ingress(struct __sk_buff *skb, const struct config *cfg)
{
	// A frame for another host, or one whose VLAN tag the NIC took off (the stack
	// hands it to its VLAN interface), is the stack's.
	if (skb->pkt_type != PACKET_HOST || skb->vlan_present)
		return TC_ACT_OK;
	pull_headers(skb, ETH_HLEN + sizeof(struct ipv6hdr) + 4); // and the ports, if any
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + ETH_HLEN;
	if ((void *)(ip6 + 1) > end || ip6->version != 6)
		return TC_ACT_OK;
	struct peer *p = bpf_map_lookup_elem(&peers, &ip6->daddr);
	if (!p)
		return TC_ACT_OK;
	// From here on, whatever goes on meets `teredo_encap` after the host's forwarding,
	// which counts it.
	__u64 now = bpf_ktime_get_ns();
	__u32 len = skb->len - ETH_HLEN;
	// Hop-by-hop options are the stack's to read (it may drop the packet, answer it,
	// or take it itself).
	if (now - p->heard >= VALIDITY_NS || len != sizeof(struct ipv6hdr) + bpf_ntohs(ip6->payload_len) ||
	    ip6->hop_limit <= 1 || ip6->nexthdr == 0 || !global_source(&ip6->saddr) || !plain_source(&ip6->saddr))
		return TC_ACT_OK;
	// The first 8 bytes as the host's forwarding sends them: the hop limit one less.
	__u8 head6[8];
	__builtin_memcpy(head6, ip6, sizeof(head6));
	head6[offsetof(struct ipv6hdr, hop_limit)] -= 1;
	// The host's route must be the Teredo interface, within its MTU (a train: each of
	// its pieces).
	__u32 piece = skb->gso_size ? train_piece(skb, ETH_HLEN, ip6->nexthdr) : len;
	if (!piece)
		return TC_ACT_OK;
	// The verdict kept for the peer while the host's routes stand; else looked up, and
	// kept when it sends the packet on. The generation is read before the look-up: a
	// change during it voids what it found.
	__u32 routes = *(volatile __u32 *)&cfg->routes;
	__u32 iif = skb->ingress_ifindex;
	int keep = routes && iif <= 0xffff;
	__u64 kept = p->route;
	if (!keep || !stamp_holds(kept, routes, iif, piece)) {
		struct bpf_fib_lookup fib = {};
		if (route6(skb, &fib, ip6, piece, end) != BPF_FIB_LKUP_RET_SUCCESS || fib.ifindex != cfg->tun)
			return TC_ACT_OK;
		// The route's MTU (where the kernel leaves none, the union still holds the
		// length asked for: a smaller bound, never a wrong one). Kept by the
		// generation's first verdict only: packets to one client arriving by turns on
		// two interfaces would otherwise rewrite its entry, from whichever core, at
		// every packet.
		if (keep && kept >> 32 != routes)
			p->route = route_stamp(routes, iif, fib.mtu_result);
	}
	int verdict = encapsulate(skb, cfg, p, ETH_HLEN, len, piece, now, head6, cfg->tun, 1);
	if (verdict == TC_ACT_REDIRECT)
		count(ENCAP_DIRECT, 1);
	return verdict;
}

// At tc ingress: the decapsulation where the driver has no XDP (or when told), and
// always a client's and a direct relay's; a direct relay's encapsulation of native
// packets too. On the socket buffer, after receive steering and GRO (a row GRO joined
// for the service socket goes up whole). The checksum state the NIC left is reset with
// the headers. A client's packet is handed to its Teredo interface's receive path, as if
// the TUN had delivered it: the host's firewall sees it arrive on that interface. A
// direct relay's leaves by its IPv6 route with its hop limit taken down, as the host's
// forwarding would send it; anything that route does not cover (another kind of route,
// too big, a frame not for this host) goes to the host's forwarding as on a relay that
// is not direct.
SEC("classifier")
int teredo_ingress(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		__u32 zero = 0;
		struct config *cfg = bpf_map_lookup_elem(&config, &zero);
		if (!cfg || !cfg->enabled || !cfg->direct || cfg->client)
			return TC_ACT_OK;
		return encap_at_ingress(skb, cfg);
	}
	pull_headers(skb, ETH_HLEN + OUTER_LEN + sizeof(struct ipv6hdr) + 4); // and the ports, if any
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u32 inner = 0;
	struct config *cfg = 0;
	int what = classify(data, end, skb->len, &inner, &cfg);
	if (what < 0 || !cfg)
		return TC_ACT_OK;
	if (what == MOVE && skb->gso_size)
		what = DECAP_NOT_PLAIN;
	if (what != MOVE) {
		count(what, 1);
		return TC_ACT_OK;
	}
	// A direct relay's route out, looked up before the headers change. The stack's,
	// as on a relay that is not direct: a frame for another host or with a VLAN tag
	// the NIC took off, bytes beyond the IPv6 packet (the stack trims them), hop-by-hop
	// options (the stack reads them), and a route into the Teredo interface (the
	// daemon's to judge: an ICMPv6 error, a client of this relay).
	__u32 out = 0;
	struct bpf_redir_neigh nh = {};
	int direct = 0;
	__u8 hop = 0;
	struct ipv6hdr *ip6 = data + ETH_HLEN + OUTER_LEN;
	if (cfg->direct && !cfg->client && skb->pkt_type == PACKET_HOST && !skb->vlan_present &&
	    skb->len == ETH_HLEN + OUTER_LEN + inner && (void *)(ip6 + 1) <= end && ip6->nexthdr != 0) {
		direct = route_out(skb, cfg, ip6, inner, end, &out, &nh);
		hop = ip6->hop_limit - 1; // above 1: classify leaves lower ones to the relay
	}
	if (bpf_skb_adjust_room(skb, -(int)OUTER_LEN, BPF_ADJ_ROOM_MAC, ADJ_ROOM_DECAP_L3_IPV6)) {
		count(DECAP_NOT_PLAIN, 1);
		return TC_ACT_OK;
	}
	count(DECAP_FORWARDED, 1);
	count(DECAP_BYTES, inner);
	// Redirected, the frame loses its Ethernet header (into the Teredo interface,
	// which has none, or to the neighbour output, which puts the next hop's on): only
	// what goes on to the host's stack needs its type right.
	if (cfg->client)
		return bpf_redirect(cfg->tun, BPF_F_INGRESS);
	if (!direct) {
		__be16 ipv6 = bpf_htons(ETH_P_IPV6);
		if (bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_proto), &ipv6, sizeof(ipv6), 0))
			return TC_ACT_SHOT; // headers half changed: nothing sensible can go on
		return TC_ACT_OK;
	}
	if (bpf_skb_store_bytes(skb, ETH_HLEN + offsetof(struct ipv6hdr, hop_limit), &hop, 1, BPF_F_RECOMPUTE_CSUM))
		return TC_ACT_SHOT;
	count(DECAP_DIRECT, 1);
	return bpf_redirect_neigh(out, &nh, sizeof(nh), 0);
}

// From the native IPv6 network to a trusted client that was heard from within 30 s
// (on a client: from the host to a trusted peer): the IPv6 packet, routed to the Teredo
// interface, gets IPv4 and UDP headers from the service socket's address and port to
// the peer's mapping, and leaves by the IPv4 route with the kernel's neighbour
// resolution.
SEC("classifier")
int teredo_encap(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_IPV6))
		return TC_ACT_OK;
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || !cfg->enabled)
		return TC_ACT_OK;
	__u32 l2 = cfg->l2 ? ETH_HLEN : 0;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + l2;
	if ((void *)(ip6 + 1) > end || ip6->version != 6)
		return TC_ACT_OK;
	struct peer *p = bpf_map_lookup_elem(&peers, &ip6->daddr);
	if (!p) {
		count(ENCAP_UNKNOWN_PEER, 1);
		return TC_ACT_OK;
	}
	__u64 now = bpf_ktime_get_ns();
	if (now - p->heard >= VALIDITY_NS) {
		count(ENCAP_STALE, 1);
		return TC_ACT_OK;
	}
	__u32 len = skb->len - l2;
	if (len != sizeof(struct ipv6hdr) + bpf_ntohs(ip6->payload_len)) {
		count(ENCAP_NOT_PLAIN, 1);
		return TC_ACT_OK;
	}
	if (cfg->client ? !same_address(&ip6->saddr, cfg->own) : !plain_source(&ip6->saddr)) {
		count(ENCAP_SOURCE, 1);
		return TC_ACT_OK;
	}
	if (cfg->client && native(&ip6->daddr, cfg)) {
		// Unanswered for a second: userland tests the peer's relay again.
		if (p->sent > p->heard && now - p->sent >= SILENCE_NS) {
			count(ENCAP_SILENT, 1);
			return TC_ACT_OK;
		}
	}
	// A train's pieces: the host checked them against the Teredo interface's MTU; the
	// route out checks them with their outer headers (one whose pieces cannot be told
	// is the daemon's).
	__u32 piece = skb->gso_size ? train_piece(skb, l2, ip6->nexthdr) : len;
	if (!piece) {
		count(ENCAP_NOT_PLAIN, 1);
		return TC_ACT_OK;
	}
	return encapsulate(skb, cfg, p, l2, len, piece, now, 0, skb->ifindex, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
