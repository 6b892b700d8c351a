//! `peregrine showcase`: the built-in demonstration `scripts/run.sh` runs.
//! The product side by side in one run, each part through the benchmark
//! that measures it: the XDP router, the tc router and Linux forwarding
//! with 64 B IPv4 frames of one flow (`bench router`'s one-flow scenario),
//! then the AF_XDP invoker against the recvmmsg/sendmmsg server
//! (`bench faas` at 200 B, one worker). Every contender: a saturated trial
//! (what it delivers when offered more than it takes, and what limited it)
//! and an RFC 2544 search.
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use peregrine_faas::Backend as FaasBackend;
use peregrine_host::signals;
use peregrine_lab::compare;
use peregrine_lab::plot::{self, Bar, BarGroup, Chart, Figure};
use peregrine_lab::results::{Limiter, NoValues, ResultFile, Run, RunKey, Trial};

use crate::common::{command_line, in_first_seen_order, PlacementConfig, ResultOutput};
use crate::faas::{invoker_run, ClientReceive, FaasContender, InvokerTrials};
use crate::report::Report;
use crate::router::{one_flow_runs, Contender, PacketTrials};
use crate::saturation::median_saturated_trial;
use crate::RateSetting;

/// `peregrine showcase`: its result is `showcase.json` in `out`.
#[derive(clap::Args, Clone, Debug)]
pub struct ShowcaseConfig {
    /// Directory for the result file and plots.
    #[arg(long, default_value = crate::DEFAULT_OUT)]
    pub out: PathBuf,
    /// Length of each trial (2, 2s, 500ms).
    #[arg(long, default_value = "2s", value_parser = crate::common::duration)]
    pub trial: Duration,
    #[command(flatten)]
    pub placement: PlacementConfig,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

/// The name of every lab the showcase builds (one at a time).
const LAB: &str = "showcase";
/// The forwarding contenders, the baseline last.
const FORWARDING: [Contender; 3] = [Contender::Xdp, Contender::Tc, Contender::Linux];
/// The invoker's request payload, bytes (as in the README's figure).
const REQUEST_BYTES: usize = 200;

/// The invoker's contenders, one worker each, the baseline last.
fn invokers() -> [FaasContender; 2] {
    let one = |backend| FaasContender {
        backend,
        threads: 1,
        wasm: false,
    };
    [one(FaasBackend::Afxdp), one(FaasBackend::Mmsg)]
}

/// The main job: the forwarding part on the `chain` lab, the invoker part
/// on a `pair` lab per backend (each lab removed after its part, also on
/// error and Ctrl-C), then table, JSON and plots.
pub fn showcase(a: ShowcaseConfig) -> Result<()> {
    let loss = a.placement.loss_tolerance()?;
    let packets = PacketTrials {
        trial: a.trial,
        // `bench router`'s resolution; no fixed-rate trial.
        resolution: RateSetting::Pps(20_000.0),
        fixed_rate: None,
        loss,
        // Its saturated figure the median of three unpaced trials.
        saturated: 3,
        dut_cpu: a.placement.dut_cpu()?,
    };
    let mut runs = one_flow_runs(LAB, &FORWARDING, &packets)?;
    // `bench faas`'s defaults: saturated above every server here, latency
    // where every backend keeps up, the server's receive as veth does it.
    let requests = InvokerTrials {
        duration: a.trial,
        loss,
        saturate: RateSetting::Pps(3e6),
        latency_rate: RateSetting::Pps(100e3),
        client_receive: ClientReceive::Sender,
    };
    for c in invokers() {
        signals::check()?;
        runs.push(invoker_run(LAB, c, REQUEST_BYTES, &requests)?);
    }
    let result = ResultFile::new(Showcase::KIND, command_line(), runs);
    let output = ResultOutput {
        out: a.out,
        name: "showcase".into(),
        json: a.json,
    };
    output.write::<Showcase>(&result)
}

/// The showcase's result file.
pub struct Showcase;

/// The figure of the forwarding part (Mpps per contender).
pub const FORWARDING_FIGURE: &str = "forwarding";
/// The figure of the invoker part (kreq/s per backend).
pub const INVOKER_FIGURE: &str = "invoker";

impl Report for Showcase {
    const KIND: &'static str = "showcase";
    type Values = NoValues;

    /// The parts side by side; a file of the earlier showcase (its runs'
    /// labels name no contender and scenario) as every benchmark's table.
    fn table(r: &ResultFile) -> String {
        let parts = parts(r);
        if parts.is_empty() {
            return compare::report(r, Self::RATE_UNIT);
        }
        table(&parts)
    }

