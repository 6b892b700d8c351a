// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* Receiver-side counting sink.
 *
 * Counts every frame and, separately, the frames that carry the generator's
 * magic right after a UDP header (IPv4 or IPv6, optionally one 802.1Q tag), so
 * that kernel chatter on the link (ND, MLD) never counts as delivered traffic.
 * The verdict for generator frames is fixed at load time: XDP_DROP for a
 * drop sink, XDP_PASS when a socket sink behind it must see them. Every other
 * frame is passed, so ARP, ND and management traffic keep working.
 */
#include <linux/bpf.h>
#include "peregrine/parse.h"
#include "peregrine/gen_kern_user.h"
#include "peregrine/sink_kern_user.h"

const volatile __u32 sink_verdict = XDP_DROP;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_stats);
} sink_stats_map SEC(".maps");

struct sink_stats sink_stats_type_anchor;

#define VLAN_HLEN 4

/* 1: carries the magic; 0: well-formed but not ours; -1: cut short. */
static __always_inline int classify(struct cursor *c)
{
	struct ethhdr *eth = cursor_take(c, sizeof(*eth));
	if (!eth)
		return -1;
	__u16 proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		__u16 *tag = cursor_take(c, VLAN_HLEN);
		if (!tag)
			return -1;
		proto = tag[1];
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cursor_take(c, sizeof(*ip));
		if (!ip)
			return -1;
		if (ip->version != 4 || ip->ihl < 5)
			return 0;
		if (ip->ihl > 5 && !cursor_take(c, (ip->ihl - 5) * 4))
			return -1;
		/* The datagram the header announces must be all there. */
		if ((void *)ip + bpf_ntohs(ip->tot_len) > c->end)
			return -1;
		if (ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x1fff)))
			return 0;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cursor_take(c, sizeof(*ip6));
		if (!ip6)
			return -1;
		if (ip6->version != 6 || ip6->nexthdr != IPPROTO_UDP)
			return 0;
		if ((void *)(ip6 + 1) + bpf_ntohs(ip6->payload_len) > c->end)
			return -1;
	} else {
		return 0;
	}

	struct udphdr *udp = cursor_take(c, sizeof(*udp));
	if (!udp)
		return -1;
	__u32 *magic = cursor_take(c, sizeof(*magic));
	if (!magic)
		return 0; /* a UDP datagram too small for the magic is not ours */
	return *magic == PEREGRINE_MAGIC;
}

SEC("xdp")
int sink(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct sink_stats *st = bpf_map_lookup_elem(&sink_stats_map, &zero);
	if (!st)
		return XDP_ABORTED;

	struct cursor c = {
		.pos = (void *)(long)ctx->data,
		.end = (void *)(long)ctx->data_end,
	};
	__u64 len = c.end - c.pos;
	st->packets++;
	st->bytes += len;

	int kind = classify(&c);
	if (kind > 0) {
		st->gen_packets++;
		st->gen_bytes += len;
		return sink_verdict;
	}
	if (kind < 0)
		st->malformed++;
	/* Not test traffic: ARP, ND and the rest go on to the kernel, so the
	 * link keeps working while the sink drops what the generator sends. */
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
