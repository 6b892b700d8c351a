/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* What differs between a program's XDP and tc (tcx) builds, for programs
 * that compile one function into both: each takes a constant `tc`, so the
 * compiler keeps one side per program and the verifier never sees the
 * other hook's context or helpers. */
#ifndef PEREGRINE_HOOK_H
#define PEREGRINE_HOOK_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include "peregrine/parse.h"

static __always_inline int hook_drop(const int tc)
{
	return tc ? TC_ACT_SHOT : XDP_DROP;
}

/* Length of the whole frame: at tc the skb may hold more than its linear
 * part (a GSO super-packet, paged data), so the cursor's end is not the
 * frame's. */
static __always_inline __u64 hook_len(void *ctx, const int tc)
{
	if (tc)
		return ((struct __sk_buff *)ctx)->len;
	struct xdp_md *x = ctx;
	return x->data_end - x->data;
}

/* A cursor over the frame's headers. tc first pulls up to `headers` bytes
 * into the linear part when a sender left them paged (rare on veth; costs
 * a copy of the headers only, never of the payload). */
static __always_inline struct cursor hook_cursor(void *ctx, const int tc, __u32 headers)
{
	if (!tc)
		return xdp_cursor(ctx);
	struct __sk_buff *skb = ctx;
	__u32 want = skb->len < headers ? skb->len : headers;
	if ((long)skb->data_end - (long)skb->data < want)
		bpf_skb_pull_data(skb, want);
	return skb_cursor(skb);
}

/* The two programs of a function `body(ctx, tc)` compiled for both hooks:
 * `xdp_name` at XDP, `tc_name` at tcx. */
#define PEREGRINE_HOOK_PROGRAMS(xdp_name, tc_name, body)                        \
	SEC("xdp") int xdp_name(struct xdp_md *ctx)                            \
	{                                                                      \
		return body(ctx, 0);                                           \
	}                                                                      \
	SEC("tc") int tc_name(struct __sk_buff *ctx)                           \
	{                                                                      \
		return body(ctx, 1);                                           \
	}

#endif
