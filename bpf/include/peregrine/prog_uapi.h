/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Program return codes user space compares with (BPF_PROG_RUN fixtures).
 * XDP's come as the kernel's own enum xdp_action (<linux/bpf.h>); tc's are
 * #defines in <linux/pkt_cls.h>, named here in an enum so they reach Rust
 * through BTF and the generated skeleton types, never retyped by hand. */
#ifndef PEREGRINE_PROG_UAPI_H
#define PEREGRINE_PROG_UAPI_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>

enum peregrine_tc_act {
	PG_TC_ACT_OK = TC_ACT_OK,
	PG_TC_ACT_SHOT = TC_ACT_SHOT,
	PG_TC_ACT_REDIRECT = TC_ACT_REDIRECT,
	PG_TC_ACT_NEXT = TC_ACT_UNSPEC, /* tcx: TCX_NEXT */
};

#endif
