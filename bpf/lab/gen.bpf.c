// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* Live-frame traffic generator.
 *
 * Run with BPF_PROG_RUN and BPF_F_TEST_XDP_LIVE_FRAMES: the kernel hands this
 * program the same page-pool frames again and again and transmits what it
 * redirects. On veth a frame's page travels to the receiver and comes back with
 * whatever the receiver wrote, so every header byte is rewritten on every run
 * from the templates in rodata. Checksums are templated for flow 0 with a zero
 * sequence/timestamp and patched incrementally (RFC 1624) for the rest.
 */
#include <linux/bpf.h>
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/gen_kern_user.h"

const volatile struct gen_config cfg = {};

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct gen_state) gen_state_map SEC(".maps");

/* Key: CPU number. An array, not per-CPU, so each sending thread can set its
 * own CPU's entry without touching the others. One entry here; resized to
 * the number of possible CPUs at load. */
PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, 1, __u32, struct gen_pace) gen_pace_map SEC(".maps");

/* Type anchors: make the skeleton carry these for user space (gen_meta
 * and the enums are used by user space only). */
struct gen_state gen_state_type_anchor;
struct gen_pace gen_pace_type_anchor;
enum gen_pace_limits gen_pace_limits_anchor;
struct gen_meta gen_meta_type_anchor;
enum gen_flags gen_flags_anchor;
enum gen_magic gen_magic_anchor;

static __always_inline void copy_words(__u64 *dst, const volatile __u64 *src, int n)
{
#pragma unroll
	for (int i = 0; i < GEN_HDR_MAX / 8; i++)
		if (i < n)
			dst[i] = src[i];
}

SEC("xdp")
int gen(struct xdp_md *ctx)
{
	/* User space keeps this program attached (generic mode) to the
	 * namespace's loopback so that each BPF_PROG_RUN finds it already in
	 * the XDP dispatcher; otherwise every run pays two synchronize_rcu().
	 * Real frames arriving there are not ours to touch. */
	if (ctx->ingress_ifindex != cfg.ifindex)
		return XDP_PASS;

	__u32 cpu = bpf_get_smp_processor_id();
	struct gen_state *st = map_first(&gen_state_map);
	struct gen_pace *pace = bpf_map_lookup_elem(&gen_pace_map, &cpu);
	if (!st || !pace)
		return XDP_ABORTED;

	if (pace->limit && pace->sent >= pace->limit)
		return XDP_DROP; /* this run's frames are all out: skip */
	__u64 now = 0;
	if (pace->gap_fp) {
		now = bpf_ktime_get_ns();
		__u64 now_fp = now << GEN_FP_SHIFT;
		if (now_fp < pace->next_fp)
			return XDP_DROP; /* too early: skip this iteration */
		__u64 lag = GEN_MAX_CATCHUP * pace->gap_fp;
		__u64 floor = now_fp > lag ? now_fp - lag : 0;
		__u64 next = pace->next_fp > floor ? pace->next_fp : floor;
		pace->next_fp = next + pace->gap_fp;
	}
	pace->sent++;

	__u64 seq = st->seq++;
	__u32 cls = 0;
	if (cfg.pattern_len > 1)
		cls = cfg.pattern[(seq % cfg.pattern_len) & (GEN_MAX_PATTERN - 1)] &
		      (GEN_MAX_CLASSES - 1);
	const volatile struct gen_class *c = &cfg.classes[cls];

	int shrink = (int)c->frame_len - (int)cfg.template_len;
	if (shrink < 0 && bpf_xdp_adjust_tail(ctx, shrink)) {
		st->errors++;
		return XDP_DROP;
	}

	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const int v6 = cfg.flags & GEN_F_IPV6;
	const int words = v6 ? 8 : 6; /* headers rounded up to u64 */
	if (data + words * 8 > data_end) {
		st->errors++;
		return XDP_DROP;
	}
	copy_words(data, (const volatile __u64 *)c->hdr, words);

	const __u32 l4 = v6 ? ETH_HLEN + sizeof(struct ipv6hdr) : ETH_HLEN + sizeof(struct iphdr);
	struct udphdr *udp = data + l4;
	if ((void *)(udp + 1) > data_end) {
		st->errors++;
		return XDP_DROP;
	}
	__u64 udp_sum = (__u16)~udp->check;
	int touched = 0;

	if (c->meta_len >= 4) {
		struct gen_meta *m = (void *)(udp + 1);
		if ((void *)&m->seq > data_end) {
			st->errors++;
			return XDP_DROP;
		}
		m->magic = PEREGRINE_MAGIC;
		if ((cfg.flags & GEN_F_STAMP) && c->meta_len >= 8) {
			if ((void *)&m->tx_ns > data_end) {
				st->errors++;
				return XDP_DROP;
			}
			m->seq = (__u32)seq;
			udp_sum += csum_word32((__u32)seq);
			touched = 1;
			if (c->meta_len >= 16) {
				if ((void *)(m + 1) > data_end) {
					st->errors++;
					return XDP_DROP;
				}
				/* Unsampled frames get zero, not what the page
				 * held from an earlier run. */
				__u64 t = 0;
				if (!(seq & cfg.stamp_mask)) {
					if (!now)
						now = bpf_ktime_get_ns();
					t = now;
				}
				m->tx_ns = t;
				udp_sum += csum_word32((__u32)t) + csum_word32((__u32)(t >> 32));
			}
		}
	}

	if (cfg.nflows > 1) {
		__u32 k = seq % cfg.nflows;
		__u16 old_port = udp->source;
		__u16 new_port = bpf_htons((__u16)(cfg.src_port + k));
		udp->source = new_port;
		udp_sum += (__u16)~old_port + new_port;
		touched = 1;
	}
	if (cfg.nflows > 1 && !(cfg.flags & GEN_F_PORTS_ONLY)) {
		__u32 k = seq % cfg.nflows;

		const int dst = cfg.flags & GEN_F_VARY_DST;
		__u32 *saddr;
		if (v6) {
			struct ipv6hdr *ip6 = data + ETH_HLEN;
			saddr = dst ? &ip6->daddr.in6_u.u6_addr32[3] : &ip6->saddr.in6_u.u6_addr32[3];
		} else {
			struct iphdr *ip = data + ETH_HLEN;
			saddr = dst ? &ip->daddr : &ip->saddr;
		}
		__u32 old_addr = *saddr;
		__u32 new_addr = bpf_htonl(bpf_ntohl(old_addr) + k);
		*saddr = new_addr;
		__u64 addr_delta = csum_unword32(old_addr) + csum_word32(new_addr);
		udp_sum += addr_delta;
		if (!v6) {
			struct iphdr *ip = data + ETH_HLEN;
			ip->check = ~csum_fold((__u16)~ip->check + addr_delta);
		}
	}

	if (touched) {
		__u16 sum = ~csum_fold(udp_sum);
		/* A computed zero is sent as all ones (RFC 768); zero means "none". */
		udp->check = sum ? sum : 0xffff;
	}
	if (cfg.flags & GEN_F_DRY_RUN)
		return XDP_DROP;
	return bpf_redirect(cfg.ifindex, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
