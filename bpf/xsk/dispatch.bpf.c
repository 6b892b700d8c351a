// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* Function dispatch for the AF_XDP invoker: a UDP datagram (IPv4 or IPv6) to
 * a registered port goes to one of its function's AF_XDP sockets on the RX
 * queue it arrived on, round robin or by flow hash. Everything else (ARP,
 * ND, other ports, malformed frames) is passed to the kernel. The first
 * fragment of a datagram to a function's port is counted and dropped: a
 * request larger than one frame is not served, and not lost silently either.
 * Functions and workers change at run time through the maps, without
 * reloading.
 */
#include <linux/bpf.h>
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/dispatch_kern_user.h"
#include "peregrine/xsk_redirect.h"

PEREGRINE_MAP(BPF_MAP_TYPE_XSKMAP, DISPATCH_MAX_SLOTS, __u32, __u32) xsks SEC(".maps");

/* UDP destination port (network order) -> function id. */
PEREGRINE_MAP(BPF_MAP_TYPE_HASH, 4096, __u16, __u32) ports SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, DISPATCH_MAX_FUNCS, __u32, struct dispatch_func)
	funcs SEC(".maps");

/* Round-robin position per CPU and function. */
PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, DISPATCH_MAX_FUNCS, __u32, __u32) rr SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, DISPATCH_MAX_FUNCS, __u32, struct dispatch_stats)
	dispatch_stats_map SEC(".maps");

struct dispatch_func dispatch_func_anchor;
struct dispatch_stats dispatch_stats_anchor;
enum dispatch_limits dispatch_limits_anchor;
enum dispatch_policy dispatch_policy_anchor;

/* The function id of `port` with its counters, or -1 when no function has it. */
static __always_inline int lookup_function(__u16 port, __u32 *fid, struct dispatch_func **f,
					   struct dispatch_stats **st)
{
	__u32 *id = bpf_map_lookup_elem(&ports, &port);
	if (!id)
		return -1;
	*fid = *id;
	*f = bpf_map_lookup_elem(&funcs, fid);
	*st = bpf_map_lookup_elem(&dispatch_stats_map, fid);
	if (!*f || !*st)
		return -1;
	return 0;
}

SEC("xdp")
int dispatch(struct xdp_md *ctx)
{
	struct cursor c = xdp_cursor(ctx);
	__u64 len = c.end - c.pos;
	struct ip_hdr l3;
	struct udphdr *udp;
	__u32 flow;

	/* Tagged frames belong to the VLAN's device; later fragments carry no
	 * port (the kernel's). */
	int found = find_udp(&c, &l3, &udp);
	if (found == UDP_NONE)
		return XDP_PASS;
	if (l3.family == 4) {
		flow = l3.v4->saddr;
	} else {
		struct in6_addr *a = &l3.v6->saddr;
		flow = a->in6_u.u6_addr32[0] ^ a->in6_u.u6_addr32[1] ^ a->in6_u.u6_addr32[2] ^
		       a->in6_u.u6_addr32[3];
	}
	struct dispatch_func *f;
	struct dispatch_stats *st;
	__u32 fid;
	if (lookup_function(udp->dest, &fid, &f, &st) < 0)
		return XDP_PASS;
	if (found == UDP_FIRST_FRAGMENT) {
		/* A request larger than one frame: counted, dropped. */
		st->fragments++;
		return XDP_DROP;
	}
	__u32 socks = f->socks;
	if (socks == 0 || socks > DISPATCH_MAX_SOCKS) {
		st->disabled++;
		return XDP_PASS;
	}
	__u32 queue = ctx->rx_queue_index;
	if (queue >= DISPATCH_MAX_QUEUES)
		queue = 0;

	__u32 w;
	if (f->policy == DISPATCH_FLOW_HASH) {
		__u32 h = (flow ^ ((__u32)udp->source << 16)) * 0x9e3779b1;
		w = (h >> 16) % socks;
	} else {
		__u32 *pos = bpf_map_lookup_elem(&rr, &fid);
		if (!pos)
			return XDP_PASS;
		w = *pos % socks;
		*pos = w + 1;
	}
	__u32 slot = (fid * DISPATCH_MAX_QUEUES + queue) * DISPATCH_MAX_SOCKS + w;
	return xsk_redirect_counted(&xsks, slot, len, &st->packets, &st->bytes, &st->no_socket);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
