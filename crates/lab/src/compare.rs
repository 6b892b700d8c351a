//! Contenders compared per scenario: the runs of a result file grouped by
//! their [`RunKey`], one figure per run (its RFC 2544 throughput, or a TCP
//! transfer's Gbit/s), summed up as median, min and max over the rounds and
//! as a ratio to the baseline (the scenario's first contender). Tables and
//! plots both read this.
use crate::results::{ResultFile, Run, RunKey};

/// How a benchmark shows RFC 2544 rates: packets per second in Mpps, or
/// (function benchmarks) requests per second in kreq/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateUnit {
    /// The divisor from packets (requests) per second.
    pub scale: f64,
    pub name: &'static str,
}

impl RateUnit {
    pub const MPPS: RateUnit = RateUnit {
        scale: 1e6,
        name: "Mpps",
    };
    pub const KREQ_S: RateUnit = RateUnit {
        scale: 1e3,
        name: "kreq/s",
    };
}

/// What a scenario's figures measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// RFC 2544 throughput, packets (requests) per second.
    Rfc2544,
    /// A TCP transfer, Gbit/s.
    Tcp,
    /// Delivered when offered the generator's maximum, packets per second:
    /// a benchmark's own figure (bench router's median of its unpaced
    /// trials), never taken from a run by [`by_scenario`].
    Saturated,
}

impl Metric {
    /// The figure of `run` in this metric, and whether it is a lower bound
    /// (generator-limited).
    fn of<V>(run: &Run<V>) -> Option<(Metric, f64, bool)> {
        match (&run.rfc2544, &run.tcp) {
            (Some(s), _) => Some((Metric::Rfc2544, s.throughput_pps, s.generator_limited)),
            (None, Some(t)) => Some((Metric::Tcp, t.gbit_s, false)),
            _ => None,
        }
    }

    /// Divisor and unit for tables and plots (`rate`: the benchmark's unit
    /// of RFC 2544 rates).
    pub fn unit(self, rate: RateUnit) -> (f64, &'static str) {
        match self {
            Metric::Tcp => (1.0, "Gbit/s"),
            Metric::Rfc2544 | Metric::Saturated => (rate.scale, rate.name),
        }
    }

    /// What the figure is, in words.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Rfc2544 => "RFC 2544 throughput",
            Metric::Tcp => "TCP (iperf3)",
            Metric::Saturated => "saturated, delivered",
        }
    }
}

/// One contender's figures in one scenario, over its rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct ContenderFigures {
    pub contender: String,
    /// The figure of each round, in the scenario's metric's base unit
    /// (packets or requests per second; Gbit/s).
    pub rounds: Vec<f64>,
    /// CPU cores per Gbit/s of each round (TCP scenarios only).
    pub cpu_per_gbit_s: Vec<f64>,
    /// Any round stopped by the generator: the figures are lower bounds.
    pub generator_limited: bool,
}

impl ContenderFigures {
    /// The median over rounds.
    pub fn median(&self) -> f64 {
        median(&self.rounds)
    }

    pub fn min(&self) -> f64 {
        self.rounds.iter().copied().fold(f64::INFINITY, f64::min)
    }

    pub fn max(&self) -> f64 {
        self.rounds.iter().copied().fold(0.0, f64::max)
    }
}

/// The median (re-exported: results and comparisons share one).
pub use crate::results::median;

/// Every contender of one scenario, the baseline first.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioFigures {
    pub scenario: String,
    pub metric: Metric,
    pub contenders: Vec<ContenderFigures>,
    /// Whether tables and plots quote ratios to the baseline (a benchmark
    /// turns this off for a figure that does not repeat between runs).
    pub rated: bool,
}

impl ScenarioFigures {
    /// Median of `c` over the baseline's median; None when the scenario
    /// quotes no ratios.
    pub fn ratio_to_baseline(&self, c: &ContenderFigures) -> Option<f64> {
        if !self.rated {
            return None;
        }
        let base = self.contenders[0].median();
        Some(if base > 0.0 { c.median() / base } else { 0.0 })
    }
}

/// Items grouped by their key's scenario, then by its contender, each
/// group in the order its first item came (for runs: the order they ran).
pub fn group_by_key<T>(items: impl IntoIterator<Item = (RunKey, T)>) -> Grouped<T> {
    let mut groups: Grouped<T> = Vec::new();
    for (key, item) in items {
        let gi = match groups.iter().position(|(s, _)| *s == key.scenario) {
            Some(i) => i,
            None => {
                groups.push((key.scenario, Vec::new()));
                groups.len() - 1
            }
        };
        let cs = &mut groups[gi].1;
        match cs.iter_mut().find(|(c, _)| *c == key.contender) {
            Some((_, v)) => v.push(item),
            None => cs.push((key.contender, vec![item])),
        }
    }
    groups
}

/// What [`group_by_key`] gives: (scenario, [(contender, its items)]).
pub type Grouped<T> = Vec<(String, Vec<(String, Vec<T>)>)>;

/// The runs of `r` that carry a [`RunKey`], grouped by [`group_by_key`].
pub fn runs_by_key<V>(r: &ResultFile<V>) -> Grouped<&Run<V>> {
    group_by_key(
        r.runs
            .iter()
            .filter_map(|run| Some((RunKey::parse(&run.label)?, run))),
    )
}

