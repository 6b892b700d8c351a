//! CPU placement of a device's receive work. On veth the receive NAPI runs on
//! the CPU that transmitted, so a device under test would share the
//! generator's core; threaded NAPI moves it to kernel threads that we pin to
//! the DUT's own CPUs, as a real DUT has its own cores.
use std::collections::BTreeSet;

use crate::error::{HostError, Result};
use crate::netns;

/// PIDs of the kernel's threaded-NAPI workers ("napi/<dev>-<id>"), with
/// their names.
fn napi_threads() -> BTreeSet<(i32, String)> {
    let mut out = BTreeSet::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if comm.starts_with("napi/") {
                    out.insert((pid, comm.trim_end().to_string()));
                }
            }
        }
    }
    out
}

/// Makes `iface`'s receive processing run in its own kernel threads pinned to
/// `cpu`. The device needs NAPI first: attach an XDP program (or enable GRO)
/// before calling this. Safe to call again: when threaded NAPI is already on,
/// the device's existing workers (named after it) are pinned. Attaching or
/// detaching XDP recreates the workers, so call it after such changes.
/// Returns the worker thread IDs.
pub fn pin_receive(ns: &str, iface: &str, cpu: usize) -> Result<Vec<i32>> {
    let before = napi_threads();
    let path = format!("/sys/class/net/{iface}/threaded");
    netns::with_sysfs(ns, || std::fs::write(&path, "1"))?.map_err(|e| {
        HostError::Other(format!(
            "enabling threaded NAPI on {ns}:{iface}: {e} (the device has no NAPI until an XDP program is attached)"
        ))
    })?;
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)
        .map_err(|e| HostError::Config(format!("cpu {cpu}: {e}")))?;
    // Workers are named "napi/<dev>-<napi id>", cut to 15 bytes.
    let mut prefix = format!("napi/{iface}-");
    prefix.truncate(15);
    // The kernel starts the workers as the setting is applied; when it was
    // already on, they exist and are found by name.
    let mut workers: Vec<i32> = Vec::new();
    for _ in 0..100 {
        let now = napi_threads();
        workers = now.difference(&before).map(|(p, _)| *p).collect();
        if workers.is_empty() {
            workers = now
                .iter()
                .filter(|(_, n)| n.starts_with(&prefix))
                .map(|(p, _)| *p)
                .collect();
        }
        if !workers.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if workers.is_empty() {
        return Err(HostError::Other(format!(
            "no threaded NAPI worker appeared for {ns}:{iface}"
        )));
    }
    for &pid in &workers {
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(pid), &set).map_err(|e| {
            HostError::Other(format!(
                "pinning NAPI worker {pid} of {ns}:{iface} to cpu {cpu}: {e}"
            ))
        })?;
    }
    Ok(workers)
}
