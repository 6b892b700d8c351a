// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* QoS policer at two hooks: XDP (`policer`) and tcx ingress (`policer_tc`),
 * one police() for both, maps shared. A packet's fields (family, addresses,
 * protocol, ports, DSCP) are matched against every rule by tuple-space
 * search (policer_kern_user.h); the winning rule's meter says conform
 * (pass on) or exceed (drop, or re-mark the DSCP and pass on).
 *
 * At tc the skb is metered whole: a GSO super-packet is charged all its
 * bytes at once, so TCP with offloads is policed by what it really sends
 * and keeps its GSO and checksum state (nothing here touches L4). tc passes
 * on with TCX_NEXT, so a router attached after the policer on the same
 * interface still runs.
 *
 * What cannot be matched is passed unmetered and counted: non-IP frames,
 * frames whose IP header is cut short or inconsistent (the kernel judges
 * those). IPv4 fragments other than the first carry no ports: they match
 * rules that do not ask for ports.
 *
 * At XDP a rule may name a scheduler class (`qos serve`): its conforming
 * packets, when the FIB routes them out of the scheduled interface, are
 * forwarded here (TTL, MACs) and handed to the scheduler's AF_XDP socket
 * with their class in the metadata. Whatever cannot be (no scheduler
 * socket, another route, TTL expiring, no neighbour yet) goes to the
 * kernel untouched and is counted `unscheduled`. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include "peregrine/forward.h"
#include "peregrine/hook.h"
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/policer_kern_user.h"

/* tcx: run the next program of the interface, then the stack
 * (TCX_NEXT in newer headers; the same value as TC_ACT_UNSPEC). */
#define POLICER_TC_NEXT TC_ACT_UNSPEC

PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, POLICER_MAX_MASKS, __u32, struct policer_mask) policer_masks SEC(".maps");

PEREGRINE_MAP_FLAGS(BPF_MAP_TYPE_HASH, POLICER_MAX_RULES, BPF_F_NO_PREALLOC, struct policer_key,
		    struct policer_rule) policer_rules SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, POLICER_MAX_RULES, __u32, struct policer_state) policer_state SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct policer_totals) policer_totals SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, 1, __u32, struct sched_port) sched_port SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_XSKMAP, SCHED_MAX_QUEUES, __u32, __u32) sched_xsks SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, SCHED_MAX_CLASSES, __u32, struct sched_class) sched_classes SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, SCHED_MAX_CLASSES, __u32, struct sched_counters) sched_stats SEC(".maps");
/* Arrivals dropped early, per class (see sched_counters.drop_ahead). */
PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, SCHED_MAX_CLASSES, __u32, struct sched_early) sched_early SEC(".maps");

/* Type anchors: make the skeleton carry these for user space. */
struct policer_key policer_key_anchor;
struct policer_mask policer_mask_anchor;
struct policer_rule policer_rule_anchor;
/* A pointer: a global holding a bpf_spin_lock would make .bss unmappable. */
struct policer_state *policer_state_anchor;
struct policer_counters policer_counters_anchor;
struct policer_totals policer_totals_anchor;
enum policer_limits policer_limits_anchor;
enum policer_unit policer_unit_anchor;
enum policer_exceed policer_exceed_anchor;
struct sched_port sched_port_anchor;
struct sched_meta sched_meta_anchor;
struct sched_class sched_class_anchor;
struct sched_counters sched_counters_anchor;
struct sched_early sched_early_anchor;
enum sched_limits sched_limits_anchor;

/* Headers read: Ethernet, two tags, IPv4 with the longest options (or
 * IPv6), TCP's fixed header (the ports; its length, for a GSO packet). */
#define POLICER_HEADERS (14 + 8 + 60 + 20)

/* The bytes a tc skb puts on the wire. A GSO super-packet (TCP, or UDP
 * with UDP_SEGMENT) leaves as gso_segs frames that each carry the headers,
 * which skb->len counts once: it is charged what the kernel charges a
 * qdisc for it (qdisc_pkt_len_init), skb->len plus the headers of every
 * segment after the first. `l4` is a cursor at the transport header,
 * `data` the frame's first byte. */
