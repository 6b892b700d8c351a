//! Plots from result files (PNG and SVG), drawn with plotters and the
//! embedded DejaVu Sans font, registered as the one family the plots name,
//! so no system fonts are looked up (PNGs are drawn with it; SVGs name
//! "sans-serif" and the viewer draws their text). This module knows no
//! benchmark: each hands it [`Figure`]s, generic charts (grouped bars with
//! min-max whiskers, lines, percentiles, points against the no-loss line,
//! panels of lines), and [`draw`] writes them. The figures every result
//! file can have are built here from its runs: [`rates`] (grouped bars
//! per scenario where runs compare contenders, median over rounds,
//! min-max whiskers, one colour per contender; else delivered vs offered),
//! [`timeline`] and [`tcp`]. Every plot has a caption with the machine and
//! the placement and tuning the result file records.
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::compare;
use crate::compare::RateUnit;
use crate::error::{LabError, Result};
use crate::results::{ResultFile, Run, RunKey};

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTERED: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Registers the embedded font as "sans-serif"; with plotters' ab_glyph
/// text this is the only font plots can use, so a failure is an error.
fn register_font() -> Result<()> {
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
                .map_err(|_| "the embedded DejaVu Sans font does not load".to_string())
        })
        .clone()
        .map_err(LabError::Other)
}

/// Ten distinguishable colours (matplotlib's tab10), one per contender.
/// Tableau's ten, then two darker ones for the charts with more contenders.
const COLORS: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 128),
    RGBColor(128, 64, 0),
];

/// Size of every plot, pixels.
const SIZE: (u32, u32) = (1000, 650);

fn perr<E: std::fmt::Debug>(e: E) -> LabError {
    LabError::Other(format!("drawing plot: {e:?}"))
}

/// Splits `text` into lines of at most `width` characters at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Most caption lines under a plot; the result file has the rest.
const CAPTION_LINES: usize = 7;

/// The machine, and where the runs ran and what the lab tuned, as the
/// result file records them: the caption under every plot.
fn caption<V>(r: &ResultFile<V>) -> Vec<String> {
    let mut items = vec![format!(
        "machine: Linux {}, {} CPUs",
        r.machine.kernel, r.machine.cpus
    )];
    let mut cpus: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for p in r.runs.iter().filter_map(|x| x.placement.as_ref()) {
        let where_ = crate::results::Placement {
            notes: vec![],
            ..p.clone()
        }
        .describe();
        if !cpus.contains(&where_) {
            cpus.push(where_);
        }
        for n in &p.notes {
            if !notes.contains(n) {
                notes.push(n.clone());
            }
        }
    }
    if !cpus.is_empty() {
        items.push(format!("placement: {}", cpus.join(" | ")));
    }
    items.extend(notes);
    let mut lines: Vec<String> = items.iter().flat_map(|i| wrap(i, 140)).collect();
    if lines.len() > CAPTION_LINES {
        lines.truncate(CAPTION_LINES);
        lines[CAPTION_LINES - 1].push_str(" ... (the rest in the result file)");
    }
    lines
}

/// Draws the caption at the foot of `root` and returns the area above it.
fn with_caption<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    lines: &[String],
) -> Result<DrawingArea<DB, Shift>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(perr)?;
    let line_h = 16;
    let (_, h) = root.dim_in_pixel();
    let foot = line_h * lines.len() as u32 + 12;
    let (top, bottom) = root.split_vertically(h.saturating_sub(foot));
    let style = ("sans-serif", 12).into_font().color(&BLACK.mix(0.75));
    for (k, line) in lines.iter().enumerate() {
        bottom
            .draw_text(line, &style, (15, 4 + k as i32 * line_h as i32))
            .map_err(perr)?;
    }
    Ok(top)
}

/// One bar: a contender's median with its min-max whisker, and a note
/// printed above it (the ratio to the baseline).
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Index of its name in the chart's legend (and so its colour).
    pub contender: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub note: String,
}

