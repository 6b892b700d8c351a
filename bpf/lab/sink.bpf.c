// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* Receiver-side counting sink.
 *
 * Counts every frame and, separately, the frames that carry the generator's
 * magic right after a UDP header (IPv4 or IPv6, untagged, 802.1Q or QinQ), so
 * that kernel chatter on the link (ND, MLD) never counts as delivered traffic.
 * The verdict for generator frames is fixed at load time: XDP_DROP for a
 * drop sink, XDP_PASS when a socket sink behind it must see them. Every other
 * frame is passed, so ARP, ND and management traffic keep working.
 */
#include <linux/bpf.h>
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/gen_kern_user.h"
#include "peregrine/sink_kern_user.h"

const volatile __u32 sink_verdict = XDP_DROP;

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct sink_stats) sink_stats_map SEC(".maps");

struct sink_stats sink_stats_type_anchor;

/* 1: carries the magic; 0: well-formed but not ours; -1: cut short. */
static __always_inline int classify(struct cursor *c)
{
	struct ethhdr *eth;
	struct ip_hdr l3;
	int vlans;

	int eth_proto = parse_eth(c, &eth, &vlans);
	if (eth_proto < 0)
		return -1;
	int proto = parse_ip(c, eth_proto, &l3);
	if (proto == PARSE_CUT)
		return -1;
	if (proto < 0)
		return 0; /* not IP, or not valid IP */
	/* The datagram the header announces must be all there. */
	if (ip_cut_short(&l3, c))
		return -1;
	if (ip_is_fragment(&l3) || proto != IPPROTO_UDP)
		return 0;

	struct udphdr *udp = parse_udp(c);
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
	struct sink_stats *st = map_first(&sink_stats_map);
	if (!st)
		return XDP_ABORTED;

	struct cursor c = xdp_cursor(ctx);
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
