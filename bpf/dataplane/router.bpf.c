// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* XDP router with service-chain steering.
 *
 * IPv4/IPv6 frames are routed with bpf_fib_lookup() (full or direct mode, set
 * at load time): TTL/hop limit decremented (IPv4 checksum patched), MACs
 * rewritten, then redirected through a DEVMAP (bulked) to the egress port.
 * Whatever the router does not handle goes to the kernel (XDP_PASS) so ARP,
 * ND, ICMP errors and local traffic keep working: non-IP, VLAN tags, IPv4
 * options and fragments, TTL <= 1, unresolved neighbours, local or
 * unroutable destinations, egress ports not under the router.
 *
 * Steering: on ports marked `classify`, frames matching a rule (destination
 * port+protocol, destination prefix, or source MAC, in that order) are sent
 * unchanged into the first container of a chain; frames coming back from a
 * container's port continue to that port's `next_ifindex`, or are routed.
 */
#include <linux/bpf.h>
#include "peregrine/maps.h"
#include "peregrine/parse.h"
#include "peregrine/router_kern_user.h"

#define AF_INET 2
#define AF_INET6 10

/* 0: full lookup (policy routing rules); BPF_FIB_LOOKUP_DIRECT: the table
 * of the ingress device (main unless an l3mdev says otherwise). */
const volatile __u32 fib_flags = 0;

/* Egress ports, indexed by ifindex: an array devmap is a direct index, the
 * cheapest lookup on the hot path. */
PEREGRINE_MAP(BPF_MAP_TYPE_DEVMAP, ROUTER_MAX_IFINDEX, __u32, __u32) tx_ports SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, ROUTER_MAX_IFINDEX, __u32, struct router_port_stats)
	port_stats SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_ARRAY, ROUTER_MAX_IFINDEX, __u32, struct router_port) ports SEC(".maps");

PEREGRINE_MAP_FLAGS(BPF_MAP_TYPE_LPM_TRIE, ROUTER_MAX_STEER, BPF_F_NO_PREALLOC,
		    struct steer_v4_key, struct steer_target) steer_v4 SEC(".maps");

PEREGRINE_MAP_FLAGS(BPF_MAP_TYPE_LPM_TRIE, ROUTER_MAX_STEER, BPF_F_NO_PREALLOC,
		    struct steer_v6_key, struct steer_target) steer_v6 SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_HASH, ROUTER_MAX_STEER, struct steer_l4_key, struct steer_target)
	steer_l4 SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_HASH, ROUTER_MAX_STEER, struct steer_mac_key, struct steer_target)
	steer_mac SEC(".maps");

/* Type anchors: make the skeleton carry these for user space. */
struct router_port_stats router_port_stats_anchor;
struct router_port router_port_anchor;
struct steer_v4_key steer_v4_key_anchor;
struct steer_v6_key steer_v6_key_anchor;
struct steer_l4_key steer_l4_key_anchor;
struct steer_mac_key steer_mac_key_anchor;
struct steer_target steer_target_anchor;
enum router_action router_action_anchor;
enum router_limits router_limits_anchor;

static __always_inline __u32 slot_of(__u32 ifindex)
{
	return ifindex < ROUTER_MAX_IFINDEX ? ifindex : 0;
}

static __always_inline int done(struct router_port_stats *st, enum router_action a, __u64 len, int verdict)
{
	if (st && a < ROUTER_ACTIONS) {
		st->packets[a]++;
		st->bytes[a] += len;
	}
	return verdict;
}

/* Picks `egress` as the redirect target if it is a router port. Only the
 * target is recorded here (the kernel redirects after the program returns),
 * so the frame can still be rewritten after a yes, and goes to the kernel as
 * it arrived after a no. */
static __always_inline int pick(__u32 egress)
{
	return bpf_redirect_map(&tx_ports, egress, XDP_PASS) == XDP_REDIRECT;
}

static __always_inline int sent(struct router_port_stats *st, __u32 egress, enum router_action a, __u64 len)
{
	__u32 eslot = slot_of(egress);
	struct router_port_stats *tx = bpf_map_lookup_elem(&port_stats, &eslot);
	if (tx) {
		tx->tx_packets++;
		tx->tx_bytes += len;
	}
	return done(st, a, len, XDP_REDIRECT);
}

/* Sends the frame unchanged to `egress`, or passes it if that is no port. */
static __always_inline int send(struct router_port_stats *st, __u32 egress, enum router_action a, __u64 len)
{
	if (!pick(egress))
		return done(st, ROUTER_PASS_NO_PORT, len, XDP_PASS);
	return sent(st, egress, a, len);
}

static __always_inline void ipv4_decrease_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xFFFF));
	ip->ttl--;
}

/* `l4` is the cursor at the L4 header. */
static __always_inline struct steer_target *classify(struct ethhdr *eth, __u8 proto, struct cursor *l4,
						      struct steer_v4_key *k4, struct steer_v6_key *k6)
{
	struct steer_target *t = NULL;
	struct l4_ports *ports = parse_ports(l4, proto);

