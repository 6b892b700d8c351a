/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Bounds-checked header parsing for XDP and tc programs, one rule for all of
 * them: no helper reads past [data, data_end), and the verifier sees every
 * check. What a program does with a frame it cannot parse (pass, count as
 * malformed) is its own choice; what counts as parseable is decided here. */
#ifndef PEREGRINE_PARSE_H
#define PEREGRINE_PARSE_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct cursor {
	void *pos;
	void *end;
};

/* A cursor over the whole frame an XDP program was given. */
static __always_inline struct cursor xdp_cursor(const struct xdp_md *ctx)
{
	struct cursor c = {
		.pos = (void *)(long)ctx->data,
		.end = (void *)(long)ctx->data_end,
	};
	return c;
}

/* A cursor over the linear part of a tc program's skb: at tcx ingress it
 * starts at the Ethernet header, and may end before skb->len (paged data;
 * bpf_skb_pull_data() brings headers in). */
static __always_inline struct cursor skb_cursor(const struct __sk_buff *skb)
{
	struct cursor c = {
		.pos = (void *)(long)skb->data,
		.end = (void *)(long)skb->data_end,
	};
	return c;
}

static __always_inline void *cursor_take(struct cursor *c, __u32 len)
{
	void *p = c->pos;

	if (p + len > c->end)
		return NULL;
	c->pos = p + len;
	return p;
}

/* Why a parse_* helper gave up (its return value when negative). */
enum parse_error {
	PARSE_CUT = -1, /* the frame ends inside the header */
	PARSE_BAD = -2, /* the header is whole but inconsistent */
	PARSE_NOT_IP = -3, /* parse_ip: the EtherType is neither IPv4 nor IPv6 */
};

#ifndef IP_MF
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
#endif

/* Tags parse_eth looks through: 802.1Q, and 802.1ad outside it (QinQ). */
#define PARSE_MAX_VLANS 2

struct vlan_hdr {
	__be16 tci;
	__be16 proto; /* the encapsulated EtherType */
};

/* The Ethernet header in *eth and up to PARSE_MAX_VLANS VLAN tags after it,
 * counted in *vlans. Returns the EtherType after the tags (network order;
 * a third tag's TPID comes back as such), or PARSE_CUT. */
static __always_inline int parse_eth(struct cursor *c, struct ethhdr **eth, int *vlans)
{
	struct ethhdr *e = cursor_take(c, sizeof(*e));

	*vlans = 0;
	if (!e)
		return PARSE_CUT;
	*eth = e;
	__u16 proto = e->h_proto;
#pragma unroll
	for (int i = 0; i < PARSE_MAX_VLANS; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan_hdr *v = cursor_take(c, sizeof(*v));
		if (!v)
			return PARSE_CUT;
		proto = v->proto;
		(*vlans)++;
	}
	return proto;
}

/* The IPv4 header in *ip, options included (the cursor ends up at the L4
 * header). Returns the protocol, PARSE_CUT when header or options are cut
 * short, PARSE_BAD for a version other than 4, an IHL below 5 words or a
 * total length shorter than the header. Whether the whole datagram is there
 * is the caller's question (ip4_cut_short): a checker of replies still wants
 * to see the UDP header of a cut one. */
static __always_inline int parse_ip4(struct cursor *c, struct iphdr **ip)
{
	struct iphdr *h = cursor_take(c, sizeof(*h));

	if (!h)
		return PARSE_CUT;
	*ip = h;
	if (h->version != 4 || h->ihl < 5)
		return PARSE_BAD;
	if (h->ihl > 5 && !cursor_take(c, (h->ihl - 5) * 4))
		return PARSE_CUT;
	if (bpf_ntohs(h->tot_len) < h->ihl * 4)
		return PARSE_BAD;
	return h->protocol;
}

/* The datagram the IPv4 header announces runs past the frame's end
 * (Ethernet padding after it is fine). */
static __always_inline int ip4_cut_short(const struct iphdr *ip, const struct cursor *c)
{
	return (void *)ip + bpf_ntohs(ip->tot_len) > c->end;
}

/* A fragment, first or later: not a whole datagram. */
static __always_inline int ip4_is_fragment(const struct iphdr *ip)
{
	return ip->frag_off & bpf_htons(IP_MF | IP_OFFSET);
}

/* The IPv6 header in *ip6 (extension headers are not walked). Returns the
 * next header, PARSE_CUT or PARSE_BAD (version other than 6). */
