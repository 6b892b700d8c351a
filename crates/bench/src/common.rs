//! What every benchmark shares: placement of the DUT's receive work, the
//! lab's sinks and drop counters, one shown trial with its shortfall warning,
//! run parameters and writing the result file with its plots.
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use peregrine_bpf::{XdpAction, XdpMode};
use peregrine_lab::pacing::Rate;
use peregrine_lab::results::{Limiter, Placement, ResultFile, Run, RunParams, Values, Window};
use peregrine_lab::sinks::Sink;
use peregrine_lab::sinks::XdpSink;
use peregrine_lab::topology::builtin;
use peregrine_lab::traffic::{Generator, TrafficSpec};
use peregrine_lab::trial::{measure_trial, DropPoint, DropProbes, SearchParams, TrialSetup};
use peregrine_lab::{Endpoint, Lab, Topology};
use peregrine_wire::UdpFrameSpec;

use crate::report::Report;

/// Where benchmarks put their files unless told: never the checkout's
/// docs/results, which holds the published runs.
pub const DEFAULT_OUT: &str = "peregrine-results";

/// Where the device under test runs, for benchmarks that have one.
#[derive(clap::Args, Clone, Debug)]
pub struct PlacementConfig {
    /// Highest share of frames an RFC 2544 trial may lose and still pass
    /// (RFC 2544 itself: 0). With the DUT on its own CPU, a VM's scheduling
    /// hiccups drop a few frames at any rate while the DUT's NAPI thread
    /// wakes; a zero-loss search then measures the hiccups, not capacity.
    #[arg(long, default_value_t = 0.001)]
    pub loss: f64,
    /// Run the DUT's receive work (threaded NAPI on its ingress veth) on
    /// this CPU, apart from the generator's (CPU 0). Default: the last CPU
    /// when there are two or more. veth otherwise runs it on the sender's
    /// CPU, and the figure would be the generator's as much as the DUT's.
    #[arg(long, conflicts_with = "dut_on_sender_cpu")]
    pub dut_cpu: Option<usize>,
    /// Leave the DUT's receive work on the sender's CPU (veth's default).
    #[arg(long)]
    pub dut_on_sender_cpu: bool,
}

impl PlacementConfig {
    /// The loss tolerance, checked.
    pub fn loss_tolerance(&self) -> Result<f64> {
        if !(0.0..0.5).contains(&self.loss) {
            bad_setting!(
                "--loss {}: expected a share of the frames in [0, 0.5)",
                self.loss
            );
        }
        Ok(self.loss)
    }

    /// The CPU for the DUT, or None to leave it on the sender's.
    pub fn dut_cpu(&self) -> Result<Option<usize>> {
        let ncpu = cpu_count();
        if self.dut_on_sender_cpu {
            return Ok(None);
        }
        match self.dut_cpu {
            Some(0) => bad_setting!("--dut-cpu 0: CPU 0 is the generator's"),
            Some(c) if c >= ncpu => {
                bad_setting!(
                    "--dut-cpu {c}: this machine has {ncpu} CPUs (0..{})",
                    ncpu - 1
                )
            }
            Some(c) => Ok(Some(c)),
            None if ncpu > 1 => Ok(Some(ncpu - 1)),
            None => Ok(None),
        }
    }
}

/// CPUs this process may use (1 when unknown).
pub(crate) fn cpu_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub use peregrine_units::RateSetting;

/// Clap value parser for a duration (`10`, `10s`, `500ms`; docs/CLI.md).
pub fn duration(s: &str) -> Result<Duration, String> {
    s.parse::<peregrine_units::DurationArg>().map(Into::into)
}

/// Clap value parser for frame sizes (bytes with FCS, or imix).
pub fn frame_sizes(s: &str) -> Result<peregrine_testbed::gen::FrameSizes, String> {
    s.parse()
        .map_err(|e: peregrine_bpf::BpfError| e.to_string())
}

/// The pacing rate of `r` for frames of `mean_frame_bytes` (FCS included).
pub fn pacing(r: RateSetting, mean_frame_bytes: f64) -> Rate {
    Rate::Pps(r.pps(mean_frame_bytes))
}

/// The path through the built-in `chain` topology: the generator's port,
/// the DUT's ingress, the sink's port.
pub(crate) struct ChainPath {
    pub from: Endpoint,
    pub dut_in: Endpoint,
    pub sink: Endpoint,
}

