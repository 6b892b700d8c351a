// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* Steering for peregrine's UDP/IP stack (crates/stack): a UDP datagram to a
 * bound (address, port) goes to the AF_XDP socket of the RX queue it arrived
 * on; everything else (ARP, ND, ICMP, TCP, other ports, VLAN-tagged frames,
 * malformed or cut-short frames) is passed to the kernel untouched, so the
 * host stays reachable and keeps answering ARP and ND.
 *
 * What is looked at: Ethernet (untagged), IPv4 with or without options,
 * IPv6 whose next header is UDP, or a fragment header followed by UDP.
 * Other IPv6 extension headers (hop-by-hop, routing, destination options)
 * are not walked: such datagrams go to the kernel. QUIC senders do not use
 * them, and the stack's user-space parser (peregrine_wire) does not take
 * them either. Checksums are verified in user space (which also accepts
 * the partial checksum of local senders), not here.
 */
#include <linux/bpf.h>
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/stack_kern_user.h"

/* RX queue index -> the stack's AF_XDP socket on that queue. */
PEREGRINE_MAP(BPF_MAP_TYPE_XSKMAP, STACK_MAX_QUEUES, __u32, __u32) stack_xsks SEC(".maps");

/* Bound (address, port) -> 1. */
PEREGRINE_MAP(BPF_MAP_TYPE_HASH, STACK_MAX_BINDINGS, struct stack_bind_key, __u32)
	stack_bindings SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct stack_steer_stats)
	stack_steer_stats_map SEC(".maps");

struct stack_steer_stats stack_steer_stats_anchor;
enum stack_limits stack_limits_anchor;

/* IPv6 fragment header (RFC 8200 4.5). */
struct stack_frag6 {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset in 8-byte units << 3, M flag in bit 0 */
	__be32 identification;
};

#define STACK_FRAG6_OFFSET 0xfff8

/* The destination address of `l3` in a bind key (IPv4 mapped). */
static __always_inline void key_addr(struct stack_bind_key *k, const struct ip_hdr *l3)
{
	if (l3->family == 4) {
		__u32 *w = (__u32 *)k->addr;
		w[0] = 0;
		w[1] = 0;
		w[2] = bpf_htonl(0xffff);
		w[3] = l3->v4->daddr;
	} else {
		__builtin_memcpy(k->addr, &l3->v6->daddr, 16);
	}
}

/* Whether (destination address, `port`) is bound: exactly, or the port on
 * the unspecified address of the family. */
static __always_inline int bound(const struct ip_hdr *l3, __be16 port)
{
	struct stack_bind_key k = { .port = port };

	key_addr(&k, l3);
	if (bpf_map_lookup_elem(&stack_bindings, &k))
		return 1;
	__u32 *w = (__u32 *)k.addr;
	w[3] = 0;
	if (l3->family == 6) {
		w[0] = 0;
		w[1] = 0;
		w[2] = 0;
	}
	return bpf_map_lookup_elem(&stack_bindings, &k) != NULL;
}

/* A first fragment whose UDP header is in this frame: dropped and counted
 * when it is for a binding, passed otherwise. */
static __always_inline int first_fragment(struct cursor *c, const struct ip_hdr *l3,
					  struct stack_steer_stats *st)
{
	struct udphdr *udp = parse_udp(c);

	if (!udp || !bound(l3, udp->dest))
		return XDP_PASS;
	st->fragments++;
	return XDP_DROP;
}

SEC("xdp")
int stack_steer(struct xdp_md *ctx)
{
	struct cursor c = xdp_cursor(ctx);
	__u64 len = c.end - c.pos;
	struct stack_steer_stats *st = map_first(&stack_steer_stats_map);
	struct ethhdr *eth;
	struct ip_hdr l3;
	int vlans;
	int proto;

	if (!st)
		return XDP_PASS;
	/* Tagged frames belong to the VLAN's device. */
	int eth_proto = parse_eth(&c, &eth, &vlans);
	if (eth_proto < 0 || vlans)
		return XDP_PASS;
	proto = parse_ip(&c, eth_proto, &l3);
	if (proto < 0 || ip_cut_short(&l3, &c))
		return XDP_PASS;
	if (ip_is_fragment(&l3)) {
		if (proto == IPPROTO_UDP && !(l3.v4->frag_off & bpf_htons(IP_OFFSET)))
			return first_fragment(&c, &l3, st);
		return XDP_PASS; /* a later fragment: no port to tell whose */
	}
	if (l3.family == 6 && proto == IPPROTO_FRAGMENT) {
		struct stack_frag6 *fh = cursor_take(&c, sizeof(*fh));
		if (fh && fh->nexthdr == IPPROTO_UDP && !(fh->frag_off & bpf_htons(STACK_FRAG6_OFFSET)))
			return first_fragment(&c, &l3, st);
		return XDP_PASS;
	}
	if (proto != IPPROTO_UDP)
		return XDP_PASS;
	struct udphdr *udp = parse_udp(&c);
	if (!udp || !bound(&l3, udp->dest))
		return XDP_PASS;
	int act = bpf_redirect_map(&stack_xsks, ctx->rx_queue_index, XDP_PASS);
	if (act == XDP_REDIRECT) {
		st->redirected++;
		st->bytes += len;
	} else {
		st->no_socket++;
	}
	return act;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