static __always_inline int parse_ip6(struct cursor *c, struct ipv6hdr **ip6)
{
	struct ipv6hdr *h = cursor_take(c, sizeof(*h));

	if (!h)
		return PARSE_CUT;
	*ip6 = h;
	if (h->version != 6)
		return PARSE_BAD;
	return h->nexthdr;
}

/* The payload the IPv6 header announces runs past the frame's end. */
static __always_inline int ip6_cut_short(const struct ipv6hdr *ip6, const struct cursor *c)
{
	return (void *)(ip6 + 1) + bpf_ntohs(ip6->payload_len) > c->end;
}

/* An IP header of either family, as parse_ip found it: `family` (4 or 6)
 * says which pointer is set. */
struct ip_hdr {
	int family;
	union {
		struct iphdr *v4;
		struct ipv6hdr *v6;
	};
};

/* parse_ip4 or parse_ip6, as the EtherType `eth_proto` (parse_eth's return)
 * says, for programs that treat both families alike up to L4. Returns the
 * L4 protocol, PARSE_CUT, PARSE_BAD, or PARSE_NOT_IP (family 0). */
static __always_inline int parse_ip(struct cursor *c, int eth_proto, struct ip_hdr *l3)
{
	if (eth_proto == bpf_htons(ETH_P_IP)) {
		l3->family = 4;
		return parse_ip4(c, &l3->v4);
	}
	if (eth_proto == bpf_htons(ETH_P_IPV6)) {
		l3->family = 6;
		return parse_ip6(c, &l3->v6);
	}
	l3->family = 0;
	return PARSE_NOT_IP;
}

/* ip4_cut_short or ip6_cut_short of what parse_ip parsed. */
static __always_inline int ip_cut_short(const struct ip_hdr *l3, const struct cursor *c)
{
	return l3->family == 4 ? ip4_cut_short(l3->v4, c) : ip6_cut_short(l3->v6, c);
}

/* An IPv4 fragment (ip4_is_fragment). IPv6 extension headers are not walked,
 * so an IPv6 fragment shows as next header IPPROTO_FRAGMENT instead. */
static __always_inline int ip_is_fragment(const struct ip_hdr *l3)
{
	return l3->family == 4 && ip4_is_fragment(l3->v4);
}

/* Whether the `len` bytes at `p`, past the IP header `l3`, lie inside the
 * datagram its length field announces (IPv4 total length, IPv6 payload
 * length). Bytes after the datagram are Ethernet padding or a trailer,
 * which ip_rcv trims: an L4 header there is none, and its ports are not
 * the datagram's. */
static __always_inline int ip_holds(const struct ip_hdr *l3, const void *p, __u32 len)
{
	const void *ip = l3->v4; /* the union's header, of either family */
	__u32 dgram = l3->family == 4 ? bpf_ntohs(l3->v4->tot_len)
				      : sizeof(struct ipv6hdr) + bpf_ntohs(l3->v6->payload_len);

	return (__u64)(p - ip) + len <= dgram;
}

/* The UDP header, or NULL when cut short. */
static __always_inline struct udphdr *parse_udp(struct cursor *c)
{
	return cursor_take(c, sizeof(struct udphdr));
}

/* IPv6 fragment header (RFC 8200 4.5). */
struct frag6_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset in 8-byte units << 3, M flag in bit 0 */
	__be32 identification;
};

#define FRAG6_OFFSET 0xfff8

/* What find_udp found. */
enum udp_found {
	UDP_NONE = 0,           /* no UDP header to act on */
	UDP_WHOLE = 1,          /* a whole datagram */
	UDP_FIRST_FRAGMENT = 2, /* the first fragment of one */
};

/* The UDP header of an untagged IPv4/IPv6 frame, for programs that steer
 * datagrams by port: UDP_WHOLE with *udp and *l3 set for a whole datagram;
 * UDP_FIRST_FRAGMENT for the first fragment of one (IPv4, or IPv6 with the
 * fragment header right after the fixed header), its UDP header in *udp;
 * UDP_NONE for anything else (VLAN-tagged, not IP, cut short or malformed,
 * a later fragment, which carries no port, another protocol, other IPv6
 * extension headers, which are not walked). */
