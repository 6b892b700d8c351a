// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* No program: an anchor object whose only job is to carry kernel uapi types
 * and constants user space needs (ethtool ioctls, program return codes) into
 * BTF, so they reach Rust as the generated `skel::uapi::types`. Never loaded.
 */
#include <linux/bpf.h>
#include "peregrine/netdev_uapi.h"
#include "peregrine/prog_uapi.h"
#include <asm/socket.h>
#include <linux/capability.h>

/* A network namespace's identity: its cookie, never reused while the
 * machine runs (an nsfs inode number is, once the namespace is freed). */
enum peregrine_sock_opt {
	PG_SO_NETNS_COOKIE = SO_NETNS_COOKIE,
};

/* The capabilities attaching a router takes, checked up front so that a
 * user without them gets one line instead of libbpf's log. */
enum peregrine_cap {
	PG_CAP_NET_ADMIN = CAP_NET_ADMIN,
	PG_CAP_SYS_ADMIN = CAP_SYS_ADMIN,
	PG_CAP_BPF = CAP_BPF,
};

struct ethtool_value ethtool_value_anchor;
enum peregrine_cap cap_anchor;
enum peregrine_ethtool_cmd ethtool_cmd_anchor;
enum peregrine_sock_opt sock_opt_anchor;
enum xdp_action xdp_action_anchor;
enum peregrine_tc_act tc_act_anchor;
struct xdp_md xdp_md_anchor;
struct __sk_buff sk_buff_anchor; /* BPF_PROG_RUN context of tc programs */
