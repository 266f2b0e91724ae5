// SPDX-License-Identifier: MIT OR Apache-2.0
//
// What every program shares: the maps and their layouts (`crates/kernel_path/src/maps.rs`
// holds the same; a test checks each field's offset against this object's BTF), and
// the small judgements of addresses and peers. Every time and prefix the programs
// judge by comes from the state machines through the configuration map (`struct
// config`), written once at load.

#ifndef SHIPWORM_SHARED_H
#define SHIPWORM_SHARED_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <stddef.h>

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

// What never changes once the programs are loaded: the loader writes it into the
// object's read-only data, which it freezes (BPF_MAP_FREEZE) before any program runs,
// so that no one, the daemon included, can change it after (a subverted daemon
// rewriting the encapsulation's source, or the interface decapsulated packets go
// into, would have the kernel spoof or redirect for it).
struct frozen {
	__be32 source;   // the encapsulation's source (0: the route's preferred source)
	__be16 port;     // the service port
	__u8 ttl;
	__u8 client;     // 1: a client's (`own` is its address, `tun` its interface)
	__u8 prefix[4];  // the relay's Teredo prefix (its first 32 bits)
	__u8 direct;     // 1: a relay forwards straight between interfaces, past the
	                 // host's IPv6 stack (`KernelForward direct`)
	__u8 spare[3];
	__u32 tun;       // the Teredo interface's index: where a client's packets arrive;
	                 // a relay's, whose routes mark Teredo destinations (a direct
	                 // relay's) and whose egress encapsulates
	__u32 slot_key[2]; // the destinations' slot hash's secret key (random at load)
	__u32 slot_mask;   // a CPU's destination slots less one (a power of two less one)
	// The state machines' own figures (`Contract`), never written here:
	__u64 validity_ns;    // a peer is valid while heard from within it (RFC 4380 §5.2.4)
	__u64 heard_grain_ns; // a peer's last-heard time is written at most this often (a
	                      // write a packet would move the map's line between cores)
	__u64 silence_ns;     // a client's native peer sent to this long without a word
	                      // back is tested again by userland: its packets go up
	__u8 teredo[2][4];    // the Teredo prefixes (RFC 4380's, and the experimental one)
	__u8 decapsulated[6]; // a client's: the Ethernet source its XDP decapsulation
	                      // writes on a packet, for tc ingress to hand that packet,
	                      // joined by GRO with its flow's next ones, to the Teredo
	                      // interface (random at load, a unicast, locally administered
	                      // address: a frame from the wire would have to guess it, and
	                      // no frame that carries it leaves the host)
	__u8 spare2[2];
};

const volatile struct frozen frozen = {};

// What the daemon changes while the programs run (the `config` map).
struct config {
	__be32 local[4]; // the IPv4 addresses the service socket receives on (0: unused)
	__u8 own[16];    // the client's Teredo address (zero while it has none)
	__u32 routes;    // the generation of the host's IPv6 routes: userland moves it on
	                 // every change of them (and at least every second), which voids
	                 // every verdict kept under an earlier one (0: keep none)
	__u32 routes4;   // the generation of the host's IPv4 routes, as `routes` is of the
	                 // IPv6 ones: a relay's verdicts on the routes to clients'
	                 // mappings (0: keep none)
	__u8 enabled;    // 0: every packet goes to userland
	__u8 l2;         // bytes before the IPv6 header at the Teredo interface (a TUN: 0;
	                 // an Ethernet header in a test run)
	__u8 single_path; // 1: no route of the host splits flows among next hops, so a
	                  // native destination's route verdict may be kept too
	__u8 spare;
};

// The counters, in the order of src/counter_list.rs, which build.rs writes out.
#include "counters.h"

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

// Whether address bytes `o` lie under the 32-bit prefix `p`.
static __always_inline int under(const __u8 *o, const volatile __u8 *p)
{
	return o[0] == p[0] && o[1] == p[1] && o[2] == p[2] && o[3] == p[3];
}

