/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Bounds-checked header access for XDP programs. Every helper returns NULL when
 * the header does not fit in [data, data_end), so callers never read past the
 * frame and the verifier sees the check. */
#ifndef PEREGRINE_PARSE_H
#define PEREGRINE_PARSE_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct cursor {
	void *pos;
	void *end;
};

static __always_inline void *cursor_take(struct cursor *c, __u32 len)
{
	void *p = c->pos;

	if (p + len > c->end)
		return NULL;
	c->pos = p + len;
	return p;
}

/* Fold a 32+ bit ones'-complement sum to 16 bits. */
static __always_inline __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* Sum of the two 16-bit halves of a 32-bit word as it lies in memory. */
static __always_inline __u64 csum_word32(__u32 w)
{
	return (w & 0xffff) + (w >> 16);
}

/* Ones'-complement "subtract": adding the complement of each half. */
static __always_inline __u64 csum_unword32(__u32 w)
{
	return ((~w) & 0xffff) + ((~w) >> 16);
}

#endif