    fn figures(r: &ResultFile) -> Vec<Figure> {
        let parts = parts(r);
        if parts.is_empty() {
            return vec![plot::rates(r, Self::RATE_UNIT), plot::timeline(r)];
        }
        parts
            .iter()
            .map(|p| Figure {
                name: if p.requests {
                    INVOKER_FIGURE
                } else {
                    FORWARDING_FIGURE
                },
                chart: bars(p),
            })
            .collect()
    }
}

/// One side-by-side comparison: the runs of one scenario, the baseline
/// (Linux forwarding, recvmmsg) last.
struct Part<'a> {
    scenario: String,
    /// Requests (the invoker: its scenario is a payload size, "200 B"),
    /// or frames.
    requests: bool,
    rows: Vec<Row<'a>>,
}

/// A contender's figures in a part.
struct Row<'a> {
    contender: String,
    saturated: Option<&'a Trial>,
    rfc2544: Option<f64>,
    generator_limited: bool,
    search_limiter: Option<Limiter>,
    /// The search's loss tolerance.
    loss: Option<f64>,
    p50_us: Option<f64>,
    /// Requests/s offered in the latency trial.
    latency_rate: Option<f64>,
}

impl Part<'_> {
    fn baseline(&self) -> Option<&Row<'_>> {
        self.rows.last()
    }

    /// "RFC 2544 throughput (<= 0.1% lost)".
    fn rfc2544_label(&self) -> String {
        match self.rows.iter().find_map(|r| r.loss) {
            Some(l) => format!("RFC 2544 throughput (<= {}% lost)", l * 100.0),
            None => "RFC 2544 throughput".into(),
        }
    }

    /// A rate in the part's unit.
    fn rate(&self, per_s: f64) -> String {
        if self.requests {
            format!("{:.1} kreq/s", per_s / 1e3)
        } else {
            format!("{:.3} Mpps", per_s / 1e6)
        }
    }
}

/// The result's runs grouped by scenario, in the order they ran.
fn parts(r: &ResultFile) -> Vec<Part<'_>> {
    let keyed: Vec<(String, &Run)> = r
        .runs
        .iter()
        .filter_map(|run| Some((RunKey::parse(&run.label)?.scenario, run)))
        .collect();
    in_first_seen_order(keyed.iter().map(|(s, _)| s.as_str()))
        .into_iter()
        .map(|name| Part {
            scenario: name.to_string(),
            requests: name.ends_with(" B"),
            rows: keyed
                .iter()
                .filter(|(s, _)| s == name)
                .map(|&(_, run)| row(run))
                .collect(),
        })
        .collect()
}

fn row(run: &Run) -> Row<'_> {
    let latency_trial = run.trials.iter().find(|t| t.phase == "latency");
    let latency = latency_trial.and_then(|t| t.latency.as_ref());
    Row {
        contender: RunKey::parse(&run.label)
            .map(|k| k.contender)
            .unwrap_or_else(|| run.label.clone()),
        saturated: median_saturated_trial(run),
        rfc2544: run.rfc2544.as_ref().map(|s| s.throughput_pps),
        generator_limited: run.rfc2544.as_ref().is_some_and(|s| s.generator_limited),
        search_limiter: run.rfc2544.as_ref().and_then(|s| s.limited_by),
        loss: run.rfc2544.as_ref().map(|s| s.loss_tolerance),
        p50_us: latency.map(|l| l.p50_ns as f64 / 1e3),
        latency_rate: latency_trial.and_then(|t| t.requested_pps),
    }
}

/// `num / den` as "3.02x", or "-" without both.
fn ratio(num: Option<f64>, den: Option<f64>) -> String {
    match (num, den) {
        (Some(n), Some(d)) if n > 0.0 && d > 0.0 => format!("{:.2}x", n / d),
        _ => "-".into(),
    }
}

/// What a ratio of two RFC 2544 figures is when either is only a lower
/// bound (the search ended generator-limited): ">= " for the numerator's,
/// "<= " for the denominator's, "~" for both.
fn bound(num_lower: bool, den_lower: bool) -> String {
    match (num_lower, den_lower) {
        (true, false) => ">= ",
        (false, true) => "<= ",
        (true, true) => "~",
        (false, false) => "",
    }
    .into()
}

/// What held a trial's delivered rate down, and where its frames were
/// lost: the largest drop counter of that limiter, or inside it.
fn limiter(t: &Trial) -> String {
    let Some(l) = t.limited_by else {
        return "?".into();
    };
    match l {
        Limiter::None => return "nothing (within the loss tolerance)".into(),
        Limiter::Generator => return "the generator (everything offered arrived)".into(),
        _ => {}
    }
    let lost = t.offered_packets.saturating_sub(t.delivered_packets).max(1);
    let top = t
        .drops
        .iter()
        .filter(|d| d.role == l)
        .max_by_key(|d| d.packets);
    match top {
        Some(d) => format!(
            "{} ({}: {:.0}% of the lost)",
            l.as_str(),
            d.at,
            d.packets as f64 * 100.0 / lost as f64
        ),
        None => format!("{} (lost inside it: no drop counter saw them)", l.as_str()),
    }
}

