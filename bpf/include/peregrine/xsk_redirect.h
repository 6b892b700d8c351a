/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* The tail of the programs that hand UDP datagrams to AF_XDP sockets (the
 * invoker's dispatch.bpf.c, the stack's steer.bpf.c): redirect to one slot
 * of an XSKMAP and count what happened, written once. */
#ifndef PEREGRINE_XSK_REDIRECT_H
#define PEREGRINE_XSK_REDIRECT_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Redirects the frame to the AF_XDP socket at `slot` of XSKMAP `xsks`, or
 * passes it to the kernel when that slot has none. A redirected frame adds
 * one to `*redirected` and `len` to `*bytes`; a slot without a socket adds
 * one to `*no_socket`. The verdict to return. */
static __always_inline int xsk_redirect_counted(void *xsks, __u32 slot, __u64 len,
						__u64 *redirected, __u64 *bytes,
						__u64 *no_socket)
{
	int act = bpf_redirect_map(xsks, slot, XDP_PASS);

	if (act == XDP_REDIRECT) {
		*redirected += 1;
		*bytes += len;
	} else {
		*no_socket += 1;
	}
	return act;
}

#endif
