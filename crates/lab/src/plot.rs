//! Plots from result files (PNG and SVG), drawn with plotters and the
//! embedded DejaVu Sans font, registered as the one family the plots name,
//! so no system fonts are looked up (PNGs are drawn with it; SVGs name
//! "sans-serif" and the viewer draws their text). Benchmarks that compare
//! contenders per scenario get grouped bars (median over rounds, min-max
//! whiskers, one colour per contender); every plot has a caption with the
//! machine and the placement and tuning the result file records.
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::compare;
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
fn caption(r: &ResultFile) -> Vec<String> {
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
    r: &ResultFile,
) -> Result<DrawingArea<DB, Shift>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(perr)?;
    let lines = caption(r);
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
struct Bar {
    contender: usize,
    median: f64,
    min: f64,
    max: f64,
    note: String,
}

/// Bars side by side under one label (a scenario).
struct BarGroup {
    label: String,
    bars: Vec<Bar>,
}

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
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(16 * label_lines + 14)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, 0.0..ymax)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
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

/// Packets (requests) per second shown in the unit of `kind`'s plots.
/// Scenarios of one metric (RFC 2544 throughput, or TCP Gbit/s) per
/// contender: median over rounds, min-max whiskers, ratio to the scenario's
/// first contender above each other bar ("2.45x", ">=" when
/// generator-limited).
fn draw_comparison<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    r: &ResultFile,
    scenarios: &[compare::ScenarioFigures],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let names = compare::contenders(scenarios);
    let metric = scenarios
        .first()
        .map_or(compare::Metric::Rfc2544, |s| s.metric);
    let (scale, unit) = metric.unit(&r.kind);
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
                    note: match (i, c.generator_limited) {
                        (0, false) => String::new(),
                        (0, true) => ">=".into(),
                        (_, gl) => format!(
                            "{}{:.2}x",
                            if gl { ">=" } else { "" },
                            s.ratio_to_baseline(c)
                        ),
                    },
                })
                .collect(),
        })
        .collect();
    let whiskers = if rounds > 1 {
        format!(", median of {rounds} rounds, whiskers min-max")
    } else {
        String::new()
    };
    draw_bars(
        area,
        &format!(
            "{}: {}{whiskers}; ratio to {}",
            r.kind,
            metric.name(),
            names.first().map(String::as_str).unwrap_or("-")
        ),
        &format!("{} ({unit})", metric.name()),
        &names,
        &groups,
    )
}

/// The file's scenarios compared in `metric`.
fn scenarios_of(r: &ResultFile, metric: compare::Metric) -> Vec<compare::ScenarioFigures> {
    compare::by_scenario(r)
        .into_iter()
        .filter(|s| s.metric == metric)
        .collect()
}

/// TCP transfers per scenario and contender, as grouped bars.
fn draw_tcp<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &ResultFile) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let area = with_caption(root, r)?;
    draw_comparison(&area, r, &scenarios_of(r, compare::Metric::Tcp))?;
    root.present().map_err(perr)
}

/// Offered vs delivered rate for every trial of every run, or, for
/// benchmarks that compare contenders per scenario, grouped bars.
fn draw_rates<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &ResultFile) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let area = with_caption(root, r)?;
    let scenarios = scenarios_of(r, compare::Metric::Rfc2544);
    if !scenarios.is_empty() {
        draw_comparison(&area, r, &scenarios)?;
        return root.present().map_err(perr);
    }
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
    let mut chart = ChartBuilder::on(&area)
        .caption(
            format!("{}: delivered vs offered", r.kind),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
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
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present().map_err(perr)
}

/// Delivered rate per ~1 s window of each run's longest trial, one colour
/// per contender.
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
                compare::contender_of(run),
                t.windows
                    .iter()
                    .map(|w| (w.t_s, w.delivered_pps / 1e6))
                    .collect(),
            ))
        })
        .collect();
    let area = with_caption(root, r)?;
    draw_lines(
        &area,
        &format!("{}: delivered rate per second", r.kind),
        ("time (s)", "delivered (Mpps)"),
        &series,
    )?;
    root.present().map_err(perr)
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
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(perr)?;
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