/// Bars side by side under one label (a scenario).
#[derive(Debug, Clone, PartialEq)]
pub struct BarGroup {
    pub label: String,
    pub bars: Vec<Bar>,
}

/// Labelled point series of one chart: (name, points); one colour per name.
pub type Series = Vec<(String, Vec<(f64, f64)>)>;

/// A chart, as a benchmark's report hands it over.
#[derive(Debug, Clone, PartialEq)]
pub enum Chart {
    /// Grouped bars: one group per label, one bar per legend entry,
    /// min-max whiskers, a note above each bar.
    Bars {
        title: String,
        y_desc: String,
        legend: Vec<String>,
        groups: Vec<BarGroup>,
    },
    /// Lines with dots, axes from zero (`axes`: x and y descriptions).
    Lines {
        title: String,
        axes: (String, String),
        series: Series,
    },
    /// Percentiles p50, p90, p99, p99.9 (x 1..4) per series, y on a log
    /// scale.
    Percentiles {
        title: String,
        y_desc: String,
        series: Series,
    },
    /// Points of offered (x) against delivered (y) with the no-loss line.
    Delivered {
        title: String,
        axes: (String, String),
        series: Series,
    },
    /// One line chart per panel (a name each, up to three in a row), a
    /// series' colour by its order in the panel; drawn half as large again.
    Panels {
        title: String,
        axes: (String, String),
        panels: Vec<(String, Series)>,
    },
}

/// A chart and the suffix of its files (`<stem>-<name>.{png,svg}`).
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub name: &'static str,
    pub chart: Chart,
}

/// The figure of delivered rates ([`rates`]).
pub const RATES: &str = "rates";
/// The figure of delivered rate over time ([`timeline`]).
pub const TIMELINE: &str = "timeline";
/// The figure of TCP transfers ([`tcp`]).
pub const TCP: &str = "tcp";

