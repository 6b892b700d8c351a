//! `peregrine report`: redraws plots (and prints tables) from result
//! files, choosing the report by the file's kind in one place
//! ([`REPORTS`]). Apart from `report` (the trait every benchmark
//! implements), so that module names no benchmark.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use peregrine_lab::results::{self, NoValues, ResultFile};

use crate::report::{draw, Report};

/// Result files of kinds no benchmark here writes (`faas load`'s): the
/// table and the rates and timeline.
pub struct Other;

impl Report for Other {
    const KIND: &'static str = "";
    type Values = NoValues;
}

/// Reads a result file of report `R`, draws its figures and returns its
/// table and the plots written.
fn show<R: Report>(text: &str, dir: &Path, stem: &str) -> Result<(String, Vec<PathBuf>)> {
    let r = ResultFile::<R::Values>::from_json(text).map_err(anyhow::Error::msg)?;
    let written = draw::<R>(&r, dir, stem)?;
    Ok((R::table(&r), written))
}

type Show = fn(&str, &Path, &str) -> Result<(String, Vec<PathBuf>)>;

/// The report of each kind of result file.
pub const REPORTS: [(&str, Show); 11] = [
    (crate::gen::Gen::KIND, show::<crate::gen::Gen>),
    (crate::gen::BenchGen::KIND, show::<crate::gen::BenchGen>),
    (
        crate::showcase::Showcase::KIND,
        show::<crate::showcase::Showcase>,
    ),
    (
        crate::router::BenchRouter::KIND,
        show::<crate::router::BenchRouter>,
    ),
    (crate::faas::BenchFaas::KIND, show::<crate::faas::BenchFaas>),
    (crate::qos::BenchQos::KIND, show::<crate::qos::BenchQos>),
    (crate::quic::BenchQuic::KIND, show::<crate::quic::BenchQuic>),
    (
        crate::agent::BenchAgent::KIND,
        show::<crate::agent::BenchAgent>,
    ),
    (crate::cni::BenchCni::KIND, show::<crate::cni::BenchCni>),
    (crate::soak::BenchSoak::KIND, show::<crate::soak::BenchSoak>),
    (
        crate::netmodes::BenchNetmodes::KIND,
        show::<crate::netmodes::BenchNetmodes>,
    ),
];

/// `peregrine report`.
#[derive(clap::Args, Clone, Debug)]
pub struct ReportConfig {
    /// Result files (JSON) to plot.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output directory (default: next to each file).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the written plots as JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
}

/// Redraws the plots of result files (and prints their tables).
pub fn report(a: ReportConfig) -> Result<()> {
    let mut written = Vec::new();
    for f in &a.files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let dir = a
            .out
            .clone()
            .unwrap_or_else(|| f.parent().map(Path::to_path_buf).unwrap_or_default());
        let stem = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "result".into());
        // A file of no known kind is checked as a plain one (the schema
        // names what is wrong).
        let kind = results::kind_of(&text).unwrap_or_default();
        let show = REPORTS
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(show::<Other> as Show, |(_, s)| *s);
        let (table, plots) =
            show(&text, &dir, &stem).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        written.extend(plots);
        if !a.json {
            print!("{table}");
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
