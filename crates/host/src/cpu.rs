//! CPU pinning and the clock every measurement shares.
use crate::error::{HostError, Result};

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)
        .map_err(|e| HostError::Config(format!("cpu {cpu}: {e}")))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| HostError::Config(format!("pinning to cpu {cpu}: {e}")))
}

/// The CPUs the calling thread may run on, in order.
pub fn allowed_cpus() -> Result<Vec<usize>> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map_err(|e| HostError::Config(format!("reading this thread's CPU affinity: {e}")))?;
    Ok((0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// CPU time (user and system) the calling thread has used.
pub fn thread_cpu() -> std::time::Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("CLOCK_THREAD_CPUTIME_ID");
    std::time::Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

/// CLOCK_MONOTONIC in nanoseconds: the clock BPF's bpf_ktime_get_ns reads,
/// so user-space and kernel timestamps compare directly.
pub fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}
