// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* Receiver-side counting sink.
 *
 * Counts every frame and, separately, the frames that carry the generator's
 * magic right after a UDP header (IPv4 or IPv6, untagged, 802.1Q or QinQ), so
 * that kernel chatter on the link (ND, MLD) never counts as delivered traffic.
 * Those frames count as delivered only with valid checksums (IPv4 header;
 * UDP full, or the partial pseudo-header value a local sender leaves at
 * default offloads); others are counted bad_checksum and dropped.
 * The verdict for generator frames is fixed at load time: XDP_DROP for a
 * drop sink, XDP_PASS when a socket sink behind it must see them. Every other
 * frame is passed, so ARP, ND and management traffic keep working.
 */
#include <linux/bpf.h>
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/csum.h"
#include "peregrine/gen_kern_user.h"
#include "peregrine/sink_kern_user.h"

COUNTS_FRAMES(struct sink_stats);

const volatile __u32 sink_verdict = XDP_DROP;

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct sink_stats) sink_stats_map SEC(".maps");

struct sink_stats sink_stats_type_anchor;

/* The IPv4 header checksum and the UDP checksum of a whole datagram: full,
 * or exactly the folded pseudo-header sum of a CHECKSUM_PARTIAL frame (what
 * a kernel sender at default veth offloads leaves), or zero on IPv4 (no
 * checksum); the rule of wire's parse_udp_frame. */
static __always_inline int checksums_ok(struct xdp_md *ctx, const struct ip_hdr *l3,
					struct udphdr *udp, void *end)
{
	__u64 pseudo = 0;
	__u16 ulen = bpf_ntohs(udp->len);

	if (l3->family == 4) {
		struct iphdr *ip = l3->v4;
		__u16 *w = (void *)ip;
		__u64 hs = 0;
		/* Up to 15 words of header, options included. */
		for (int i = 0; i < 30; i++) {
			if (i >= ip->ihl * 2 || (void *)(w + i + 1) > end)
				break;
			hs += w[i];
		}
		if (csum_fold(hs) != 0xffff)
			return 0;
		if (udp->check == 0)
			return 1;
		pseudo = csum_word32(ip->saddr) + csum_word32(ip->daddr);
	} else {
		struct ipv6hdr *ip6 = l3->v6;
		if (udp->check == 0)
			return 0; /* RFC 8200 8.1: never "none" on IPv6 */
#pragma unroll
		for (int i = 0; i < 4; i++)
			pseudo += csum_word32(ip6->saddr.in6_u.u6_addr32[i]) +
				  csum_word32(ip6->daddr.in6_u.u6_addr32[i]);
	}
	pseudo += bpf_htons(IPPROTO_UDP) + udp->len;
	if (udp->check == csum_fold(pseudo))
		return 1;
	__s64 data = sum_bytes(ctx, (void *)udp - (void *)(long)ctx->data, ulen);
	return data >= 0 && csum_fold(pseudo + data) == 0xffff;
}

/* 1: carries the magic; 0: well-formed but not ours; -1: cut short;
 * -2: carries the magic, checksum wrong. */
static __always_inline int classify(struct xdp_md *ctx, struct cursor *c)
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
	/* The UDP length must agree with the IP header's. */
	__u32 ip_payload = l3.family == 4 ? bpf_ntohs(l3.v4->tot_len) - l3.v4->ihl * 4
					  : bpf_ntohs(l3.v6->payload_len);
	if (bpf_ntohs(udp->len) < sizeof(*udp) || bpf_ntohs(udp->len) > ip_payload)
		return -1;
	/* The magic must be the datagram's: a UDP length that leaves no room
	 * for it says the bytes after the header are not its payload (the IP
	 * payload's rest, padding), whatever they spell. */
	if (bpf_ntohs(udp->len) < sizeof(*udp) + sizeof(__u32))
		return 0;
	__u32 *magic = cursor_take(c, sizeof(*magic));
	if (!magic)
		return 0; /* a UDP datagram too small for the magic is not ours */
	if (*magic != PEREGRINE_MAGIC)
		return 0;
	return checksums_ok(ctx, &l3, udp, c->end) ? 1 : -2;
}

SEC("xdp")
int sink(struct xdp_md *ctx)
{
	struct cursor c = xdp_cursor(ctx);
	__u64 len = c.end - c.pos;
	struct sink_stats *st = count_frame(&sink_stats_map, len);
	if (!st)
		return XDP_ABORTED;

	int kind = classify(ctx, &c);
	if (kind > 0) {
		st->gen_packets++;
		st->gen_bytes += len;
		return sink_verdict;
	}
	if (kind == -2) {
		/* Corrupted test traffic: not delivered, and not the kernel's. */
		st->bad_checksum++;
		return XDP_DROP;
	}
	if (kind < 0)
		st->malformed++;
	/* Not test traffic: ARP, ND and the rest go on to the kernel, so the
	 * link keeps working while the sink drops what the generator sends. */
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
