/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Receiver-side counting sink: definitions shared by sink.bpf.c and user space. */
#ifndef PEREGRINE_SINK_KERN_USER_H
#define PEREGRINE_SINK_KERN_USER_H

#include <linux/types.h>

/* Per-CPU counters; user space sums them over all CPUs. */
struct sink_stats {
	__u64 packets;     /* every frame seen */
	__u64 bytes;       /* their length, without FCS */
	__u64 gen_packets; /* frames carrying the generator's magic */
	__u64 gen_bytes;
	__u64 malformed;   /* frames cut short inside a header they announce */
	/* Frames with the magic whose IPv4 header or UDP checksum is wrong:
	 * neither the full checksum nor exactly the partial pseudo-header value
	 * a local sender with TX checksum offload leaves. Dropped, not counted
	 * as the generator's. */
	__u64 bad_checksum;
};

#endif
