//! Map access shared by the program wrappers: writes and deletes with the
//! error naming what was being done, and per-CPU counters summed over CPUs
//! (from a loaded skeleton's map or from a pin another process made).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::path::Path;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::error::{BpfError, Result};
use crate::pod::{sum_per_cpu, Counters};

/// Sets `key` to `value` in `map`; `doing` names the change for the error.
/// A map of a program an older peregrine loaded may keep a shorter value
/// (its struct before fields were appended): the value goes in without
/// the new fields when they are all zero, which is what the old program
/// would have read there; anything else is refused, as before.
pub fn update(map: &impl MapCore, key: &[u8], value: &[u8], doing: &str) -> Result<()> {
    let size = map.value_size() as usize;
    let value = match value.split_at_checked(size) {
        Some((head, tail)) if tail.iter().all(|&b| b == 0) => head,
        _ => value,
    };
    map.update(key, value, MapFlags::ANY)
        .map_err(BpfError::libbpf(doing))
}

/// The value at `key` of `map` (the type's default when there is none);
/// `doing` names the read for the error. A shorter value (a map of a
/// program an older peregrine loaded, before fields were appended to its
/// struct) reads with the new fields zero, not as no value at all.
pub fn read<T: crate::pod::Pod + Default>(
    map: &impl MapCore,
    key: &[u8],
    doing: &str,
) -> Result<T> {
    Ok(map
        .lookup(key, MapFlags::ANY)
        .map_err(BpfError::libbpf(doing))?
        .and_then(|mut b| {
            if b.len() < std::mem::size_of::<T>() {
                b.resize(std::mem::size_of::<T>(), 0);
            }
            T::from_bytes(&b)
        })
        .unwrap_or_default())
}

/// Sets `key` of per-CPU `map` to zero on every CPU; `doing` names the
/// change for the error.
pub fn zero_per_cpu(map: &impl MapCore, key: &[u8], doing: &str) -> Result<()> {
    let cpus =
        libbpf_rs::num_possible_cpus().map_err(BpfError::libbpf("counting possible CPUs"))?;
    let zero = vec![vec![0u8; map.value_size() as usize]; cpus];
    map.update_percpu(key, &zero, MapFlags::ANY)
        .map_err(BpfError::libbpf(doing))
}

/// Removes `key` from `map`; `doing` names the change for the error.
pub fn delete(map: &impl MapCore, key: &[u8], doing: &str) -> Result<()> {
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

/// The name of a loaded program (as the kernel keeps it: at most 15
/// characters, e.g. "policer_tc").
pub fn program_name(prog: std::os::fd::BorrowedFd<'_>) -> Result<String> {
    Ok(info_name(&program_info(prog)?))
}

/// The id of a loaded program.
pub fn program_id(prog: std::os::fd::BorrowedFd<'_>) -> Result<u32> {
    Ok(program_info(prog)?.id)
}

/// The kernel's description of a loaded program (no arrays asked for).
fn program_info(prog: std::os::fd::BorrowedFd<'_>) -> Result<libbpf_sys::bpf_prog_info> {
    use std::os::fd::AsRawFd;
    // Safety: zeroed is a valid empty info struct.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of_val(&info) as u32;
    // Safety: `info` outlives the call; the kernel writes at most `len`
    // bytes, and no map or instruction arrays were asked for.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) };
    if rc < 0 {
        return Err(BpfError::Io {
            what: "reading a program's info".into(),
            source: std::io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(info)
}

/// The name of loaded program `prog_id` ("" when it cannot be read: gone,
/// or not this process's to open).
pub fn program_name_of(prog_id: u32) -> String {
    program_by_id(prog_id)
        .and_then(|fd| program_name(std::os::fd::AsFd::as_fd(&fd)))
        .unwrap_or_default()
}

/// The program's name in its info struct.
pub(crate) fn info_name(info: &libbpf_sys::bpf_prog_info) -> String {
    let name: Vec<u8> = info
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&name).into_owned()
}

/// A descriptor of the loaded program `prog_id` (e.g. the one a pinned
/// link runs), to attach it elsewhere or read its info.
pub fn program_by_id(prog_id: u32) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // Safety: a plain syscall wrapper; a non-negative return is a new fd.
    let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(prog_id) };
    if fd < 0 {
        return Err(BpfError::Io {
            what: format!("opening program {prog_id}"),
            source: std::io::Error::from_raw_os_error(-fd),
        });
    }
    // Safety: `fd` was just returned to us and is owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The maps program `prog_id` uses, by name (as the kernel keeps it: at
/// most 15 characters). Lets a later command find a running program's
/// state from its link alone, so it can never disagree with what runs.
pub fn maps_of_program(prog_id: u32) -> Result<Vec<(String, MapHandle)>> {
    let io = |what: String, rc: i32| BpfError::Io {
        what,
        source: std::io::Error::from_raw_os_error(-rc),
    };
    let prog = program_by_id(prog_id)?;
    let info_of = |ids: &mut [u32]| -> Result<u32> {
        use std::os::fd::AsRawFd;
        // Safety: zeroed is a valid empty info struct.
        let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
        info.nr_map_ids = ids.len() as u32;
        info.map_ids = ids.as_mut_ptr() as u64;
        let mut len = std::mem::size_of_val(&info) as u32;
        // Safety: `info` and `ids` outlive the call; the kernel writes at
        // most `nr_map_ids` ids and `len` bytes.
        let rc =
            unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) };
        if rc < 0 {
            return Err(io(format!("reading program {prog_id}'s maps"), rc));
        }
        Ok(info.nr_map_ids)
    };
    let n = info_of(&mut [])?;
    let mut ids = vec![0u32; n as usize];
    let n = info_of(&mut ids)?.min(n) as usize;
    ids[..n]
        .iter()
        .map(|&id| {
            let m = MapHandle::from_map_id(id).map_err(BpfError::libbpf(format!(
                "opening map {id} of program {prog_id}"
            )))?;
            Ok((m.name().to_string_lossy().into_owned(), m))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Pod;
    use crate::policer::ClassCounters;
    use peregrine_testbed::testing::privileged;

    /// A map of an older program keeps `sched_counters` without its last
    /// two fields (56 bytes): read, the new fields are zero and the old
    /// ones intact; written, a value whose new fields are zero goes in,
    /// one that sets them is refused (the old program could not see it).
    #[test]
    fn a_shorter_value_of_an_older_program_reads_and_writes_its_fields() {
        if !privileged("a_shorter_value_of_an_older_program_reads_and_writes_its_fields") {
            return;
        }
        let old = std::mem::size_of::<ClassCounters>() - 16;
        // Safety: zeroed is the valid empty options struct; `sz` is set.
        let mut opts: libbpf_sys::bpf_map_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of_val(&opts) as _;
        let map = MapHandle::create(
            libbpf_rs::MapType::Array,
            Some("old_counters"),
            4,
            old as u32,
            2,
            &opts,
        )
        .unwrap();
        let key = 1u32.to_ne_bytes();
        let c = ClassCounters {
            sent_packets: 7,
            queue_depth: 3,
            ..Default::default()
        };
        update(&map, &key, c.as_bytes(), "writing").unwrap();
        let back: ClassCounters = read(&map, &key, "reading").unwrap();
        assert_eq!(back.as_bytes(), c.as_bytes());
        let stamped = ClassCounters { drop_ahead: 1, ..c };
        assert!(update(&map, &key, stamped.as_bytes(), "writing").is_err());
        let again: ClassCounters = read(&map, &key, "reading").unwrap();
        assert_eq!(again.as_bytes(), c.as_bytes());
    }
}
