//! `peregrine report`: plots (and tables) redrawn from result files.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use peregrine_lab::results::ResultFile;

/// `peregrine report`.
#[derive(Clone, Debug)]
pub struct ReportConfig {
    /// Result files (JSON) to plot.
    pub files: Vec<PathBuf>,
    /// Output directory; None: next to each file.
    pub out: Option<PathBuf>,
    /// Print the written plots as JSON instead of the tables.
    pub json: bool,
}

/// Redraws the plots of result files (and prints their tables).
pub fn report(a: ReportConfig) -> Result<()> {
    let mut written = Vec::new();
    for f in &a.files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let r =
            ResultFile::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        let dir = a
            .out
            .clone()
            .unwrap_or_else(|| f.parent().map(Path::to_path_buf).unwrap_or_default());
        let stem = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "result".into());
        written.extend(peregrine_lab::plot::plot(&r, &dir, &stem)?);
        if !a.json {
            // A benchmark with its own table prints that one again.
            match r.kind.as_str() {
                "bench-quic" => print!("{}", crate::quic::table(&r)),
                _ => print!("{}", peregrine_lab::compare::report(&r)),
            }
        }
    }
    if a.json {
        println!("{}", serde_json::json!({ "plots": written }));
    } else {
        for w in written {
            println!("wrote {}", w.display());
        }
    }
    Ok(())
}
