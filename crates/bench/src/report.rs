//! What each benchmark's result file is and shows: the [`Report`] trait
//! (its kind, its typed values, its table and figures). `peregrine report`
//! (`crate::redraw`) chooses one by a file's kind.
use std::path::{Path, PathBuf};

use anyhow::Result;
use peregrine_lab::compare::{self, RateUnit};
use peregrine_lab::plot::{self, Figure};
use peregrine_lab::results::{ResultFile, Values};

/// A benchmark's result file: what it is called, what its runs measure
/// beside their trials, and the table and figures it is shown as.
pub trait Report {
    /// The `kind` its result files carry.
    const KIND: &'static str;
    /// The unit its RFC 2544 rates are shown in.
    const RATE_UNIT: RateUnit = RateUnit::MPPS;
    /// What its runs measure beside their trials.
    type Values: Values;

    /// The table for people.
    fn table(r: &ResultFile<Self::Values>) -> String {
        compare::report(r, Self::RATE_UNIT)
    }

    /// Its figures (TCP transfers, where runs carried them, come after
    /// these in every report: [`figures`]).
    fn figures(r: &ResultFile<Self::Values>) -> Vec<Figure> {
        vec![plot::rates(r, Self::RATE_UNIT), plot::timeline(r)]
    }
}

/// Every figure of `r`: the report's own, then the TCP transfers.
pub fn figures<R: Report>(r: &ResultFile<R::Values>) -> Vec<Figure> {
    let mut f = R::figures(r);
    f.extend(plot::tcp(r, R::RATE_UNIT));
    f
}

/// Draws every figure of `r` into `dir` as `<stem>-<figure>.{png,svg}`.
pub fn draw<R: Report>(r: &ResultFile<R::Values>, dir: &Path, stem: &str) -> Result<Vec<PathBuf>> {
    Ok(plot::draw(r, &figures::<R>(r), dir, stem)?)
}
