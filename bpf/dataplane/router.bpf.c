// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* Router with service-chain steering, at two hooks: XDP (`router`) and tcx
 * ingress (`router_tc`). Both run route() below and share every map, so
 * ports, steering rules and counters are the same whichever hook a port
 * uses; the per-hook differences (context, verdict values, the way out) are
 * the small hook_* functions, each taking a constant `tc` so the compiler
 * keeps one side per program.
 *
 * IPv4/IPv6 frames are routed with bpf_fib_lookup() (full or direct mode, set
 * at load time), TTL/hop limit decremented (IPv4 checksum patched). XDP
 * rewrites the MACs and redirects through a DEVMAP (bulked). tc hands the
 * frame to bpf_redirect_neigh(), which keeps the skb's GSO and
 * CHECKSUM_PARTIAL state (TCP from a local sender at default veth offloads
 * works), or, on ports flagged ROUTER_PORT_PEER (a container's veth),
 * rewrites the MACs and delivers it into the peer's namespace with
 * bpf_redirect_peer().
 *
 * What Linux's forwarding path drops is dropped (bad IPv4 header checksum,
 * martian sources, this host's own IPv4 addresses as source, frames for
 * another host's MAC). Whatever the router does
 * not handle goes to the kernel (pass) so ARP, ND, ICMP errors and local
 * traffic keep working: non-IP, VLAN tags, IP options and fragments,
 * broadcast/multicast MACs, TTL <= 1, unresolved neighbours, local or
 * unroutable destinations, egress ports not under the router.
 *
 * Steering: on ports marked `classify`, frames matching a rule (destination
 * port+protocol, destination prefix, or source MAC, in that order) are sent
 * unchanged into the first container of a chain; frames coming back from a
 * container's port continue to that port's `next_ifindex`, or are routed.
 */
#include <linux/bpf.h>
#include <linux/if_packet.h>
#include <linux/pkt_cls.h>
#include <linux/rtnetlink.h>
#include "peregrine/forward.h"
#include "peregrine/hook.h"
#include "peregrine/maps.h"
#include "peregrine/netns.h"
#include "peregrine/parse.h"
#include "peregrine/router_kern_user.h"

/* 0: full lookup (policy routing rules); BPF_FIB_LOOKUP_DIRECT: the table
 * of the ingress device (main unless an l3mdev says otherwise). */
const volatile __u32 fib_flags = 0;

/* The port tables, keyed by ifindex (hashes: an ifindex has no upper
 * bound, and in a node's root namespace it only grows as pods come and
 * go). User space adds a port's entries together and deletes them when it
 * leaves. tx_ports: XDP's egress ports (tc checks ROUTER_PORT_TX in
 * `ports`; user space keeps the two in step). A port's counters are
 * created with it: a frame arriving on an ifindex that is not a port is
 * not counted. */
PEREGRINE_MAP(BPF_MAP_TYPE_DEVMAP_HASH, ROUTER_MAX_PORTS, __u32, __u32) tx_ports SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_HASH, ROUTER_MAX_PORTS, __u32, struct router_port_stats)
	port_stats SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_HASH, ROUTER_MAX_PORTS, __u32, struct router_port) ports SEC(".maps");

PEREGRINE_MAP_FLAGS(BPF_MAP_TYPE_LPM_TRIE, ROUTER_MAX_STEER, BPF_F_NO_PREALLOC,
		    struct steer_v4_key, struct steer_target) steer_v4 SEC(".maps");

PEREGRINE_MAP_FLAGS(BPF_MAP_TYPE_LPM_TRIE, ROUTER_MAX_STEER, BPF_F_NO_PREALLOC,
		    struct steer_v6_key, struct steer_target) steer_v6 SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_HASH, ROUTER_MAX_STEER, struct steer_l4_key, struct steer_target)
	steer_l4 SEC(".maps");

PEREGRINE_MAP(BPF_MAP_TYPE_HASH, ROUTER_MAX_STEER, struct steer_mac_key, struct steer_target)
	steer_mac SEC(".maps");

/* The MAC of every router port (key: steer_mac_key, value: ifindex). A
 * frame a chain's last container hands back is still addressed to the
 * router port it first came in by, not to the port it comes back on: it is
 * for this router, not for another host. */
