// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* Reply checker of the open-loop function load (`peregrine faas load --rate`).
 *
 * The live-frame generator sends requests whose payload is gen_meta (magic,
 * sequence, send time) followed by zeros, so the one correct reply of a
 * one-to-one function (echo, reverse) is known byte for byte except for the
 * twelve bytes it carries back. Every frame from the server's UDP port is
 * checked here, in full, and dropped: lengths, IPv4 header checksum, UDP
 * checksum (the pseudo header, the header and the only non-zero payload
 * bytes, once every other byte is checked to be zero; or exactly the
 * partial pseudo-header value of a local sender with TX checksum offload),
 * magic and zeros. The
 * send time it carries gives the request-to-reply latency into a log-linear
 * histogram. Checking in XDP keeps the client off the CPUs the server is
 * measured on; everything else on the link is passed.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/gen_kern_user.h"
#include "peregrine/replycheck_kern_user.h"

const volatile struct replycheck_config cfg = {};

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct replycheck_stats)
	replycheck_stats_map SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, LATENCY_BUCKETS, __u32, __u64)
	replycheck_latency SEC(".maps");

struct replycheck_stats replycheck_stats_anchor;
struct replycheck_config replycheck_config_anchor;
enum replycheck_function replycheck_function_anchor;
enum replycheck_limits replycheck_limits_anchor;

static __always_inline __u32 latency_bucket(__u64 v)
{
	if (v < (1 << LATENCY_SUB_BITS))
		return v;
	__u32 msb = 0;
	__u64 x = v;
	if (x >> 32) { x >>= 32; msb += 32; }
	if (x >> 16) { x >>= 16; msb += 16; }
	if (x >> 8) { x >>= 8; msb += 8; }
	if (x >> 4) { x >>= 4; msb += 4; }
	if (x >> 2) { x >>= 2; msb += 2; }
	if (x >> 1) { msb += 1; }
	__u32 shift = msb - LATENCY_SUB_BITS;
	__u64 idx = ((__u64)(shift + 1) << LATENCY_SUB_BITS) +
		    ((v >> shift) - (1 << LATENCY_SUB_BITS));
	return idx < LATENCY_BUCKETS ? idx : LATENCY_BUCKETS - 1;
}

static __always_inline __u32 bswap32(__u32 x)
{
	return __builtin_bswap32(x);
}

/* Sum of a 16-bit quantity as it lies in memory (see parse.h). */
static __always_inline __u16 swap16(__u16 x)
{
	return (x >> 8) | (x << 8);
}