/// The parts side by side: rates, ratios to the baseline, then what
/// limited each contender.
fn table(parts: &[Part]) -> String {
    let mut s = String::new();
    for p in parts {
        let Some(base) = p.baseline() else { continue };
        let what = if p.requests {
            format!("function invoker: {} requests, one worker", p.scenario)
        } else {
            format!("forwarding: {}, 64 B", p.scenario)
        };
        let vs = format!("/ {}", base.contender);
        let _ = writeln!(
            s,
            "{what:<36} {:>14} {:>20} {:>9}  {vs:^21}",
            "saturated",
            "RFC 2544 throughput",
            if p.requests { "p50" } else { "" },
        );
        let _ = writeln!(
            s,
            "{:<36} {:>14} {:>20} {:>9}  {:>10} {:>10}",
            "", "", "", "", "saturated", "RFC 2544"
        );
        for (i, r) in p.rows.iter().enumerate() {
            // The baseline over itself is exact, bound or not.
            let is_base = i + 1 == p.rows.len();
            let sat = r.saturated.map(|t| t.delivered_pps);
            let tput = r.rfc2544.map(|v| {
                format!(
                    "{}{}",
                    if r.generator_limited { ">= " } else { "" },
                    p.rate(v)
                )
            });
            let p50 = r.p50_us.map(|v| format!("{v:.1} us")).unwrap_or_default();
            let _ = writeln!(
                s,
                "  {:<34} {:>14} {:>20} {:>9}  {:>10} {:>10}",
                r.contender,
                sat.map(|v| p.rate(v)).unwrap_or_else(|| "-".into()),
                tput.unwrap_or_else(|| "-".into()),
                p50,
                ratio(sat, base.saturated.map(|t| t.delivered_pps)),
                if p.requests {
                    bound(
                        r.generator_limited && !is_base,
                        base.generator_limited && !is_base,
                    ) + &ratio(r.rfc2544, base.rfc2544)
                } else {
                    "-".into()
                },
            );
        }
        let _ = writeln!(
            s,
            "  saturated: delivered when offered {}; {}: the highest rate offered with at most that share lost",
            if p.requests {
                "more requests than any server here answers"
            } else {
                "the generator's maximum"
            },
            p.rfc2544_label()
        );
        if !p.requests {
            let _ = writeln!(
                s,
                "  RFC 2544 not rated: at this loss it follows the DUT's NAPI wake-ups on this VM, and does not repeat between runs"
            );
        }
        if let Some(rate) = p.rows.iter().find_map(|r| r.latency_rate) {
            let _ = writeln!(
                s,
                "  p50: median request-to-reply time offered {:.0} kreq/s",
                rate / 1e3
            );
        }
        let _ = writeln!(s, "  what limited it:");
        for r in &p.rows {
            let _ = writeln!(
                s,
                "  {:<18} saturated: {}; RFC 2544 search: {}",
                r.contender,
                r.saturated.map(limiter).unwrap_or_else(|| "-".into()),
                r.search_limiter.map(Limiter::as_str).unwrap_or("-"),
            );
        }
        let _ = writeln!(s);
    }
    s
}

/// A part as bars: saturated and RFC 2544 per contender, each noted with
/// its ratio to the baseline.
fn bars(p: &Part) -> Chart {
    let (scale, unit) = if p.requests {
        (1e-3, "kreq/s")
    } else {
        (1e-6, "Mpps")
    };
    let base = p.baseline();
    // Each bar's value, and what its ratio to the baseline is of (None:
    // not rated).
    type Of<'a> = &'a dyn Fn(&Row) -> Option<f64>;
    let group = |label: &str, v: Of, rated: Option<Of>| BarGroup {
        label: label.into(),
        bars: p
            .rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let x = v(r)?;
                let rate = |of: Of| Some((of(r)?, base.and_then(of)?));
                let note = match rated.and_then(rate) {
                    Some((x, b)) if i + 1 < p.rows.len() && b > 0.0 => format!("{:.2}x", x / b),
                    _ => String::new(),
                };
                Some(Bar {
                    contender: i,
                    median: x * scale,
                    min: x * scale,
                    max: x * scale,
                    note,
                })
            })
            .collect(),
    };
    let title = if p.requests {
        format!("showcase: function invoker, {} requests", p.scenario)
    } else {
        format!("showcase: forwarding, {}, 64 B", p.scenario)
    };
    Chart::Bars {
        title,
        y_desc: unit.into(),
        legend: p.rows.iter().map(|r| r.contender.clone()).collect(),
        groups: vec![
            group(
                "saturated",
                &|r| r.saturated.map(|t| t.delivered_pps),
                Some(&|r: &Row| r.saturated.map(|t| t.delivered_pps)),
            ),
            group(
                &p.rfc2544_label(),
                &|r| r.rfc2544,
                p.requests.then_some(&|r: &Row| r.rfc2544),
            ),
        ],
    }
}