impl ChainPath {
    pub fn new() -> ChainPath {
        let ep = |host: &str, iface: &str| Endpoint {
            host: host.into(),
            iface: iface.into(),
        };
        ChainPath {
            from: ep("gen", "eth0"),
            dut_in: ep("dut", "in0"),
            sink: ep("sink", "eth0"),
        }
    }

    /// An XDP drop sink at the sink's port of `lab`, and the drop probes
    /// along the path to it: what every run through the chain counts with.
    pub fn drop_sink(&self, lab: &Lab) -> Result<(XdpSink, DropProbes)> {
        let sink = lab_sink(
            lab.name(),
            &lab.ns(&self.sink.host),
            &self.sink,
            XdpAction::Drop,
        )?;
        let drops = path_drops(lab.name(), Some(&self.dut_in), &self.sink)?;
        Ok((sink, drops))
    }
}

/// The label of `contender`'s run in `scenario`, `round` (a `RunKey`),
/// printed as the run starts.
pub(crate) fn announce(contender: &str, scenario: &str, round: u32) -> String {
    let label = peregrine_lab::results::RunKey {
        contender: contender.into(),
        scenario: scenario.into(),
        round: Some(round),
    }
    .label();
    eprintln!("{label}");
    label
}

/// The command line of this process, recorded in every result file.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

pub(crate) fn progress_line(label: &str) -> impl FnMut(&Window) + '_ {
    move |w| {
        // Contention worth naming: a short window is then the host's.
        let wait = if w.cpu_wait_s > 0.005 {
            format!(", {:.0} ms waiting for a CPU", w.cpu_wait_s * 1e3)
        } else {
            String::new()
        };
        eprintln!(
            "  {label}: t={:>4.1}s offered {:>8.3} Mpps, delivered {:>8.3} Mpps{wait}",
            w.t_s,
            w.offered_pps / 1e6,
            w.delivered_pps / 1e6
        )
    }
}

/// Warns on stderr when a trial offered less than it was asked to (by more
/// than `trial::SHORTFALL`): the figure is the generator's, not the path's.
pub(crate) fn warn_shortfall(label: &str, t: &peregrine_lab::results::Trial) {
    if let Some(req) = t.requested_pps {
        if peregrine_lab::trial::short_of(Some(req), t.offered_pps) {
            eprintln!(
                "peregrine: warning: {label}: asked for {:.3} Mpps, the generator offered {:.3} Mpps ({:.1}% short): generator-limited",
                req / 1e6,
                t.offered_pps / 1e6,
                (1.0 - t.offered_pps / req) * 100.0
            );
        }
    }
}

/// The drop counters of a generator -> [DUT ->] sink path: the DUT's input
/// ring (its ingress veth) and the sink's input ring; loss no counter saw
/// happened inside the DUT (or, without one, is unattributed).
pub(crate) fn path_drops(
    lab: &str,
    dut_in: Option<&Endpoint>,
    sink_in: &Endpoint,
) -> Result<DropProbes> {
    let ns = |host: &str| peregrine_lab::lab::ns_name(lab, host);
    let mut points = Vec::new();
    if let Some(d) = dut_in {
        points.push(DropPoint::rx(ns(&d.host), &d.iface, Limiter::Dut));
    }
    points.push(DropPoint::rx(
        ns(&sink_in.host),
        &sink_in.iface,
        Limiter::Sink,
    ));
    let remainder = if dut_in.is_some() {
        Limiter::Dut
    } else {
        Limiter::Unattributed
    };
    Ok(DropProbes::new(points, remainder)?)
}

/// Moves the DUT's receive work (threaded NAPI of its ingress veth) to
/// `dut_cpu`, away from the generator's CPUs, and says where everything
/// runs. Call once the ingress has NAPI (an XDP program is attached, the
/// generator's pass-through included); XDP attach and detach recreate the
/// NAPI workers, so call again after each change.
pub(crate) fn place(
    lab: &Lab,
    gen_cpus: &[usize],
    dut_in: &Endpoint,
    dut_cpu: Option<usize>,
) -> Result<Placement> {
    let mut p = Placement {
        generator_cpus: gen_cpus.to_vec(),
        ..Default::default()
    };
    match dut_cpu {
        Some(cpu) => {
            let threads = peregrine_host::napi::pin_receive(&lab.ns(&dut_in.host), &dut_in.iface, cpu)?;
            p.dut_cpus = vec![cpu];
            p.sink_cpus = vec![cpu];
            p.notes.push(format!(
                "threaded NAPI on {dut_in} pinned to cpu {cpu} ({} worker(s)); the sink's receive runs where the DUT transmits",
                threads.len()
            ));
        }
        None => p.notes.push(
            "DUT and sink receive on the sender's CPU (veth default): the figure includes the generator's work".into(),
        ),
    }
    p.notes.push(lab.topo.offloads_note());
    Ok(p)
}

