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
#include "peregrine/xsk_redirect.h"

/* RX queue index -> the stack's AF_XDP socket on that queue. */
PEREGRINE_MAP(BPF_MAP_TYPE_XSKMAP, STACK_MAX_QUEUES, __u32, __u32) stack_xsks SEC(".maps");

/* Bound (address, port) -> 1. */
PEREGRINE_MAP(BPF_MAP_TYPE_HASH, STACK_MAX_BINDINGS, struct stack_bind_key, __u32)
	stack_bindings SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct stack_steer_stats)
	stack_steer_stats_map SEC(".maps");

struct stack_steer_stats stack_steer_stats_anchor;
enum stack_limits stack_limits_anchor;

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

SEC("xdp")
int stack_steer(struct xdp_md *ctx)
{
	struct cursor c = xdp_cursor(ctx);
	__u64 len = c.end - c.pos;
	struct stack_steer_stats *st = map_first(&stack_steer_stats_map);
	struct ip_hdr l3;
	struct udphdr *udp;

	if (!st)
		return XDP_PASS;
	int found = find_udp(&c, &l3, &udp);
	if (found == UDP_NONE || !bound(&l3, udp->dest))
		return XDP_PASS;
	if (found == UDP_FIRST_FRAGMENT) {
		/* The stack does not reassemble (QUIC sets DF): counted. */
		st->fragments++;
		return XDP_DROP;
	}
	return xsk_redirect_counted(&stack_xsks, ctx->rx_queue_index, len, &st->redirected,
				    &st->bytes, &st->no_socket);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
