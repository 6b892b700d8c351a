/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Network functions run inside containers of a service chain: definitions
 * shared by nf.bpf.c and user space. */
#ifndef PEREGRINE_NF_KERN_USER_H
#define PEREGRINE_NF_KERN_USER_H

#include <linux/types.h>

enum nf_limits {
	NF_MAX_RULES = 32,
};

enum acl_verdict {
	ACL_DROP = 0,
	ACL_PASS = 1,
};

/* One ACL rule; every set field must match; the first matching rule wins,
 * and a frame no rule matches is passed. */
struct acl_rule {
	__u8 family;    /* 4 or 6; 0: any */
	__u8 proto;     /* IP protocol; 0: any */
	__u16 port;     /* destination port, network order; 0: any */
	__u8 prefixlen; /* bits of addr to compare; 0: any address */
	__u8 match_src; /* 1: addr is the source, 0: the destination */
	__u8 verdict;   /* enum acl_verdict */
	__u8 pad;
	__u8 addr[16];  /* IPv4 in the first 4 bytes */
};

struct nf_config {
	/* 0: send frames back out of the interface they came in on (XDP_TX,
	 * "reflect"); else redirect them to this interface ("forward"). */
	__u32 out_ifindex;
	__u32 rules;    /* rules used in acl[] ("filter" when non-zero) */
	struct acl_rule acl[NF_MAX_RULES];
};

/* Per-CPU counters of a network function. */
struct nf_stats {
	__u64 packets;
	__u64 bytes;
	__u64 sent;    /* sent on (reflected or forwarded) */
	__u64 dropped; /* by an ACL rule */
	__u64 ip;      /* of the packets: IPv4 or IPv6 ones the ACL could judge */
	__u64 csum_completed; /* UDP/TCP checksums a local sender left partial, completed */
};

#endif