static __always_inline int find_udp(struct cursor *c, struct ip_hdr *l3, struct udphdr **udp)
{
	struct ethhdr *eth;
	int vlans;
	int found = UDP_WHOLE;

	int eth_proto = parse_eth(c, &eth, &vlans);
	if (eth_proto < 0 || vlans)
		return UDP_NONE;
	int proto = parse_ip(c, eth_proto, l3);
	if (proto < 0 || ip_cut_short(l3, c))
		return UDP_NONE;
	if (ip_is_fragment(l3)) {
		if (proto != IPPROTO_UDP || (l3->v4->frag_off & bpf_htons(IP_OFFSET)))
			return UDP_NONE;
		found = UDP_FIRST_FRAGMENT;
	} else if (l3->family == 6 && proto == IPPROTO_FRAGMENT) {
		struct frag6_hdr *fh = cursor_take(c, sizeof(*fh));
		if (!fh || !ip_holds(l3, fh, sizeof(*fh)) || fh->nexthdr != IPPROTO_UDP ||
		    (fh->frag_off & bpf_htons(FRAG6_OFFSET)))
			return UDP_NONE;
		found = UDP_FIRST_FRAGMENT;
	} else if (proto != IPPROTO_UDP) {
		return UDP_NONE;
	}
	*udp = parse_udp(c);
	return *udp && ip_holds(l3, *udp, sizeof(**udp)) ? found : UDP_NONE;
}

/* Source and destination port, where UDP and TCP headers both begin. */
struct l4_ports {
	__be16 source;
	__be16 dest;
};

/* The ports of the UDP or TCP header after the IP header `l3`, or NULL
 * (the cursor left where it was) for another protocol, an IPv4 fragment
 * other than the first (it carries no L4 header: what stands there is
 * payload), or ports cut short by the frame's end or by the datagram's
 * (ip_holds). */
static __always_inline struct l4_ports *parse_ports(struct cursor *c, const struct ip_hdr *l3, __u8 proto)
{
	struct cursor at = *c;

	if (proto != IPPROTO_UDP && proto != IPPROTO_TCP)
		return NULL;
	if (ip_is_fragment(l3) && (l3->v4->frag_off & bpf_htons(IP_OFFSET)))
		return NULL;
	struct l4_ports *p = cursor_take(&at, sizeof(*p));
	if (!p || !ip_holds(l3, p, sizeof(*p)))
		return NULL;
	*c = at;
	return p;
}

/* Fold a 32+ bit ones'-complement sum to 16 bits. */
static __always_inline __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* Sum of the two 16-bit halves of a 32-bit word as it lies in memory. */
static __always_inline __u64 csum_word32(__u32 w)
{
	return (w & 0xffff) + (w >> 16);
}

/* Ones'-complement "subtract": adding the complement of each half. */
static __always_inline __u64 csum_unword32(__u32 w)
{
	return ((~w) & 0xffff) + ((~w) >> 16);
}

/* A broadcast or multicast (group) MAC address. */
static __always_inline int eth_is_group(const __u8 *mac)
{
	return mac[0] & 1;
}

/* The header checksum of an option-less (20-byte) IPv4 header holds: the
 * ones'-complement sum of its ten words is all ones. */
static __always_inline int ip4_csum_ok(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u64 sum = 0;

#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	return csum_fold(sum) == 0xffff;
}

/* Source addresses Linux never accepts for forwarding (martians, as
 * ip_route_input_slow calls them): loopback 127/8, the unspecified
 * 0.0.0.0, multicast 224/4 and the limited broadcast 255.255.255.255. The
 * rest of 0/8 is an ordinary source since Linux 6.x (0.1.2.3 is
 * forwarded). */
static __always_inline int ip4_martian_src(__be32 saddr)
{
	__u32 a = bpf_ntohl(saddr);

	return (a >> 24) == 127 || a == 0 || (a >> 28) == 0xe || a == 0xffffffff;
}

/* A destination no unicast route may take: multicast 224/4 or the limited
 * broadcast (the kernel's multicast and broadcast input paths own them). */
static __always_inline int ip4_group_dst(__be32 daddr)
{
	__u32 a = bpf_ntohl(daddr);

	return (a >> 28) == 0xe || a == 0xffffffff;
}

static __always_inline int ip6_is_multicast(const struct in6_addr *a)
{
	return a->in6_u.u6_addr8[0] == 0xff;
}

static __always_inline int ip6_is_link_local(const struct in6_addr *a)
{
	return a->in6_u.u6_addr8[0] == 0xfe && (a->in6_u.u6_addr8[1] & 0xc0) == 0x80;
}

/* IPv6 source addresses ip6_rcv_core and ip6_forward refuse: loopback ::1,
 * multicast ff00::/8 and the unspecified address ::. */
static __always_inline int ip6_martian_src(const struct in6_addr *a)
{
	const __u32 *w = a->in6_u.u6_addr32;

	if (ip6_is_multicast(a))
		return 1;
	return !(w[0] | w[1] | w[2]) && (w[3] == 0 || w[3] == bpf_htonl(1));
}

#endif
