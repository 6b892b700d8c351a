//! The record of a program attached as a cls_bpf filter (a tc filter in a
//! clsact qdisc). A tcx attachment is a bpf_link: pinned, it names its
//! program and interface and says when the interface is gone. A filter is
//! none of that (the kernel keeps it in the qdisc, by priority and handle),
//! so whoever attaches one keeps this record beside it, in a bpffs
//! directory of its own:
//!
//! - `prog`: the program, pinned (what the filter runs, and what a later
//!   port attached the same way runs);
//! - `ifindex`: a DEVMAP of two entries holding the interface. The kernel
//!   clears a devmap's entries for a device when the device unregisters,
//!   so entry 0 empty means the interface (or its namespace) is gone, read
//!   from any namespace, as a dead link's ifindex 0 says it. Entry 1 is
//!   set when the attacher made the clsact qdisc (and so may remove it);
//! - `netns`: an array holding the cookie of the interface's namespace
//!   (where the filter is to be removed from), and whether the filter was
//!   attached (`note_attached`).
//!
//! The record is made before the filter (`create`) and marked attached
//! once its owner keeps it (after the filter; for a new router, after its
//! last port), so a run killed between the two leaves a record its owner
//! finds and that reads as not running, never a filter nobody knows of.
//! The devmap's map id is the record's identity: a record made again has
//! another.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::error::{BpfError, Result};

const PROG: &str = "prog";
const IFINDEX: &str = "ifindex";
const NETNS: &str = "netns";

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClsRecord {
    /// The program the filter runs.
    pub prog_id: u32,
    /// The interface in its namespace; 0 once it (or the namespace) is
    /// gone.
    pub ifindex: u32,
    /// The filter was attached (`note_attached`): a record without it is
    /// one an attach killed or failing part-way left.
    pub attached: bool,
    /// The attacher made the interface's clsact qdisc.
    pub made_clsact: bool,
    /// The cookie of the interface's network namespace.
    pub netns_cookie: u64,
    /// The record's identity: its devmap's id.
    pub id: u32,
}

impl ClsRecord {
    /// The filter was attached and its interface is still there.
    pub fn live(&self) -> bool {
        self.ifindex != 0 && self.attached
    }
}

/// Whether `dir` holds a record (its interface devmap is pinned there).
pub fn is_record(dir: &Path) -> bool {
    dir.join(IFINDEX).exists()
}

fn create_map(kind: libbpf_rs::MapType, name: &str, value: u32, entries: u32) -> Result<MapHandle> {
    // Safety: zeroed is the valid empty options struct; `sz` is set.
    let mut opts: libbpf_sys::bpf_map_create_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of_val(&opts) as _;
    MapHandle::create(kind, Some(name), 4, value, entries, &opts)
        .map_err(BpfError::libbpf(format!("creating the record map {name}")))
}

fn pin(map: &MapHandle, path: &Path) -> Result<()> {
    crate::link::pin_fd(map.as_fd(), path)
}

fn open(dir: &Path, name: &str) -> Result<MapHandle> {
    let path = dir.join(name);
    MapHandle::from_pinned_path(&path).map_err(BpfError::libbpf(format!(
        "opening the record {}",
        crate::bpffs::display(&path)
    )))
}

/// Makes the record of `prog` attached to interface `ifindex` (of the
/// calling thread's namespace, whose cookie is `netns_cookie`) in `dir`,
/// which must not hold one. On error nothing of it is left.
pub fn create(dir: &Path, prog: BorrowedFd<'_>, ifindex: u32, netns_cookie: u64) -> Result<()> {
    if is_record(dir) {
        return Err(BpfError::Invalid(format!(
            "{} holds a record already",
            crate::bpffs::display(dir)
        )));
    }
    // What a create killed part-way left: the pins before the devmap.
    remove(dir)?;
    std::fs::create_dir_all(dir).map_err(BpfError::io(format!(
        "creating {}",
        crate::bpffs::display(dir)
    )))?;
    let made = (|| {
        crate::link::pin_fd(prog, &dir.join(PROG))?;
        let ns = create_map(libbpf_rs::MapType::Array, "pg_cls_netns", 8, 2)?;
        crate::maps::update(
            &ns,
            &0u32.to_ne_bytes(),
            &netns_cookie.to_ne_bytes(),
            "writing the record's namespace",
        )?;
        pin(&ns, &dir.join(NETNS))?;
        // The devmap resolves the index in the calling thread's namespace
        // and holds the device from here on.
        let dev = create_map(libbpf_rs::MapType::Devmap, "pg_cls_ifindex", 4, 2)?;
        crate::maps::update(
            &dev,
            &0u32.to_ne_bytes(),
            &ifindex.to_ne_bytes(),
            "writing the record's interface",
        )?;
        // Last: `is_record` says yes only for a whole record.
        pin(&dev, &dir.join(IFINDEX))
    })();
    if made.is_err() {
        let _ = remove(dir);
    }
    made
}

