// SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause)
/* No program: an anchor object whose only job is to carry kernel uapi types
 * and constants user space needs (ethtool ioctls, program return codes) into
 * BTF, so they reach Rust as the generated `skel::uapi::types`. Never loaded.
 */
#include <linux/bpf.h>
#include "peregrine/netdev_uapi.h"
#include "peregrine/prog_uapi.h"

struct ethtool_value ethtool_value_anchor;
enum peregrine_ethtool_cmd ethtool_cmd_anchor;
enum xdp_action xdp_action_anchor;
enum peregrine_tc_act tc_act_anchor;
struct xdp_md xdp_md_anchor;
struct __sk_buff sk_buff_anchor; /* BPF_PROG_RUN context of tc programs */