/// Latency percentiles (x: 1..4 = p50, p90, p99, p99.9) on a log scale.
fn draw_percentiles<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let ymax = series_max(series, |p| p.1, 10.0) * 2.0;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
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
    draw_series(&mut chart, series, SeriesLabelPosition::UpperLeft)
}

/// Runs of bench faas ("CONTENDER | SIZE B") grouped by contender: one
/// point per size, `y` taken from each run.
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

/// A bench faas run's contender and request size (its scenario, "200 B").
fn contender_and_size(run: &Run) -> Option<(String, f64)> {
    let key = crate::results::RunKey::parse(&run.label)?;
    let size = key.scenario.strip_suffix(" B")?.parse().ok()?;
    Some((key.contender, size))
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

/// bench netmodes' figures, one per scenario of seed 003 (runs labelled
/// "PATH MODE | I|II|III ... | round N"): delivered kpps per path and mode
/// (median of rounds) against what the scenario varies (scenario II: the
/// offered rate as measured, so the unpaced run sits where it saturated).
fn netmodes_figures(r: &ResultFile) -> Vec<Figure> {
    let scenarios: [(&'static str, &str, &'static str); 3] = [
        ("scenario-i", "I", "datagrams sent"),
        ("scenario-ii", "II", "offered Mbit/s (measured)"),
        ("scenario-iii", "III", "UDP payload (bytes)"),
    ];
    let mut out = Vec::new();
    for (suffix, name, x_desc) in scenarios {
        // (contender, point label) -> (xs, ys) over rounds.
        let mut points: Vec<(String, String, Vec<f64>, Vec<f64>)> = Vec::new();
        for run in &r.runs {
            let Some(key) = RunKey::parse(&run.label) else {
                continue;
            };
            if key.scenario.split(' ').next() != Some(name) {
                continue;
            }
            let Some(t) = run.trials.first() else {
                continue;
            };
            let x = if name == "II" {
                t.offered_bps / 1e6
            } else {
                run.values.get("x").copied().unwrap_or(0.0)
            };
            let at = points
                .iter()
                .position(|p| p.0 == key.contender && p.1 == key.scenario);
            let i = at.unwrap_or_else(|| {
                points.push((key.contender.clone(), key.scenario.clone(), vec![], vec![]));
                points.len() - 1
            });
            points[i].2.push(x);
            points[i].3.push(t.delivered_pps / 1e3);
        }
        if points.is_empty() {
            continue;
        }
        let mut series: Series = Vec::new();
        for (contender, _, xs, ys) in &points {
            let p = (crate::results::median(xs), crate::results::median(ys));
            match series.iter_mut().find(|s| &s.0 == contender) {
                Some(s) => s.1.push(p),
                None => series.push((contender.clone(), vec![p])),
            }
        }
        out.push((
            suffix,
            format!("{}: scenario {name}, delivered kpps", r.kind),
            (x_desc, "delivered kpps"),
            series,
        ));
    }
    out
}

/// A bench netmodes figure as one panel per network mode (series are named
/// "PATH MODE"), each path in the same colour on every panel: twenty-five
/// lines on one chart cannot be told apart.
fn draw_mode_panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &ResultFile,
    (_, title, axes, series): &Figure,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let area = with_caption(root, r)?;
    let (head, body) = area.split_vertically(34);
    head.titled(title, ("sans-serif", 20)).map_err(perr)?;
    let mut modes: Vec<&str> = Vec::new();
    for (name, _) in series {
        let mode = name.split_once(' ').map_or("", |(_, m)| m);
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    let cols = modes.len().clamp(1, 3);
    let rows = modes.len().div_ceil(cols).max(1);
    for (mode, panel) in modes.iter().zip(body.split_evenly((rows, cols))) {
        let of_mode: Series = series
            .iter()
            .filter(|(name, _)| name.split_once(' ').map_or("", |(_, m)| m) == *mode)
            .map(|(name, pts)| {
                let path = name.split_once(' ').map_or(name.as_str(), |(p, _)| p);
                (path.to_string(), pts.clone())
            })
            .collect();
        draw_lines(&panel, mode, *axes, &of_mode)?;
    }
    root.present().map_err(perr)
}

/// One of bench faas's figures: percentiles on a log scale, a value per
/// size as lines, or as bars when there is only one size (a one-point line
/// shows nothing), with ratios to the first contender.
fn draw_faas_figure<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &ResultFile,
    (kind, title, axes, series): &Figure,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let area = with_caption(root, r)?;
    let sizes: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .collect();
    let one_size = sizes.windows(2).all(|w| w[0] == w[1]);
    if *kind == "latency" {
        draw_percentiles(&area, title, series)?;
    } else if one_size && !sizes.is_empty() {
        let names: Vec<String> = series.iter().map(|s| s.0.clone()).collect();
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
        let group = BarGroup {
            label: format!("{} B request payload", sizes[0]),
            bars,
        };
        draw_bars(&area, title, axes.1, &names, &[group])?;
    } else {
        draw_lines(&area, title, *axes, series)?;
    }
    root.present().map_err(perr)
}

