/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* UDP port -> function -> AF_XDP socket dispatch: definitions shared by
 * dispatch.bpf.c and user space. */
#ifndef PEREGRINE_DISPATCH_KERN_USER_H
#define PEREGRINE_DISPATCH_KERN_USER_H

#include <linux/types.h>

enum dispatch_limits {
	DISPATCH_MAX_FUNCS = 64,
	/* Sockets a function may have per RX queue. */
	DISPATCH_MAX_SOCKS = 16,
	DISPATCH_MAX_QUEUES = 16,
	/* XSKMAP size: every function, queue and socket has its own slot. */
	DISPATCH_MAX_SLOTS = DISPATCH_MAX_FUNCS * DISPATCH_MAX_QUEUES * DISPATCH_MAX_SOCKS,
};

enum dispatch_policy {
	DISPATCH_ROUND_ROBIN = 0, /* per CPU, over the queue's sockets */
	DISPATCH_FLOW_HASH = 1,   /* source address and port: a client sticks to a worker */
};

/* A function (index: function id). Its socket for RX queue q, worker w is
 * XSKMAP slot id * QUEUES * SOCKS + q * SOCKS + w. */
struct dispatch_func {
	__u32 socks;  /* workers per RX queue; 0: function off (frames passed) */
	__u32 policy; /* enum dispatch_policy */
};

/* Per-CPU counters per function. */
struct dispatch_stats {
	__u64 packets;   /* redirected to a socket */
	__u64 bytes;
	__u64 no_socket; /* the chosen slot had no socket: passed to the kernel */
	__u64 disabled;  /* the function had no workers: passed */
	/* First fragment of a datagram to the function's port (IPv4, or IPv6
	 * with the fragment header right after the fixed header): a request
	 * larger than one frame, which the invoker cannot serve. Dropped here,
	 * so the drop is counted; later fragments carry no port and go to the
	 * kernel, whose reassembly times them out (its ReasmFails counter). */
	__u64 fragments;
};

#endif
