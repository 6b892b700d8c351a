/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Checksums over a whole XDP frame's bytes: summing a datagram (the sink
 * checks UDP checksums with it) and completing the partial checksum a
 * local sender at default veth offloads leaves (CHECKSUM_PARTIAL: only the
 * pseudo-header sum is in the field, the device was to finish it). An XDP
 * program that sends such a frame on (XDP_TX, a redirect) drops the skb's
 * checksum state with it, so the receiver would see a wrong checksum;
 * completing it here keeps the frame valid. */
#ifndef PEREGRINE_CSUM_H
#define PEREGRINE_CSUM_H

#include <linux/bpf.h>
#include "peregrine/parse.h"

#ifndef IPPROTO_TCP
#define IPPROTO_TCP 6
#endif

/* Longest UDP datagram summed: a 9000-byte MTU's, in csum_diff blocks. */
#define SUM_BLOCK 256
#define SUM_MAX_BLOCKS 36

/* Ones'-complement sum (memory order, see parse.h) of the `len` bytes at
 * offset `off` of the frame. Copied out block by block with
 * bpf_xdp_load_bytes and summed with bpf_csum_diff: scalar offsets keep
 * the verifier's work linear (packet pointers walked in a loop made it
 * explore every length). Returns -1 if the bytes are not all there. */
static __always_inline __s64 sum_bytes(struct xdp_md *ctx, __u32 off, __u32 len)
{
	/* A block, and room to round the last piece up to whole words. */
	__u8 buf[SUM_BLOCK + 4];
	__u64 sum = 0;

	for (int i = 0; i < SUM_MAX_BLOCKS; i++) {
		if (len < SUM_BLOCK)
			break;
		if (bpf_xdp_load_bytes(ctx, off, buf, SUM_BLOCK))
			return -1;
		sum += (__u32)bpf_csum_diff(0, 0, (__be32 *)buf, SUM_BLOCK, 0);
		off += SUM_BLOCK;
		len -= SUM_BLOCK;
	}
	if (len >= SUM_BLOCK)
		return -1; /* longer than any frame summed */
	/* Masked behind a barrier: the compiler knows len < SUM_BLOCK and would
	 * drop the mask, leaving the verifier a copy of len without bounds. */
	__u32 rest = len & (SUM_BLOCK - 1);
	asm volatile("" : "+r"(rest));
	rest &= SUM_BLOCK - 1;
	if (rest) {
		/* The rest, zero-padded to whole words: an odd last byte is the
		 * first byte of a word padded with zero, as the checksum wants. */
		__builtin_memset(buf, 0, sizeof(buf));
		if (bpf_xdp_load_bytes(ctx, off, buf, rest))
			return -1;
		__u32 words = (rest + 3) & ~3u;
		sum += (__u32)bpf_csum_diff(0, 0, (__be32 *)buf, words, 0);
	}
	return sum;
}

/* The L4 checksum field's offset in a UDP or a TCP header. */
#define UDP_CHECK_AT 6
#define TCP_CHECK_AT 16

/* If the UDP or TCP datagram after `l3` (whole in the frame, not a
 * fragment; `l4` the cursor at its header) carries exactly the partial
 * pseudo-header checksum, writes the full one: 1 done, 0 nothing to do
 * (another protocol, a full or no checksum), -1 the bytes are not there.
 * A full checksum that happens to equal the partial value is rewritten to
 * itself (the sum with the field zeroed gives the same value back). */
static __always_inline int finish_partial_csum(struct xdp_md *ctx, const struct ip_hdr *l3, int proto,
						struct cursor *l4)
{
	__u32 at = proto == IPPROTO_UDP ? UDP_CHECK_AT : TCP_CHECK_AT;
	__u64 pseudo = 0;
	__u32 seg;

	if (proto != IPPROTO_UDP && proto != IPPROTO_TCP)
		return 0;
	__u16 *check = (void *)l4->pos + at;
	if ((void *)(check + 1) > l4->end)
		return -1;
	if (l3->family == 4) {
		struct iphdr *ip = l3->v4;
		seg = bpf_ntohs(ip->tot_len) - ip->ihl * 4;
		pseudo = csum_word32(ip->saddr) + csum_word32(ip->daddr);
	} else {
		struct ipv6hdr *ip6 = l3->v6;
		seg = bpf_ntohs(ip6->payload_len);
#pragma unroll
		for (int i = 0; i < 4; i++)
			pseudo += csum_word32(ip6->saddr.in6_u.u6_addr32[i]) +
				  csum_word32(ip6->daddr.in6_u.u6_addr32[i]);
	}
	pseudo += bpf_htons(proto) + bpf_htons((__u16)seg);
	__u16 partial = csum_fold(pseudo);
	if (*check != partial || (proto == IPPROTO_UDP && *check == 0))
		return 0;
	__s64 data = sum_bytes(ctx, (void *)l4->pos - (void *)(long)ctx->data, seg);
	if (data < 0)
		return -1;
	/* The segment's sum without the field: subtract what it holds. */
	__u16 full = ~csum_fold(pseudo + data + (__u16)~partial);
	if (proto == IPPROTO_UDP && full == 0)
		full = 0xffff; /* 0 means "no checksum" in UDP */
	/* bpf_xdp_load_bytes leaves the packet as it was: `check` holds. */
	*check = full;
	return 1;
}

#endif
