/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The latency histogram's scale, shared by the reply checker
 * (replycheck.bpf.c's latency_bucket()) and histograms kept in user space on
 * the same scale (the invoker's per-function call statistics). Reaches Rust
 * through bpf/host/uapi.bpf.c as peregrine_bpf::latency. */
#ifndef PEREGRINE_LATENCY_KERN_USER_H
#define PEREGRINE_LATENCY_KERN_USER_H

enum latency_scale {
	/* Log-linear buckets, 2^SUB_BITS per power of two (about 3% wide);
	 * values below 2^SUB_BITS ns have their own bucket. */
	LATENCY_SUB_BITS = 5,
	LATENCY_BUCKETS = 1024,
};

#endif