/// The result file's runs that carry a [`RunKey`] and a figure (RFC 2544
/// or TCP), per scenario in the order they ran; empty for files of other
/// benchmarks.
pub fn by_scenario<V>(r: &ResultFile<V>) -> Vec<ScenarioFigures> {
    let figured = r.runs.iter().filter_map(|run| {
        let figure = Metric::of(run)?;
        Some((RunKey::parse(&run.label)?, (run, figure)))
    });
    group_by_key(figured)
        .into_iter()
        .map(|(scenario, cs)| {
            // The metric of the scenario's first run.
            let (_, (metric, _, _)) = cs[0].1[0];
            ScenarioFigures {
                scenario,
                metric,
                contenders: cs
                    .into_iter()
                    .map(|(contender, runs)| ContenderFigures {
                        contender,
                        rounds: runs.iter().map(|(_, (_, figure, _))| *figure).collect(),
                        cpu_per_gbit_s: runs
                            .iter()
                            .filter_map(|(run, _)| run.tcp.as_ref())
                            .map(|t| t.cpu_cores_per_gbit_s)
                            .collect(),
                        generator_limited: runs.iter().any(|(_, (_, _, lower))| *lower),
                    })
                    .collect(),
                rated: true,
            }
        })
        .collect()
}

/// Contenders in the order they first ran (one colour each in plots).
pub fn contenders(scenarios: &[ScenarioFigures]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for c in scenarios.iter().flat_map(|s| s.contenders.iter()) {
        if !names.contains(&c.contender) {
            names.push(c.contender.clone());
        }
    }
    names
}

/// The contender part of a run's label, or the whole label when it has no
/// [`RunKey`]: what plots colour and name a run by.
pub fn contender_of<V>(run: &Run<V>) -> String {
    RunKey::parse(&run.label)
        .map(|k| k.contender)
        .unwrap_or_else(|| run.label.clone())
}

/// Lines for the table: per scenario and contender, the median, min and
/// max over rounds and the ratio to the scenario's baseline (and, for TCP,
/// CPU cores per Gbit/s); `rate` is the benchmark's unit of rates.
pub fn table(scenarios: &[ScenarioFigures], rate: RateUnit) -> String {
    if scenarios.is_empty() {
        return String::new();
    }
    let cw = contenders(scenarios)
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(9)
        .max(9);
    let over = if scenarios.iter().all(|s| s.metric == Metric::Saturated) {
        "of the kept trials"
    } else {
        "over rounds"
    };
    let mut out = format!(
        "Per scenario, median {over} (min..max){}:\n",
        if scenarios.iter().any(|s| s.rated) {
            ", ratio to the first contender"
        } else {
            ""
        }
    );
    for s in scenarios {
        let (scale, unit) = s.metric.unit(rate);
        out.push_str(&format!(
            "{} [{}]:\n  {:<cw$}  {:>12} {:>21} {:>8}{}\n",
            s.scenario,
            s.metric.name(),
            "contender",
            format!("median {unit}"),
            format!("min..max {unit}"),
            if s.rated { "ratio" } else { "" },
            if s.metric == Metric::Tcp {
                "  CPU cores per Gbit/s"
            } else {
                ""
            }
        ));
        for c in &s.contenders {
            let lower = if c.generator_limited { ">= " } else { "" };
            let cpu = if c.cpu_per_gbit_s.is_empty() {
                String::new()
            } else {
                format!("  {:.3}", median(&c.cpu_per_gbit_s))
            };
            let ratio = s
                .ratio_to_baseline(c)
                .map_or(String::new(), |x| format!("{x:>7.2}x"));
            out.push_str(&format!(
                "  {:<cw$}  {:>12} {:>21} {ratio:>8}{cpu}{}\n",
                c.contender,
                format!("{lower}{:.3}", c.median() / scale),
                format!("{:.3}..{:.3}", c.min() / scale, c.max() / scale),
                if c.generator_limited {
                    " (generator-limited: a lower bound)"
                } else {
                    ""
                }
            ));
        }
    }
    out
}

/// A result file's table followed by its per-scenario comparison, rates
/// in `rate`.
pub fn report<V: crate::results::Values>(file: &ResultFile<V>, rate: RateUnit) -> String {
    file.table() + &table(&by_scenario(file), rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_keys_round_trip_and_group() {
        let key = RunKey {
            contender: "xdp router".into(),
            scenario: "ipv4, 1 flow".into(),
            round: Some(2),
        };
        assert_eq!(key.label(), "xdp router | ipv4, 1 flow | round 2");
        assert_eq!(RunKey::parse(&key.label()), Some(key));
        let faas = RunKey::parse("afxdp 1T1Q | 200 B").unwrap();
        assert_eq!((faas.contender.as_str(), faas.round), ("afxdp 1T1Q", None));
        assert_eq!(RunKey::parse("generator -> XDP drop sink"), None);
        assert_eq!(RunKey::parse("a | b | lap 1"), None);
        let c = ContenderFigures {
            contender: "x".into(),
            rounds: vec![3.0, 1.0, 2.0],
            cpu_per_gbit_s: vec![],
            generator_limited: false,
        };
        assert_eq!((c.median(), c.min(), c.max()), (2.0, 1.0, 3.0));
        assert_eq!(median(&[1.0, 4.0]), 2.5);
    }
}
