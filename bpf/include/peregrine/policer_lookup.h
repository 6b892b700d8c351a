/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The policer's rule lookup (tuple-space search, policer_kern_user.h),
 * shared by the policer (policer.bpf.c) and the HTB classifier
 * (classify.bpf.c). The including program defines the two maps it reads,
 * `policer_masks` (array of struct policer_mask, POLICER_MAX_MASKS) and
 * `policer_rules` (hash of struct policer_key -> struct policer_rule), before
 * including this header: the classifier's are the policer's own maps,
 * shared by fd when it is loaded. */
#ifndef PEREGRINE_POLICER_LOOKUP_H
#define PEREGRINE_POLICER_LOOKUP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "peregrine/parse.h"
#include "peregrine/policer_kern_user.h"

/* The rule of mask slot `i` that `pkt` matches, if it beats `best`. */
static __always_inline struct policer_rule *try_mask(__u32 i, const struct policer_key *pkt,
						     struct policer_rule *best)
{
	struct policer_mask *m = bpf_map_lookup_elem(&policer_masks, &i);
	if (!m || !m->used)
		return best;
	struct policer_key k;
	const __u32 *p = (const __u32 *)pkt, *b = (const __u32 *)&m->bits;
	__u32 *o = (__u32 *)&k;
#pragma unroll
	for (int w = 0; w < sizeof(k) / 4; w++)
		o[w] = p[w] & b[w];
	k.mask_id = i;
	struct policer_rule *r = bpf_map_lookup_elem(&policer_rules, &k);
	if (r && (!best || r->priority < best->priority))
		return r;
	return best;
}

/* The best rule (lowest priority) whose mask and key match `pkt`: one
 * try_mask per slot, spelled out (slot numbers are constants, so the
 * verifier walks straight-line code instead of a loop whose counter it
 * loses track of on the stack). */
static __always_inline struct policer_rule *lookup(const struct policer_key *pkt)
{
	struct policer_rule *best = NULL;

#define POLICER_TRY4(base)                                                     \
	best = try_mask((base) + 0, pkt, best);                                \
	best = try_mask((base) + 1, pkt, best);                                \
	best = try_mask((base) + 2, pkt, best);                                \
	best = try_mask((base) + 3, pkt, best);
	POLICER_TRY4(0)
	POLICER_TRY4(4)
	POLICER_TRY4(8)
	POLICER_TRY4(12)
#undef POLICER_TRY4
	_Static_assert(POLICER_MAX_MASKS == 16, "lookup() tries 16 mask slots");
	return best;
}

/* Fills `key` from a parsed IP packet: family, protocol (`l4`), DSCP,
 * addresses, and the ports unless it is a later fragment. `c` stands at
 * the transport header (after parse_ip) and moves past the ports. 1 when
 * the ports were read. */
static __always_inline int policer_key_of(struct policer_key *key, const struct ip_hdr *l3, int l4,
					  struct cursor *c)
{
	key->family = l3->family;
	key->proto = l4;
	if (l3->family == 4) {
		struct iphdr *ip = l3->v4;
		key->dscp = ip->tos >> 2;
		__builtin_memcpy(key->src, &ip->saddr, 4);
		__builtin_memcpy(key->dst, &ip->daddr, 4);
	} else {
		struct ipv6hdr *ip6 = l3->v6;
		key->dscp = (ip6->priority << 2) | (ip6->flow_lbl[0] >> 6);
		__builtin_memcpy(key->src, &ip6->saddr, 16);
		__builtin_memcpy(key->dst, &ip6->daddr, 16);
	}
	struct l4_ports *ports = parse_ports(c, l3, l4);
	if (!ports)
		return 0;
	key->sport = ports->source;
	key->dport = ports->dest;
	return 1;
}

/* A frame parsed as far as its rule key (policer_parse). */
struct policer_pkt {
	struct policer_key key;
	struct ip_hdr l3;
	struct cursor at_l4; /* at the transport header */
	int ports; /* policer_key_of read the ports */
};

/* Parses the frame at `c` into `p`: Ethernet (VLAN tags skipped), IPv4
 * or IPv6, then policer_key_of. The L4 protocol (>= 0), PARSE_NOT_IP, or
 * another negative PARSE_* for a malformed frame. */
static __always_inline int policer_parse(struct cursor *c, struct policer_pkt *p)
{
	struct ethhdr *eth;
	int vlans;
	int proto = parse_eth(c, &eth, &vlans);
	if (proto < 0)
		return proto;
	int l4 = parse_ip(c, proto, &p->l3);
	if (l4 < 0)
		return l4;
	p->at_l4 = *c;
	p->ports = policer_key_of(&p->key, &p->l3, l4, c);
	return l4;
}

#endif