/// Grouped bars: one group per scenario, one bar per contender, coloured
/// by contender with a legend of contenders only.
fn draw_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    contenders: &[String],
    groups: &[BarGroup],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let n = groups.len().max(1) as f64;
    let top = groups
        .iter()
        .flat_map(|g| g.bars.iter())
        .map(|b| b.max.max(b.median))
        .fold(0.0f64, f64::max)
        .max(1e-3);
    // Head room for the legend and the notes above the bars.
    let ymax = top * (1.25 + 0.07 * contenders.len() as f64);
    let (w, _) = area.dim_in_pixel();
    let label_chars = ((w as f64 - 100.0) / n / 7.5).max(8.0) as usize;
    let label_lines = groups
        .iter()
        .map(|g| wrap(&g.label, label_chars).len())
        .max()
        .unwrap_or(1) as u32;
    let mut chart = styled(area, title, 16 * label_lines + 14)
        .build_cartesian_2d(0.0..n, 0.0..ymax)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|y| tick(*y))
        .y_desc(y_desc)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(perr)?;
    for (gi, g) in groups.iter().enumerate() {
        let k = g.bars.len().max(1) as f64;
        let width = 0.8 / k;
        for (bi, b) in g.bars.iter().enumerate() {
            let c = COLORS[b.contender % COLORS.len()];
            let x0 = gi as f64 + 0.1 + bi as f64 * width;
            let x1 = x0 + width * 0.9;
            let mid = (x0 + x1) / 2.0;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, b.median)],
                    c.filled(),
                )))
                .map_err(perr)?;
            if b.max > b.min {
                let cap = width * 0.2;
                let whisker = vec![
                    vec![(mid, b.min), (mid, b.max)],
                    vec![(mid - cap, b.min), (mid + cap, b.min)],
                    vec![(mid - cap, b.max), (mid + cap, b.max)],
                ];
                chart
                    .draw_series(
                        whisker
                            .into_iter()
                            .map(|p| PathElement::new(p, BLACK.stroke_width(1))),
                    )
                    .map_err(perr)?;
            }
            if !b.note.is_empty() {
                let style = ("sans-serif", 12)
                    .into_font()
                    .into_text_style(area)
                    .pos(Pos::new(HPos::Center, VPos::Bottom));
                chart
                    .draw_series(std::iter::once(Text::new(
                        b.note.clone(),
                        (mid, b.max.max(b.median) + top * 0.02),
                        style,
                    )))
                    .map_err(perr)?;
            }
        }
        // The scenario under its group, wrapped to the group's width.
        let (px, py) = chart.backend_coord(&(gi as f64 + 0.5, 0.0));
        let (ax, ay) = area.get_base_pixel();
        let style = ("sans-serif", 14)
            .into_font()
            .into_text_style(area)
            .pos(Pos::new(HPos::Center, VPos::Top));
        for (li, line) in wrap(&g.label, label_chars).iter().enumerate() {
            area.draw_text(line, &style, (px - ax, py - ay + 8 + 16 * li as i32))
                .map_err(perr)?;
        }
    }
    for (ci, name) in contenders.iter().enumerate() {
        let c = COLORS[ci % COLORS.len()];
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(perr)?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// Scenarios of one metric (RFC 2544 throughput, or TCP Gbit/s) per
/// contender: median over rounds, min-max whiskers, ratio to the scenario's
/// first contender above each other bar ("2.45x", ">=" when
/// generator-limited); rates in `rate`.
fn comparison<V>(
    r: &ResultFile<V>,
    scenarios: &[compare::ScenarioFigures],
    rate: RateUnit,
) -> Chart {
    let names = compare::contenders(scenarios);
    let metric = scenarios
        .first()
        .map_or(compare::Metric::Rfc2544, |s| s.metric);
    let (scale, unit) = metric.unit(rate);
    let rounds = scenarios
        .iter()
        .flat_map(|s| s.contenders.iter())
        .map(|c| c.rounds.len())
        .max()
        .unwrap_or(1);
    let groups: Vec<BarGroup> = scenarios
        .iter()
        .map(|s| BarGroup {
            label: s.scenario.clone(),
            bars: s
                .contenders
                .iter()
                .enumerate()
                .map(|(i, c)| Bar {
                    contender: names.iter().position(|n| *n == c.contender).unwrap_or(0),
                    median: c.median() / scale,
                    min: c.min() / scale,
                    max: c.max() / scale,
                    note: match (i, c.generator_limited, s.ratio_to_baseline(c)) {
                        (0, true, _) => ">=".into(),
                        (0, false, _) | (_, _, None) => String::new(),
                        (_, gl, Some(x)) => format!("{}{x:.2}x", if gl { ">=" } else { "" }),
                    },
                })
                .collect(),
        })
        .collect();
    let whiskers = if rounds > 1 {
        let of = match metric {
            compare::Metric::Saturated => "trials",
            _ => "rounds",
        };
        format!(", median of {rounds} {of}, whiskers min-max")
    } else {
        String::new()
    };
    Chart::Bars {
        title: format!(
            "{}: {}{whiskers}{}",
            r.kind,
            metric.name(),
            match scenarios.iter().any(|s| s.rated) {
                true => format!("; ratio to {}", names.first().map_or("-", String::as_str)),
                false => String::new(),
            }
        ),
        y_desc: format!("{} ({unit})", metric.name()),
        legend: names,
        groups,
    }
}

/// `scenarios` (of one metric) per contender as grouped bars, median over
/// rounds, min-max whiskers, ratios where rated, as figure `name`.
pub fn comparison_figure<V>(
    r: &ResultFile<V>,
    name: &'static str,
    scenarios: &[compare::ScenarioFigures],
    rate: RateUnit,
) -> Figure {
    Figure {
        name,
        chart: comparison(r, scenarios, rate),
    }
}

/// The file's scenarios compared in `metric`.
fn scenarios_of<V>(r: &ResultFile<V>, metric: compare::Metric) -> Vec<compare::ScenarioFigures> {
    compare::by_scenario(r)
        .into_iter()
        .filter(|s| s.metric == metric)
        .collect()
}

/// TCP transfers per scenario and contender, as grouped bars; None when no
/// run carried TCP.
pub fn tcp<V>(r: &ResultFile<V>, rate: RateUnit) -> Option<Figure> {
    let scenarios = scenarios_of(r, compare::Metric::Tcp);
    (!scenarios.is_empty()).then(|| Figure {
        name: TCP,
        chart: comparison(r, &scenarios, rate),
    })
}

/// RFC 2544 throughput per scenario and contender as grouped bars (rates in
/// `rate`), or, for files without such comparisons, offered vs delivered
/// rate for every trial of every run.
pub fn rates<V>(r: &ResultFile<V>, rate: RateUnit) -> Figure {
    rates_of(r, &scenarios_of(r, compare::Metric::Rfc2544), rate)
}

/// [`rates`] of the RFC 2544 `scenarios` a benchmark took from `r` (and,
/// say, chose not to rate).
pub fn rates_of<V>(
    r: &ResultFile<V>,
    scenarios: &[compare::ScenarioFigures],
    rate: RateUnit,
) -> Figure {
    if !scenarios.is_empty() {
        return comparison_figure(r, RATES, scenarios, rate);
    }
    // Runs whose frames were built but not sent have nothing delivered to
    // show: they stay in the table, not on this chart.
    let series = r
        .runs
        .iter()
        .filter(|x| x.params.sent)
        .map(|run| {
            let mut pts: Vec<(f64, f64)> = run
                .trials
                .iter()
                .map(|t| (t.offered_pps / 1e6, t.delivered_pps / 1e6))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (run.label.clone(), pts)
        })
        .collect();
    Figure {
        name: RATES,
        chart: Chart::Delivered {
            title: format!("{}: delivered vs offered", r.kind),
            axes: ("offered (Mpps)".into(), "delivered (Mpps)".into()),
            series,
        },
    }
}

/// Delivered rate per ~1 s window of each run's longest trial, one colour
/// per contender.
pub fn timeline<V>(r: &ResultFile<V>) -> Figure {
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
                compare::contender_of(run),
                t.windows
                    .iter()
                    .map(|w| (w.t_s, w.delivered_pps / 1e6))
                    .collect(),
            ))
        })
        .collect();
    Figure {
        name: TIMELINE,
        chart: Chart::Lines {
            title: format!("{}: delivered rate per second", r.kind),
            axes: ("time (s)".into(), "delivered (Mpps)".into()),
            series,
        },
    }
}