PEREGRINE_MAP(BPF_MAP_TYPE_HASH, ROUTER_MAX_PORTS, struct steer_mac_key, __u32) port_macs SEC(".maps");

/* Type anchors: make the skeleton carry these for user space. */
struct router_port_stats router_port_stats_anchor;
struct router_port router_port_anchor;
struct steer_v4_key steer_v4_key_anchor;
struct steer_v6_key steer_v6_key_anchor;
struct steer_l4_key steer_l4_key_anchor;
struct steer_mac_key steer_mac_key_anchor;
struct steer_target steer_target_anchor;
enum router_action router_action_anchor;
enum router_port_flags router_port_flags_anchor;
enum router_limits router_limits_anchor;

static __always_inline int done(struct router_port_stats *st, enum router_action a, __u64 len, int verdict)
{
	if (st && a < ROUTER_ACTIONS) {
		st->packets[a]++;
		st->bytes[a] += len;
	}
	return verdict;
}

/* Per-hook pieces. `tc` is a constant at every call site (route() is
 * inlined into each program), so each program keeps only its own side and
 * the verifier never sees the other hook's helpers. */

static __always_inline int hook_pass(const int tc)
{
	return tc ? TC_ACT_OK : XDP_PASS;
}

/* Headers the router reads: Ethernet, two tags, an IPv4 header with the
 * longest options (or IPv6), the L4 ports. */
#define ROUTER_HEADERS (14 + 8 + 60 + 4)

/* A VLAN tag on the frame that its bytes no longer show: before tcx
 * ingress runs, the kernel moves an 802.1Q/802.1ad tag out of the frame
 * into the skb (skb_vlan_untag), so at tc the frame reads as untagged. XDP
 * sees every tag in the frame itself. */
static __always_inline int hook_vlan_stripped(void *ctx, const int tc)
{
	return tc && ((struct __sk_buff *)ctx)->vlan_present;
}

static __always_inline __u32 hook_ingress(void *ctx, const int tc)
{
	if (tc)
		return ((struct __sk_buff *)ctx)->ifindex;
	return ((struct xdp_md *)ctx)->ingress_ifindex;
}

/* A unicast frame for another host's MAC, which the kernel would drop as
 * PACKET_OTHERHOST. tc has the kernel's own answer; XDP compares with the
 * port's MAC when user space stored it. Either way a frame addressed to
 * another port of this router (coming back from a chain) is not foreign:
 * it is readdressed to this port (tc: and made PACKET_HOST), so that if
 * it goes to the kernel after all (unresolved neighbour, TTL, local) the
 * kernel takes it as its own instead of dropping it. */
static __always_inline int hook_otherhost(void *ctx, const int tc, struct ethhdr *eth,
					  const struct router_port *port)
{
	if (tc) {
		if (((struct __sk_buff *)ctx)->pkt_type != PACKET_OTHERHOST)
			return 0;
	} else {
		if (!port || !(port->flags & ROUTER_PORT_MAC) || eth_is_group(eth->h_dest))
			return 0;
		/* Two loads a side (clang emits no inline memcmp for BPF). */
		const __u8 *d = eth->h_dest, *m = port->mac;
		if (!((*(__u32 *)d ^ *(__u32 *)m) | (*(__u16 *)(d + 4) ^ *(__u16 *)(m + 4))))
			return 0;
	}
	struct steer_mac_key k = {};
	__builtin_memcpy(k.mac, eth->h_dest, ETH_ALEN);
	if (!bpf_map_lookup_elem(&port_macs, &k))
		return 1;
	if (port && (port->flags & ROUTER_PORT_MAC)) {
		__builtin_memcpy(eth->h_dest, port->mac, ETH_ALEN);
		if (tc)
			bpf_skb_change_type(ctx, PACKET_HOST);
	}
	return 0;
}

/* Cuts the frame to `new_len` bytes (trailing bytes after the IP datagram,
 * which ip_rcv would trim too). Packet pointers are invalid afterwards. */
static __always_inline int hook_trim(void *ctx, const int tc, __u64 len, __u32 new_len)
{
	if (tc)
		return bpf_skb_change_tail(ctx, new_len, 0);
	return bpf_xdp_adjust_tail(ctx, (int)new_len - (int)len);
}

