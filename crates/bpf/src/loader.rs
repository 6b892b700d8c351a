//! Opening and loading skeletons: owns the skeleton's backing object, keeps
//! libbpf's log (the verifier's output) for the error, and serialises loads so
//! each error carries only its own log.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Mutex, Once};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{OpenObject, PrintLevel};

use crate::error::{BpfError, Result};

static CAPTURE: Mutex<Option<String>> = Mutex::new(None);
static LOAD_LOCK: Mutex<()> = Mutex::new(());
static INSTALL_PRINT: Once = Once::new();

fn libbpf_print(level: PrintLevel, msg: String) {
    let mut cap = CAPTURE.lock().unwrap_or_else(|e| e.into_inner());
    match cap.as_mut() {
        Some(buf) => buf.push_str(&msg),
        None if matches!(level, PrintLevel::Warn) => eprint!("libbpf: {msg}"),
        None => {}
    }
}

/// A loaded skeleton together with the storage it borrows from. Skeletons
/// borrow their `OpenObject` for `'obj`; boxing it gives a stable address that
/// lives exactly as long as this value.
pub struct Loaded<S> {
    skel: ManuallyDrop<S>,
    storage: NonNull<MaybeUninit<OpenObject>>,
}

// Safety: the generated skeletons are Send + Sync; the storage pointer is only
// touched in Drop, after the skeleton is gone.
unsafe impl<S: Send> Send for Loaded<S> {}
unsafe impl<S: Sync> Sync for Loaded<S> {}

impl<S> Loaded<S> {
    /// Runs `open_and_load` with fresh storage and libbpf's log captured. On
    /// failure the error carries the verifier log.
    pub fn new<F>(object: &'static str, open_and_load: F) -> Result<Self>
    where
        F: FnOnce(&'static mut MaybeUninit<OpenObject>) -> std::result::Result<S, BpfError>,
    {
        INSTALL_PRINT.call_once(|| {
            // libbpf reads the count of possible CPUs from sysfs on first
            // use and keeps it: read it now, while a file can be opened,
            // not at a per-CPU counter read deep into a run.
            let _ = libbpf_rs::num_possible_cpus();
        });
        let _serial = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // libbpf has one print callback per process: set it to this
        // module's at every load, so the log lands in this CAPTURE even
        // where a second copy of this crate in the binary (a test binary
        // whose dev-dependencies link the library again) set its own.
        libbpf_rs::set_print(Some((PrintLevel::Debug, libbpf_print)));
        if free_fds().is_some_and(|free| free < FDS_PER_LOAD) {
            return Err(BpfError::too_many_open_files(&format!("loading {object}")));
        }
        let storage = NonNull::from(Box::leak(Box::new(MaybeUninit::<OpenObject>::uninit())));
        *CAPTURE.lock().unwrap_or_else(|e| e.into_inner()) = Some(String::new());
        // Safety: `storage` came from Box::leak above and is freed only in Drop
        // (or below on failure), after everything borrowing it is dropped.
        let result = open_and_load(unsafe { &mut *storage.as_ptr() });
        let log = CAPTURE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        match result {
            Ok(skel) => Ok(Loaded {
                skel: ManuallyDrop::new(skel),
                storage,
            }),
            Err(e) => {
                // Safety: the failed skeleton was dropped inside the closure;
                // MaybeUninit does not drop its content, so this only frees.
                drop(unsafe { Box::from_raw(storage.as_ptr()) });
                Err(match e {
                    BpfError::Libbpf { what, source } => {
                        classify_load_error(object, what, source, log)
                    }
                    other => other,
                })
            }
        }
    }
}

/// Opens the skeleton `B` builds, lets `configure` fix what must be set
/// before loading (rodata config, map sizes), and loads it. The error names
/// `object` and carries the verifier's reason.
pub fn open_and_load<B>(
    object: &'static str,
    configure: impl FnOnce(&mut B::Output) -> Result<()>,
) -> Result<Loaded<<B::Output as OpenSkel<'static>>::Output>>
where
    B: SkelBuilder<'static> + Default,
{
    Loaded::new(object, |storage| {
        let mut open = B::default()
            .open(storage)
            .map_err(BpfError::libbpf(format!("opening {object}")))?;
        configure(&mut open)?;
        open.load()
            .map_err(BpfError::libbpf(format!("loading {object}")))
    })
}

/// An open skeleton's rodata (its `const volatile` config); every object
/// with config has one, so its absence means `object` was built wrong.
pub fn rodata<'a, T>(section: Option<&'a mut T>, object: &str) -> Result<&'a mut T> {
    section.ok_or_else(|| BpfError::Invalid(format!("{object} has no rodata")))
}