/// Bars per scenario and contender of what `value` reads from each run
/// (None: the run is not in the figure), medians over rounds with min-max
/// whiskers; notes give the ratio to the first contender. Returns the
/// contenders in the order they first ran (the legend) and the groups.
pub fn bars_by_key<V>(
    r: &ResultFile<V>,
    value: impl Fn(&RunKey, &Run<V>) -> Option<f64>,
) -> (Vec<String>, Vec<BarGroup>) {
    let values: Vec<(RunKey, f64)> = r
        .runs
        .iter()
        .filter_map(|run| {
            let key = RunKey::parse(&run.label)?;
            let v = value(&key, run)?;
            Some((key, v))
        })
        .collect();
    // One colour per contender, in the order they first ran.
    let mut names: Vec<String> = Vec::new();
    for (key, _) in &values {
        if !names.contains(&key.contender) {
            names.push(key.contender.clone());
        }
    }
    let groups = compare::group_by_key(values)
        .into_iter()
        .map(|(label, bars)| {
            let base = bars.first().map(|(_, v)| compare::median(v));
            BarGroup {
                label,
                bars: bars
                    .iter()
                    .enumerate()
                    .map(|(i, (c, v))| {
                        let m = compare::median(v);
                        Bar {
                            contender: names.iter().position(|n| n == c).unwrap_or(0),
                            median: m,
                            min: v.iter().copied().fold(f64::INFINITY, f64::min),
                            max: v.iter().copied().fold(0.0, f64::max),
                            note: match (i, base) {
                                (0, _) | (_, None) => String::new(),
                                (_, Some(b)) => format!("{:.2}x", m / b.max(1e-9)),
                            },
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    (names, groups)
}

/// A chart on `area` titled `title`, in the style every figure shares
/// (caption, margins, label sizes), `x_labels` pixels high under the x axis.
fn styled<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    x_labels: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(x_labels)
        .y_label_area_size(70);
    builder
}

/// A linear chart from 0 to `(xmax, ymax)` with named axes, in the style
/// every figure shares.
fn xy_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    (xmax, ymax): (f64, f64),
) -> Result<XyChart<'a, DB>>
where
    DB::ErrorType: 'static,
{
    let mut chart = styled(area, title, 50)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(6)
        .x_label_formatter(&|x| tick(*x))
        .y_label_formatter(&|y| tick(*y))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(perr)?;
    Ok(chart)
}

/// An axis label: as few digits as say it, three significant ones below
/// 100 and the whole number from there (`1800`, `2.5`, `0.125`,
/// `0.00025`), not `1800.0`. Every axis starts at 0, so its labels are
/// multiples of one step and differ within those digits. Six labels at
/// most on an x axis, which three panels side by side share the width of.
fn tick(v: f64) -> String {
    let magnitude = if v == 0.0 {
        0
    } else {
        v.abs().log10().floor() as i32
    };
    let decimals = (2 - magnitude).clamp(0, 12) as usize;
    let s = format!("{v:.decimals$}");
    let s = match s.contains('.') {
        true => s.trim_end_matches('0').trim_end_matches('.'),
        false => &s,
    };
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// A linear chart's context: f64 on both axes.
type XyChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Both axes of a chart of offered (x) against delivered (y) points: to the
/// largest coordinate of `series`, with room.
fn delivered_max(series: &[(String, Vec<(f64, f64)>)]) -> f64 {
    series_max(series, |p| p.0.max(p.1), 1e-6) * 1.1
}

/// Offered (x) against delivered (y) points per series on `chart` (both
/// axes to `max`, see [`delivered_max`]), with the no-loss diagonal.
fn draw_delivered<'a, DB: DrawingBackend + 'a>(
    chart: &mut XyChart<'a, DB>,
    series: &[(String, Vec<(f64, f64)>)],
    max: f64,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 0.0), (max, max)],
            BLACK.mix(0.3),
        ))
        .map_err(perr)?
        .label("no loss")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.3)));
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
            .map_err(perr)?
            .label(name.clone())
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled()));
    }
    draw_legend(chart, SeriesLabelPosition::UpperLeft)
}

