/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* Live-frame traffic generator: the only definitions shared by gen.bpf.c and
 * user space. Rust sees them through the generated skeleton types. */
#ifndef PEREGRINE_GEN_KERN_USER_H
#define PEREGRINE_GEN_KERN_USER_H

#include <linux/types.h>

/* Frame sizes the generator can mix in one run (IMIX needs three). */
#define GEN_MAX_CLASSES 4
/* Length of the repeating size pattern (IMIX 7:4:1 needs twelve). */
#define GEN_MAX_PATTERN 16
/* Ethernet (14) + IPv6 (40) + UDP (8) rounded up to whole u64 words. */
#define GEN_HDR_MAX 64

/* Enums rather than #defines so the values reach Rust through BTF and the
 * generated skeleton types. */
enum gen_flags {
	GEN_F_IPV6 = 1 << 0,
	/* Write sequence number and transmit time into every frame's payload. */
	GEN_F_STAMP = 1 << 1,
	/* Build every frame but drop it instead of sending: the generator's
	 * own ceiling, without the device and receiver behind it. */
	GEN_F_DRY_RUN = 1 << 2,
	/* Flows vary the destination address instead of the source (many
	 * destinations, e.g. to exercise a large routing table). */
	GEN_F_VARY_DST = 1 << 3,
	/* Flows vary the source port only, addresses stay (replies then go
	 * back to one host the sender's neighbours know). */
	GEN_F_PORTS_ONLY = 1 << 4,
};

enum gen_magic {
	/* "PRGR": marks a frame made by the generator, so sinks count only those. */
	PEREGRINE_MAGIC = 0x52475250,
};

/* Placed right after the UDP header, as much of it as the payload holds:
 * the magic alone (4 bytes) is what makes a frame count as delivered, so even
 * the smallest IPv6 frame (78 bytes, 12 payload bytes) carries it. */
struct gen_meta {
	__u32 magic; /* PEREGRINE_MAGIC, byte order as written by the host */
	__u32 seq;   /* per-CPU sequence number, wraps */
	__u64 tx_ns; /* bpf_ktime_get_ns() at generation (CLOCK_MONOTONIC), or
		      * zero in frames left out of the latency sample */
};

/* One frame size: its headers for flow 0, with checksums computed over a
 * payload that is all zero except gen_meta.magic (seq and tx_ns zero). */
struct gen_class {
	__u8 hdr[GEN_HDR_MAX];
	__u16 frame_len; /* bytes handed to the device, without FCS */
	__u16 meta_len;  /* bytes of gen_meta in the payload: 0, 4, 8 or 16 */
};

struct gen_config {
	__u32 ifindex;      /* device the frames leave through */
	__u32 nflows;       /* flows 0..nflows-1 vary source address and port */
	__u32 pattern_len;  /* entries used in pattern[] */
	__u32 flags;        /* GEN_F_* */
	__u32 template_len; /* length of the frame given to BPF_PROG_RUN */
	__u32 src_port;     /* flow 0 source UDP port, host order */
	/* With GEN_F_STAMP: the send time goes into frames whose sequence
	 * number has these bits clear (0: every frame; 15: every 16th), the
	 * others carry zero. Reading the clock is dear on a VM; a sample of
	 * every 16th frame still gives tens of thousands of latencies a second. */
	__u32 stamp_mask;
	__u8 pattern[GEN_MAX_PATTERN];
	struct gen_class classes[GEN_MAX_CLASSES];
};

/* Pacing of one sending CPU, set by its thread before a run. Frames leave at
 * most every gap_ns; iterations of the BPF_PROG_RUN loop that come too early
 * are skipped (XDP_DROP, nothing sent), so the rate is smooth down to the
 * loop's granularity with no bursts, and one long run covers many frames.
 * All zero: unpaced and unlimited (what the fixtures run with). */
struct gen_pace {
	/* Times in 1/256 ns (24.8 fixed point) so that gaps like 66.67 ns
	 * (15 Mpps) do not round the rate off by up to 1%. */
	__u64 gap_fp;  /* time between frames; 0: as fast as possible */
	__u64 next_fp; /* when the next frame may leave (CLOCK_MONOTONIC) */
	__u64 limit;   /* frames to send in this run; 0: no limit */
	__u64 sent;    /* frames sent in this run */
};

/* How far a paced sender may fall behind (preemption, the gap between two
 * BPF_PROG_RUN calls) and still catch up: beyond this it resumes from now
 * rather than sending a burst the device under test never asked for. */
enum gen_pace_limits {
	GEN_MAX_CATCHUP = 128,
	GEN_FP_SHIFT = 8,
};

/* Per-CPU state of the generator program. */
struct gen_state {
	__u64 seq;    /* frames made on this CPU */
	__u64 errors; /* frames it could not build (too short, tail adjust failed) */
};

#endif
