//! Map access shared by the program wrappers: writes and deletes with the
//! error naming what was being done, and per-CPU counters summed over CPUs
//! (from a loaded skeleton's map or from a pin another process made).
use std::path::Path;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::error::{BpfError, Result};
use crate::pod::{sum_per_cpu, Counters};

/// Sets `key` to `value` in `map`; `doing` names the change for the error.
pub(crate) fn update(map: &impl MapCore, key: &[u8], value: &[u8], doing: &str) -> Result<()> {
    map.update(key, value, MapFlags::ANY)
        .map_err(BpfError::libbpf(doing))
}

/// Removes `key` from `map`; `doing` names the change for the error.
pub(crate) fn delete(map: &impl MapCore, key: &[u8], doing: &str) -> Result<()> {
    map.delete(key).map_err(BpfError::libbpf(doing))
}

/// The counters at `key` of a per-CPU array or hash map, summed over CPUs
/// (zero when a hash map has no such key).
pub fn read_per_cpu<T: Counters>(map: &impl MapCore, key: &[u8]) -> Result<T> {
    let per_cpu = map
        .lookup_percpu(key, MapFlags::ANY)
        .map_err(BpfError::libbpf(format!(
            "reading {}",
            map.name().to_string_lossy()
        )))?
        .unwrap_or_default();
    Ok(sum_per_cpu(&per_cpu))
}

/// `read_per_cpu` on a map pinned at `path`; `missing` says what a missing
/// pin means (e.g. "is a router attached?").
pub fn read_pinned_per_cpu<T: Counters>(path: &Path, key: &[u8], missing: &str) -> Result<T> {
    let map = MapHandle::from_pinned_path(path).map_err(BpfError::libbpf(format!(
        "opening {} ({missing})",
        path.display()
    )))?;
    read_per_cpu(&map, key)
}
