/* SPDX-License-Identifier: (GPL-2.0 OR BSD-2-Clause) */
/* BTF-defined map declarations in one line each: every program's maps are
 * the same four (or five) fields, so the struct is spelled once, here.
 * Use: PEREGRINE_MAP(BPF_MAP_TYPE_HASH, 64, __u32, struct v) name SEC(".maps"); */
#ifndef PEREGRINE_MAPS_H
#define PEREGRINE_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define PEREGRINE_MAP(map_type, entries, key_type, value_type)                 \
	struct {                                                               \
		__uint(type, map_type);                                        \
		__uint(max_entries, entries);                                  \
		__type(key, key_type);                                         \
		__type(value, value_type);                                     \
	}

/* The same with map_flags (e.g. BPF_F_NO_PREALLOC, which LPM tries need). */
#define PEREGRINE_MAP_FLAGS(map_type, entries, flags, key_type, value_type)    \
	struct {                                                               \
		__uint(type, map_type);                                        \
		__uint(max_entries, entries);                                  \
		__uint(map_flags, flags);                                      \
		__type(key, key_type);                                         \
		__type(value, value_type);                                     \
	}

/* Entry 0 of `map`: a program's counters live in a one-entry per-CPU array.
 * NULL only if the map is not what the program declared. */
static __always_inline void *map_first(void *map)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(map, &zero);
}

/* What the counters of the programs that count every frame (nf, sink) begin
 * with, so that one function counts a frame for each of them. */
struct frame_counts {
	__u64 packets;
	__u64 bytes;
};

/* Counts a frame of `len` bytes in entry 0 of `map`, whose value begins with
 * struct frame_counts; that entry, NULL if the map is not what the program
 * declared. */
static __always_inline void *count_frame(void *map, __u64 len)
{
	struct frame_counts *n = map_first(map);

	if (n) {
		n->packets++;
		n->bytes += len;
	}
	return n;
}

/* Asserts that `type` begins with struct frame_counts, as count_frame needs. */
#define COUNTS_FRAMES(type)                                                    \
	_Static_assert(__builtin_offsetof(type, packets) == 0 &&               \
			       __builtin_offsetof(type, bytes) ==              \
				       __builtin_offsetof(struct frame_counts, \
							  bytes),              \
		       #type " begins with struct frame_counts")

#endif
