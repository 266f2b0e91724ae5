// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The tc ingress program: the decapsulation where XDP cannot do it, a client's, and a
// direct relay's both ways.

#ifndef SHIPWORM_INGRESS_H
#define SHIPWORM_INGRESS_H

// Whether a client's XDP decapsulation took `skb` out of its tunnel: its Ethernet
// source is the mark.
static __always_inline int decapsulated_here(struct __sk_buff *skb)
{
	struct ethhdr *eth = (void *)(long)skb->data;
	if ((void *)(eth + 1) > (void *)(long)skb->data_end)
		return 0;
	const volatile __u8 *mark = frozen.decapsulated;
	int same = 1;
	for (int i = 0; i < ETH_ALEN; i++)
		same &= eth->h_source[i] == mark[i];
	return same;
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
// is not direct. A client's packet its XDP decapsulation marked (GRO may have joined it
// with its flow's next ones since) goes on to the Teredo interface as it is.
SEC("classifier")
int teredo_ingress(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (frozen.client)
			return decapsulated_here(skb) ? bpf_redirect(frozen.tun, BPF_F_INGRESS) : TC_ACT_OK;
		__u32 zero = 0;
		struct config *cfg = bpf_map_lookup_elem(&config, &zero);
		if (!cfg || !cfg->enabled || !frozen.direct || frozen.client)
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
	if (frozen.direct && !frozen.client && skb->pkt_type == PACKET_HOST && !skb->vlan_present &&
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
	if (frozen.client)
		return bpf_redirect(frozen.tun, BPF_F_INGRESS);
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

#endif // SHIPWORM_INGRESS_H
