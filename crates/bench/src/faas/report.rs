//! `bench faas`'s result files: RFC 2544 in requests/s, and the figures in
//! the shape of the source's Tables 6 and 7 and its latency figure.
use peregrine_lab::compare::RateUnit;
use peregrine_lab::plot::{self, Bar, BarGroup, Chart, Figure, Series};
use peregrine_lab::results::{NoValues, ResultFile, Run, RunKey};

use crate::report::Report;

/// `bench faas`'s result files.
pub struct BenchFaas;

/// Answered requests/s per request size, saturated (Table 6).
pub const REQUESTS: &str = "requests";
/// Answered Mbit/s per request size, saturated (Table 7).
pub const MBITS: &str = "mbits";
/// Latency percentiles per contender at the fixed rate.
pub const LATENCY: &str = "latency";

impl Report for BenchFaas {
    const KIND: &'static str = "bench-faas";
    const RATE_UNIT: RateUnit = RateUnit::KREQ_S;
    type Values = NoValues;

    fn figures(r: &ResultFile) -> Vec<Figure> {
        let mut f = vec![plot::rates(r, Self::RATE_UNIT), plot::timeline(r)];
        f.extend(figures(r));
        f
    }
}

/// Runs ("CONTENDER | SIZE B") grouped by contender: one point per size,
/// `y` taken from each run.
fn by_size(r: &ResultFile, y: impl Fn(&Run) -> Option<f64>) -> Series {
    let mut series: Series = Vec::new();
    for run in &r.runs {
        let Some((contender, size)) = contender_and_size(run) else {
            continue;
        };
        let Some(v) = y(run) else { continue };
        match series.iter_mut().find(|s| s.0 == contender) {
            Some(s) => s.1.push((size, v)),
            None => series.push((contender, vec![(size, v)])),
        }
    }
    series
}

/// A run's contender and request size (its scenario, "200 B").
fn contender_and_size(run: &Run) -> Option<(String, f64)> {
    let key = RunKey::parse(&run.label)?;
    let size = key.scenario.strip_suffix(" B")?.parse().ok()?;
    Some((key.contender, size))
}

/// A value per size as lines, or as bars when there is only one size (a
/// one-point line shows nothing), with ratios to the first contender.
fn per_size(title: String, (x_desc, y_desc): (&str, &str), series: Series) -> Chart {
    let sizes: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .collect();
    let one_size = sizes.windows(2).all(|w| w[0] == w[1]);
    if !one_size || sizes.is_empty() {
        return Chart::Lines {
            title,
            axes: (x_desc.into(), y_desc.into()),
            series,
        };
    }
    let legend: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
    let base = series[0].1[0].1.max(1e-9);
    let bars = series
        .iter()
        .enumerate()
        .map(|(i, (_, pts))| Bar {
            contender: i,
            median: pts[0].1,
            min: pts[0].1,
            max: pts[0].1,
            note: if i == 0 {
                String::new()
            } else {
                format!("{:.2}x", pts[0].1 / base)
            },
        })
        .collect();
    Chart::Bars {
        title,
        y_desc: y_desc.into(),
        legend,
        groups: vec![BarGroup {
            label: format!("{} B request payload", sizes[0]),
            bars,
        }],
    }
}

/// Requests/s and Mbit/s per request size (saturated), latency percentiles
/// per backend at the fixed rate (the size nearest 800 B).
fn figures(r: &ResultFile) -> Vec<Figure> {
    let saturated = |run: &Run| {
        run.trials
            .iter()
            .find(|t| t.phase == "saturate" || t.phase == "max")
            .cloned()
    };
    let requests = by_size(r, |run| saturated(run).map(|t| t.delivered_pps / 1e3));
    let mbits = by_size(r, |run| saturated(run).map(|t| t.delivered_bps / 1e6));
    let sizes: Vec<f64> = requests
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .collect();
    let pick = sizes
        .iter()
        .copied()
        .min_by(|a, b| (a - 800.0).abs().total_cmp(&(b - 800.0).abs()))
        .unwrap_or(800.0);
    let mut latency = Vec::new();
    for run in &r.runs {
        let Some((contender, size)) = contender_and_size(run) else {
            continue;
        };
        if size != pick {
            continue;
        }
        let Some(l) = run
            .trials
            .iter()
            .find(|t| t.phase == "latency")
            .and_then(|t| t.latency.as_ref())
        else {
            continue;
        };
        let us = |ns: u64| ns as f64 / 1e3;
        latency.push((
            contender,
            vec![
                (1.0, us(l.p50_ns)),
                (2.0, us(l.p90_ns)),
                (3.0, us(l.p99_ns)),
                (4.0, us(l.p999_ns)),
            ],
        ));
    }
    vec![
        Figure {
            name: REQUESTS,
            chart: per_size(
                format!("{}: answered requests/s, saturated (Table 6)", r.kind),
                ("request payload (bytes)", "kreq/s"),
                requests,
            ),
        },
        Figure {
            name: MBITS,
            chart: per_size(
                format!("{}: answered Mbit/s, saturated (Table 7)", r.kind),
                ("request payload (bytes)", "Mbit/s (request frames)"),
                mbits,
            ),
        },
        Figure {
            name: LATENCY,
            chart: Chart::Percentiles {
                title: format!("{}: latency at the fixed rate, {pick} B", r.kind),
                y_desc: "request to reply (us, log)".into(),
                series: latency,
            },
        },
    ]
}
