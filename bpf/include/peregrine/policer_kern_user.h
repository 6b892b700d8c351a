/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The QoS policer (policer.bpf.c): rule keys and masks, each rule's meter
 * and its counters, shared by the program and user space.
 *
 * Matching is tuple-space search: every rule belongs to one mask (which
 * bits of which fields it compares); a packet's key is ANDed with each mask
 * in use and looked up in one hash of all rules. The cost grows with the
 * number of distinct masks (at most POLICER_MAX_MASKS), never with the
 * number of rules. Of the rules that match, the lowest `priority` wins. */
#ifndef PEREGRINE_POLICER_KERN_USER_H
#define PEREGRINE_POLICER_KERN_USER_H

#include <linux/types.h>
#include <linux/bpf.h>

enum policer_limits {
	POLICER_MAX_RULES = 131072,
	POLICER_MAX_MASKS = 16,
	/* Fixed-point shift of policer_rule.cost: nanoseconds per unit. */
	POLICER_COST_SHIFT = 20,
};

enum policer_unit {
	POLICER_BITS = 0,    /* rate in bit/s of Ethernet frames (header included, no FCS) */
	POLICER_PACKETS = 1, /* rate in packets/s */
	POLICER_NONE = 2,    /* a rate of 0: nothing conforms (a deny rule) */
};

enum policer_exceed {
	POLICER_EXCEED_DROP = 0,
	POLICER_EXCEED_REMARK = 1, /* set the DSCP to `remark_dscp` and pass */
};

/* What a rule can match. A mask is the same struct with the bits to compare
 * set; `mask_id` is 0 in a mask and the mask's index in a rule's key. */
struct policer_key {
	__u32 mask_id;
	__u8 family; /* 4 or 6 */
	__u8 proto;  /* IP protocol */
	__u8 dscp;   /* 6 bits */
	__u8 pad;
	__u16 sport; /* network order; UDP and TCP only */
	__u16 dport;
	__u8 src[16]; /* IPv4 in the first 4 bytes */
	__u8 dst[16];
};

/* One slot of the mask table; unused slots have used == 0. */
struct policer_mask {
	__u32 used;
	__u32 pad;
	struct policer_key bits;
};

/* The value of a rule: its meter's settings. The meter's state lives in
 * `policer_state[id]`, its counters in `policer_stats[id]`. */
struct policer_rule {
	__u32 id;       /* index of this rule's state and counters */
	__u32 priority; /* lower wins among matching rules */
	__u8 unit;      /* enum policer_unit */
	__u8 exceed;    /* enum policer_exceed */
	__u8 remark_dscp;
	__u8 pad;
	/* The scheduler class conforming packets go to (`qos serve`: the
	 * AF_XDP engine's 1..SCHED_MAX_CLASSES-1 at XDP, the htb engine's
	 * 1..HTB_MAX_CLASSES-1 at tc); 0: none, the packet passes on. A rule
	 * with cost 0 has no meter: a filter, which only steers and counts. */
	__u16 class_id;
	__u8 pad2[2];
	/* Nanoseconds one unit (bit or packet) takes at the rate, << POLICER_COST_SHIFT. */
	__u64 cost;
	/* The burst in nanoseconds of rate: how far the meter's theoretical
	 * arrival time may run ahead of now. */
	__u64 tolerance_ns;
};

/* Counters of one rule (bytes: Ethernet frames, header included). */
struct policer_counters {
	__u64 conform_packets;
	__u64 conform_bytes;
	__u64 exceed_packets;
	__u64 exceed_bytes;
};

/* A rule's meter (GCRA, the virtual-scheduling form of a token bucket): one
 * theoretical arrival time, checked and advanced under one lock, so two
 * CPUs can never both spend the same credit; no refill timer, time is read
 * per packet. The counters are kept under the same lock (one cache line,
 * no per-CPU copies for 100k rules), and read with BPF_F_LOCK. */
struct policer_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 tat_ns;
	struct policer_counters counters;
};

/* Per-CPU counters of the whole program. */
struct policer_totals {
	__u64 packets;
	__u64 unmatched; /* IP, no rule matched: passed */
	__u64 not_ip;    /* passed */
	__u64 malformed; /* an IP header cut short or inconsistent: passed, unmetered */
	__u64 steered;   /* handed to the scheduler's AF_XDP socket */
	/* A class rule matched but the packet went to the kernel instead: no
	 * scheduler socket, not routed out of the scheduled interface, TTL
	 * expiring, no neighbour yet (the kernel resolves it), too big. */
	__u64 unscheduled;
};

/* The egress scheduler (`qos serve`), fed by the XDP policer: packets of
 * class rules routed out of `egress_ifindex` are forwarded here (FIB
 * lookup, TTL, MACs) and redirected to the AF_XDP socket of their RX queue
 * with a `sched_meta` in front; the scheduler queues them by class and
 * sends them out of the egress interface when the class may. */
enum sched_limits {
	SCHED_MAX_CLASSES = 64, /* AF_XDP engine: class ids 1..63; 0 is "no class" */
	SCHED_MAX_QUEUES = 64,  /* RX queues of the ingress interface */
	SCHED_NAME_LEN = 32,
	/* A `drop_ahead` older than this is ignored: a scheduler that stopped
	 * publishing (starved of CPU, stopped) is not trusted to be full.
	 * Two of its 20 ms publication intervals. */
	SCHED_DROP_AHEAD_MS = 40,
};

/* Entry 0 of sched_port: where the scheduler sends, and who runs it. */
struct sched_port {
	__u32 egress_ifindex; /* 0: no scheduler, class rules only count */
	__u32 owner_pid;      /* the `qos serve` process */
	__u64 generation;     /* bumped after each change of sched_classes */
	__u64 link_bps;       /* the rate the egress is shaped to */
	__u64 link_burst;     /* bytes */
};

/* In front of a steered frame (XDP metadata, copied by AF_XDP). */
struct sched_meta {
	__u32 class_id;
};

/* A class as configured (sched_classes[class_id]); written by `qos serve`
 * and `qos class`, read by the scheduler when the generation changes. */
struct sched_class {
	char name[SCHED_NAME_LEN];
	__u32 used;
	__u32 parent;      /* class id; 0: the link */
	__u64 rate_bps;    /* assured */
	__u64 ceil_bps;    /* the most, borrowing */
	__u64 burst;       /* bytes */
	__u32 weight;      /* DRR weight within a priority level */
	__u32 queue_limit; /* packets */
	__u8 priority;     /* lower first */
	__u8 pad[7];
};

/* A class's counters (sched_stats[class_id]), written by the scheduler. */
struct sched_counters {
	__u64 enqueued_packets;
	__u64 sent_packets;
	__u64 sent_bytes;
	__u64 dropped_packets; /* queue full */
	__u64 dropped_bytes;
	__u64 borrowed_packets;
	__u64 queue_depth;     /* packets queued now */
	__u64 counted_at_ns;   /* CLOCK_MONOTONIC when these were written */
	/* 1 while the queue is full and holds at least twice what the class
	 * sent since the last publication: it cannot run dry before the next
	 * one, so XDP drops the class's arrivals (counted in sched_early)
	 * instead of copying them to a scheduler that would drop them; for
	 * SCHED_DROP_AHEAD_MS after `counted_at_ns` at most. */
	__u64 drop_ahead;
};

/* Arrivals of a class XDP dropped while its `drop_ahead` was set
 * (sched_early[class_id], per CPU). */
struct sched_early {
	__u64 packets;
	__u64 bytes;
};

#endif
