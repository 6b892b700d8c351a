//! Plain-old-data views of the generated kernel/user structs, for map values
//! and BPF_PROG_RUN contexts.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound

use crate::skel::classify::types::{htb_port, htb_totals};
use crate::skel::dispatch::types::{dispatch_func, dispatch_stats};
use crate::skel::nf::types::nf_stats;
use crate::skel::policer::types::{
    policer_counters, policer_key, policer_mask, policer_rule, policer_state, policer_totals,
    sched_class, sched_counters, sched_early, sched_meta, sched_port,
};
use crate::skel::router::types::{
    router_port, router_port_stats, steer_l4_key, steer_mac_key, steer_target, steer_v4_key,
    steer_v6_key,
};
use crate::skel::sink::types::sink_stats;
use crate::skel::steer::types::{stack_bind_key, stack_steer_stats};
use crate::skel::uapi::types::xdp_md;

/// Implemented for generated `#[repr(C)]` types that hold only integers and
/// arrays of integers, so any byte pattern of the right size is a valid value.
///
/// # Safety
/// The type must be `repr(C)`, contain no pointers, references or padding
/// whose reading would be undefined, and accept every bit pattern.
pub unsafe trait Pod: Copy + Default {
    fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() < std::mem::size_of::<Self>() {
            return None;
        }
        // Safety: the length is checked above and `Self: Pod` accepts any bytes;
        // read_unaligned copes with the Vec's alignment.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<Self>()) })
    }

    fn as_bytes(&self) -> &[u8] {
        // Safety: `Self: Pod` is repr(C) plain data; the slice covers exactly
        // the value and lives as long as the borrow of `self`.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }
}

/// Marks the generated counter structs made only of `u64`s (scalars and
/// arrays), so a per-CPU map's values can be summed word by word.
///
/// # Safety
/// The type must be `Pod` and consist of `u64` fields only, no padding.
pub unsafe trait Counters: Pod {}

/// Implements `Pod` (and, after `counters:`, `Counters` too) for the listed
/// generated types, so each type is named once. Exported for the lab's
/// programs' types in peregrine-testbed.
#[macro_export]
macro_rules! plain_data {
    (pod: $($pod:ty),* ; counters: $($ctr:ty),* $(,)?) => {
        $(
            // Safety: a repr(C) struct of unsigned integers and arrays of
            // them (the *_kern_user.h headers, linux/bpf.h), by libbpf-cargo.
            unsafe impl $crate::pod::Pod for $pod {}
        )*
        $(
            // Safety: as above, and made of __u64 fields and __u64 arrays
            // only (u64: a scalar counter, e.g. per-CPU histogram buckets).
            unsafe impl $crate::pod::Pod for $ctr {}
            // Safety: Pod (above) and only u64 words, no padding.
            unsafe impl $crate::pod::Counters for $ctr {}
        )*
    };
}

plain_data! {
    pod: xdp_md, router_port, steer_v4_key, steer_v6_key, steer_l4_key,
        steer_mac_key, steer_target, dispatch_func, policer_key, policer_mask, policer_rule,
        policer_state, sched_port, sched_meta, sched_class, stack_bind_key, htb_port;
    counters: sink_stats, router_port_stats, nf_stats, dispatch_stats, policer_counters, policer_totals, sched_counters, sched_early, stack_steer_stats, htb_totals, u64,
}

/// The sum over CPUs of a per-CPU map's values (as `lookup_percpu` returns
/// them), field by field.
pub fn sum_per_cpu<T: Counters>(per_cpu: &[Vec<u8>]) -> T {
    let words = std::mem::size_of::<T>() / 8;
    let mut sum = vec![0u64; words];
    for v in per_cpu.iter().filter(|v| v.len() >= words * 8) {
        for (s, w) in sum.iter_mut().zip(v.chunks_exact(8)) {
            *s += u64::from_ne_bytes(w.try_into().expect("8 bytes"));
        }
    }
    let bytes: Vec<u8> = sum.iter().flat_map(|w| w.to_ne_bytes()).collect();
    T::from_bytes(&bytes).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skel::router::types::router_port_stats;

    #[test]
    fn per_cpu_counters_sum_field_by_field() {
        let mut a = router_port_stats::default();
        a.packets[1] = 3;
        a.tx_bytes = 7;
        let mut b = router_port_stats::default();
        b.packets[1] = 4;
        b.bytes[0] = 9;
        b.tx_bytes = 1;
        let s: router_port_stats =
            sum_per_cpu(&[a.as_bytes().to_vec(), b.as_bytes().to_vec(), vec![1, 2]]);
        assert_eq!(s.packets[1], 7);
        assert_eq!(s.bytes[0], 9);
        assert_eq!(s.tx_bytes, 8);
        assert_eq!(std::mem::size_of::<router_port_stats>() % 8, 0);
    }
}