/// Notes in the record at `dir` that its attacher makes the clsact qdisc
/// of its interface `ifindex` (in the calling thread's namespace): noted
/// before the qdisc is made, so a run killed in between leaves it known.
pub fn note_made_clsact(dir: &Path, ifindex: u32) -> Result<()> {
    crate::maps::update(
        &open(dir, IFINDEX)?,
        &1u32.to_ne_bytes(),
        &ifindex.to_ne_bytes(),
        "noting the clsact made",
    )
}

/// Takes back `note_made_clsact` (the clsact could not be made).
pub fn forget_made_clsact(dir: &Path) -> Result<()> {
    crate::maps::delete(
        &open(dir, IFINDEX)?,
        &1u32.to_ne_bytes(),
        "taking back the clsact noted",
    )
}

/// Notes in the record at `dir` that its filter is attached.
pub fn note_attached(dir: &Path) -> Result<()> {
    crate::maps::update(
        &open(dir, NETNS)?,
        &1u32.to_ne_bytes(),
        &1u64.to_ne_bytes(),
        "noting the filter attached",
    )
}

/// Entry `key` of a record's array.
fn word(map: &MapHandle, key: u32, doing: &str) -> Result<u64> {
    Ok(map
        .lookup(&key.to_ne_bytes(), MapFlags::ANY)
        .map_err(BpfError::libbpf(doing))?
        .and_then(|b| Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?)))
        .unwrap_or(0))
}

/// The ifindex in entry `key` of a record's devmap (0: empty).
fn dev_entry(map: &MapHandle, key: u32) -> Result<u32> {
    let v = map
        .lookup(&key.to_ne_bytes(), MapFlags::ANY)
        .map_err(BpfError::libbpf("reading a record's interface"))?;
    Ok(
        v.and_then(|b| Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?)))
            .unwrap_or(0),
    )
}

/// Reads the record at `dir`.
pub fn read(dir: &Path) -> Result<ClsRecord> {
    let dev = open(dir, IFINDEX)?;
    let ifindex = dev_entry(&dev, 0)?;
    let made_clsact = dev_entry(&dev, 1)? != 0;
    let id = dev
        .info()
        .map_err(BpfError::libbpf("reading a record's id"))?
        .info
        .id;
    let ns = open(dir, NETNS)?;
    let cookie = word(&ns, 0, "reading a record's namespace")?;
    let attached = word(&ns, 1, "reading a record's state")? != 0;
    let prog = program(dir)?;
    Ok(ClsRecord {
        prog_id: crate::maps::program_id(prog.as_fd())?,
        ifindex,
        attached,
        made_clsact,
        netns_cookie: cookie,
        id,
    })
}

/// The program the record at `dir` pinned.
pub fn program(dir: &Path) -> Result<OwnedFd> {
    crate::link::open_pinned(&dir.join(PROG))
}

/// Removes the record at `dir` (every pin, then the directory); a record
/// not there is removed already.
pub fn remove(dir: &Path) -> Result<()> {
    for name in [IFINDEX, NETNS, PROG] {
        match std::fs::remove_file(dir.join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(BpfError::io(format!(
                    "removing {}",
                    crate::bpffs::display(&dir.join(name))
                ))(e))
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(BpfError::io(format!(
            "removing {}",
            crate::bpffs::display(dir)
        ))(e)),
    }
}
