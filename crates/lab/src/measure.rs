//! CPU use from /proc/stat and latency summaries from HDR histograms.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use hdrhistogram::Histogram;

use crate::results::{CoreCpu, Latency};

/// Per-core jiffies: user, nice, system, idle, iowait, irq, softirq, steal.
#[derive(Debug, Clone, Default)]
pub struct CpuSnapshot(Vec<[u64; 8]>);

impl CpuSnapshot {
    pub fn take() -> CpuSnapshot {
        let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        CpuSnapshot::parse(&text)
    }

    pub fn parse(text: &str) -> CpuSnapshot {
        let mut cores = Vec::new();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            match it.next() {
                Some(n) if n.starts_with("cpu") && n.len() > 3 => {
                    let mut v = [0u64; 8];
                    for (slot, f) in v.iter_mut().zip(it) {
                        *slot = f.parse().unwrap_or(0);
                    }
                    cores.push(v);
                }
                _ => {}
            }
        }
        CpuSnapshot(cores)
    }

    /// Share of each core's time between two snapshots, in percent.
    pub fn usage_since(&self, earlier: &CpuSnapshot) -> Vec<CoreCpu> {
        self.0
            .iter()
            .zip(earlier.0.iter())
            .enumerate()
            .map(|(core, (b, a))| {
                let d: Vec<u64> = b
                    .iter()
                    .zip(a.iter())
                    .map(|(x, y)| x.saturating_sub(*y))
                    .collect();
                let total = d.iter().sum::<u64>().max(1) as f64;
                let pct = |x: u64| (x as f64 * 1000.0 / total).round() / 10.0;
                CoreCpu {
                    core,
                    user_pct: pct(d[0] + d[1]),
                    system_pct: pct(d[2]),
                    softirq_pct: pct(d[6]),
                    irq_pct: pct(d[5]),
                    idle_pct: pct(d[3] + d[4]),
                }
            })
            .collect()
    }
}

/// Time lost to CPU contention, as two counters that only grow: the
/// run-queue wait of every thread of this process (`schedstat`'s run_delay:
/// runnable, not running) and the hypervisor's steal of each CPU. On a
/// shared VM a generator thread can lose tens of milliseconds at once; a
/// window that lost that much cannot carry its full rate, and says so.
#[derive(Debug, Clone)]
pub struct CpuWait {
    run_delay_ns: u64,
    steal_ticks: Vec<u64>,
}

impl CpuWait {
    pub fn take() -> CpuWait {
        CpuWait::of_tasks("/proc/self/task")
    }

    /// The same counters for another process (a server under test, say);
    /// one that has exited counts no wait.
    pub fn of_process(pid: u32) -> CpuWait {
        CpuWait::of_tasks(&format!("/proc/{pid}/task"))
    }

    fn of_tasks(dir: &str) -> CpuWait {
        let mut run_delay_ns = 0;
        if let Ok(tasks) = std::fs::read_dir(dir) {
            for t in tasks.flatten() {
                let text = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
                run_delay_ns += text
                    .split_whitespace()
                    .nth(1)
                    .and_then(|f| f.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        let steal_ticks = CpuSnapshot::take().0.iter().map(|c| c[7]).collect();
        CpuWait {
            run_delay_ns,
            steal_ticks,
        }
    }

    /// Seconds lost since `earlier`: the run-queue wait of this process's
    /// threads (a thread that ended in between takes its share with it, so
    /// this can be short, never long) plus the largest steal of any CPU.
    pub fn since(&self, earlier: &CpuWait) -> f64 {
        // Safety: sysconf only reads a constant of the running kernel.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let steal = self
            .steal_ticks
            .iter()
            .zip(&earlier.steal_ticks)
            .map(|(b, a)| b.saturating_sub(*a))
            .max()
            .unwrap_or(0) as f64
            / hz;
        self.run_delay_ns.saturating_sub(earlier.run_delay_ns) as f64 * 1e-9 + steal
    }
}

pub fn summarize(h: &Histogram<u64>) -> Option<Latency> {
    if h.is_empty() {
        return None;
    }
    Some(Latency {
        count: h.len(),
        min_ns: h.min(),
        p50_ns: h.value_at_quantile(0.50),
        p90_ns: h.value_at_quantile(0.90),
        p99_ns: h.value_at_quantile(0.99),
        p999_ns: h.value_at_quantile(0.999),
        max_ns: h.max(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_split_from_proc_stat() {
        let a = CpuSnapshot::parse("cpu 0 0 0 0\ncpu0 100 0 50 800 0 0 50 0\n");
        let b = CpuSnapshot::parse("cpu 0 0 0 0\ncpu0 200 0 100 1600 0 0 100 0\n");
        let u = b.usage_since(&a);
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].user_pct, 10.0);
        assert_eq!(u[0].system_pct, 5.0);
        assert_eq!(u[0].softirq_pct, 5.0);
        assert_eq!(u[0].idle_pct, 80.0);
    }

    #[test]
    fn latency_percentiles() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
        for v in 1..=1000 {
            h.record(v).unwrap();
        }
        let l = summarize(&h).unwrap();
        assert_eq!(l.count, 1000);
        assert_eq!(l.min_ns, 1);
        assert!((499..=501).contains(&l.p50_ns));
        assert!((989..=991).contains(&l.p99_ns));
        assert_eq!(l.max_ns, 1000);
    }
}