/// One line chart per panel under one title, up to three panels in a row.
fn draw_panels<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    panels: &[(String, Series)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (head, body) = area.split_vertically(34);
    head.titled(title, ("sans-serif", 20)).map_err(perr)?;
    let cols = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(cols).max(1);
    for ((name, series), panel) in panels.iter().zip(body.split_evenly((rows, cols))) {
        draw_lines(&panel, name, (x_desc, y_desc), series)?;
    }
    Ok(())
}

/// Draws `chart` with the caption `caption` under it.
fn draw_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    caption: &[String],
    chart: &Chart,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let area = with_caption(root, caption)?;
    match chart {
        Chart::Bars {
            title,
            y_desc,
            legend,
            groups,
        } => draw_bars(&area, title, y_desc, legend, groups)?,
        Chart::Lines {
            title,
            axes,
            series,
        } => draw_lines(&area, title, (&axes.0, &axes.1), series)?,
        Chart::Percentiles {
            title,
            y_desc,
            series,
        } => draw_percentiles(&area, title, y_desc, series)?,
        Chart::Delivered {
            title,
            axes,
            series,
        } => {
            let max = delivered_max(series);
            let mut xy = xy_chart(&area, title, (&axes.0, &axes.1), (max, max))?;
            draw_delivered(&mut xy, series, max)?
        }
        Chart::Panels {
            title,
            axes,
            panels,
        } => draw_panels(&area, title, (&axes.0, &axes.1), panels)?,
    }
    root.present().map_err(perr)
}

