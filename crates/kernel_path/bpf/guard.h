// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The Teredo interface's guard: what the daemon writes into its TUN (its ingress, as the
// host sees it) must be IPv6. IPv4 forwarding is on for that interface (the
// encapsulation's route look-up is made as if a packet arrived there, and the kernel
// refuses the look-up where forwarding is off), so an IPv4 packet a subverted daemon
// wrote there would be forwarded by the host, from any source it chose: it is dropped
// here, and counted.

#ifndef SHIPWORM_GUARD_H
#define SHIPWORM_GUARD_H

SEC("classifier")
int teredo_guard(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return TC_ACT_OK;
	count(GUARD_NOT_IPV6, 1);
	return TC_ACT_SHOT;
}

#endif // SHIPWORM_GUARD_H
