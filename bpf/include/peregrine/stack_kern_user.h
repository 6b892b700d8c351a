/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The UDP/IP stack's XDP steering (bpf/stack/steer.bpf.c): definitions
 * shared with user space (crates/bpf/src/stack.rs, crates/stack). */
#ifndef PEREGRINE_STACK_KERN_USER_H
#define PEREGRINE_STACK_KERN_USER_H

#include <linux/types.h>

enum stack_limits {
	/* Bound (address, port) pairs per interface. */
	STACK_MAX_BINDINGS = 4096,
	/* RX queues with an AF_XDP socket: XSKMAP slot = RX queue index. */
	STACK_MAX_QUEUES = 64,
};

/* A bound local address and UDP port. IPv4 addresses are stored
 * IPv4-mapped (::ffff:a.b.c.d), so one map holds both families; the
 * unspecified address (:: or ::ffff:0.0.0.0) binds the port on every
 * address of the interface. */
struct stack_bind_key {
	__u8 addr[16];
	__be16 port; /* network order, as in the UDP header */
	__u16 pad;   /* zero */
};

/* Per-CPU counters of the steering program (one entry). Frames that are
 * not for a binding go to the kernel untouched and are not counted here;
 * the kernel counts them as it counts any frame. */
struct stack_steer_stats {
	__u64 redirected; /* to the RX queue's AF_XDP socket */
	__u64 bytes;      /* of the redirected frames */
	/* For a binding, but the RX queue has no socket in the XSKMAP (or the
	 * redirect failed): passed to the kernel, which has no socket there. */
	__u64 no_socket;
	/* First fragment of a datagram to a binding: the stack does not
	 * reassemble (QUIC never fragments: DF is set), so it is dropped here,
	 * counted; later fragments carry no port and go to the kernel, whose
	 * reassembly times them out. */
	__u64 fragments;
};

#endif