static __always_inline struct router_port *port_of(__u32 ifindex)
{
	return bpf_map_lookup_elem(&ports, &ifindex);
}

/* The length the FIB lookup checks against the egress MTU. tc passes 0:
 * the kernel then checks the skb itself (is_skb_forwardable), which knows a
 * GSO super-packet is cut to size on the way out; its IP length would
 * otherwise read as far above the MTU and every TCP burst would go to the
 * kernel as frag_needed. */
static __always_inline __u16 hook_fib_len(const int tc, __u16 dgram)
{
	return tc ? 0 : dgram;
}

/* Whether `egress` is a router port frames may leave by. XDP also records
 * it as the redirect target (the kernel redirects after the program
 * returns), so the frame can still be rewritten after a yes, and goes to
 * the kernel as it arrived after a no. */
static __always_inline int hook_pick(const int tc, __u32 egress)
{
	if (!tc)
		return bpf_redirect_map(&tx_ports, egress, XDP_PASS) == XDP_REDIRECT;
	struct router_port *p = port_of(egress);
	return p && (p->flags & ROUTER_PORT_TX);
}

static __always_inline int sent(struct router_port_stats *st, __u32 egress, enum router_action a, __u64 len,
				int verdict)
{
	struct router_port_stats *tx = bpf_map_lookup_elem(&port_stats, &egress);
	if (tx) {
		tx->tx_packets++;
		tx->tx_bytes += len;
	}
	return done(st, a, len, verdict);
}

/* Sends the frame unchanged out of `egress` (a chain hop), or passes it if
 * that is no port. tc uses a plain egress redirect, never the peer one:
 * the container's network function may be an XDP program, which only a
 * frame sent through the veth reaches. */
static __always_inline int send(const int tc, struct router_port_stats *st, __u32 egress, enum router_action a,
				__u64 len)
{
	if (!hook_pick(tc, egress))
		return done(st, ROUTER_PASS_NO_PORT, len, hook_pass(tc));
	return sent(st, egress, a, len, tc ? bpf_redirect(egress, 0) : XDP_REDIRECT);
}