/// Writes `<stem>-rates.{png,svg}` and `<stem>-timeline.{png,svg}` into
/// `outdir` (and bench faas's own figures, and `<stem>-tcp` where runs
/// carried TCP); returns the paths written.
/// `bench qos`'s figures: per UDP scenario and contender, the delivered
/// rate in steady state ("accuracy", Mbit/s of frames without FCS) and
/// the DUT CPU's busy share ("cpu"), medians over rounds with min-max.
fn qos_groups(r: &ResultFile, cpu: bool) -> (Vec<String>, Vec<BarGroup>) {
    value_groups(r, |scenario, run| {
        if !scenario.starts_with("udp ") {
            return None;
        }
        let t = run.trials.first()?;
        Some(if cpu {
            let core = run
                .placement
                .as_ref()
                .and_then(|p| p.dut_cpus.first().copied());
            core.map_or(f64::NAN, |c| t.busy_pct(c))
        } else {
            t.steady_delivered_pps() * (run.params.mean_frame_bytes - 4.0) * 8.0 / 1e6
        })
    })
}

/// Bars per scenario and contender of what `value` reads from each run
/// (None: the run is not in the figure), medians over rounds with
/// min-max whiskers; notes give the ratio to the first contender.
fn value_groups(
    r: &ResultFile,
    value: impl Fn(&str, &crate::results::Run) -> Option<f64>,
) -> (Vec<String>, Vec<BarGroup>) {
    let values: Vec<(RunKey, f64)> = r
        .runs
        .iter()
        .filter_map(|run| {
            let key = RunKey::parse(&run.label)?;
            let v = value(&key.scenario, run)?;
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

/// `bench qos`'s scheduler figures: (file suffix, title, y axis, the
/// value key of the runs, the scenarios' prefix).
const SCHED_FIGURES: [(&str, &str, &str, &str, &str); 4] = [
    (
        "shares",
        "WFQ 80/20 under overload: the gold class's share of what left",
        "gold share",
        "gold share",
        "wfq",
    ),
    (
        "wfq-cpu",
        "WFQ 80/20, UDP: DUT CPU busy per Gbit/s delivered",
        "DUT CPU % per Gbit/s",
        "dut cpu % per gbit/s",
        "wfq",
    ),
    (
        "priority",
        "Strict priority: voice's ping p99 under a bulk flood over its idle p99",
        "p99 loaded / idle",
        "ping p99 loaded / idle",
        "priority",
    ),
    (
        "saturation",
        "Saturation: delivered with one class that never binds",
        "delivered (Mpps)",
        "delivered mpps",
        "saturation",
    ),
];

fn draw_sched<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &ResultFile,
    fig: (&str, &str, &str, &str, &str),
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let (_, title, y, key, prefix) = fig;
    let first = value_groups(r, |scenario, run| {
        run.values
            .get(key)
            .filter(|_| scenario.starts_with(prefix))
            .copied()
    })
    .0
    .into_iter()
    .next()
    .unwrap_or_else(|| "-".into());
    draw_value_bars(
        root,
        r,
        &format!("{}: {title}; ratio to {first}", r.kind),
        y,
        key,
        |scenario| scenario.starts_with(prefix),
    )
}

/// Bars of value `key` per scenario (those `scenarios` takes) and
/// contender, ratios to each group's first bar.
fn draw_value_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &ResultFile,
    title: &str,
    y: &str,
    key: &str,
    scenarios: impl Fn(&str) -> bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let area = with_caption(root, r)?;
    let (names, groups) = value_groups(r, |scenario, run| {
        if !scenarios(scenario) {
            return None;
        }
        run.values.get(key).copied()
    });
    draw_bars(&area, title, y, &names, &groups)?;
    root.present().map_err(perr)
}

/// `bench quic`'s bar charts: (file suffix, title, y axis, value key).
const QUIC_FIGURES: [(&str, &str, &str, &str); 2] = [
    (
        "goodput",
        "HTTP/3 download goodput, median of the rounds (min-max); ratio to each group's first",
        "goodput (Mbit/s)",
        "goodput mbit/s",
    ),
    (
        "cpu",
        "machine CPU per GB downloaded (both ends and the kernel); ratio to each group's first",
        "CPU-seconds per GB",
        "machine cpu-s/gb",
    ),
];

/// Prefix of `bench quic`'s perf shares in a run's values.
const PERF_SHARE: &str = "perf % ";

/// `bench quic --perf`: per contender (the first round's run that has
/// shares), a bar per CPU category.
fn draw_perf<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &ResultFile) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let area = with_caption(root, r)?;
    let mut categories: Vec<String> = Vec::new();
    let mut groups: Vec<BarGroup> = Vec::new();
    for run in &r.runs {
        let Some(key) = RunKey::parse(&run.label) else {
            continue;
        };
        if groups.iter().any(|g| g.label == key.contender) {
            continue;
        }
        let mut bars = Vec::new();
        for (k, v) in &run.values {
            let Some(cat) = k.strip_prefix(PERF_SHARE) else {
                continue;
            };
            let ci = match categories.iter().position(|c| c == cat) {
                Some(i) => i,
                None => {
                    categories.push(cat.to_string());
                    categories.len() - 1
                }
            };
            bars.push(Bar {
                contender: ci,
                median: *v,
                min: *v,
                max: *v,
                note: format!("{v:.0}"),
            });
        }
        if !bars.is_empty() {
            groups.push(BarGroup {
                label: key.contender,
                bars,
            });
        }
    }
    draw_bars(
        &area,
        &format!("{}: where the busy CPU went (perf, first round)", r.kind),
        "% of busy samples",
        &categories,
        &groups,
    )?;
    root.present().map_err(perr)
}