	if (ports) {
		struct steer_l4_key kl = { .proto = proto, .port = ports->dest };
		t = bpf_map_lookup_elem(&steer_l4, &kl);
		if (t)
			return t;
	}
	if (k4)
		t = bpf_map_lookup_elem(&steer_v4, k4);
	else if (k6)
		t = bpf_map_lookup_elem(&steer_v6, k6);
	if (t)
		return t;
	struct steer_mac_key km = {};
	__builtin_memcpy(km.mac, eth->h_source, 6);
	return bpf_map_lookup_elem(&steer_mac, &km);
}

SEC("xdp")
int router(struct xdp_md *ctx)
{
	struct cursor c = xdp_cursor(ctx);
	__u64 len = c.end - c.pos;
	__u32 in = ctx->ingress_ifindex;
	__u32 slot = slot_of(in);
	struct router_port_stats *st = bpf_map_lookup_elem(&port_stats, &slot);
	struct router_port *port = bpf_map_lookup_elem(&ports, &slot);
	struct bpf_fib_lookup fib = {};
	struct ethhdr *eth;
	int vlans, l4proto;
	int rc;

	int proto = parse_eth(&c, &eth, &vlans);
	if (proto < 0)
		return done(st, ROUTER_PASS_MALFORMED, len, XDP_PASS);
	if (vlans)
		return done(st, ROUTER_PASS_VLAN, len, XDP_PASS);

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip;
		l4proto = parse_ip4(&c, &ip);
		if (l4proto < 0 || ip4_cut_short(ip, &c))
			return done(st, ROUTER_PASS_MALFORMED, len, XDP_PASS);
		if (ip->ihl != 5)
			return done(st, ROUTER_PASS_OPTIONS, len, XDP_PASS);
		__u16 tot = bpf_ntohs(ip->tot_len);
		if (ip4_is_fragment(ip))
			return done(st, ROUTER_PASS_FRAGMENT, len, XDP_PASS);

		if (port && port->next_ifindex)
			return send(st, port->next_ifindex, ROUTER_STEER, len);
		if (port && port->classify) {
			struct steer_v4_key k4 = { .prefixlen = 32, .addr = ip->daddr };
			struct steer_target *t = classify(eth, l4proto, &c, &k4, NULL);
			if (t)
				return send(st, t->ifindex, ROUTER_STEER, len);
		}
		if (ip->ttl <= 1)
			return done(st, ROUTER_PASS_TTL, len, XDP_PASS);

		fib.family = AF_INET;
		fib.tos = ip->tos;
		fib.l4_protocol = ip->protocol;
		fib.tot_len = tot;
		fib.ipv4_src = ip->saddr;
		fib.ipv4_dst = ip->daddr;
		fib.ifindex = in;
		rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), fib_flags);
		if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
			if (!pick(fib.ifindex))
				return done(st, ROUTER_PASS_NO_PORT, len, XDP_PASS);
			ipv4_decrease_ttl(ip);
		}
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6;
		l4proto = parse_ip6(&c, &ip6);
		if (l4proto < 0 || ip6_cut_short(ip6, &c))
			return done(st, ROUTER_PASS_MALFORMED, len, XDP_PASS);
		__u16 plen = bpf_ntohs(ip6->payload_len);

		if (port && port->next_ifindex)
			return send(st, port->next_ifindex, ROUTER_STEER, len);
		if (port && port->classify) {
			struct steer_v6_key k6 = { .prefixlen = 128 };
			__builtin_memcpy(k6.addr, &ip6->daddr, 16);
			struct steer_target *t = classify(eth, l4proto, &c, NULL, &k6);
			if (t)
				return send(st, t->ifindex, ROUTER_STEER, len);
		}
		if (ip6->hop_limit <= 1)
			return done(st, ROUTER_PASS_TTL, len, XDP_PASS);

		struct in6_addr *src = (struct in6_addr *)fib.ipv6_src;
		struct in6_addr *dst = (struct in6_addr *)fib.ipv6_dst;
		fib.family = AF_INET6;
		fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0FFFFFFF);
		fib.l4_protocol = ip6->nexthdr;
		fib.tot_len = sizeof(*ip6) + plen;
		*src = ip6->saddr;
		*dst = ip6->daddr;
		fib.ifindex = in;
		rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), fib_flags);
		if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
			if (!pick(fib.ifindex))
				return done(st, ROUTER_PASS_NO_PORT, len, XDP_PASS);
			ip6->hop_limit--;
		}
	} else {
		return done(st, ROUTER_PASS_NOT_IP, len, XDP_PASS);
	}

	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
		return sent(st, fib.ifindex, ROUTER_FORWARD, len);
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return done(st, ROUTER_PASS_NO_NEIGH, len, XDP_PASS);
	case BPF_FIB_LKUP_RET_NOT_FWDED:
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return done(st, ROUTER_PASS_LOCAL, len, XDP_PASS);
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return done(st, ROUTER_PASS_FRAG_NEEDED, len, XDP_PASS);
	default: /* blackhole, unreachable, prohibit, unsupported encap */
		return done(st, ROUTER_PASS_NO_ROUTE, len, XDP_PASS);
	}
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