static __always_inline __u64 wire_len(struct __sk_buff *skb, struct cursor l4, int proto, void *data)
{
	__u32 segs = skb->gso_segs;
	void *payload;

	if (segs <= 1)
		return skb->len;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = cursor_take(&l4, sizeof(*th));
		if (!th)
			return skb->len;
		payload = (void *)th + th->doff * 4;
	} else if (proto == IPPROTO_UDP) {
		struct udphdr *uh = cursor_take(&l4, sizeof(*uh));
		if (!uh)
			return skb->len;
		payload = uh + 1;
	} else {
		return skb->len;
	}
	return skb->len + (__u64)(segs - 1) * (__u64)(payload - data);
}

static __always_inline int verdict_pass(const int tc)
{
	return tc ? POLICER_TC_NEXT : XDP_PASS;
}

#include "peregrine/policer_lookup.h"

/* Meters `len` bytes against `r`: 1 when they conform (their cost is
 * spent), 0 when they exceed (nothing is spent). A packet conforms when
 * the bucket holds its whole cost. A GSO super-packet (`whole`: several
 * frames the policer cannot split) conforms while the bucket holds any
 * credit, and is charged in full, running the bucket into debt by less
 * than its own cost: what conforms stays within rate x time + burst + one
 * packet. Asking it for its whole cost would drop a 64 KiB packet at tc
 * whenever less than that is left while the smaller ones behind it pass:
 * a flight's tail lost in one piece, and TCP waits out a retransmission
 * timeout (one flow at 10 Mbit/s got 0.89 of the rate that way, 0.95 this
 * way; docs/QOS.md). A rate of 0 (POLICER_NONE) lets nothing conform. */
static __always_inline int meter(const struct policer_rule *r, __u64 len, int whole)
{
	__u32 id = r->id;
	struct policer_state *s = bpf_map_lookup_elem(&policer_state, &id);
	if (!s)
		return 1;
	__u64 units = r->unit == POLICER_PACKETS ? 1 : len * 8;
	__u64 inc = (units * r->cost) >> POLICER_COST_SHIFT;
	__u64 tolerance = r->tolerance_ns;
	__u64 now = bpf_ktime_get_ns();
	int ok;

	bpf_spin_lock(&s->lock);
	__u64 tat = s->tat_ns > now ? s->tat_ns : now;
	if (whole)
		ok = tat - now < tolerance || inc == 0;
	else
		ok = tat + inc - now <= tolerance;
	ok = ok && r->unit != POLICER_NONE;
	if (ok) {
		s->tat_ns = tat + inc;
		s->counters.conform_packets++;
		s->counters.conform_bytes += len;
	} else {
		s->counters.exceed_packets++;
		s->counters.exceed_bytes += len;
	}
	bpf_spin_unlock(&s->lock);
	return ok;
}

/* Sets the DSCP of the IP header, keeping ECN; IPv4's header checksum is
 * patched (the header's sum, and so a CHECKSUM_COMPLETE skb's, stays the
 * same); an IPv6 skb's CHECKSUM_COMPLETE sum is told of the change. */
static __always_inline void remark(void *ctx, const int tc, struct ip_hdr *l3, __u8 dscp)
{
	if (l3->family == 4) {
		struct iphdr *ip = l3->v4;
		__u16 *word = (__u16 *)ip;
		__u16 old = *word;
		ip->tos = (dscp << 2) | (ip->tos & 3);
		__u32 sum = (__u16)~ip->check;
		sum += (__u16)~old;
		sum += *word;
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		ip->check = ~sum;
	} else {
		__u32 *word = (__u32 *)l3->v6;
		__u32 old = *word;
		/* version(4) | traffic class(8) | flow label(20); DSCP is the
		 * class's upper six bits. */
		__u32 host = bpf_ntohl(old);
		host = (host & ~(0x3fu << 22)) | ((__u32)dscp << 22);
		*word = bpf_htonl(host);
		if (tc)
			bpf_csum_update(ctx, csum_unword32(old) + csum_word32(*word));
	}
}

/* Hands a class's packet (`len` bytes) to the scheduler: routed out of its
 * interface, TTL taken, MACs set, class in front; or XDP_PASS, untouched;
 * or XDP_DROP, counted, while the class's queue stays full (drop_ahead). */