/* `l4` is the cursor at the L4 header, after the IP header `l3`. */
static __always_inline struct steer_target *classify(struct ethhdr *eth, const struct ip_hdr *l3, __u8 proto,
						      struct cursor *l4, struct steer_v4_key *k4,
						      struct steer_v6_key *k6)
{
	struct steer_target *t = NULL;
	struct l4_ports *ports = parse_ports(l4, l3, proto);

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

/* Why bpf_fib_lookup() said NOT_FWDED: it says so both for destinations a
 * rule before the main table took (local addresses and broadcasts in the
 * local table) and for no route at all (-ENETUNREACH). A second lookup,
 * straight in the main table without the neighbour, tells them apart: a
 * local address has its connected route there, an unroutable one nothing.
 * IPv4 asks about the other address of the destination's /31 instead:
 * without custom rules the kernel keeps main and local in one trie, and a
 * main-table lookup of a local address finds its local /32 again (NOT_FWDED
 * once more), while its neighbour falls under the connected prefix.
 * Counted as no route although the kernel delivers them: a local address
 * with neither a prefix nor a default route in main, and an IPv4 one whose
 * /31 neighbour is local too. */
static __always_inline enum router_action not_forwarded(void *ctx, struct bpf_fib_lookup *fib)
{
	if (fib->family == AF_INET)
		fib->ipv4_dst ^= bpf_htonl(1);
	fib->tbid = RT_TABLE_MAIN;
	int rc = bpf_fib_lookup(ctx, fib, sizeof(*fib),
				BPF_FIB_LOOKUP_DIRECT | BPF_FIB_LOOKUP_TBID | BPF_FIB_LOOKUP_SKIP_NEIGH);
	return rc == BPF_FIB_LKUP_RET_NOT_FWDED ? ROUTER_PASS_NO_ROUTE : ROUTER_PASS_LOCAL;
}

/* An IPv4 source that is one of this host's own addresses, which Linux's
 * input route refuses as a martian (fib_validate_source: a local source
 * arriving from outside, any interface's address). The FIB knows them
 * without a copy in a map: looked up as a destination, a local address is
 * NOT_FWDED, and not_forwarded() tells it from an unroutable one. */
static __always_inline int ip4_local_src_lookup(void *ctx, __u32 in, __be32 saddr)
{
	struct bpf_fib_lookup f = {
		.family = AF_INET,
		.ipv4_dst = saddr,
		.ifindex = in,
	};
	int rc = bpf_fib_lookup(ctx, &f, sizeof(f), fib_flags | BPF_FIB_LOOKUP_SKIP_NEIGH);
	return rc == BPF_FIB_LKUP_RET_NOT_FWDED && not_forwarded(ctx, &f) == ROUTER_PASS_LOCAL;
}

/* ip4_local_src_lookup's answers, per CPU, direct-mapped by source address.
 * That lookup costs as much as the forwarding one (measured: the IPv4
 * router ran 470 ns a frame beside xdp-forward's 258 with it, in live
 * traffic with bpf_stats). An answer holds while the namespace's route
 * generation is the one it was found under (every address change bumps
 * it: exact) and for at most a second (the removal of a route that no
 * kernel lookup used does not bump it). */
#define LOCAL_SRC_SLOTS 256
#define LOCAL_SRC_TTL_NS 1000000000ULL
struct local_src_answer {
	__be32 saddr;
	__u32 genid;
	__u64 at_ns;
	__u32 in;
	__u32 local;
};

PEREGRINE_MAP(BPF_MAP_TYPE_PERCPU_ARRAY, LOCAL_SRC_SLOTS, __u32, struct local_src_answer)
	local_src_cache SEC(".maps");

static __always_inline int ip4_local_src(void *ctx, const int tc, __u32 in, __be32 saddr)
{
	__u32 h = bpf_ntohl(saddr);
	__u32 slot = (h ^ (h >> 8) ^ (h >> 16)) & (LOCAL_SRC_SLOTS - 1);
	struct local_src_answer *a = bpf_map_lookup_elem(&local_src_cache, &slot);
	__u32 genid = hook_route_genid(ctx, tc);
	__u64 now = bpf_ktime_get_coarse_ns();
	if (!a)
		return ip4_local_src_lookup(ctx, in, saddr);
	if (a->saddr == saddr && a->in == in && a->genid == genid && now - a->at_ns < LOCAL_SRC_TTL_NS)
		return a->local;
	int local = ip4_local_src_lookup(ctx, in, saddr);
	a->saddr = saddr;
	a->in = in;
	a->genid = genid;
	a->at_ns = now;
	a->local = local;
	return local;
}

/* Sends a routed frame out of fib->ifindex: trims what follows the IP
 * datagram (`dgram` bytes after the Ethernet header), decrements TTL/hop
 * limit, then XDP rewrites the MACs and redirects; tc lets the neighbour
 * subsystem fill in the MACs (bpf_redirect_neigh, next hop from the
 * lookup), or rewrites them and enters the container (bpf_redirect_peer). */
static __always_inline int forward(void *ctx, const int tc, struct router_port_stats *st,
				   struct bpf_fib_lookup *fib, int v6, __u32 dgram, __u64 len)
{
	__u32 want = sizeof(struct ethhdr) + dgram;

	if (want < len && hook_trim(ctx, tc, len, want))
		return done(st, ROUTER_PASS_MALFORMED, len, hook_pass(tc));

	/* Pointers from before a trim are gone: take the headers again
	 * (untagged, so the IP header is right after Ethernet). */
	struct cursor c = tc ? skb_cursor(ctx) : xdp_cursor(ctx);
	struct ethhdr *eth = cursor_take(&c, sizeof(*eth));
	if (!eth)
		return done(st, ROUTER_PASS_MALFORMED, len, hook_pass(tc));
	if (v6) {
		struct ipv6hdr *ip6 = cursor_take(&c, sizeof(*ip6));
		if (!ip6)
			return done(st, ROUTER_PASS_MALFORMED, len, hook_pass(tc));
		/* An skb with CHECKSUM_COMPLETE carries the sum over the
		 * header; the kernel's ip6_forward drops that state, here it
		 * is kept true (a no-op for any other skb). */
		__u16 *hop_word = (__u16 *)((void *)ip6 + 6);
		__u16 old = *hop_word;
		ip6->hop_limit--;
		if (tc)
			bpf_csum_update(ctx, (__u32)(__u16)~old + *hop_word);
	} else {
		struct iphdr *ip = cursor_take(&c, sizeof(*ip));
		if (!ip)
			return done(st, ROUTER_PASS_MALFORMED, len, hook_pass(tc));
		ipv4_decrease_ttl(ip);
	}

