//! The latency histogram's scale (bpf/include/peregrine/latency_kern_user.h):
//! log-linear buckets, about 3% wide, the reply checker's in BPF and user
//! space histograms on the same scale (the invoker's call statistics).
use crate::skel::uapi::types::latency_scale;

const SUB_BITS: u32 = latency_scale::LATENCY_SUB_BITS.0;
/// How many buckets a histogram has; the last takes everything above.
pub const BUCKETS: u32 = latency_scale::LATENCY_BUCKETS.0;

/// The lowest value (ns) and width of latency bucket `idx`: the inverse of
/// `latency_bucket()` in replycheck.bpf.c.
pub fn bucket_range(idx: u32) -> (u64, u64) {
    let sub = 1u64 << SUB_BITS;
    if u64::from(idx) < sub {
        return (u64::from(idx), 1);
    }
    let shift = idx / sub as u32 - 1;
    let low = (u64::from(idx) % sub + sub) << shift;
    (low, 1 << shift)
}

/// The bucket of `v` ns: `latency_bucket()` of replycheck.bpf.c, for
/// histograms kept in user space on the same scale.
pub fn bucket_of(v: u64) -> u32 {
    let sub = 1u64 << SUB_BITS;
    if v < sub {
        return v as u32;
    }
    let shift = 63 - v.leading_zeros() - SUB_BITS;
    let idx = (u64::from(shift + 1) << SUB_BITS) + ((v >> shift) - sub);
    idx.min(u64::from(BUCKETS - 1)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_ranges_tile_the_line() {
        let mut next = 0;
        for b in 0..BUCKETS {
            let (low, width) = bucket_range(b);
            assert_eq!(low, next, "bucket {b}");
            // About 3% wide at most (2^-SUB_BITS of its value).
            assert!(width == 1 || width * 32 <= low, "bucket {b}");
            next = low + width;
        }
        assert!(next > 30_000_000_000, "the histogram covers 30 s");
    }

    #[test]
    fn bucket_of_is_bucket_range_inverted() {
        for v in (0..100_000u64).chain((0..40).map(|s| (1u64 << s) * 3 / 2)) {
            let (low, width) = bucket_range(bucket_of(v));
            assert!(
                v >= low && (v < low + width || bucket_of(v) == BUCKETS - 1),
                "{v}"
            );
        }
    }
}