static __always_inline int steer(struct xdp_md *ctx, const struct ip_hdr *l3, __u32 class_id,
				 __u64 len, struct policer_totals *t)
{
	__u32 queue = ctx->rx_queue_index;
	struct sched_port *port = map_first(&sched_port);
	struct bpf_fib_lookup fib = {};

	if (!port || !port->egress_ifindex || !bpf_map_lookup_elem(&sched_xsks, &queue))
		goto unscheduled;
	/* A class deleted after its rule was read, or an id out of range.
	 * (Both maps belong to the program this way, so user space finds
	 * them from the program a pinned link runs.) */
	struct sched_class *class = bpf_map_lookup_elem(&sched_classes, &class_id);
	struct sched_counters *queued = bpf_map_lookup_elem(&sched_stats, &class_id);
	if (!class || !class->used || !queued)
		goto unscheduled;
	if (l3->family == 4) {
		if (l3->v4->ttl <= 1)
			goto unscheduled;
		fib_key_ip4(&fib, l3->v4, bpf_ntohs(l3->v4->tot_len));
	} else {
		if (l3->v6->hop_limit <= 1)
			goto unscheduled;
		fib_key_ip6(&fib, l3->v6, sizeof(struct ipv6hdr) + bpf_ntohs(l3->v6->payload_len));
	}
	fib.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS ||
	    fib.ifindex != port->egress_ifindex)
		goto unscheduled;
	/* The scheduler would drop it: its queue stays full until it next
	 * publishes. Only here, once the scheduler runs and the packet is
	 * routed to it: anything else still goes to the kernel. */
	if (queued->drop_ahead &&
	    bpf_ktime_get_ns() - queued->counted_at_ns < SCHED_DROP_AHEAD_MS * 1000000ULL) {
		struct sched_early *e = bpf_map_lookup_elem(&sched_early, &class_id);
		if (e) {
			e->packets++;
			e->bytes += len;
		}
		return XDP_DROP;
	}
	/* Room for the class in front: every packet pointer is void after. */
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct sched_meta)))
		goto unscheduled;
	struct sched_meta *meta = (void *)(long)ctx->data_meta;
	struct cursor c = xdp_cursor(ctx);
	if ((void *)(meta + 1) > c.pos)
		goto unscheduled;
	meta->class_id = class_id;
	struct ethhdr *eth;
	struct ip_hdr ip;
	int vlans;
	/* Parsed whole a moment ago; the verifier wants the bounds again. */
	if (parse_ip(&c, parse_eth(&c, &eth, &vlans), &ip) < 0)
		goto unscheduled;
	if (ip.family == 4)
		ipv4_decrease_ttl(ip.v4);
	else
		ip.v6->hop_limit--;
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
	if (t)
		t->steered++;
	return bpf_redirect_map(&sched_xsks, queue, XDP_PASS);
unscheduled:
	if (t)
		t->unscheduled++;
	return XDP_PASS;
}

static __always_inline int police(void *ctx, const int tc)
{
	struct policer_totals *t = map_first(&policer_totals);
	struct policer_pkt pkt = {};
	struct cursor c = hook_cursor(ctx, tc, POLICER_HEADERS);
	__u64 len = hook_len(ctx, tc);

	if (t)
		t->packets++;
	int l4 = policer_parse(&c, &pkt);
	if (l4 == PARSE_NOT_IP) {
		if (t)
			t->not_ip++;
		return verdict_pass(tc);
	}
	if (l4 < 0) {
		if (t)
			t->malformed++;
		return verdict_pass(tc);
	}
	if (pkt.ports && tc)
		len = wire_len(ctx, pkt.at_l4, l4, (void *)(long)((struct __sk_buff *)ctx)->data);

	struct policer_rule *r = lookup(&pkt.key);
	if (!r) {
		if (t)
			t->unmatched++;
		return verdict_pass(tc);
	}
	int whole = tc && ((struct __sk_buff *)ctx)->gso_segs > 1;
	if (!meter(r, len, whole)) {
		if (r->exceed != POLICER_EXCEED_REMARK)
			return hook_drop(tc);
		remark(ctx, tc, &pkt.l3, r->remark_dscp);
	}
	if (!tc && r->class_id)
		return steer(ctx, &pkt.l3, r->class_id, len, t);
	return verdict_pass(tc);
}

PEREGRINE_HOOK_PROGRAMS(policer, policer_tc, police)

char LICENSE[] SEC("license") = "Dual BSD/GPL";
