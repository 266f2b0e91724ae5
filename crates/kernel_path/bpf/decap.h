// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The decapsulation: what a frame from the IPv4 side is (`classify`), and the XDP
// program that takes a trusted client's plain packet out of its tunnel.

#ifndef SHIPWORM_DECAP_H
#define SHIPWORM_DECAP_H

// What a frame from the IPv4 side is to the decapsulation: not ours (not counted),
// ours but for userland (a counter says why), or a trusted client's plain packet to
// move (its peer's last-heard time is then updated).
#define MOVE COUNTERS

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

// `data` points at the Ethernet header, `end` at the end of what can be read directly,
// and the frame is `frame_len` bytes long (a socket buffer's may lie partly beyond
// `end`). Returns MOVE, a counter (left to userland) or -1 (not a Teredo datagram for
// us); `inner` gets the IPv6 packet's length.
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
	if ((void *)(udp + 1) > end || udp->dest != frozen.port)
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
	if (frozen.client) {
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

// The ones' complement sum (unfolded, in memory order) of the `len` bytes at offset
// `off` of frame `ctx`, or -1 where they are not all in it (or are more than 1,536):
// copied 256 bytes at a time into a buffer (the last piece into a zeroed one) and
// summed there. bpf_csum_diff's sizes must be known to the verifier: summing in place
// took a chunk for each power of two, whose combinations the verifier explored one by
// one (tens of milliseconds at each load), and a chunk read in place at a variable
// offset is one it cannot bound.
static __always_inline __s64 sum_bytes(struct xdp_md *ctx, __u32 off, __u32 len)
{
	__u8 buf[256];
	__u64 sum = 0;
	if (len > 1536)
		return -1;
	for (int i = 0; i < 6 && len >= sizeof(buf); i++) {
		if (bpf_xdp_load_bytes(ctx, off, buf, sizeof(buf)))
			return -1;
		sum += (__u32)bpf_csum_diff(0, 0, (void *)buf, sizeof(buf), 0);
		off += sizeof(buf);
		len -= sizeof(buf);
	}
	__builtin_memset(buf, 0, sizeof(buf));
	len &= sizeof(buf) - 1;
	if (len >= 1 && bpf_xdp_load_bytes(ctx, off, buf, len))
		return -1;
	sum += (__u32)bpf_csum_diff(0, 0, (void *)buf, sizeof(buf), 0);
	sum = (sum & 0xffffffff) + (sum >> 32);
	return (__u32)((sum & 0xffffffff) + (sum >> 32));
}

// Whether IPv6 packet `ip6` (in frame `ctx`, before `end`) carries a TCP, UDP or
// ICMPv6 message right after its header whose own checksum holds, summing all of it.
static __always_inline int inner_sum_holds(struct xdp_md *ctx, struct ipv6hdr *ip6, void *end)
{
	__u32 addresses = 0;
	__u16 check = 0;
	if (!transport_sums(ip6, end, &addresses, &check))
		return 0;
	__u32 at = (__u32)((void *)(ip6 + 1) - (void *)(long)ctx->data);
	__s64 body = sum_bytes(ctx, at, bpf_ntohs(ip6->payload_len));
	if (body < 0)
		return 0;
	return fold(fold((__u32)body) + pseudo6_sum(ip6, addresses)) == 0xffff;
}

// Whether datagram `udp` of `ip4`, around IPv6 packet `ip6`, has a UDP checksum that
// holds exactly when the inner packet's own does: when the datagram's sum, with the
// transport part's taken as the complement of its pseudo-header's (what a finished
// inner sum makes it), comes out right. A few additions over the headers; a sender
// that derives its outer sum from the inner one (shipworm's encapsulation) or sums the
// whole datagram (a socket) passes it when the inner sum holds.
static __always_inline int outer_sum_vouches(struct iphdr *ip4, struct udphdr *udp, struct ipv6hdr *ip6, void *end)
{
	__u32 addresses = 0;
	__u16 check = 0;
	if (!udp->check || !transport_sums(ip6, end, &addresses, &check))
		return 0;
	__u32 sum = datagram_head_sum(ip4, udp) + addresses + head_words(ip6) + (__u16)~pseudo6_sum(ip6, addresses);
	return fold(sum) == 0xffff;
}

// Whether a client may take `data`'s trusted datagram out of its tunnel here, in the
// driver, marking it for tc ingress (`frozen.decapsulated`); otherwise tc ingress
// decapsulates it alone, as on a driver without XDP. Here, before GRO, the inner TCP
// segments of a flow are joined into one packet for the host's TCP, where a datagram
// taken out at tc ingress (after GRO) goes up alone. GRO, and the host after it, may
// trust the driver's "checksum verified", which was said of the datagram, for the
// inner packet: so the program takes only a datagram for which that verdict would
// mean the inner sum holds (`outer_sum_vouches`: a zero sum, which a driver may call
// verified, vouches for nothing), or whose inner sum it checked itself; anything else
// (an inner sum that does not hold, or is still to be taken) goes to tc ingress, which
// leaves the host to check it.
static __always_inline int client_takes(struct xdp_md *ctx, void *data, void *end)
{
	struct iphdr *ip4 = data + ETH_HLEN;
	struct udphdr *udp = (void *)(ip4 + 1);
	struct ipv6hdr *ip6 = (void *)(udp + 1);
	if ((void *)(ip6 + 1) > end)
		return 0;
	return outer_sum_vouches(ip4, udp, ip6, end) || inner_sum_holds(ctx, ip6, end);
}

// From a trusted client to the native IPv6 network, in the driver (XDP): the outer
// IPv4 and UDP headers go, the Ethernet header stays (its type becomes IPv6), and the
// kernel forwards the IPv6 packet as if it had arrived so. On a client, from a trusted
// peer to the client: the same, its Ethernet source the mark for tc ingress to hand it
// on to the Teredo interface (`client_takes`); what it leaves, tc ingress judges and
// counts.
SEC("xdp")
int teredo_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 inner = 0;
	struct config *cfg = 0;
	int what = classify(data, end, (__u32)(end - data), &inner, &cfg);
	if (what < 0 || !cfg)
		return XDP_PASS;
	if (frozen.client && (what != MOVE || !client_takes(ctx, data, end)))
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
	if (frozen.client) {
		// Read as volatile, each byte: a plain copy would take the object's zeros.
		for (int i = 0; i < ETH_ALEN; i++)
			eth->h_source[i] = frozen.decapsulated[i];
	} else {
		__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	}
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	count(DECAP_FORWARDED, 1);
	count(DECAP_BYTES, inner);
	return XDP_PASS;
}

#endif // SHIPWORM_DECAP_H