/// Writes `<stem>-<name>.{png,svg}` of every figure into `outdir`, each
/// with the caption of `r` (its machine, placement and tuning); returns
/// the paths written.
pub fn draw<V>(
    r: &ResultFile<V>,
    figures: &[Figure],
    outdir: &Path,
    stem: &str,
) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(outdir)
        .map_err(|e| LabError::Other(format!("creating {}: {e}", outdir.display())))?;
    let caption = caption(r);
    let mut out = Vec::new();
    for f in figures {
        let png = outdir.join(format!("{stem}-{}.png", f.name));
        let svg = outdir.join(format!("{stem}-{}.svg", f.name));
        let size = match f.chart {
            Chart::Panels { .. } => (SIZE.0 * 3 / 2, SIZE.1 * 3 / 2),
            _ => SIZE,
        };
        draw_chart(
            &BitMapBackend::new(&png, size).into_drawing_area(),
            &caption,
            &f.chart,
        )?;
        draw_chart(
            &SVGBackend::new(&svg, size).into_drawing_area(),
            &caption,
            &f.chart,
        )?;
        out.push(png);
        out.push(svg);
    }
    Ok(out)
}

/// The largest coordinate `of` any point in `series`, at least `floor` (an
/// empty or all-zero chart still gets an axis).
fn series_max(
    series: &[(String, Vec<(f64, f64)>)],
    of: impl Fn(&(f64, f64)) -> f64,
    floor: f64,
) -> f64 {
    series
        .iter()
        .flat_map(|s| s.1.iter())
        .map(of)
        .fold(floor, f64::max)
}

/// A line chart of `series` (name, points), axes from zero.
fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let xmax = series_max(series, |p| p.0, 1.0) * 1.05;
    let ymax = series_max(series, |p| p.1, 0.001);
    // Head room above the lines for the legend, one row per name.
    let mut names: Vec<&str> = series.iter().map(|s| s.0.as_str()).collect();
    names.dedup();
    let ymax = ymax * (1.15 + 0.06 * names.len() as f64);
    let mut chart = xy_chart(area, title, (x_desc, y_desc), (xmax, ymax))?;
    draw_series(&mut chart, series, SeriesLabelPosition::UpperRight)
}

/// Lines with dots for every series, one colour per name, and a legend
/// naming each once at `pos`.
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
    let mut names: Vec<&str> = Vec::new();
    for (name, pts) in series {
        let first = !names.contains(&name.as_str());
        if first {
            names.push(name);
        }
        let i = names.iter().position(|n| n == name).unwrap_or(0);
        let c = COLORS[i % COLORS.len()];
        let line = chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(perr)?;
        if first {
            line.label(name.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
            });
        }
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(perr)?;
    }
    draw_legend(chart, pos)
}

/// The legend of the series drawn so far, at `pos`, the same on every chart.
fn draw_legend<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    pos: SeriesLabelPosition,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    X: Ranged,
    Y: Ranged,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(pos)
        .draw()
        .map_err(perr)
}

/// Percentiles (x: 1..4 = p50, p90, p99, p99.9) on a log scale.
fn draw_percentiles<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let ymax = series_max(series, |p| p.1, 10.0) * 2.0;
    let mut chart = styled(area, title, 50)
        .build_cartesian_2d(0.5..4.5, (1.0..ymax).log_scale())
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc(y_desc)
        .x_labels(4)
        .x_label_formatter(&|x: &f64| match x.round() as i64 {
            1 => "p50".into(),
            2 => "p90".into(),
            3 => "p99".into(),
            4 => "p99.9".into(),
            _ => String::new(),
        })
        .y_label_formatter(&|y: &f64| tick(*y))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(perr)?;
    draw_series(&mut chart, series, SeriesLabelPosition::UpperLeft)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticks_say_as_few_digits_as_they_need() {
        let got: Vec<String> = [0.0, -0.0, 1800.0, 2.5, 0.125, 0.00025, -0.0001, 1e6]
            .iter()
            .map(|v| super::tick(*v))
            .collect();
        assert_eq!(
            got,
            ["0", "0", "1800", "2.5", "0.125", "0.00025", "-0.0001", "1000000"]
        );
    }
}