// Whether `o` is a Teredo address: under either Teredo prefix, or the role's own.
static __always_inline int teredo(const __u8 *o, const struct config *cfg)
{
	return under(o, frozen.teredo[0]) || under(o, frozen.teredo[1]) || under(o, frozen.prefix);
}

// The destinations the relay's own rules let out of the tunnel without more thought:
// global unicast, not Teredo (ours or either Teredo prefix), and no tunnel format whose
// embedded IPv4 address userland must compare with its own (6to4, ISATAP). The rest
// goes up, where the relay decides.
static __always_inline int plain_destination(const struct in6_addr *a, const struct config *cfg)
{
	const __u8 *o = a->s6_addr;
	if ((o[0] & 0xe0) != 0x20) // only 2000::/3 (no ::, ::1, fc00::/7, fe80::/10, ff00::/8)
		return 0;
	if (teredo(o, cfg))
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
	if (now - p->heard > frozen.heard_grain_ns || (frozen.client && p->sent > p->heard))
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

// Folds a ones' complement sum to 16 bits.
static __always_inline __u16 fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)((sum & 0xffff) + (sum >> 16));
}

// What IPv6 packet `ip6`'s header gives of its sums (in memory order), for a TCP, UDP or
// ICMPv6 message right after that header: `*addresses`, the sum of both addresses'
// 16-bit words, unfolded; `*check`, the transport checksum field. 0 for another next
// header, or a UDP message without a sum or whose length is not the payload's (its sum
// would not cover what follows it).
static __always_inline int transport_sums(struct ipv6hdr *ip6, void *end, __u32 *addresses, __u16 *check)
{
	if ((void *)(ip6 + 1) > end)
		return 0;
	__u8 nh = ip6->nexthdr;
	__u32 at;
	if (nh == IPPROTO_TCP) {
		at = offsetof(struct tcphdr, check);
	} else if (nh == IPPROTO_UDP) {
		struct udphdr *u = (void *)(ip6 + 1);
		if ((void *)(u + 1) > end || !u->check || u->len != ip6->payload_len)
			return 0;
		at = offsetof(struct udphdr, check);
	} else if (nh == IPPROTO_ICMPV6) {
		at = 2; // RFC 4443 §2.1
	} else {
		return 0;
	}
	__u16 *field = (void *)(ip6 + 1) + at;
	if ((void *)(field + 1) > end)
		return 0;
	*check = *field;
	const __u16 *w = (const __u16 *)&ip6->saddr; // both addresses: 16 words
	__u32 sum = 0;
	for (int i = 0; i < 16; i++)
		sum += w[i];
	*addresses = sum;
	return 1;
}

// The sum (unfolded, in memory order) of `ip`'s datagram `udp` but its payload: the
// pseudo-header's and the UDP header's words, the checksum field as it stands.
static __always_inline __u32 datagram_head_sum(const struct iphdr *ip, const struct udphdr *udp)
{
	return (ip->saddr & 0xffff) + (ip->saddr >> 16) + (ip->daddr & 0xffff) + (ip->daddr >> 16) +
	       bpf_htons(IPPROTO_UDP) + udp->len + udp->source + udp->dest + udp->len + udp->check;
}

// The transport pseudo-header's sum of IPv6 packet `ip6` (whose addresses' words sum to
// `addresses`), folded: its next header right after its fixed header.
static __always_inline __u16 pseudo6_sum(const struct ipv6hdr *ip6, __u32 addresses)
{
	return fold(addresses + ip6->payload_len + bpf_htons(ip6->nexthdr));
}

// The 16-bit words of IPv6 header `h`'s first 8 bytes, summed.
static __always_inline __u32 head_words(const void *h)
{
	const __u16 *w = h;
	return (__u32)w[0] + w[1] + w[2] + w[3];
}

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
	return !teredo(a->s6_addr, cfg);
}

// A source the direct path may forward: global unicast (the host's forwarding would
// refuse a link-local one with an error, which only the stack sends).
static __always_inline int global_source(const struct in6_addr *a)
{
	return (a->s6_addr[0] & 0xe0) == 0x20;
}

#endif // SHIPWORM_SHARED_H
