/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* What the kernel knows about the network namespace a frame arrived in,
 * read through BTF (CO-RE: the offsets are the running kernel's, fixed by
 * libbpf at load time). Only the fields named here are declared; the
 * `___peregrine` suffix keeps them apart from the kernel's own types. */
#ifndef PEREGRINE_NETNS_H
#define PEREGRINE_NETNS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct netns_ipv4___peregrine {
	struct {
		int counter;
	} rt_genid;
} __attribute__((preserve_access_index));

struct net___peregrine {
	struct netns_ipv4___peregrine ipv4;
} __attribute__((preserve_access_index));

struct net_device___peregrine {
	struct {
		struct net___peregrine *net;
	} nd_net;
} __attribute__((preserve_access_index));

struct xdp_rxq_info___peregrine {
	struct net_device___peregrine *dev;
} __attribute__((preserve_access_index));

struct xdp_buff___peregrine {
	struct xdp_rxq_info___peregrine *rxq;
} __attribute__((preserve_access_index));

struct sk_buff___peregrine {
	struct net_device___peregrine *dev;
} __attribute__((preserve_access_index));

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

/* The IPv4 route generation of the frame's namespace (net->ipv4.rt_genid).
 * The kernel bumps it whenever what an IPv4 route lookup answers may have
 * changed: an address added or removed, a route added, a device going
 * down, a rule changed (rt_cache_flush); its own cached routes are checked
 * against it. The one change it misses is the removal of a route no
 * kernel lookup ever used (fib_table_delete flushes only accessed ones). */
static __always_inline __u32 hook_route_genid(void *ctx, const int tc)
{
	struct net_device___peregrine *dev;
	if (tc) {
		struct sk_buff___peregrine *skb = bpf_cast_to_kern_ctx(ctx);
		dev = skb->dev;
	} else {
		struct xdp_buff___peregrine *xdp = bpf_cast_to_kern_ctx(ctx);
		dev = xdp->rxq->dev;
	}
	return dev->nd_net.net->ipv4.rt_genid.counter;
}

#endif
