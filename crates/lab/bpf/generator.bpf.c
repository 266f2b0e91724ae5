// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The lab's traffic generator: run by the kernel's test run in live-frame mode on the
// sending host's interface, over and over, on a frame userland gave. Each run either
// sends the frame (XDP_TX), its headers first made those of the stream whose turn it
// is, or, ahead of its pace, drops it unsent (the run goes on; userland ends it with a
// signal). The pace is kept here because a test run cannot sleep, and starting one
// per batch costs an RCU grace period (milliseconds) in the kernel's teardown.
//
// Layouts shared with crates/lab/src/live_frames.rs: change both together.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// Bytes of headers a stream may differ in: Ethernet, IPv4, UDP, IPv6 and UDP (a
// Teredo datagram's), or fewer (a native one's: Ethernet, IPv6, UDP).
#define TEREDO_HEADERS 90
#define NATIVE_HEADERS 62
#define STREAMS 64
// Lateness the pace makes up for: the sinks on the same core take it from the run for
// up to a millisecond or two at times. Made up at the generator's full speed, which the
// receiving core partly drains as it comes: at the rates the relays carry here, within
// the receive queue it fills (netdev_max_backlog, 1,000 by default).
#define CATCH_UP_NS (2000ULL * 1000)

struct pace {
	__u64 next_ns;     // when the next burst may leave (CLOCK_MONOTONIC)
	__u64 gap_ns;      // between two frames
	__u64 end_ns;      // nothing leaves from then on (0: set at the first frame)
	__u64 dur_ns;      // the run's length, from its first frame
	__u64 sent;        // frames sent
	__u64 seq;         // frames sent, numbering the streams' turns
	__u64 restarts;    // times the pace started again, late by more than CATCH_UP_NS
	__u64 late_ns;     // the most a burst was late
	__u32 burst;       // frames a burst
	__u32 left;        // frames left of the current burst
	__u32 streams;     // streams taking turns (1 to STREAMS)
	__u32 run;         // frames a stream's turn
	__u32 headers;     // TEREDO_HEADERS or NATIVE_HEADERS
	__u32 spare;
};

struct headers {
	__u8 bytes[TEREDO_HEADERS];
	__u8 spare[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pace);
} pace SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STREAMS);
	__type(key, __u32);
	__type(value, struct headers);
} streams SEC(".maps");

SEC("xdp")
int generate(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct pace *p = bpf_map_lookup_elem(&pace, &zero);
	if (!p || !p->streams || !p->run)
		return XDP_ABORTED;
	__u64 now = bpf_ktime_get_ns();
	// The pace starts with the run's first frame: setting a run up takes the kernel
	// milliseconds at times.
	if (!p->end_ns) {
		p->next_ns = now;
		p->end_ns = now + p->dur_ns;
	}
	if (now >= p->end_ns)
		return XDP_DROP;
	if (!p->left) {
		if (now < p->next_ns)
			return XDP_DROP;
		// A burst late by less than CATCH_UP_NS leaves at once (the sender catches
		// up, as after the scheduler gave the core to another thread a moment);
		// later than that, the pace starts again from now, what was missed unsent.
		// Catching up after the core was gone for milliseconds would send that
		// backlog at the generator's full speed, which no sender of the rate asked
		// for does (and overflows the relay host's receive queue).
		__u64 span = p->burst * p->gap_ns;
		if (now - p->next_ns > p->late_ns)
			p->late_ns = now - p->next_ns;
		if (now > p->next_ns + CATCH_UP_NS) {
			p->next_ns = now + span;
			p->restarts++;
		} else {
			p->next_ns += span;
		}
		p->left = p->burst;
	}
	__u32 stream = (__u32)((p->seq / p->run) % p->streams);
	struct headers *h = bpf_map_lookup_elem(&streams, &stream);
	if (!h)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (p->headers == TEREDO_HEADERS) {
		if (data + TEREDO_HEADERS > end)
			return XDP_ABORTED;
		__builtin_memcpy(data, h->bytes, TEREDO_HEADERS);
	} else {
		if (data + NATIVE_HEADERS > end)
			return XDP_ABORTED;
		__builtin_memcpy(data, h->bytes, NATIVE_HEADERS);
	}
	p->left--;
	p->seq++;
	p->sent++;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