fn classify_load_error(
    object: &'static str,
    what: String,
    source: libbpf_rs::Error,
    log: String,
) -> BpfError {
    let errno = source.kind();
    let reason = format!("{what}: {source}");
    if let Some(limit) = os_error(&source).and_then(|e| open_files_refusal(object, e)) {
        return limit;
    }
    if matches!(errno, libbpf_rs::ErrorKind::PermissionDenied) && log.trim().is_empty() {
        return BpfError::MissingFeature(format!(
            "loading {object} was refused ({reason}); BPF needs root (CAP_BPF, CAP_NET_ADMIN)"
        ));
    }
    let log = relevant_log(&log);
    BpfError::Load {
        object,
        reason,
        log,
    }
}

/// File descriptors a load may need at once: one per map (and libbpf's
/// placeholder for it), per program, for BTF and for the sysfs files libbpf
/// reads. With fewer free, libbpf fails in ways that do not say so (a map
/// reference to a descriptor that is no map), so the load is refused first.
const FDS_PER_LOAD: u64 = 32;

/// How many more files this process may open (RLIMIT_NOFILE less those
/// open), if /proc says.
fn free_fds() -> Option<u64> {
    use nix::sys::resource::{getrlimit, Resource};
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    // The directory's own descriptor is counted too.
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(soft.saturating_sub(open))
}

/// The OS error behind a libbpf error. libbpf-rs keeps its `io::Error`
/// private (its `source()` skips it), so this reads the "(os error N)" that
/// std's `io::Error` always ends its message with.
fn os_error(e: &libbpf_rs::Error) -> Option<i32> {
    let text = e.to_string();
    let n = text.strip_suffix(')')?.rsplit_once("(os error ")?.1;
    n.parse().ok()
}

/// One line for a load that ran out of file descriptors (every map and
/// program is one) or found the system's table full.
fn open_files_refusal(object: &str, errno: i32) -> Option<BpfError> {
    match errno {
        libc::EMFILE => Some(BpfError::too_many_open_files(&format!("loading {object}"))),
        libc::ENFILE => Some(BpfError::Limit(format!(
            "loading {object}: the system's table of open files is full (fs.file-max)"
        ))),
        _ => None,
    }
}

/// The part of libbpf's output worth showing: the verifier's own log when
/// present, otherwise libbpf's lines that say what failed (its debug
/// chatter about the object's sections and maps is left out).
fn relevant_log(log: &str) -> String {
    if let (Some(b), Some(e)) = (
        log.find("-- BEGIN PROG LOAD LOG --"),
        log.find("-- END PROG LOAD LOG --"),
    ) {
        let lines: Vec<&str> = log[b..e].lines().skip(1).collect();
        let tail = lines.len().saturating_sub(40);
        return lines[tail..].join("\n");
    }
    log.lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("error") || l.contains("failed")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl<S> Deref for Loaded<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.skel
    }
}

impl<S> DerefMut for Loaded<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.skel
    }
}

impl<S> Drop for Loaded<S> {
    fn drop(&mut self) {
        // Safety: the skeleton is dropped once, here, before the storage it
        // borrows; the storage came from Box::leak in `new`.
        unsafe {
            ManuallyDrop::drop(&mut self.skel);
            drop(Box::from_raw(self.storage.as_ptr()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_testbed::testing::privileged;

    #[test]
    fn verifier_rejection_carries_the_log() {
        if !privileged("verifier_rejection_carries_the_log") {
            return;
        }
        let path = concat!(env!("OUT_DIR"), "/verifier_reject.bpf.o");
        let err = Loaded::new("verifier_reject.bpf.o", |_storage| {
            let open = libbpf_rs::ObjectBuilder::default()
                .open_file(path)
                .map_err(BpfError::libbpf("opening verifier_reject.bpf.o"))?;
            open.load()
                .map_err(BpfError::libbpf("loading verifier_reject.bpf.o"))
        })
        .err()
        .expect("the verifier must refuse an unchecked packet read");
        let msg = err.to_string();
        assert!(
            msg.starts_with("loading verifier_reject.bpf.o failed"),
            "{msg}"
        );
        assert!(msg.contains("verifier log:"), "{msg}");
        assert!(
            msg.contains("invalid access to packet"),
            "verifier's own words expected: {msg}"
        );
    }
}
