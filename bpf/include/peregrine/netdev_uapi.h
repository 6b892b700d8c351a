/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Kernel uapi definitions user space needs for device settings netlink does
 * not carry here (veth offloads). Values come from <linux/ethtool.h> at
 * compile time; bpf/host/uapi.bpf.c anchors them so they reach Rust through BTF and
 * the generated skeleton types, never retyped by hand. */
#ifndef PEREGRINE_NETDEV_UAPI_H
#define PEREGRINE_NETDEV_UAPI_H

/* <linux/ethtool.h> pulls in glibc's <limits.h>, whose stubs.h would pick
 * the 32-bit variant for the BPF target; present it as the 64-bit host. */
#if defined(__bpf__) && !defined(__x86_64__) && !defined(__aarch64__)
#define __x86_64__ 1
#define PEREGRINE_UNDEF_X86_64
#endif
#include <linux/ethtool.h>
#include <linux/sockios.h>
#ifdef PEREGRINE_UNDEF_X86_64
#undef __x86_64__
#undef PEREGRINE_UNDEF_X86_64
#endif

enum peregrine_ethtool_cmd {
	PG_ETHTOOL_GTXCSUM = ETHTOOL_GTXCSUM, /* TX checksum offload: read */
	PG_ETHTOOL_STXCSUM = ETHTOOL_STXCSUM, /* TX checksum offload on/off */
	PG_ETHTOOL_GGSO = ETHTOOL_GGSO,       /* generic segmentation offload: read */
	PG_ETHTOOL_SGSO = ETHTOOL_SGSO,       /* generic segmentation offload on/off */
	PG_ETHTOOL_GGRO = ETHTOOL_GGRO,       /* generic receive offload: read */
	PG_ETHTOOL_SGRO = ETHTOOL_SGRO,       /* generic receive offload on/off */
	PG_ETHTOOL_GTSO = ETHTOOL_GTSO,       /* TCP segmentation offload: read */
	PG_ETHTOOL_STSO = ETHTOOL_STSO,       /* TCP segmentation offload on/off */
	PG_SIOCETHTOOL = SIOCETHTOOL,
};

#endif
