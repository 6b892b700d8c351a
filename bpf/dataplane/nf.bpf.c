// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* A network function for a container in a service chain: counts every frame,
 * optionally filters it with ACL rules, and sends the rest on: back out of
 * the interface it came in on (XDP_TX, the source's "reflect"), or to another
 * interface of the container ("forward"). Configured in rodata at load time.
 * UDP and TCP checksums a local sender left partial (default veth offloads)
 * are completed before the frame leaves (csum.h).
 */
#include <linux/bpf.h>
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/csum.h"
#include "peregrine/nf_kern_user.h"

COUNTS_FRAMES(struct nf_stats);

const volatile struct nf_config cfg = {};

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct nf_stats) nf_stats_map SEC(".maps");

struct nf_stats nf_stats_anchor;
enum acl_verdict acl_verdict_anchor;
enum nf_limits nf_limits_anchor;

static __always_inline int prefix_match(const volatile __u8 *want, const __u8 *got, __u32 bits)
{
	for (int i = 0; i < 16; i++) {
		if (bits == 0)
			return 1;
		__u8 mask = bits >= 8 ? 0xff : (__u8)(0xff << (8 - bits));
		if ((want[i] ^ got[i]) & mask)
			return 0;
		bits = bits >= 8 ? bits - 8 : 0;
	}
	return 1;
}

/* ACL_PASS or ACL_DROP for a parsed IP frame. */
static __always_inline int acl(__u8 family, __u8 proto, __u16 dport, const __u8 *src, const __u8 *dst)
{
	for (int i = 0; i < NF_MAX_RULES; i++) {
		if (i >= cfg.rules)
			break;
		const volatile struct acl_rule *r = &cfg.acl[i];
		if (r->family && r->family != family)
			continue;
		if (r->proto && r->proto != proto)
			continue;
		if (r->port && r->port != dport)
			continue;
		if (r->prefixlen && !prefix_match(r->addr, r->match_src ? src : dst, r->prefixlen))
			continue;
		return r->verdict;
	}
	return ACL_PASS;
}

SEC("xdp")
int nf(struct xdp_md *ctx)
{
	struct cursor c = xdp_cursor(ctx);
	struct nf_stats *st = count_frame(&nf_stats_map, c.end - c.pos);
	if (!st)
		return XDP_ABORTED;

	struct ethhdr *eth;
	struct ip_hdr l3;
	int vlans;
	/* Tagged frames are judged by what they carry: a tag must not carry
	 * traffic past the rules. Only the headers are judged, so a datagram
	 * cut short after them is judged like a whole one. */
	int eth_proto = parse_eth(&c, &eth, &vlans);
	int proto = parse_ip(&c, eth_proto, &l3);
	struct cursor l4 = c;

	if (cfg.rules && proto >= 0) {
		__u8 src[16] = {}, dst[16] = {};
		__u16 dport = 0;
		__u8 family = l3.family;
		if (family == 4) {
			__builtin_memcpy(src, &l3.v4->saddr, 4);
			__builtin_memcpy(dst, &l3.v4->daddr, 4);
		} else {
			__builtin_memcpy(src, &l3.v6->saddr, 16);
			__builtin_memcpy(dst, &l3.v6->daddr, 16);
		}
		st->ip++;
		struct l4_ports *ports = parse_ports(&c, &l3, proto);
		if (ports)
			dport = ports->dest;
		if (acl(family, proto, dport, src, dst) == ACL_DROP) {
			st->dropped++;
			return XDP_DROP;
		}
	}

	/* What a local sender left with a partial checksum would reach the
	 * next host invalid once sent on from here: complete it. */
	if (proto >= 0 && !ip_cut_short(&l3, &l4) && !ip_is_fragment(&l3) &&
	    finish_partial_csum(ctx, &l3, proto, &l4) > 0)
		st->csum_completed++;

	st->sent++;
	if (cfg.out_ifindex)
		return bpf_redirect(cfg.out_ifindex, 0);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
