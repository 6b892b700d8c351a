//! The BPF filesystem and peregrine's pin directory.
use std::path::{Path, PathBuf};

use crate::error::{BpfError, Result};

pub const BPFFS: &str = "/sys/fs/bpf";
pub const PIN_ROOT: &str = "/sys/fs/bpf/peregrine";
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// Mounts bpffs on /sys/fs/bpf when it is not there (it is not mounted at boot
/// on the project machines) and creates `/sys/fs/bpf/peregrine/<sub>`.
pub fn pin_dir(sub: &str) -> Result<PathBuf> {
    ensure_mounted()?;
    let dir = Path::new(PIN_ROOT).join(sub);
    std::fs::create_dir_all(&dir).map_err(BpfError::io(format!("creating {}", dir.display())))?;
    Ok(dir)
}

pub fn ensure_mounted() -> Result<()> {
    if is_bpffs(Path::new(BPFFS)) {
        return Ok(());
    }
    std::fs::create_dir_all(BPFFS).map_err(BpfError::io("creating /sys/fs/bpf"))?;
    nix::mount::mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| BpfError::MissingFeature(format!("cannot mount bpffs on {BPFFS}: {e}")))
}

fn is_bpffs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p)
        .map(|s| s.filesystem_type().0 == BPF_FS_MAGIC)
        .unwrap_or(false)
}

/// Removes a pin directory and everything pinned below it. Unlinking a pin
/// drops the kernel's reference; objects die when no one else holds them.
pub fn remove_pins(sub: &str) -> Result<()> {
    if !is_bpffs(Path::new(BPFFS)) {
        return Ok(());
    }
    let dir = Path::new(PIN_ROOT).join(sub);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(BpfError::io(format!("removing {}", dir.display()))(e)),
    }
    // Drop the root too once nothing is left under it.
    let _ = std::fs::remove_dir(PIN_ROOT);
    Ok(())
}

/// Names of the pin directories directly under `/sys/fs/bpf/peregrine`.
pub fn list_pin_dirs() -> Vec<String> {
    if !is_bpffs(Path::new(BPFFS)) {
        return Vec::new();
    }
    std::fs::read_dir(PIN_ROOT)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
