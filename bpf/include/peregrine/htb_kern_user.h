/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The HTB engine's classifier (classify.bpf.c, tcx egress of the shaped
 * device): what it needs to turn a rule's class into an HTB class id, and
 * its counters; shared by the program and user space (`qos serve` with
 * engine = "htb"). */
#ifndef PEREGRINE_HTB_KERN_USER_H
#define PEREGRINE_HTB_KERN_USER_H

#include <linux/types.h>

enum htb_limits {
	/* TX queues given an HTB each under an MQ root. */
	HTB_MAX_QUEUES = 16,
	/* Class ids 1..16383 (0 is "no class"): the slots of htb_classes, the
	 * minor of each HTB class (below the link class's 0xffff) and of its
	 * leaf's handle (0x7100 + id). The AF_XDP engine has its own,
	 * smaller limit (SCHED_MAX_CLASSES). */
	HTB_MAX_CLASSES = 16384,
};

/* Entry 0 of htb_port: the tree peregrine built on the shaped device, and
 * who serves it. Also the record of ownership: the root qdisc `root_major:`
 * is peregrine's, made by `owner_pid`. */
struct htb_port {
	__u32 egress_ifindex; /* the shaped device; 0: nothing is classified */
	__u32 owner_pid;      /* the `qos serve` process */
	__u16 root_major;     /* the root qdisc's handle major (htb, or mq) */
	__u16 major;          /* the HTB of TX queue 0; queue q's is major + q */
	__u16 queues;         /* 1: one HTB at the root; n: n HTBs under mq */
	__u16 pad;
	__u64 link_bps;       /* the root class's rate, all queues together */
};

/* Per-CPU counters of the classifier. */
struct htb_totals {
	__u64 packets;
	__u64 classified;   /* skb->priority set to a class */
	__u64 unclassified; /* IP, no rule with a class (or its class gone): unshaped */
	__u64 not_ip;       /* passed, unshaped */
	__u64 malformed;    /* an IP header cut short or inconsistent: passed, unshaped */
};

#endif