/* XDP_PASS: not a reply, leave it to the kernel; XDP_DROP: a reply, counted. */
static __always_inline int check_reply(void *data, void *data_end)
{
	struct replycheck_stats *st = map_first(&replycheck_stats_map);
	if (!st)
		return XDP_PASS;
	struct cursor c = {
		.pos = data,
		.end = data_end,
	};
	void *frame = c.pos;

	struct ethhdr *eth;
	int vlans;
	/* The client's link is untagged: tagged frames are not our replies. */
	int eth_proto = parse_eth(&c, &eth, &vlans);
	if (eth_proto < 0 || vlans)
		return XDP_PASS;
	const __u32 plen = cfg.payload_len;
	__u64 sum = 0; /* UDP checksum, memory-order ones' complement */
	__u16 udp_len_want = bpf_htons(sizeof(struct udphdr) + plen);
	int v4 = 0;
	struct iphdr *ip = 0;
	struct ip_hdr l3 = {};

	if (eth_proto == bpf_htons(ETH_P_IP)) {
		/* A cut datagram is still parsed: from the server port it is a
		 * reply, counted as truncated below. Options: not our server's. */
		if (parse_ip4(&c, &ip) != IPPROTO_UDP || ip->ihl != 5 || ip4_is_fragment(ip))
			return XDP_PASS;
		v4 = 1;
		l3.family = 4;
		l3.v4 = ip;
		sum += csum_word32(ip->saddr) + csum_word32(ip->daddr) + bpf_htons(IPPROTO_UDP) +
		       udp_len_want;
	} else if (eth_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6;
		if (parse_ip6(&c, &ip6) != IPPROTO_UDP)
			return XDP_PASS;
		l3.family = 6;
		l3.v6 = ip6;
		if (ip6->payload_len != udp_len_want) {
			struct udphdr *u = parse_udp(&c);
			/* A UDP header past the datagram's end (its length ends it
			 * early, a trailer follows) is none: not a reply. */
			if (u && ip_holds(&l3, u, sizeof(*u)) && u->source == cfg.server_port) {
				st->bad_length++;
				return XDP_DROP;
			}
			return XDP_PASS;
		}
#pragma unroll
		for (int i = 0; i < 4; i++)
			sum += csum_word32(ip6->saddr.in6_u.u6_addr32[i]) +
			       csum_word32(ip6->daddr.in6_u.u6_addr32[i]);
		sum += bpf_htons(IPPROTO_UDP) + udp_len_want;
	} else {
		return XDP_PASS;
	}

	/* The pseudo header alone: what a CHECKSUM_PARTIAL reply carries. */
	const __u16 partial = csum_fold(sum);

	struct udphdr *udp = parse_udp(&c);
	if (!udp || !ip_holds(&l3, udp, sizeof(*udp)))
		return XDP_PASS;
	if (udp->source != cfg.server_port)
		return XDP_PASS;
	/* From here on the frame is a reply: counted under one outcome, dropped. */
	if (udp->len != udp_len_want ||
	    (v4 && ip->tot_len != bpf_htons(sizeof(*ip) + sizeof(*udp) + plen))) {
		st->bad_length++;
		return XDP_DROP;
	}
	__u8 *p = c.pos;
	if ((void *)p + plen > c.end || plen < sizeof(struct gen_meta)) {
		st->truncated++;
		return XDP_DROP;
	}
	if (v4) {
		__u16 *w = (void *)ip;
		__u64 hs = 0;
#pragma unroll
		for (int i = 0; i < 10; i++)
			hs += w[i];
		if (csum_fold(hs) != 0xffff) {
			st->bad_checksum++;
			return XDP_DROP;
		}
	}

	const int reverse = cfg.function == REPLYCHECK_REVERSE;
	/* Where gen_meta's 16 bytes are in the reply, and the zeros around them. */
	__u32 meta_at = reverse ? plen - sizeof(struct gen_meta) : 0;
	__u32 zeros_at = reverse ? 0 : sizeof(struct gen_meta);
	__u32 nzero = plen - sizeof(struct gen_meta);

	__u8 *z = p + (zeros_at & 0xffff);
	__u64 any = 0;
	/* 32 bytes per bounds check, then 8, then single bytes. */
	for (__u32 i = 0; i < REPLYCHECK_MAX_WORDS / 4; i++) {
		if (i >= nzero / 32)
			break;
		if ((void *)(z + 32) > c.end)
			break;
		__u64 *w = (__u64 *)z;
		any |= w[0] | w[1] | w[2] | w[3];
		z += 32;
	}
#pragma unroll
	for (__u32 i = 0; i < 3; i++) {
		if (i >= (nzero % 32) / 8)
			break;
		if ((void *)(z + 8) > c.end)
			break;
		any |= *(__u64 *)z;
		z += 8;
	}
#pragma unroll
	for (__u32 i = 0; i < 7; i++) {
		if (i >= nzero % 8)
			break;
		if ((void *)(z + 1) > c.end)
			break;
		any |= *z;
		z++;
	}

	__u8 *m = p + (meta_at & 0xffff);
	if ((void *)(m + sizeof(struct gen_meta)) > c.end) {
		st->truncated++;
		return XDP_DROP;
	}
	__u32 magic = *(__u32 *)(reverse ? m + 12 : m);
	__u64 tx_ns = *(__u64 *)(reverse ? m : m + 8);
	if (reverse) {
		magic = bswap32(magic);
		tx_ns = __builtin_bswap64(tx_ns);
	}
	if (any || magic != PEREGRINE_MAGIC) {
		st->bad_payload++;
		return XDP_DROP;
	}

	/* A server on kernel sockets behind a veth at default offloads sends
	 * CHECKSUM_PARTIAL replies: the field holds exactly the folded pseudo
	 * header sum, not complemented, for a NIC that never comes. Accepted as
	 * the kernel's sockets accept it (and wire's parse_udp_frame); any other
	 * value must be the full checksum. Zero: no checksum, IPv4 only; on
	 * IPv6 never valid (RFC 8200 8.1), even where the data sums to zero
	 * (the full sum would take it): wire's rule, and the sink's. */
	if (!v4 && udp->check == 0) {
		st->bad_checksum++;
		return XDP_DROP;
	}
	if (!(v4 && udp->check == 0) && udp->check != partial) {
		__u16 *uw = (void *)udp;
		sum += uw[0] + uw[1] + uw[2] + uw[3];
		__u64 ms = 0;
		__u16 *mw = (void *)m;
#pragma unroll
		for (int i = 0; i < 8; i++)
			ms += mw[i];
		/* A run of 16-bit loads starting at an odd offset from the UDP
		 * header sums byte-swapped words: swap the folded result back. */
		__u16 mf = csum_fold(ms);
		sum += (meta_at & 1) ? swap16(mf) : mf;
		if (csum_fold(sum) != 0xffff) {
			st->bad_checksum++;
			return XDP_DROP;
		}
	}

	st->replies++;
	st->bytes += c.end - frame;
	/* Only sampled requests carry a send time; the clock is read for
	 * those alone (reading it costs ~3% of a core at a million replies a
	 * second here). */
	if (tx_ns) {
		__u64 now = bpf_ktime_get_ns();
		if (tx_ns <= now) {
			__u32 b = latency_bucket(now - tx_ns);
			__u64 *n = bpf_map_lookup_elem(&replycheck_latency, &b);
			if (n)
				*n += 1;
		}
	}
	return XDP_DROP;
}

SEC("xdp")
int replycheck(struct xdp_md *ctx)
{
	return check_reply((void *)(long)ctx->data, (void *)(long)ctx->data_end);
}

/* The same check at tcx ingress: on veth, an XDP program on the client makes
 * every reply skb be copied into an XDP frame first (on the server's CPU); at
 * tc the skb is read where it lies. */
SEC("tc")
int replycheck_tc(struct __sk_buff *skb)
{
	if ((long)skb->data_end - (long)skb->data < skb->len)
		bpf_skb_pull_data(skb, skb->len);
	int v = check_reply((void *)(long)skb->data, (void *)(long)skb->data_end);
	return v == XDP_PASS ? TC_ACT_OK : TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
