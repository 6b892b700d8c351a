//! `peregrine showcase`: the built-in demonstration `scripts/run.sh` runs.
use std::time::Duration;

use anyhow::Result;
use peregrine_bpf::XdpAction;
use peregrine_host::signals;
use peregrine_lab::pacing::Rate;
use peregrine_lab::results::{NoValues, Placement, ResultFile, Run};
use peregrine_lab::sinks::Sink;
use peregrine_lab::traffic::{Generator, TrafficSpec};
use peregrine_lab::trial::rfc2544_search;
use peregrine_lab::{Endpoint, Lab, Lifetime};
use peregrine_testbed::gen::FrameSizes;

use crate::common::{
    builtin_topology, command_line, dut_search, frame_for, lab_sink, one_trial_run, params,
    path_drops, place, progress_line, shown_trial, trial_setup, PlacementConfig, ResultOutput,
};
use crate::report::Report;

/// `peregrine showcase`.
#[derive(Clone, Debug)]
pub struct ShowcaseConfig {
    /// Length of each trial.
    pub trial: Duration,
    pub placement: PlacementConfig,
    pub output: ResultOutput,
}

/// The main job: default lab, generator -> XDP drop sink, an RFC 2544 search
/// through Linux forwarding, table, JSON, plots, lab removed.
pub fn showcase(a: ShowcaseConfig) -> Result<()> {
    let trial = a.trial;
    let dut_cpu = a.placement.dut_cpu()?;
    let loss = a.placement.loss_tolerance()?;
    let topo = builtin_topology("gen-dut-sink", "showcase")?;
    eprintln!("building lab {} (generator -> dut -> sink)", topo.name);
    let lab = Lab::up(topo, Lifetime::Ephemeral)?;
    let from = Endpoint {
        host: "gen".into(),
        iface: "eth0".into(),
    };
    let mut runs = Vec::new();
    let sizes = FrameSizes::Fixed(64);
    let mean = sizes.mean_size();
    // Both parts send the same frames (more flows in the second) to the
    // DUT's ingress, `peer`.
    let (frame, peer) = frame_for(
        &lab,
        &from,
        "198.18.1.100".parse()?,
        "198.19.0.1".parse()?,
        9,
    )?;
    let spec = |flows| {
        TrafficSpec::live(
            lab.ns("gen"),
            "eth0".into(),
            frame.clone(),
            sizes.clone(),
            flows,
        )
    };

    // 1. Generator straight into an XDP drop sink on the DUT's ingress.
    {
        let sink = lab_sink(lab.name(), &lab.ns(&peer.host), &peer, XdpAction::Drop)?;
        let drops = path_drops(&lab, None, &peer)?;
        let spec = spec(1);
        let label = "generator -> XDP drop sink".to_string();
        eprintln!("{label}");
        let gen = Generator::new(spec.clone(), None)?;
        let setup = trial_setup(&gen, &sink, &drops, trial, mean, 0.0);
        let placement = Placement {
            generator_cpus: vec![0],
            sink_cpus: vec![0],
            notes: vec!["the sink's receive runs on the sending CPU (veth default)".into()],
            ..Default::default()
        };
        runs.push(one_trial_run(
            label,
            &setup,
            "max",
            Rate::Max,
            params(&spec, &sink.describe()),
            Some(placement),
        )?);
    }
    // 2. RFC 2544 throughput of Linux IPv4 forwarding in the DUT.
    {
        signals::check()?;
        let sink_ep = Endpoint {
            host: "sink".into(),
            iface: "eth0".into(),
        };
        let sink = lab_sink(lab.name(), &lab.ns("sink"), &sink_ep, XdpAction::Drop)?;
        let spec = spec(16);
        let gen = Generator::new(spec.clone(), Some((lab.ns(&peer.host), peer.iface.clone())))?;
        // The generator's pass-through on the DUT's ingress gives it NAPI;
        // its worker moves to the DUT's own CPU.
        let placement = place(&lab, &spec.cpus, &peer, dut_cpu)?;
        let drops = path_drops(&lab, Some(&peer), &sink_ep)?;
        let label = "Linux forwarding, RFC 2544".to_string();
        eprintln!("{label} ({})", placement.describe());
        let search = dut_search(loss, 50_000.0, trial);
        let setup = trial_setup(&gen, &sink, &drops, trial, mean, search.loss_tolerance);
        let mut show = progress_line(&label);
        let (summary, trials) = rfc2544_search(search, mean, |phase, rate| {
            if let Rate::Pps(p) = rate {
                eprintln!("  trial at {:.3} Mpps", p / 1e6);
            }
            shown_trial(&setup, &label, phase, rate, &mut show)
        })?;
        drop(show);
        eprintln!("  RFC 2544: {}", summary.describe());
        runs.push(Run {
            label,
            params: params(&spec, &sink.describe()),
            trials,
            rfc2544: Some(summary),
            placement: Some(placement),
            ..Default::default()
        });
    }

    drop(lab);
    let result = ResultFile::new(Showcase::KIND, command_line(), runs);
    a.output.write::<Showcase>(&result)
}

/// The showcase's result file.
pub struct Showcase;

impl Report for Showcase {
    const KIND: &'static str = "showcase";
    type Values = NoValues;
}