	if (tc) {
		struct router_port *out = port_of(fib->ifindex);
		if (out && (out->flags & ROUTER_PORT_PEER)) {
			__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
			__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
			return sent(st, fib->ifindex, ROUTER_FORWARD, len, bpf_redirect_peer(fib->ifindex, 0));
		}
		struct bpf_redir_neigh nh = {};
		if (v6) {
			nh.nh_family = AF_INET6;
			__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, 16);
		} else {
			nh.nh_family = AF_INET;
			nh.ipv4_nh = fib->ipv4_dst;
		}
		return sent(st, fib->ifindex, ROUTER_FORWARD, len,
			    bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0));
	}
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	return sent(st, fib->ifindex, ROUTER_FORWARD, len, XDP_REDIRECT);
}

/* Not a verdict of either hook (XDP_*: 0..4, TC_ACT_*: -1..8): the frame
 * goes on to routing. */
#define ROUTE_ON -1000

/* What both IP versions decide before routing, in Linux's order: a frame
 * coming back from a chain's container continues to the next hop; a frame
 * for another host's MAC is dropped (ip_rcv: PACKET_OTHERHOST), or on a
 * bridge's port passed to the bridge, which switches it; one to a
 * group MAC is the kernel's (ip_forward never forwards it). ROUTE_ON else. */
static __always_inline int next_hop_or_l2(void *ctx, const int tc, struct router_port_stats *st,
					  struct router_port *port, struct ethhdr *eth, __u64 len)
{
	if (port && port->next_ifindex)
		return send(tc, st, port->next_ifindex, ROUTER_STEER, len);
	if (hook_otherhost(ctx, tc, eth, port)) {
		if (port && (port->flags & ROUTER_PORT_BRIDGED))
			return done(st, ROUTER_PASS_BRIDGED, len, hook_pass(tc));
		return done(st, ROUTER_DROP_OTHERHOST, len, hook_drop(tc));
	}
	if (eth_is_group(eth->h_dest))
		return done(st, ROUTER_PASS_L2_GROUP, len, hook_pass(tc));
	return ROUTE_ON;
}

/* The router, for either hook. Checks run in the order Linux's input path
 * makes them where it matters (ip_rcv_core: other host, header checksum,
 * trailing bytes; route input: martians, multicast; ip_forward: TTL). */
