// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* Deliberately invalid: reads the packet without a bounds check. Only the
 * loader's tests use it, to prove a verifier rejection reaches the user
 * with the verifier's log. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int reject(struct xdp_md *ctx)
{
	unsigned char *data = (void *)(long)ctx->data;
	return data[20] ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
