/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Reply checker of the open-loop function load: definitions shared by
 * replycheck.bpf.c and user space. */
#ifndef PEREGRINE_REPLYCHECK_KERN_USER_H
#define PEREGRINE_REPLYCHECK_KERN_USER_H

#include <linux/types.h>
#include "peregrine/gen_kern_user.h"
#include "peregrine/latency_kern_user.h"

/* The function the server runs, which fixes what its reply to a generator
 * request (gen_meta then zeros) must be. Only one-to-one functions can be
 * checked without keeping every request. */
enum replycheck_function {
	REPLYCHECK_ECHO = 0,    /* the request itself */
	REPLYCHECK_REVERSE = 1, /* the request's bytes in reverse order */
};

enum replycheck_limits {
	/* Longest payload checked (u64 words): a 1500-byte MTU's UDP payload. */
	REPLYCHECK_MAX_WORDS = 184,
	/* Shortest payload checked: the generator's whole gen_meta. */
	REPLYCHECK_MIN_PAYLOAD = sizeof(struct gen_meta),
};

struct replycheck_config {
	__u16 server_port; /* replies come from this UDP port, network order */
	__u16 payload_len; /* every request's (and so reply's) payload, bytes */
	__u32 function;    /* enum replycheck_function */
};

/* Per-CPU counters; user space sums them over all CPUs. */
struct replycheck_stats {
	__u64 replies;      /* correct replies (dropped after counting) */
	__u64 bytes;        /* their frame length, without FCS */
	__u64 bad_length;   /* from the server port, wrong UDP or IP length */
	__u64 bad_payload;  /* wrong bytes, or not a reply to our request */
	__u64 bad_checksum; /* IPv4 header or UDP checksum wrong */
	__u64 truncated;    /* from the server port, cut short */
};

#endif
