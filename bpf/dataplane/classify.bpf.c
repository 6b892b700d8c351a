// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* The HTB engine's classifier (`qos serve` with engine = "htb"), at tcx
 * egress of the shaped device: each packet's fields are matched against
 * the policer's rules (the same tuple-space lookup, policer_lookup.h, on
 * the policer's own maps, shared by fd), and a packet whose winning rule
 * names a class gets that class's HTB class id in skb->priority
 * (major:minor = the HTB's handle : the class id), which HTB takes before
 * any filter. On a device with several TX queues (an MQ root, one HTB per
 * queue) the flow's hash picks the queue, and queue_mapping and the
 * priority's major say the same queue.
 *
 * Nothing is dropped or changed but those two fields: unclassified, non-IP
 * and malformed frames pass with their priority as it was (HTB sends
 * them unshaped: no default class), counted. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include "peregrine/hook.h"
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/policer_kern_user.h"
#include "peregrine/htb_kern_user.h"

/* tcx: run the next program, then the qdisc (TCX_NEXT). */
#define CLASSIFY_NEXT TC_ACT_UNSPEC

/* The policer's maps: user space hands the loader the running policer's
 * (bpf_map__reuse_fd), so `qos rule add|del` changes what this sees too. */
PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, POLICER_MAX_MASKS, __u32, struct policer_mask) policer_masks SEC(".maps");

PEREGRINE_MAP_FLAGS(BPF_MAP_TYPE_HASH, POLICER_MAX_RULES, BPF_F_NO_PREALLOC, struct policer_key,
		    struct policer_rule) policer_rules SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, 1, __u32, struct htb_port) htb_port SEC(".maps");

/* The classes as configured (names, settings): a class id is used only
 * while its slot is. Sized by the htb engine's own limit, not the AF_XDP
 * scheduler's (SCHED_MAX_CLASSES). */
PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, HTB_MAX_CLASSES, __u32, struct sched_class) htb_classes SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct htb_totals) htb_totals SEC(".maps");

#include "peregrine/policer_lookup.h"

/* Type anchors for the skeleton. */
struct htb_port htb_port_anchor;
struct htb_totals htb_totals_anchor;
enum htb_limits htb_limits_anchor;

/* Headers read: Ethernet, two tags, IPv4 with the longest options (or
 * IPv6), the L4 ports. */
#define CLASSIFY_HEADERS (14 + 8 + 60 + 4)

SEC("tc") int classify(struct __sk_buff *skb)
{
	struct htb_totals *t = map_first(&htb_totals);
	struct policer_pkt pkt = {};
	struct cursor c = hook_cursor(skb, 1, CLASSIFY_HEADERS);

	if (t)
		t->packets++;
	int l4 = policer_parse(&c, &pkt);
	if (l4 < 0) {
		if (t && l4 == PARSE_NOT_IP)
			t->not_ip++;
		else if (t)
			t->malformed++;
		return CLASSIFY_NEXT;
	}

	struct policer_rule *r = lookup(&pkt.key);
	struct htb_port *port = map_first(&htb_port);
	if (!r || !r->class_id || !port || !port->major || !port->queues)
		goto unclassified;
	__u32 class_id = r->class_id;
	struct sched_class *class = bpf_map_lookup_elem(&htb_classes, &class_id);
	if (!class || !class->used)
		goto unclassified;
	__u32 queue = 0;
	if (port->queues > 1) {
		queue = bpf_get_hash_recalc(skb) % port->queues;
		/* The TX queue is picked after tcx egress; a queue_mapping of
		 * q + 1 reads there as "received on queue q", which the pick
		 * (skb_tx_hash) turns into TX queue q when no socket has a
		 * queue cached and no XPS map says otherwise: forwarded
		 * traffic, what `qos serve` shapes. */
		skb->queue_mapping = queue + 1;
	}
	skb->priority = ((__u32)(port->major + queue) << 16) | class_id;
	if (t)
		t->classified++;
	return CLASSIFY_NEXT;
unclassified:
	if (t)
		t->unclassified++;
	return CLASSIFY_NEXT;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
