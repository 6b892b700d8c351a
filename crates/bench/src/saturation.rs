//! Saturated figures that repeat on a noisy machine: what `bench router`
//! quotes its ratios from.
//!
//! On this 2-vCPU VM one saturated trial of 1 s can land 5-10% off its
//! neighbours (the host's scheduling of the DUT's vCPU), and an RFC 2544
//! search at <= 0.1% loss follows the DUT's NAPI wake-ups. So each
//! contender's run holds several unpaced trials (`PacketTrials::saturated`),
//! a contender's figure is the median of all of them over the rounds, and a
//! trial whose generator offered well below that contender's median offered
//! rate (starved; `SLOW_GENERATOR`) is left out, the table saying how many
//! were. Ratios are of those medians.
//!
//! Not of the share delivered/offered: the generator's rate is not a gauge
//! of the machine's speed, it depends on the DUT (a DUT that takes frames
//! off the veth ring faster makes every send dearer: 7 Mpps offered into
//! the XDP router, 10.5 into Linux forwarding, same run), so shares would
//! inflate the faster DUT's ratio.
use std::fmt::Write;

use peregrine_lab::compare::{self, median, runs_by_key, ContenderFigures, Metric, RateUnit};
use peregrine_lab::plot::{self, Figure};
use peregrine_lab::results::{ResultFile, Run, Trial};

/// A saturated trial whose generator offered less than this share of its
/// contender's median offered rate in the scenario is left out.
pub const SLOW_GENERATOR: f64 = 0.75;

/// The figure's name (`<stem>-saturated.{png,svg}`).
pub const SATURATED_FIGURE: &str = "saturated";

/// Whether `t` is a saturated trial: unpaced, or offered more than any
/// contender takes.
pub fn is_saturated(t: &Trial) -> bool {
    t.phase == "max" || t.phase == "saturate"
}

/// A run's saturated trial of median delivered rate (of an even count,
/// the lower middle one).
pub fn median_saturated_trial<V>(run: &Run<V>) -> Option<&Trial> {
    let mut all: Vec<&Trial> = run.trials.iter().filter(|t| is_saturated(t)).collect();
    all.sort_by(|a, b| a.delivered_pps.total_cmp(&b.delivered_pps));
    all.get(all.len().saturating_sub(1) / 2).copied()
}

/// A scenario's saturated figures (`Metric::Saturated`: each contender's
/// `rounds` are the delivered rates of its kept trials), and what was
/// left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub figures: compare::ScenarioFigures,
    /// Per contender, in the same order: trials left out for a slow
    /// generator.
    pub left_out: Vec<usize>,
}

impl Scenario {
    /// Contender `top`'s median over `bottom`'s, when both ran.
    pub fn ratio_of(&self, top: &str, bottom: &str) -> Option<f64> {
        let find = |n: &str| {
            self.figures
                .contenders
                .iter()
                .find(|c| c.contender == n)
                .map(ContenderFigures::median)
        };
        let (t, b) = (find(top)?, find(bottom)?);
        (b > 0.0).then(|| t / b)
    }

    /// Trials left out, and all saturated trials.
    pub fn left_out(&self) -> (usize, usize) {
        let out: usize = self.left_out.iter().sum();
        let kept: usize = self.figures.contenders.iter().map(|c| c.rounds.len()).sum();
        (out, out + kept)
    }
}

/// The saturated trials of `r`'s keyed runs, per scenario and contender,
/// the slow ones left out.
pub fn scenarios<V>(r: &ResultFile<V>) -> Vec<Scenario> {
    runs_by_key(r)
        .into_iter()
        .filter_map(|(scenario, cs)| {
            let mut left_out = Vec::new();
            let contenders: Vec<ContenderFigures> = cs
                .into_iter()
                .filter_map(|(contender, runs)| {
                    let all: Vec<&Trial> = runs
                        .iter()
                        .flat_map(|r| r.trials.iter().filter(|t| is_saturated(t)))
                        .collect();
                    let offered: Vec<f64> = all.iter().map(|t| t.offered_pps).collect();
                    if offered.is_empty() {
                        return None;
                    }
                    let floor = SLOW_GENERATOR * median(&offered);
                    let rounds: Vec<f64> = all
                        .iter()
                        .filter(|t| t.offered_pps >= floor)
                        .map(|t| t.delivered_pps)
                        .collect();
                    left_out.push(all.len() - rounds.len());
                    Some(ContenderFigures {
                        contender,
                        rounds,
                        cpu_per_gbit_s: Vec::new(),
                        generator_limited: false,
                    })
                })
                .collect();
            (!contenders.is_empty()).then_some(Scenario {
                figures: compare::ScenarioFigures {
                    scenario,
                    metric: Metric::Saturated,
                    contenders,
                    rated: true,
                },
                left_out,
            })
        })
        .collect()
}

