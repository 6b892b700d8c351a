//! Plots from result files (PNG and SVG), drawn with plotters and the
//! embedded DejaVu Sans font so no system fonts are needed.
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::{LabError, Result};
use crate::results::ResultFile;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

fn register_font() {
    REGISTER.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn perr<E: std::fmt::Debug>(e: E) -> LabError {
    LabError::Other(format!("drawing plot: {e:?}"))
}

/// Offered vs delivered rate for every trial of every run.
fn draw_rates<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &ResultFile) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(perr)?;
    // Runs whose frames were built but not sent have nothing delivered to
    // show: they stay in the table, not on this chart.
    let sent = || r.runs.iter().filter(|x| x.params.sent);
    let max = sent()
        .flat_map(|x| x.trials.iter())
        .map(|t| t.offered_pps.max(t.delivered_pps))
        .fold(0.0f64, f64::max)
        .max(1.0)
        / 1e6
        * 1.1;
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("{}: delivered vs offered", r.kind),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max, 0.0..max)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("offered (Mpps)")
        .y_desc("delivered (Mpps)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(perr)?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 0.0), (max, max)],
            BLACK.mix(0.3),
        ))
        .map_err(perr)?
        .label("no loss")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.3)));
    for (i, run) in sent().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let mut pts: Vec<(f64, f64)> = run
            .trials
            .iter()
            .map(|t| (t.offered_pps / 1e6, t.delivered_pps / 1e6))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
            .map_err(perr)?
            .label(run.label.clone())
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(perr)?;
    root.present().map_err(perr)
}

/// Delivered rate per ~1 s window of each run's longest trial.
fn draw_timeline<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &ResultFile) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let series: Series = r
        .runs
        .iter()
        .filter(|run| run.params.sent)
        .filter_map(|run| {
            let t = run
                .trials
                .iter()
                .max_by(|a, b| a.windows.len().cmp(&b.windows.len()))?;
            Some((
                run.label.clone(),
                t.windows
                    .iter()
                    .map(|w| (w.t_s, w.delivered_pps / 1e6))
                    .collect(),
            ))
        })
        .collect();
    draw_lines(
        root,
        &format!("{}: delivered rate per second", r.kind),
        ("time (s)", "delivered (Mpps)"),
        &series,
    )
}

