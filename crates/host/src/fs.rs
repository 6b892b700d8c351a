//! Plain filesystem reads the host's objects are listed with (namespaces
//! under /run/netns, pins under bpffs).
use std::path::Path;

/// Names of the entries of directory `dir` (none if it cannot be read).
pub fn list_dir(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
