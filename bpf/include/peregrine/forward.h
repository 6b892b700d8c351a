/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* What every program that forwards an IP packet itself does: the FIB
 * lookup's key from the IP header, and the TTL/hop limit step. One place
 * for the router and for the policer's steering to the QoS scheduler. */
#ifndef PEREGRINE_FORWARD_H
#define PEREGRINE_FORWARD_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/in6.h>
#include "peregrine/parse.h"

#ifndef AF_INET
#define AF_INET 2
#define AF_INET6 10
#endif

/* The lookup key of an IPv4 packet of `tot_len` bytes (for the MTU check). */
static __always_inline void fib_key_ip4(struct bpf_fib_lookup *fib, const struct iphdr *ip, __u16 tot_len)
{
	fib->family = AF_INET;
	fib->tos = ip->tos;
	fib->l4_protocol = ip->protocol;
	fib->tot_len = tot_len;
	fib->ipv4_src = ip->saddr;
	fib->ipv4_dst = ip->daddr;
}

static __always_inline void fib_key_ip6(struct bpf_fib_lookup *fib, const struct ipv6hdr *ip6, __u16 tot_len)
{
	struct in6_addr *src = (struct in6_addr *)fib->ipv6_src;
	struct in6_addr *dst = (struct in6_addr *)fib->ipv6_dst;

	fib->family = AF_INET6;
	fib->flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0FFFFFFF);
	fib->l4_protocol = ip6->nexthdr;
	fib->tot_len = tot_len;
	*src = ip6->saddr;
	*dst = ip6->daddr;
}

/* TTL - 1 with the header checksum patched (RFC 1624). */
static __always_inline void ipv4_decrease_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xFFFF));
	ip->ttl--;
}

#endif