/// A line chart of `series` (label, points), axes from zero.
fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(perr)?;
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter())
        .map(|p| p.0)
        .fold(1.0f64, f64::max)
        * 1.05;
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter())
        .map(|p| p.1)
        .fold(0.001f64, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(perr)?;
    draw_series(&mut chart, series, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(perr)
}

/// Lines with dots for every series, and the legend at `pos`.
fn draw_series<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    series: &[(String, Vec<(f64, f64)>)],
    pos: SeriesLabelPosition,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, (label, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(perr)?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(perr)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(pos)
        .draw()
        .map_err(perr)?;
    Ok(())
}

/// Latency percentiles (x: 1..4 = p50, p90, p99, p99.9) on a log scale.
fn draw_percentiles<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(perr)?;
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter())
        .map(|p| p.1)
        .fold(10.0f64, f64::max)
        * 2.0;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5..4.5, (1.0..ymax).log_scale())
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("request to reply (us, log)")
        .x_labels(4)
        .x_label_formatter(&|x: &f64| match x.round() as i64 {
            1 => "p50".into(),
            2 => "p90".into(),
            3 => "p99".into(),
            4 => "p99.9".into(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(perr)?;
    draw_series(&mut chart, series, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(perr)
}

/// Runs labelled "CONFIG | SIZE B" (bench faas) grouped by CONFIG: one
/// point per size, `y` taken from each run.
fn by_size(r: &ResultFile, y: impl Fn(&crate::results::Run) -> Option<f64>) -> Series {
    let mut series: Series = Vec::new();
    for run in &r.runs {
        let Some((config, size)) = run.label.split_once(" | ") else {
            continue;
        };
        let Some(size) = size.trim_end_matches(" B").parse::<f64>().ok() else {
            continue;
        };
        let Some(v) = y(run) else { continue };
        match series.iter_mut().find(|s| s.0 == config) {
            Some(s) => s.1.push((size, v)),
            None => series.push((config.to_string(), vec![(size, v)])),
        }
    }
    series
}

/// Labelled point series of one chart.
type Series = Vec<(String, Vec<(f64, f64)>)>;

/// A chart to draw: file suffix, title, axis descriptions, series.
type Figure = (&'static str, String, (&'static str, &'static str), Series);

/// The function benchmark's figures, in the shape of the source's Tables 6
/// and 7 and its latency figure: requests/s and Mbit/s per request size
/// (saturated), latency percentiles per backend at the fixed rate (the size
/// nearest 800 B).
fn faas_figures(r: &ResultFile) -> Vec<Figure> {
    let saturated = |run: &crate::results::Run| {
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
        let Some((config, size)) = run.label.split_once(" | ") else {
            continue;
        };
        if size.trim_end_matches(" B").parse::<f64>().ok() != Some(pick) {
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
            config.to_string(),
            vec![
                (1.0, us(l.p50_ns)),
                (2.0, us(l.p90_ns)),
                (3.0, us(l.p99_ns)),
                (4.0, us(l.p999_ns)),
            ],
        ));
    }
    vec![
        (
            "requests",
            format!("{}: answered requests/s, saturated (Table 6)", r.kind),
            ("request payload (bytes)", "kreq/s"),
            requests,
        ),
        (
            "mbits",
            format!("{}: answered Mbit/s, saturated (Table 7)", r.kind),
            ("request payload (bytes)", "Mbit/s (request frames)"),
            mbits,
        ),
        (
            "latency",
            format!("{}: latency at the fixed rate, {pick} B", r.kind),
            ("percentile", "request to reply (us)"),
            latency,
        ),
    ]
}

/// Writes `<stem>-rates.{png,svg}` and `<stem>-timeline.{png,svg}` into
/// `outdir`; returns the paths written.
pub fn plot(r: &ResultFile, outdir: &Path, stem: &str) -> Result<Vec<PathBuf>> {
    register_font();
    std::fs::create_dir_all(outdir)
        .map_err(|e| LabError::Other(format!("creating {}: {e}", outdir.display())))?;
    let mut out = Vec::new();
    let size = (900, 600);
    for kind in ["rates", "timeline"] {
        let draw_png = |root: &DrawingArea<BitMapBackend, Shift>| match kind {
            "rates" => draw_rates(root, r),
            _ => draw_timeline(root, r),
        };
        let png = outdir.join(format!("{stem}-{kind}.png"));
        draw_png(&BitMapBackend::new(&png, size).into_drawing_area())?;
        out.push(png);
        let svg = outdir.join(format!("{stem}-{kind}.svg"));
        {
            let root = SVGBackend::new(&svg, size).into_drawing_area();
            match kind {
                "rates" => draw_rates(&root, r)?,
                _ => draw_timeline(&root, r)?,
            }
        }
        out.push(svg);
    }
    if r.kind == "bench-faas" {
        for (kind, title, axes, series) in faas_figures(r) {
            let png = outdir.join(format!("{stem}-{kind}.png"));
            let svg = outdir.join(format!("{stem}-{kind}.svg"));
            if kind == "latency" {
                draw_percentiles(
                    &BitMapBackend::new(&png, size).into_drawing_area(),
                    &title,
                    &series,
                )?;
                draw_percentiles(
                    &SVGBackend::new(&svg, size).into_drawing_area(),
                    &title,
                    &series,
                )?;
            } else {
                draw_lines(
                    &BitMapBackend::new(&png, size).into_drawing_area(),
                    &title,
                    axes,
                    &series,
                )?;
                draw_lines(
                    &SVGBackend::new(&svg, size).into_drawing_area(),
                    &title,
                    axes,
                    &series,
                )?;
            }
            out.push(png);
            out.push(svg);
        }
    }
    Ok(out)
}