/// An XDP sink whose counters are pinned under the lab's pin directory
/// while it runs, so other tools can read them; removed with the lab.
pub(crate) fn lab_sink(lab: &str, ns: &str, ep: &Endpoint, verdict: XdpAction) -> Result<XdpSink> {
    let mut s = XdpSink::attach_or_share(ns, &ep.iface, verdict, XdpMode::Native)?;
    let dir = peregrine_bpf::bpffs::pin_dir(lab)?;
    s.pin(&dir.join(format!("sink-{}-{}", ep.host, ep.iface)))?;
    Ok(s)
}

/// One trial shown live as it goes, its shortfall (if any) warned about.
pub(crate) fn shown_trial(
    setup: &TrialSetup,
    label: &str,
    phase: &str,
    rate: Rate,
    show: &mut dyn FnMut(&Window),
) -> peregrine_lab::Result<peregrine_lab::results::Trial> {
    let mut repeated = 0;
    loop {
        let mut t = measure_trial(setup, phase, rate, show)?;
        // A starved trial measured the machine, not the path: once or
        // twice more, and the last attempt stands, saying how many went.
        if t.starved() && repeated < STARVED_REPEATS {
            repeated += 1;
            eprintln!(
                "  {label}: the {phase} trial waited {:.0} ms of {:.1} s for a CPU (starved): repeated",
                t.cpu_wait_s() * 1e3,
                t.duration_s
            );
            continue;
        }
        t.repeated = repeated;
        warn_shortfall(label, &t);
        return Ok(t);
    }
}

/// How many times a starved trial is repeated at most.
const STARVED_REPEATS: u32 = 2;

/// The line under a table that says how many trials were repeated for
/// being starved, and how many of those still were; empty when none.
pub(crate) fn repeated_line<V>(result: &ResultFile<V>) -> String {
    let trials = result.runs.iter().flat_map(|r| &r.trials);
    let (mut repeats, mut still) = (0u32, 0usize);
    for t in trials {
        repeats += t.repeated;
        still += usize::from(t.repeated > 0 && t.starved());
    }
    if repeats == 0 {
        return String::new();
    }
    format!(
        "{repeats} trial attempt(s) were starved (> {:.0}% of their time waiting for a CPU) and \
         repeated; {still} trial(s) still starved after {STARVED_REPEATS} repeats are kept and \
         say so (`repeated` in the JSON)\n",
        peregrine_lab::results::STARVED_SHARE * 100.0
    )
}

/// An RFC 2544 search of a DUT: from the generator's top rate, at most 12
/// trials of `trial` each.
pub(crate) fn dut_search(
    loss_tolerance: f64,
    resolution_pps: f64,
    trial: Duration,
) -> SearchParams {
    SearchParams {
        loss_tolerance,
        resolution_pps,
        trial,
        max_trials: 12,
        start: Rate::Max,
    }
}

/// The trial set-up of a path: `gen` into `sink`, trials of `duration`
/// passing with up to `loss_tolerance` lost (0 for the generator's own
/// figures).
pub(crate) fn trial_setup<'a>(
    gen: &'a Generator,
    sink: &'a dyn Sink,
    drops: &'a DropProbes,
    duration: Duration,
    mean_frame_bytes: f64,
    loss_tolerance: f64,
) -> TrialSetup<'a> {
    TrialSetup {
        gen,
        sink,
        duration,
        mean_frame_bytes,
        loss_tolerance,
        drops,
    }
}

/// A run of one trial, shown live as it goes.
pub(crate) fn one_trial_run(
    label: String,
    setup: &TrialSetup,
    phase: &str,
    rate: Rate,
    params: RunParams,
    placement: Option<Placement>,
) -> Result<Run> {
    let t = shown_trial(setup, &label, phase, rate, &mut progress_line(&label))?;
    Ok(Run {
        label,
        params,
        trials: vec![t],
        rfc2544: None,
        placement,
        ..Default::default()
    })
}

/// Addresses and MACs for traffic from `from` to `dst_ip` via the veth peer.
pub(crate) fn frame_for(
    lab: &Lab,
    from: &Endpoint,
    src_ip: std::net::IpAddr,
    dst_ip: std::net::IpAddr,
    dst_port: u16,
) -> Result<(UdpFrameSpec, Endpoint)> {
    let peer = lab
        .peer_of(from)
        .with_context(|| format!("{from} is not one end of a veth link in lab {}", lab.name()))?;
    let (frame, _) =
        peregrine_lab::traffic::lab_frame(lab.topology(), from, Some(src_ip), dst_ip, dst_port)?;
    Ok((frame, peer))
}

