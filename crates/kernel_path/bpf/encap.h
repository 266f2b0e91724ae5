// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The encapsulation: a trusted peer's IPv6 packet into its tunnel (`encapsulate`), a
// direct relay's way out, and the tc egress program of the Teredo interface.

#ifndef SHIPWORM_ENCAP_H
#define SHIPWORM_ENCAP_H

// Puts IPv4 and UDP headers, from the service socket's address and port to peer `p`'s
// mapping, on the IPv6 packet at `l2` (`len` bytes; `piece`: its largest piece if it is
// a train the kernel joined, to be cut again after with outer headers each, else
// `len`), and sends it by the IPv4 route, looked up as if it arrived on the Teredo
// interface `via`. `head6`, if given, is the packet's first 8 bytes with its hop limit
// taken down, written with the outer headers. Without that route, or over its MTU, the
// packet goes on untouched (TC_ACT_OK); `quiet`: a program further on counts what
// becomes of it.
// The ones' complement sum an outer UDP checksum takes of the IPv6 packet at `l2`
// (unfolded, in memory order), got without reading its payload: its header's (the
// first 8 bytes as `head6` has them, if given), plus its transport part's, which a
// finished TCP, UDP or ICMPv6 checksum makes the complement of the pseudo-header's
// (the kernel's own tunnels' "local checksum offload"). 0 where that cannot be told:
// a train (each piece's sum is taken later), another next header, a UDP packet
// without a sum (`transport_sums`), and a sum still to be taken (the field then holds
// the pseudo-header's sum alone, as a sender on this host leaves it for the NIC; a
// finished sum equals it for about one packet in 65,535, which then goes without an
// outer sum).
static __always_inline __u32 inner_sum(struct __sk_buff *skb, __u32 l2, const __u8 *head6)
{
	if (skb->gso_size)
		return 0;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip6 = data + l2;
	__u32 addresses = 0;
	__u16 check = 0;
	if (!transport_sums(ip6, end, &addresses, &check))
		return 0;
	__u16 pseudo = pseudo6_sum(ip6, addresses);
	// A train's pseudo sum has no length.
	if (check == pseudo || check == fold(addresses + bpf_htons(ip6->nexthdr)))
		return 0;
	return addresses + head_words(head6 ? (const void *)head6 : (const void *)ip6) + (__u16)~pseudo;
}

// The outer UDP checksum of `ip`'s datagram `udp` (its checksum field still zero)
// around a packet of inner sum `inner` (`inner_sum`; 0: none, which RFC 768 allows
// over IPv4).
static __always_inline __u16 outer_udp_check(__u32 inner, const struct iphdr *ip, const struct udphdr *udp)
{
	if (!inner)
		return 0;
	__u16 check = ~fold(inner + datagram_head_sum(ip, udp));
	return check ? check : 0xffff; // a sum of zero is sent as all ones
}

static __always_inline int encapsulate(struct __sk_buff *skb, const struct config *cfg, struct peer *p, __u32 l2,
				       __u32 len, __u32 piece, __u64 now, const __u8 *head6, __u32 via, int quiet)
{
	// Taken before the headers move.
	__u32 inner = inner_sum(skb, l2, head6);
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
	if (routes && !frozen.client && via == frozen.tun) {
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
	fib.ipv4_src = frozen.source;
	// The route's MTU against the packet, or a train's largest piece, with its outer
	// headers.
	fib.tot_len = out_len;
	// Looked up as if the packet arrived on the Teredo interface (which is why the
	// loader turns IPv4 forwarding on for that interface alone): the route out, and
	// the route's preferred source when the service socket has no address of its own.
	fib.ifindex = via;
	__u32 flags = BPF_FIB_LOOKUP_SKIP_NEIGH | (frozen.source ? 0 : BPF_FIB_LOOKUP_SRC);
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
	h.ip.ttl = frozen.ttl;
	h.ip.protocol = IPPROTO_UDP;
	h.ip.saddr = frozen.source ? frozen.source : source;
	h.ip.daddr = to;
	h.ip.check = ipv4_checksum(&h.ip);
	h.udp.source = frozen.port;
	h.udp.dest = to_port;
	h.udp.len = bpf_htons(len + sizeof(struct udphdr));
	// A UDP checksum where the inner packet's own makes it cheap: a receiver that
	// trusts its NIC's verdict on the datagram may then trust it for the packet inside
	// (a client's XDP decapsulation takes only such datagrams, ahead of GRO); none
	// otherwise (RFC 768 allows it over IPv4), the inner packet's own checksum still
	// covering what it carries.
	h.udp.check = outer_udp_check(inner, &h.ip, &h.udp);
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
	if (frozen.client && p->sent <= p->heard)
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
	if (route6(skb, &fib, ip6, len, end) != BPF_FIB_LKUP_RET_SUCCESS || fib.ifindex == frozen.tun)
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
// direct`): for a trusted client heard from within its validity, whose route is the Teredo
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
	if (now - p->heard >= frozen.validity_ns || len != sizeof(struct ipv6hdr) + bpf_ntohs(ip6->payload_len) ||
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
		if (route6(skb, &fib, ip6, piece, end) != BPF_FIB_LKUP_RET_SUCCESS || fib.ifindex != frozen.tun)
			return TC_ACT_OK;
		// The route's MTU (where the kernel leaves none, the union still holds the
		// length asked for: a smaller bound, never a wrong one). Kept by the
		// generation's first verdict only: packets to one client arriving by turns on
		// two interfaces would otherwise rewrite its entry, from whichever core, at
		// every packet.
		if (keep && kept >> 32 != routes)
			p->route = route_stamp(routes, iif, fib.mtu_result);
	}
	int verdict = encapsulate(skb, cfg, p, ETH_HLEN, len, piece, now, head6, frozen.tun, 1);
	if (verdict == TC_ACT_REDIRECT)
		count(ENCAP_DIRECT, 1);
	return verdict;
}

// From the native IPv6 network to a trusted client that was heard from within its validity
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
	if (now - p->heard >= frozen.validity_ns) {
		count(ENCAP_STALE, 1);
		return TC_ACT_OK;
	}
	__u32 len = skb->len - l2;
	if (len != sizeof(struct ipv6hdr) + bpf_ntohs(ip6->payload_len)) {
		count(ENCAP_NOT_PLAIN, 1);
		return TC_ACT_OK;
	}
	if (frozen.client ? !same_address(&ip6->saddr, cfg->own) : !plain_source(&ip6->saddr)) {
		count(ENCAP_SOURCE, 1);
		return TC_ACT_OK;
	}
	if (frozen.client && native(&ip6->daddr, cfg)) {
		// Unanswered for a second: userland tests the peer's relay again.
		if (p->sent > p->heard && now - p->sent >= frozen.silence_ns) {
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

#endif // SHIPWORM_ENCAP_H