fn draw_qos<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    r: &ResultFile,
    cpu: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let area = with_caption(root, r)?;
    let (names, groups) = qos_groups(r, cpu);
    let base = names.first().map(String::as_str).unwrap_or("-");
    if cpu {
        draw_bars(
            &area,
            &format!(
                "{}: DUT CPU busy at the same offered load (UDP at 2x the rate); ratio to {base}",
                r.kind
            ),
            "DUT CPU busy (%)",
            &names,
            &groups,
        )?;
    } else {
        draw_bars(
            &area,
            &format!(
                "{}: delivered in steady state (UDP offered at 2x the rate); ratio to {base}",
                r.kind
            ),
            "delivered (Mbit/s of frames, no FCS)",
            &names,
            &groups,
        )?;
    }
    root.present().map_err(perr)
}

pub fn plot(r: &ResultFile, outdir: &Path, stem: &str) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(outdir)
        .map_err(|e| LabError::Other(format!("creating {}: {e}", outdir.display())))?;
    let mut out = Vec::new();
    let mut figures: Vec<(&str, Option<Figure>)> = vec![("rates", None), ("timeline", None)];
    if r.kind == "bench-faas" {
        figures.extend(faas_figures(r).into_iter().map(|f| (f.0, Some(f))));
    }
    if r.kind == "bench-netmodes" {
        // One chart per scenario; rates and timelines say nothing here.
        figures = netmodes_figures(r)
            .into_iter()
            .map(|f| (f.0, Some(f)))
            .collect();
    }
    if r.kind == "bench-qos" {
        // Its runs compare contenders per rate: the per-trial scatter and
        // timeline of 75 runs say nothing there.
        figures = Vec::new();
        if r.runs
            .iter()
            .any(|run| RunKey::parse(&run.label).is_some_and(|k| k.scenario.starts_with("udp ")))
        {
            figures = vec![("accuracy", None), ("cpu", None)];
        }
        for f in SCHED_FIGURES {
            if r.runs.iter().any(|run| run.values.contains_key(f.3)) {
                figures.push((f.0, None));
            }
        }
    }
    if r.kind == "bench-quic" {
        figures = QUIC_FIGURES.iter().map(|f| (f.0, None)).collect();
        if r.runs
            .iter()
            .any(|run| run.values.keys().any(|k| k.starts_with(PERF_SHARE)))
        {
            figures.push(("perf", None));
        }
    }
    if !scenarios_of(r, compare::Metric::Tcp).is_empty() {
        figures.push(("tcp", None));
    }
    for (kind, figure) in &figures {
        let png = outdir.join(format!("{stem}-{kind}.png"));
        let svg = outdir.join(format!("{stem}-{kind}.svg"));
        match (*kind, figure) {
            (_, Some(f)) if r.kind == "bench-netmodes" => {
                let big = (SIZE.0 * 3 / 2, SIZE.1 * 3 / 2);
                draw_mode_panels(&BitMapBackend::new(&png, big).into_drawing_area(), r, f)?;
                draw_mode_panels(&SVGBackend::new(&svg, big).into_drawing_area(), r, f)?;
            }
            (_, Some(f)) => {
                draw_faas_figure(&BitMapBackend::new(&png, SIZE).into_drawing_area(), r, f)?;
                draw_faas_figure(&SVGBackend::new(&svg, SIZE).into_drawing_area(), r, f)?;
            }
            ("rates", None) => {
                draw_rates(&BitMapBackend::new(&png, SIZE).into_drawing_area(), r)?;
                draw_rates(&SVGBackend::new(&svg, SIZE).into_drawing_area(), r)?;
            }
            ("tcp", None) => {
                draw_tcp(&BitMapBackend::new(&png, SIZE).into_drawing_area(), r)?;
                draw_tcp(&SVGBackend::new(&svg, SIZE).into_drawing_area(), r)?;
            }
            ("perf", None) if r.kind == "bench-quic" => {
                draw_perf(&BitMapBackend::new(&png, SIZE).into_drawing_area(), r)?;
                draw_perf(&SVGBackend::new(&svg, SIZE).into_drawing_area(), r)?;
            }
            (k, None) if r.kind == "bench-quic" && QUIC_FIGURES.iter().any(|f| f.0 == k) => {
                let f = *QUIC_FIGURES.iter().find(|f| f.0 == k).expect("found");
                let title = format!("{}: {}", r.kind, f.1);
                let (png_root, svg_root) = (
                    BitMapBackend::new(&png, SIZE).into_drawing_area(),
                    SVGBackend::new(&svg, SIZE).into_drawing_area(),
                );
                draw_value_bars(&png_root, r, &title, f.2, f.3, |_| true)?;
                draw_value_bars(&svg_root, r, &title, f.2, f.3, |_| true)?;
            }
            (k, None) if SCHED_FIGURES.iter().any(|f| f.0 == k) => {
                let f = *SCHED_FIGURES.iter().find(|f| f.0 == k).expect("found");
                draw_sched(&BitMapBackend::new(&png, SIZE).into_drawing_area(), r, f)?;
                draw_sched(&SVGBackend::new(&svg, SIZE).into_drawing_area(), r, f)?;
            }
            (k @ ("accuracy" | "cpu"), None) => {
                let cpu = k == "cpu";
                draw_qos(&BitMapBackend::new(&png, SIZE).into_drawing_area(), r, cpu)?;
                draw_qos(&SVGBackend::new(&svg, SIZE).into_drawing_area(), r, cpu)?;
            }
            _ => {
                draw_timeline(&BitMapBackend::new(&png, SIZE).into_drawing_area(), r)?;
                draw_timeline(&SVGBackend::new(&svg, SIZE).into_drawing_area(), r)?;
            }
        }
        out.push(png);
        out.push(svg);
    }
    Ok(out)
}