pub(crate) fn params(spec: &TrafficSpec, sink: &str) -> RunParams {
    RunParams {
        backend: spec.backend.as_str().into(),
        ip: if spec.frame.src_ip.is_ipv6() {
            "ipv6".into()
        } else {
            "ipv4".into()
        },
        frame_size: spec.sizes.label(),
        mean_frame_bytes: spec.sizes.mean_size(),
        flows: spec.flows,
        threads: spec.cpus.len(),
        sink: sink.into(),
        sent: !spec.dry_run,
    }
}

pub(crate) fn builtin_topology(name: &str, lab_name: &str) -> Result<Topology> {
    let mut t = Topology::from_toml(builtin::get(name).expect("built-in exists"))?;
    t.name = lab_name.into();
    Ok(t)
}

/// Where a benchmark's result goes: the result file, its command line and
/// plots, and then the table or the result as JSON on stdout. `--name` has
/// no default here: each benchmark gives its own ([`ResultOutput::named`]).
#[derive(clap::Args, Clone, Debug)]
pub struct ResultOutput {
    /// Directory for the result file and plots.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long)]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

impl ResultOutput {
    /// `--name`'s default for one benchmark, on its config struct:
    /// `#[command(mut_arg("name", ResultOutput::named("bench-x")))]`.
    pub fn named(stem: &'static str) -> impl FnOnce(clap::Arg) -> clap::Arg {
        move |a| a.default_value(stem).required(false)
    }

    /// Writes `result` of report `R` with its figures, and prints its table.
    pub(crate) fn write<R: Report>(&self, result: &ResultFile<R::Values>) -> Result<()> {
        self.write_with_table::<R>(result, &R::table(result))
    }

    /// As `write`, with `table` for people instead of the report's.
    pub(crate) fn write_with_table<R: Report>(
        &self,
        result: &ResultFile<R::Values>,
        table: &str,
    ) -> Result<()> {
        let (out, stem) = (&self.out, &self.name);
        write_outputs(result, out, stem, self.json, table, || {
            crate::report::draw::<R>(result, out, stem)
        })
    }
}

fn write_outputs<V: Values>(
    result: &ResultFile<V>,
    out: &Path,
    stem: &str,
    json: bool,
    table: &str,
    plot: impl FnOnce() -> Result<Vec<PathBuf>>,
) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let path = out.join(format!("{stem}.json"));
    std::fs::write(&path, result.to_json())
        .with_context(|| format!("writing {}", path.display()))?;
    std::fs::write(
        out.join(format!("{stem}.cmd")),
        format!("{}\n", result.command),
    )?;
    let plots = plot()?;
    if json {
        println!("{}", result.to_json());
    } else {
        print!("{table}");
        print!("{}", repeated_line(result));
        println!("wrote {}", path.display());
        for p in plots {
            println!("wrote {}", p.display());
        }
    }
    Ok(())
}

/// The distinct items of `items`, in the order they first appear (the
/// scenarios of a summary, as they ran).
pub(crate) fn in_first_seen_order<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// Runs `tc ARGS` (iproute2) in namespace `ns`; its error output becomes
/// the error (bench qos's HTB and filters).
pub(crate) fn tc(ns: &str, args: &[&str]) -> Result<()> {
    let out = peregrine_host::netns::command(ns, "tc")?
        .args(args)
        .output()
        .context("running tc (iproute2)")?;
    if !out.status.success() {
        anyhow::bail!(
            "tc {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_documented() {
        use peregrine_testbed::gen::FrameSizes;
        assert_eq!(frame_sizes("1500"), Ok(FrameSizes::Fixed(1500)));
        assert_eq!(frame_sizes("IMIX"), Ok(FrameSizes::Imix));
        assert!(frame_sizes("big").unwrap_err().contains("imix"));
    }

    #[test]
    fn bad_placements_are_bad_settings() {
        let p = PlacementConfig {
            loss: 0.7,
            dut_cpu: Some(0),
            dut_on_sender_cpu: false,
        };
        for e in [p.loss_tolerance().unwrap_err(), p.dut_cpu().unwrap_err()] {
            assert!(e.is::<crate::BadSetting>(), "{e}");
        }
        let on_sender = PlacementConfig {
            dut_on_sender_cpu: true,
            ..p
        };
        assert_eq!(on_sender.dut_cpu().unwrap(), None);
    }
}
