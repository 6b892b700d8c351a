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
	__u8 pad[5];
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
};

#endif
