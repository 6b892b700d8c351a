/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Router and service-chain steering (XDP and tc): definitions shared by router.bpf.c
 * and user space (through the generated skeleton types). */
#ifndef PEREGRINE_ROUTER_KERN_USER_H
#define PEREGRINE_ROUTER_KERN_USER_H

#include <linux/types.h>

/* What the router did with a frame. Every frame is counted under exactly one
 * action at its ingress port, on either hook (XDP or tcx ingress). The PASS
 * actions hand the frame to the kernel, which then answers (ICMP, ARP, ND)
 * or drops it with its own counters; the DROP actions drop what the
 * kernel's forwarding path would drop too. User space names each action
 * after its enumerator (ROUTER_PASS_TTL: "pass_ttl"), read from this list
 * by crates/bpf/build.rs: one enumerator a line, comment on the same line. */
enum router_action {
	ROUTER_FORWARD = 0,       /* routed by the FIB and sent out */
	ROUTER_STEER,             /* sent into a service chain (or on along it) */
	ROUTER_PASS_NOT_IP,       /* ARP and other non-IP */
	ROUTER_PASS_VLAN,         /* 802.1Q/802.1ad tagged: not handled */
	ROUTER_PASS_MALFORMED,    /* cut short or inconsistent headers */
	ROUTER_PASS_IP_OPTIONS,   /* IPv4 options, IPv6 hop-by-hop options */
	ROUTER_PASS_FRAGMENT,     /* IPv4 fragment */
	ROUTER_PASS_TTL,          /* TTL / hop limit <= 1: kernel sends time exceeded */
	ROUTER_PASS_LOCAL,        /* for this host, or multicast/broadcast destination */
	ROUTER_PASS_NO_NEIGH,     /* next hop's MAC unknown: kernel resolves it */
	ROUTER_PASS_NO_ROUTE,     /* no route, unreachable, blackhole, prohibit: kernel answers */
	ROUTER_PASS_FRAG_NEEDED,  /* larger than the egress MTU */
	ROUTER_PASS_NO_PORT,      /* egress is not a router port */
	ROUTER_PASS_L2_GROUP,     /* broadcast/multicast MAC: the host's, never forwarded */
	ROUTER_PASS_LINK_LOCAL,   /* IPv6 link-local source or destination: not routed */
	ROUTER_PASS_BRIDGED,      /* unicast MAC of another host on a bridge's port: the bridge switches it */
	ROUTER_DROP_OTHERHOST,    /* unicast MAC of another host, not a router port (PACKET_OTHERHOST) */
	ROUTER_DROP_BAD_CSUM,     /* IPv4 header checksum wrong */
	ROUTER_DROP_MARTIAN,      /* martian source: loopback, 0.0.0.0, multicast, broadcast, own address, :: */
	ROUTER_ACTIONS,
};

enum router_limits {
	/* Ports of one router: the port tables (tx_ports, ports, port_stats,
	 * port_macs) are hashes keyed by ifindex, so any ifindex fits; this
	 * many ports at once. */
	ROUTER_MAX_PORTS = 4096,
	ROUTER_MAX_STEER = 1024,
};

/* Per-CPU, per-port counters (key: ifindex). */
struct router_port_stats {
	__u64 packets[ROUTER_ACTIONS];
	__u64 bytes[ROUTER_ACTIONS];
	__u64 tx_packets; /* frames this port sent out for the router */
	__u64 tx_bytes;
};

/* What user space says about a port (router_port.flags). */
enum router_port_flags {
	/* A router port: routed and steered frames may leave through it
	 * (XDP: also its tx_ports DEVMAP entry). */
	ROUTER_PORT_TX = 1 << 0,
	/* router_port.mac holds the port's MAC (also a key of port_macs). XDP
	 * has no pkt_type: it drops unicast frames for another MAC by this
	 * (tc reads skb->pkt_type). */
	ROUTER_PORT_MAC = 1 << 1,
	/* tc: the port is a veth whose peer is in another network namespace (a
	 * container): routed frames are delivered straight into the peer's
	 * ingress with bpf_redirect_peer, MACs rewritten here. The helper takes
	 * this port's own ifindex and finds the peer itself, so no peer ifindex
	 * is stored. Not for ports whose peer runs an XDP program: the peer's
	 * XDP hook is skipped (its tc ingress runs). */
	ROUTER_PORT_PEER = 1 << 2,
	/* The port is a port of a bridge (it has a master): a unicast frame
	 * for another MAC is the bridge's to switch, passed on
	 * (ROUTER_PASS_BRIDGED) where a lone port drops it. */
	ROUTER_PORT_BRIDGED = 1 << 3,
};

/* How the router treats frames arriving on a port (key: ifindex). */
struct router_port {
	/* Frames arriving here go to this ifindex (the next hop of a service
	 * chain); 0: classify (steering rules) and route. */
	__u32 next_ifindex;
	/* 1: apply steering rules to frames arriving here. */
	__u32 classify;
	__u32 flags;   /* enum router_port_flags */
	__u8 mac[6];   /* the port's MAC, with ROUTER_PORT_MAC */
	__u16 pad;
};

/* Steering rule keys. A match sends the frame to target.ifindex, the first
 * container of a chain; the chain continues through router_port entries. */
struct steer_v4_key {
	__u32 prefixlen;
	__u32 addr;      /* destination, network order */
};

struct steer_v6_key {
	__u32 prefixlen;
	__u8 addr[16];   /* destination */
};

struct steer_l4_key {
	__u8 proto;      /* IPPROTO_UDP / IPPROTO_TCP */
	__u8 pad;
	__u16 port;      /* destination port, network order */
};

struct steer_mac_key {
	__u8 mac[6];     /* source MAC */
	__u16 pad;
};

struct steer_target {
	__u32 ifindex;   /* router port leading to the chain's first container */
	__u32 chain;     /* chain number, for the user's reference */
};

#endif