/// The saturated figures as a table (`compare::table`: median of the kept
/// trials, min..max, ratio to the baseline), then per scenario the `pairs`
/// (top, bottom contender names) that ran and how many trials were left
/// out.
pub fn table(scenarios: &[Scenario], pairs: &[(&str, &str)], rate: RateUnit) -> String {
    if scenarios.is_empty() {
        return String::new();
    }
    let figures: Vec<compare::ScenarioFigures> =
        scenarios.iter().map(|s| s.figures.clone()).collect();
    let mut s = compare::table(&figures, rate);
    for sc in scenarios {
        let _ = write!(s, "{}:", sc.figures.scenario);
        for (top, bottom) in pairs {
            if let Some(x) = sc.ratio_of(top, bottom) {
                let _ = write!(s, " {top} / {bottom}: {x:.2}x;");
            }
        }
        let (out, all) = sc.left_out();
        let _ = writeln!(
            s,
            " left out: {out} of {all} saturated trials (offered below {:.0}% of their \
             contender's median: a starved generator)",
            SLOW_GENERATOR * 100.0,
        );
    }
    s
}

/// The saturated figures as grouped bars (`plot::comparison_figure`).
pub fn figure<V>(r: &ResultFile<V>, scenarios: &[Scenario], rate: RateUnit) -> Option<Figure> {
    let figures: Vec<compare::ScenarioFigures> =
        scenarios.iter().map(|s| s.figures.clone()).collect();
    (!figures.is_empty()).then(|| plot::comparison_figure(r, SATURATED_FIGURE, &figures, rate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_lab::plot::Chart;
    use peregrine_lab::results::{NoValues, RunKey};

    /// A run of `contender` in round `round` with one saturated trial per
    /// (offered, delivered) pair.
    fn run(contender: &str, round: u32, trials: &[(f64, f64)]) -> Run<NoValues> {
        Run {
            label: RunKey {
                contender: contender.into(),
                scenario: "ipv4, 1 flow".into(),
                round: Some(round),
            }
            .label(),
            trials: trials
                .iter()
                .map(|&(o, d)| Trial::of_rates("max", None, o, d))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn medians_of_every_saturated_trial_and_starved_ones_left_out() {
        // Three saturated trials a round. xdp's round 2 had one outlier
        // (1.2 M) and one starved generator (2 M offered against its median
        // of 7 M): the outlier moves no median, the starved one is left out.
        let runs = vec![
            run("linux", 1, &[(10e6, 1.0e6), (10e6, 1.02e6), (10e6, 0.98e6)]),
            run("xdp", 1, &[(7e6, 1.6e6), (7e6, 1.62e6), (7e6, 1.58e6)]),
            run("linux", 2, &[(10e6, 1.01e6), (10e6, 0.99e6), (9e6, 1.0e6)]),
            run("xdp", 2, &[(7e6, 1.2e6), (2e6, 0.5e6), (7e6, 1.61e6)]),
        ];
        let f = ResultFile::<NoValues>::new("bench-router", "test".into(), runs);
        let sc = scenarios(&f);
        assert_eq!(sc.len(), 1);
        let s = &sc[0];
        assert_eq!(s.left_out(), (1, 12));
        assert_eq!(s.left_out, vec![0, 1]);
        let (linux, xdp) = (&s.figures.contenders[0], &s.figures.contenders[1]);
        assert_eq!(xdp.rounds.len(), 5);
        assert_eq!((linux.median(), xdp.median()), (1.0e6, 1.6e6));
        assert_eq!(s.figures.ratio_to_baseline(xdp), Some(1.6));
        assert_eq!(s.ratio_of("xdp", "tc"), None);
        let t = table(&sc, &[("xdp", "linux"), ("xdp", "tc")], RateUnit::MPPS);
        assert!(t.contains("[saturated, delivered]"), "{t}");
        assert!(t.contains("xdp / linux: 1.60x;"), "{t}");
        assert!(!t.contains("xdp / tc"), "{t}");
        assert!(t.contains("left out: 1 of 12 saturated trials"), "{t}");
        let fig = figure(&f, &sc, RateUnit::MPPS).expect("a figure");
        assert_eq!(fig.name, SATURATED_FIGURE);
        let Chart::Bars { groups, .. } = fig.chart else {
            panic!("bars")
        };
        assert_eq!(groups[0].bars[1].note, "1.60x");
        assert_eq!((groups[0].bars[1].min, groups[0].bars[1].max), (1.2, 1.62));
        let xdp2 = &f.runs[3];
        assert_eq!(
            median_saturated_trial(xdp2).map(|t| t.delivered_pps),
            Some(1.2e6)
        );
        assert_eq!(
            median_saturated_trial(&f.runs[1]).map(|t| t.delivered_pps),
            Some(1.6e6)
        );
    }
}
