/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* XDP router and service-chain steering: definitions shared by router.bpf.c
 * and user space (through the generated skeleton types). */
#ifndef PEREGRINE_ROUTER_KERN_USER_H
#define PEREGRINE_ROUTER_KERN_USER_H

#include <linux/types.h>

/* What the router did with a frame. Every frame is counted under exactly one
 * action at its ingress port. The PASS actions hand the frame to the kernel,
 * which then answers (ICMP, ARP, ND) or drops it with its own counters. */
enum router_action {
	ROUTER_FORWARD = 0,       /* routed by the FIB and redirected out */
	ROUTER_STEER,             /* sent into a service chain (or on along it) */
	ROUTER_PASS_NOT_IP,       /* ARP and other non-IP */
	ROUTER_PASS_VLAN,         /* 802.1Q/802.1ad tagged: not handled */
	ROUTER_PASS_MALFORMED,    /* cut short or inconsistent headers */
	ROUTER_PASS_OPTIONS,      /* IPv4 options */
	ROUTER_PASS_FRAGMENT,     /* IPv4 fragment */
	ROUTER_PASS_TTL,          /* TTL / hop limit <= 1: kernel sends time exceeded */
	ROUTER_PASS_LOCAL,        /* for this host, or not forwarded (multicast, ...) */
	ROUTER_PASS_NO_NEIGH,     /* next hop's MAC unknown: kernel resolves it */
	ROUTER_PASS_NO_ROUTE,     /* unreachable, blackhole, prohibit: kernel answers */
	ROUTER_PASS_FRAG_NEEDED,  /* larger than the egress MTU */
	ROUTER_PASS_NO_PORT,      /* egress is not a router port */
	ROUTER_ACTIONS,
};

enum router_limits {
	/* Counters are indexed by ifindex; larger ifindexes share slot 0. */
	ROUTER_MAX_IFINDEX = 1024,
	ROUTER_MAX_STEER = 1024,
};

/* Per-CPU, per-ingress-port counters (index: ifindex). */
struct router_port_stats {
	__u64 packets[ROUTER_ACTIONS];
	__u64 bytes[ROUTER_ACTIONS];
	__u64 tx_packets; /* frames this port sent out for the router */
	__u64 tx_bytes;
};

/* How the router treats frames arriving on a port (index: ifindex). */
struct router_port {
	/* Frames arriving here go to this ifindex (the next hop of a service
	 * chain); 0: classify (steering rules) and route. */
	__u32 next_ifindex;
	/* 1: apply steering rules to frames arriving here. */
	__u32 classify;
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