static __always_inline int route(void *ctx, const int tc)
{
	struct cursor c = hook_cursor(ctx, tc, ROUTER_HEADERS);
	__u64 len = hook_len(ctx, tc);
	__u32 in = hook_ingress(ctx, tc);
	struct router_port_stats *st = bpf_map_lookup_elem(&port_stats, &in);
	struct router_port *port = port_of(in);
	struct bpf_fib_lookup fib = {};
	struct ethhdr *eth;
	__u32 dgram;
	int vlans, l4proto;
	int rc, v6;

	int proto = parse_eth(&c, &eth, &vlans);
	if (proto < 0)
		return done(st, ROUTER_PASS_MALFORMED, len, hook_pass(tc));
	if (vlans || hook_vlan_stripped(ctx, tc))
		return done(st, ROUTER_PASS_VLAN, len, hook_pass(tc));

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip;
		v6 = 0;
		l4proto = parse_ip4(&c, &ip);
		if (l4proto < 0)
			return done(st, ROUTER_PASS_MALFORMED, len, hook_pass(tc));
		dgram = bpf_ntohs(ip->tot_len);
		if (sizeof(*eth) + dgram > len)
			return done(st, ROUTER_PASS_MALFORMED, len, hook_pass(tc));
		if (ip->ihl != 5)
			return done(st, ROUTER_PASS_IP_OPTIONS, len, hook_pass(tc));
		if (ip4_is_fragment(ip))
			return done(st, ROUTER_PASS_FRAGMENT, len, hook_pass(tc));

		rc = next_hop_or_l2(ctx, tc, st, port, eth, len);
		if (rc != ROUTE_ON)
			return rc;
		if (!ip4_csum_ok(ip))
			return done(st, ROUTER_DROP_BAD_CSUM, len, hook_drop(tc));
		if (ip4_martian_src(ip->saddr) || ip4_local_src(ctx, tc, in, ip->saddr))
			return done(st, ROUTER_DROP_MARTIAN, len, hook_drop(tc));
		if (ip4_group_dst(ip->daddr))
			return done(st, ROUTER_PASS_LOCAL, len, hook_pass(tc));
		if (port && port->classify) {
			struct steer_v4_key k4 = { .prefixlen = 32, .addr = ip->daddr };
			struct ip_hdr l3 = { .family = 4, .v4 = ip };
			struct steer_target *t = classify(eth, &l3, l4proto, &c, &k4, NULL);
			if (t)
				return send(tc, st, t->ifindex, ROUTER_STEER, len);
		}
		if (ip->ttl <= 1)
			return done(st, ROUTER_PASS_TTL, len, hook_pass(tc));

		fib_key_ip4(&fib, ip, hook_fib_len(tc, dgram));
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6;
		v6 = 1;
		l4proto = parse_ip6(&c, &ip6);
		if (l4proto < 0)
			return done(st, ROUTER_PASS_MALFORMED, len, hook_pass(tc));
		dgram = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
		if (sizeof(*eth) + dgram > len)
			return done(st, ROUTER_PASS_MALFORMED, len, hook_pass(tc));
		/* Hop-by-hop options are for every router on the path (router
		 * alert, jumbograms): the kernel's to read. */
		if (l4proto == IPPROTO_HOPOPTS)
			return done(st, ROUTER_PASS_IP_OPTIONS, len, hook_pass(tc));

		rc = next_hop_or_l2(ctx, tc, st, port, eth, len);
		if (rc != ROUTE_ON)
			return rc;
		if (ip6_martian_src(&ip6->saddr))
			return done(st, ROUTER_DROP_MARTIAN, len, hook_drop(tc));
		if (ip6_is_multicast(&ip6->daddr))
			return done(st, ROUTER_PASS_LOCAL, len, hook_pass(tc));
		/* ip6_forward answers a link-local source with "beyond scope";
		 * a link-local destination is the ingress link's own. */
		if (ip6_is_link_local(&ip6->saddr) || ip6_is_link_local(&ip6->daddr))
			return done(st, ROUTER_PASS_LINK_LOCAL, len, hook_pass(tc));
		if (port && port->classify) {
			struct steer_v6_key k6 = { .prefixlen = 128 };
			__builtin_memcpy(k6.addr, &ip6->daddr, 16);
			struct ip_hdr l3 = { .family = 6, .v6 = ip6 };
			struct steer_target *t = classify(eth, &l3, l4proto, &c, NULL, &k6);
			if (t)
				return send(tc, st, t->ifindex, ROUTER_STEER, len);
		}
		if (ip6->hop_limit <= 1)
			return done(st, ROUTER_PASS_TTL, len, hook_pass(tc));

		fib_key_ip6(&fib, ip6, hook_fib_len(tc, dgram));
	} else {
		return done(st, ROUTER_PASS_NOT_IP, len, hook_pass(tc));
	}

	fib.ifindex = in;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), fib_flags);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		if (!hook_pick(tc, fib.ifindex))
			return done(st, ROUTER_PASS_NO_PORT, len, hook_pass(tc));
		return forward(ctx, tc, st, &fib, v6, dgram, len);
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return done(st, ROUTER_PASS_NO_NEIGH, len, hook_pass(tc));
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return done(st, not_forwarded(ctx, &fib), len, hook_pass(tc));
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return done(st, ROUTER_PASS_LOCAL, len, hook_pass(tc));
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return done(st, ROUTER_PASS_FRAG_NEEDED, len, hook_pass(tc));
	default: /* blackhole, unreachable, prohibit, unsupported encap */
		return done(st, ROUTER_PASS_NO_ROUTE, len, hook_pass(tc));
	}
}

/* `router` at XDP, `router_tc` at tcx ingress (attach with BPF_TCX_INGRESS
 * only: bpf_redirect_peer works from ingress alone). */
PEREGRINE_HOOK_PROGRAMS(router, router_tc, route)

char LICENSE[] SEC("license") = "Dual BSD/GPL";
