//! `peregrine bench quic`: seed 002's experiment asked of quinn. An HTTP/3
//! download of a body the server holds in memory (1 GiB by default, 2 GiB
//! in the seed), `peregrine quic serve` in one namespace and `peregrine
//! quic get` in another over a veth left at the kernel's defaults, with
//! quinn on kernel UDP without GSO/GRO, on kernel UDP with GSO/GRO and on
//! peregrine's UDP/IP stack over AF_XDP; then the stack's ablations (TX
//! batch, busy polling, queues). Each run: goodput, CPU per GB (the
//! machine's, the server's, the client's) and, with `--perf`, where the
//! CPU went. Contenders take turns within each round, so the machine's
//! drift spreads over all of them.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use peregrine_host::{netns, signals};
use peregrine_lab::compare::runs_by_key;
use peregrine_lab::lab::{Lab, Lifetime};
use peregrine_lab::measure::CpuSnapshot;
use peregrine_lab::plot::{bars_by_key, Bar, BarGroup, Chart, Figure};
use peregrine_lab::results::{median, Placement, ResultFile, Run, RunKey, RunParams, Values};
use serde::{Deserialize, Serialize};

use crate::common::{builtin_topology, command_line, ResultOutput};
use crate::report::Report;
use crate::tcp::{finish, Reaped};
use peregrine_units::ByteSize;

/// How quinn's datagrams move, at both ends of a contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuicIo {
    /// Kernel UDP, one datagram per system call each way.
    KernelNogso,
    /// Kernel UDP with GSO (quinn's 10 datagrams per sendmsg) and GRO.
    KernelGso,
    /// The same, with the server's veth segmenting the super-packets
    /// (tx-udp-segmentation off): what crosses the link is datagrams, as
    /// from a NIC without UDP segmentation offload, not one skb of ten.
    KernelGsoSegmented,
    /// peregrine's UDP/IP stack on AF_XDP.
    Afxdp,
}

impl QuicIo {
    pub const ALL: [QuicIo; 4] = [
        QuicIo::KernelNogso,
        QuicIo::KernelGso,
        QuicIo::KernelGsoSegmented,
        QuicIo::Afxdp,
    ];

    /// The contender's name, as `--contenders` takes it.
    pub fn name(self) -> &'static str {
        match self {
            QuicIo::KernelNogso => "kernel-nogso",
            QuicIo::KernelGso => "kernel-gso",
            QuicIo::KernelGsoSegmented => "kernel-gso-segmented",
            QuicIo::Afxdp => "afxdp",
        }
    }

    /// `quic serve|get --io`'s value.
    fn cli(self) -> &'static str {
        match self {
            QuicIo::KernelNogso => "kernel-nogso",
            QuicIo::KernelGso | QuicIo::KernelGsoSegmented => "kernel",
            QuicIo::Afxdp => "afxdp",
        }
    }
}

/// One setting of the stack changed from its default, for the ablations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ablation {
    /// Datagrams per quinn transmit = per TX batch (1..=10).
    TxBatch(usize),
    /// Busy polling after each batch, microseconds.
    BusyPoll(u32),
    /// RX queues of the veth and the stack.
    Queues(u32),
    /// The steering program in generic (skb) XDP mode, not native.
    XdpGeneric,
    /// Async runtime threads of both ends (1 by default).
    Threads(usize),
}

impl Ablation {
    fn name(self) -> String {
        match self {
            Ablation::TxBatch(n) => format!("afxdp tx-batch {n}"),
            Ablation::BusyPoll(us) => format!("afxdp busy-poll {us}us"),
            Ablation::Queues(q) => format!("afxdp {q} queues"),
            Ablation::XdpGeneric => "afxdp xdp-generic".into(),
            Ablation::Threads(n) => format!("afxdp {n} runtime threads"),
        }
    }

    /// Runs of the same scenario share one chart group.
    fn scenario(self) -> &'static str {
        match self {
            Ablation::TxBatch(_) => "ablation: TX batch",
            Ablation::BusyPoll(_) => "ablation: busy poll",
            Ablation::Queues(_) => "ablation: queues",
            Ablation::XdpGeneric => "ablation: XDP mode",
            Ablation::Threads(_) => "ablation: runtime threads",
        }
    }
}

const DEFAULT_CONTENDERS: &str = "kernel-nogso,kernel-gso,kernel-gso-segmented,afxdp";
const DEFAULT_ABLATIONS: &str = "tx-batch,busy-poll,queues,xdp-generic,threads";
const DEFAULT_TX_BATCHES: &str = "1,4";

/// `peregrine bench quic`.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("name", ResultOutput::named("bench-quic")))]
pub struct QuicBenchConfig {
    /// Body bytes each download carries (the seed: 2GiB).
    #[arg(long, default_value = "1GiB")]
    pub size: ByteSize,
    /// Contenders, comma-separated: kernel-nogso, kernel-gso,
    /// kernel-gso-segmented (GSO with the server's veth segmenting), afxdp.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_CONTENDERS)]
    pub contenders: Vec<String>,
    /// The stack's ablations, comma-separated: tx-batch, busy-poll, queues,
    /// xdp-generic, threads, or none.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_ABLATIONS)]
    pub ablations: Vec<String>,
    /// TX batches (datagrams per quinn transmit, 1-10) the tx-batch
    /// ablation tries beside the default 10.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_TX_BATCHES)]
    pub tx_batches: Vec<usize>,
    /// The busy-poll ablation's time per poll (20, 20us).
    #[arg(long, default_value = "20us", value_parser = peregrine_units::micros)]
    pub busy_poll: u32,
    /// The queues ablation's RX queue count (veth and stack).
    #[arg(long, default_value_t = 2)]
    pub queues: u32,
    /// The threads ablation's async runtime threads per end (default runs: 1).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Rounds; the contenders take turns within each.
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Over IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Skip perf (the CPU breakdown of the first round).
    #[arg(long)]
    pub no_perf: bool,
    /// A short run for CI: 64 MiB, one round, no ablations, no perf.
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub output: ResultOutput,
}

impl QuicBenchConfig {
    /// What the flags ask for, as typed values (--quick applied).
    fn plan(self) -> Result<Plan> {
        let mut contenders = Vec::new();
        for c in &self.contenders {
            match QuicIo::ALL.into_iter().find(|io| io.name() == c) {
                Some(io) => contenders.push(io),
                None => bad_setting!(
                    "--contenders {c}: expected kernel-nogso, kernel-gso, kernel-gso-segmented or afxdp"
                ),
            }
        }
        let mut ablations = Vec::new();
        for x in &self.ablations {
            match x.as_str() {
                "tx-batch" => {
                    ablations.extend(self.tx_batches.iter().map(|&n| Ablation::TxBatch(n)))
                }
                "busy-poll" => ablations.push(Ablation::BusyPoll(self.busy_poll)),
                "queues" => ablations.push(Ablation::Queues(self.queues)),
                "xdp-generic" => ablations.push(Ablation::XdpGeneric),
                "threads" => ablations.push(Ablation::Threads(self.threads)),
                "none" => {}
                _ => bad_setting!(
                    "--ablations {x}: expected tx-batch, busy-poll, queues, xdp-generic, threads or none"
                ),
            }
        }
        let exe =
            std::env::current_exe().map_err(|e| anyhow!("finding the peregrine binary: {e}"))?;
        let quick = self.quick;
        Ok(Plan {
            exe,
            size: if quick { 64 << 20 } else { self.size.0 },
            contenders,
            ablations: if quick { Vec::new() } else { ablations },
            repeats: if quick { 1 } else { self.repeats },
            ipv6: self.ipv6,
            perf: !self.no_perf && !quick,
            output: self.output,
        })
    }
}

/// A run of `bench quic`, its flags checked.
#[derive(Clone, Debug)]
struct Plan {
    /// The peregrine binary the server and client run as.
    exe: PathBuf,
    /// Body bytes per download.
    size: u64,
    contenders: Vec<QuicIo>,
    ablations: Vec<Ablation>,
    repeats: u32,
    ipv6: bool,
    /// Record `perf` over the first round's downloads.
    perf: bool,
    output: ResultOutput,
}

/// What one run sets up.
#[derive(Debug, Clone)]
struct Setup {
    contender: String,
    scenario: String,
    io: QuicIo,
    queues: u32,
    /// `quic serve|get` flags of the stack, both ends.
    stack_args: Vec<String>,
}

fn setups(cfg: &Plan) -> Vec<Setup> {
    let main = format!("download {}", size_name(cfg.size));
    let mut v: Vec<Setup> = cfg
        .contenders
        .iter()
        .map(|&io| Setup {
            contender: io.name().into(),
            scenario: main.clone(),
            io,
            queues: 1,
            stack_args: Vec::new(),
        })
        .collect();
    let mut groups: Vec<&str> = Vec::new();
    for a in &cfg.ablations {
        // Each ablation group opens with the stack at its defaults: the
        // group's ratios are to it.
        if !groups.contains(&a.scenario()) {
            groups.push(a.scenario());
            v.push(Setup {
                contender: "afxdp defaults".into(),
                scenario: a.scenario().into(),
                io: QuicIo::Afxdp,
                queues: 1,
                stack_args: Vec::new(),
            });
        }
        let (queues, args) = match *a {
            Ablation::TxBatch(n) => (1, vec!["--tx-batch".into(), n.to_string()]),
            Ablation::BusyPoll(us) => (1, vec!["--busy-poll".into(), us.to_string()]),
            Ablation::Queues(q) => (q, vec!["--queues".into(), q.to_string()]),
            Ablation::XdpGeneric => (1, vec!["--xdp-mode".into(), "generic".into()]),
            Ablation::Threads(n) => (1, vec!["--threads".into(), n.to_string()]),
        };
        v.push(Setup {
            contender: a.name(),
            scenario: a.scenario().into(),
            io: QuicIo::Afxdp,
            queues,
            stack_args: args,
        });
    }
    v
}

fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} B")
    }
}

/// The body every contender downloads once, unmeasured and hashed, before
/// its measured downloads (which skip the client's SHA-256: it would cost
/// the client about a CPU-second per 2 GB).
const CHECK_BYTES: u64 = 64 << 20;
const PORT: u16 = 4433;

/// The perf categories, in the order tables and plots show them.
pub const CATEGORIES: [&str; 7] = [
    "crypto",
    "QUIC+HTTP/3",
    "packet I/O, user",
    "packet I/O, kernel",
    "copies",
    "runtime",
    "other",
];

pub fn bench_quic(cfg: QuicBenchConfig) -> Result<()> {
    let cfg = cfg.plan()?;
    if cfg.contenders.is_empty() && cfg.ablations.is_empty() {
        bad_setting!("bench quic needs at least one contender or ablation");
    }
    if cfg.size < 1 << 20 {
        bad_setting!("--size {}: at least 1 MiB", cfg.size);
    }
    if cfg.repeats == 0 {
        bad_setting!("--repeats 0: at least one round");
    }
    for a in &cfg.ablations {
        match *a {
            Ablation::TxBatch(n) if !(1..=10).contains(&n) => {
                bad_setting!("--tx-batches {n}: 1 to 10 datagrams (quinn's most)")
            }
            Ablation::Queues(q) if !(1..=8).contains(&q) => {
                bad_setting!("--queues {q}: 1 to 8")
            }
            Ablation::Threads(n) if !(2..=64).contains(&n) => {
                bad_setting!("--threads {n}: 2 to 64 (1 is the default the ablation compares with)")
            }
            _ => {}
        }
    }
    if cfg.perf && !tool_available("perf") {
        bad_setting!("--perf needs perf (scripts/setup.sh installs linux-perf)");
    }
    let setups = setups(&cfg);
    let expected = peregrine_quic::http3::memory_sha256(CHECK_BYTES);
    let mut runs = Vec::new();
    let total = setups.len() * cfg.repeats as usize;
    for round in 1..=cfg.repeats {
        for s in &setups {
            signals::check()?;
            let key = RunKey {
                contender: s.contender.clone(),
                scenario: s.scenario.clone(),
                round: Some(round),
            };
            eprintln!(
                "[{}/{total}] {} ...",
                runs.len() + 1,
                key.label().replace(" | ", ", ")
            );
            let check = (round == 1).then_some(expected.as_str());
            let perf = cfg.perf && round == 1;
            let f = download(&cfg, s, check, perf)
                .with_context(|| format!("{}, round {round}", s.contender))?;
            eprintln!(
                "    {:.0} Mbit/s, {:.2} CPU-s per GB (server {:.2}, client {:.2})",
                f.goodput_mbit_s, f.machine_cpu_s_gb, f.server_cpu_s_gb, f.client_cpu_s_gb
            );
            runs.push(Run {
                label: key.label(),
                params: RunParams {
                    backend: s.io.name().into(),
                    ip: if cfg.ipv6 { "ipv6" } else { "ipv4" }.into(),
                    frame_size: "quic".into(),
                    mean_frame_bytes: 0.0,
                    flows: 1,
                    threads: s.queues as usize,
                    sink: "quic get".into(),
                    sent: true,
                },
                values: f,
                placement: Some(placement(s)),
                ..Default::default()
            });
        }
    }
    let result = ResultFile::new(BenchQuic::KIND, command_line(), runs);
    cfg.output.write::<BenchQuic>(&result)
}

/// Where a run's parties ran and what the lab tunes: nothing.
fn placement(s: &Setup) -> Placement {
    let all: Vec<usize> = (0..crate::common::cpu_count()).collect();
    Placement {
        generator_cpus: all.clone(),
        dut_cpus: Vec::new(),
        sink_cpus: all,
        notes: vec![
            "server (quic serve) and client (quic get) are separate processes, unpinned: \
             the scheduler places them; veth's receive work runs on the sending CPU"
                .into(),
            format!(
                "nothing tuned{}: veth with {} queue(s) at the kernel's default offloads (TX \
                 checksum and GSO on), no sysctls; stack flags: {}",
                if s.io == QuicIo::KernelGsoSegmented {
                    " but the contender's point: tx-udp-segmentation off on the server's veth"
                } else {
                    ""
                },
                s.queues,
                if s.stack_args.is_empty() {
                    "none (defaults)".to_string()
                } else {
                    s.stack_args.join(" ")
                }
            ),
        ],
    }
}

fn tool_available(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One download's figures, named in the file as before (the keys of
/// `values`, in their order).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuicValues {
    /// Body bytes downloaded.
    pub bytes: f64,
    /// The client process's CPU-seconds per GB.
    #[serde(rename = "client cpu-s/gb")]
    pub client_cpu_s_gb: f64,
    /// Body bits over the time from request to the body's end, Mbit/s.
    #[serde(rename = "goodput mbit/s")]
    pub goodput_mbit_s: f64,
    /// The machine's busy CPU-seconds per GB (both ends and the kernel).
    #[serde(rename = "machine cpu-s/gb")]
    pub machine_cpu_s_gb: f64,
    /// perf's share of busy samples per category ([`CATEGORIES`]), %.
    #[serde(
        rename = "perf % QUIC+HTTP/3",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub perf_quic: Option<f64>,
    #[serde(
        rename = "perf % copies",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub perf_copies: Option<f64>,
    #[serde(
        rename = "perf % crypto",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub perf_crypto: Option<f64>,
    #[serde(
        rename = "perf % other",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub perf_other: Option<f64>,
    #[serde(
        rename = "perf % packet I/O, kernel",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub perf_io_kernel: Option<f64>,
    #[serde(
        rename = "perf % packet I/O, user",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub perf_io_user: Option<f64>,
    #[serde(
        rename = "perf % runtime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub perf_runtime: Option<f64>,
    /// Seconds from request to the body's end.
    pub seconds: f64,
    /// The server process's CPU-seconds per GB.
    #[serde(rename = "server cpu-s/gb")]
    pub server_cpu_s_gb: f64,
}

impl Values for QuicValues {
    fn is_empty(&self) -> bool {
        *self == QuicValues::default()
    }
}

impl QuicValues {
    /// The perf shares, in the order of [`CATEGORIES`].
    pub fn perf(&self) -> [Option<f64>; CATEGORIES.len()] {
        [
            self.perf_crypto,
            self.perf_quic,
            self.perf_io_user,
            self.perf_io_kernel,
            self.perf_copies,
            self.perf_runtime,
            self.perf_other,
        ]
    }

    /// Sets the perf shares from `shares` (category, %), as [`categorize`]
    /// gives them.
    fn set_perf(&mut self, shares: &[(&str, f64)]) {
        let [crypto, quic, io_user, io_kernel, copies, runtime, other] =
            CATEGORIES.map(|c| shares.iter().find(|s| s.0 == c).map(|s| s.1));
        (self.perf_crypto, self.perf_quic) = (crypto, quic);
        (self.perf_io_user, self.perf_io_kernel) = (io_user, io_kernel);
        (self.perf_copies, self.perf_runtime, self.perf_other) = (copies, runtime, other);
    }

    fn has_perf(&self) -> bool {
        self.perf().iter().any(Option::is_some)
    }
}

/// Reads a child's stderr until a line starting with `prefix`; the lines
/// after it are drained (and dropped) so the child never blocks on a full
/// pipe.
fn wait_for_line(child: &mut Reaped, prefix: &str, limit: Duration, what: &str) -> Result<()> {
    let err = child
        .0
        .stderr
        .take()
        .ok_or_else(|| anyhow!("{what}: no stderr"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            // Sent until the receiver stops listening; drained after.
            let _ = tx.send(line);
        }
    });
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < limit {
        signals::check()?;
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) if line.starts_with(prefix) => return Ok(()),
            Ok(line) => last = Some(line),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    bail!(
        "{what} did not start within {:.0} s: {}",
        limit.as_secs_f64(),
        last.as_deref().unwrap_or("no output")
    )
}

/// User plus system CPU seconds of process `pid` so far (/proc/PID/stat).
fn process_cpu(pid: u32) -> f64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The fields after the command name (which may hold spaces) in ")".
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line: 12 and 13 here.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Safety: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

fn download(cfg: &Plan, s: &Setup, check: Option<&str>, perf: bool) -> Result<QuicValues> {
    let mut topo = builtin_topology("pair", "benchquic")?;
    topo.links[0].queues = s.queues;
    let lab = Lab::up(topo, Lifetime::Ephemeral)?;
    let (server_ns, client_ns) = (lab.ns("a"), lab.ns("b"));
    if s.io == QuicIo::KernelGsoSegmented {
        // ethtool's features interface (ETHTOOL_SFEATURES by name) has no
        // legacy ioctl for this bit; the lab's veth goes with the lab.
        let out = netns::command(&server_ns, "ethtool")?
            .args(["-K", "eth0", "tx-udp-segmentation", "off"])
            .output()
            .context("running ethtool (scripts/setup.sh installs it)")?;
        if !out.status.success() {
            bail!(
                "ethtool -K eth0 tx-udp-segmentation off: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    let server_ip = if cfg.ipv6 {
        "[2001:db8::1]"
    } else {
        "198.18.0.1"
    };
    let listen: SocketAddr = format!("{server_ip}:{PORT}").parse()?;
    let mut server = Reaped(
        netns::command(&server_ns, &cfg.exe.to_string_lossy())?
            .args(["quic", "serve", "--listen", &listen.to_string()])
            .args(["--io", s.io.cli()])
            .args(&s.stack_args)
            .args(["--memory", &format!("file={}", cfg.size)])
            .args(["--memory", &format!("check={CHECK_BYTES}")])
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting quic serve")?,
    );
    wait_for_line(
        &mut server,
        "serving",
        Duration::from_secs(20),
        "quic serve",
    )?;
    let get = |path: &str, hash: bool| -> Result<Command> {
        let mut c = netns::command(&client_ns, &cfg.exe.to_string_lossy())?;
        c.args(["quic", "get", &format!("https://{listen}/{path}")])
            .args(["--io", s.io.cli()])
            .args(&s.stack_args)
            .args(["--insecure", "--json", "--timeout", "10m"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if !hash {
            c.arg("--no-sha256");
        }
        Ok(c)
    };
    // Generous: a download at 20 Mbit/s, plus start and handshake.
    let limit = Duration::from_secs_f64(cfg.size as f64 * 8.0 / 20e6 + 30.0);
    if let Some(want) = check {
        let child = Reaped(get("check", true)?.spawn().context("starting quic get")?);
        let out = finish(child, limit, "quic get (the check download)")?;
        let v: serde_json::Value = serde_json::from_str(out.trim())
            .with_context(|| format!("quic get printed no JSON: {out}"))?;
        if v["status"] != 200 || v["bytes"] != CHECK_BYTES || v["sha256"] != want {
            bail!("the check download came back wrong: {v}");
        }
    }
    let server_pid = server.0.id();
    let recorder = if perf {
        Some(Perf::start(&perf_file(&s.contender))?)
    } else {
        None
    };
    let (cpu0, server0, t0) = (CpuSnapshot::take(), process_cpu(server_pid), Instant::now());
    let child = Reaped(get("file", false)?.spawn().context("starting quic get")?);
    let out = finish(child, limit, "quic get")?;
    let wall = t0.elapsed().as_secs_f64();
    let cores = CpuSnapshot::take().usage_since(&cpu0);
    let server_cpu = process_cpu(server_pid) - server0;
    let shares = recorder.map(Perf::finish).transpose()?;
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .with_context(|| format!("quic get printed no JSON: {out}"))?;
    if v["status"] != 200 || v["bytes"] != cfg.size {
        bail!("the download came back wrong: {v}");
    }
    // The server's own account: every request answered, none failed.
    // Safety: kill with a pid this process spawned and has not reaped.
    unsafe { libc::kill(server_pid as i32, libc::SIGINT) };
    let served = finish(server, Duration::from_secs(10), "quic serve")?;
    let sv: serde_json::Value = serde_json::from_str(served.trim())
        .with_context(|| format!("quic serve printed no JSON: {served}"))?;
    if sv["failed"] != 0 {
        bail!("the server counted failed requests: {sv}");
    }
    drop(lab);
    let seconds = v["seconds"].as_f64().unwrap_or(f64::NAN);
    let gb = cfg.size as f64 / 1e9;
    let busy: f64 = cores.iter().map(|c| (100.0 - c.idle_pct) / 100.0).sum();
    let mut values = QuicValues {
        bytes: cfg.size as f64,
        seconds,
        goodput_mbit_s: cfg.size as f64 * 8.0 / seconds / 1e6,
        machine_cpu_s_gb: busy * wall / gb,
        server_cpu_s_gb: server_cpu / gb,
        client_cpu_s_gb: v["cpu_seconds"].as_f64().unwrap_or(f64::NAN) / gb,
        ..Default::default()
    };
    if let Some(shares) = shares {
        values.set_perf(&shares);
    }
    Ok(values)
}

fn perf_file(contender: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "peregrine-bench-quic-{}-{}.perf",
        std::process::id(),
        contender.replace(' ', "-")
    ))
}

/// `perf record` of every CPU while it lives.
struct Perf {
    child: Reaped,
    file: PathBuf,
}

impl Perf {
    fn start(file: &PathBuf) -> Result<Perf> {
        // 1997 Hz as the seed: no lockstep with periodic work.
        let child = Reaped(
            Command::new("perf")
                .args(["record", "-a", "-F", "1997", "-q", "-o"])
                .arg(file)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting perf record")?,
        );
        // perf needs a moment to open its events on every CPU.
        std::thread::sleep(Duration::from_millis(300));
        Ok(Perf {
            child,
            file: file.clone(),
        })
    }

    /// Stops recording; each category's share of the samples that were not
    /// idle, percent.
    fn finish(mut self) -> Result<Vec<(&'static str, f64)>> {
        // Safety: kill with a pid this process spawned and has not reaped.
        unsafe { libc::kill(self.child.0.id() as i32, libc::SIGINT) };
        let _ = self.child.0.wait();
        let out = Command::new("perf")
            .args(["report", "--stdio", "--no-children", "-q"])
            .args(["--sort", "dso,sym", "--percent-limit", "0", "-i"])
            .arg(&self.file)
            .stderr(Stdio::null())
            .output()
            .context("running perf report")?;
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_file(self.file.with_extension("perf.old"));
        if !out.status.success() {
            bail!("perf report failed on {}", self.file.display());
        }
        Ok(categorize(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// What a sampled function is, by its name and the object it is in.
pub fn category(dso: &str, sym: &str) -> Option<&'static str> {
    let s = sym.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| s.contains(w));
    let kernel = dso.contains("kernel") || dso.starts_with('[');
    // Idle: not counted at all.
    if kernel
        && has(&[
            "idle",
            "safe_halt",
            "mwait",
            "cpu_startup_entry",
            "do_idle",
            "acpi_processor",
        ])
    {
        return None;
    }
    if has(&[
        "aes",
        "gcm",
        "ghash",
        "chacha",
        "poly1305",
        "sha256",
        "sha2::",
        "ring_core",
        "x25519",
        "nistz",
        "hkdf",
        "hmac",
        "aead",
    ]) {
        return Some("crypto");
    }
    if has(&[
        "memcpy",
        "memmove",
        "copy_user",
        "copy_to_iter",
        "copy_from_iter",
        "rep_mov",
    ]) {
        return Some("copies");
    }
    // The stack's checksums are inlined into its frame code: they count as
    // its packet I/O, as the kernel's do as the kernel's.
    if has(&[
        "quinn_udp",
        "peregrine_stack",
        "peregrine_xsk",
        "peregrine_wire",
        "s2n_quic_xdp",
        "peregrine_io",
    ]) {
        return Some("packet I/O, user");
    }
    if has(&["quinn", "h3::", "h3_quinn", "peregrine_quic", "bytes::"]) {
        return Some("QUIC+HTTP/3");
    }
    if has(&[
        "tokio",
        "futex",
        "schedule",
        "sched",
        "pick_next",
        "switch_to",
        "task_switch",
        "wake_up",
        "epoll",
        "ep_poll",
        "malloc",
        "free",
        "parking_lot",
        "std::thread",
        "hrtimer",
        "update_curr",
        "enqueue_task",
        "dequeue_task",
        "psi_",
    ]) {
        return Some("runtime");
    }
    if kernel {
        return Some("packet I/O, kernel");
    }
    Some("other")
}

/// Category shares of `perf report --stdio --no-children -q --sort dso,sym`
/// lines ("  12.34%  dso  [k] symbol"), percent of the non-idle samples.
pub fn categorize(report: &str) -> Vec<(&'static str, f64)> {
    let mut sums = [0.0f64; CATEGORIES.len()];
    for line in report.lines() {
        let line = line.trim();
        let Some((pct, rest)) = line.split_once('%') else {
            continue;
        };
        let Ok(pct) = pct.trim().parse::<f64>() else {
            continue;
        };
        let rest = rest.trim();
        let (dso, sym) = match rest.split_once(' ') {
            Some((d, s)) => (d, s.trim()),
            None => (rest, ""),
        };
        // "[k] name" or "[.] name".
        let sym = sym.split_once("] ").map(|(_, s)| s).unwrap_or(sym);
        let kernel_mark = rest.contains("[k]");
        let dso = if kernel_mark { "[kernel]" } else { dso };
        if let Some(c) = category(dso, sym) {
            let i = CATEGORIES.iter().position(|k| *k == c).expect("known");
            sums[i] += pct;
        }
    }
    let total: f64 = sums.iter().sum();
    CATEGORIES
        .iter()
        .zip(sums)
        .map(|(c, s)| (*c, if total > 0.0 { s * 100.0 / total } else { 0.0 }))
        .collect()
}

/// The table for people: per contender the median goodput and CPU per GB
/// over the rounds (min..max), the ratio to the group's first contender
/// and to kernel-gso in the main group, then the perf shares.
pub fn table(r: &ResultFile<QuicValues>) -> String {
    let groups = runs_by_key(r);
    type Value = fn(&QuicValues) -> f64;
    let goodput: Value = |v| v.goodput_mbit_s;
    let med = |runs: &[&QRun], key: Value| {
        median(&runs.iter().map(|r| key(&r.values)).collect::<Vec<_>>())
    };
    let span = |runs: &[&QRun], key: Value| {
        let v: Vec<f64> = runs.iter().map(|r| key(&r.values)).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{lo:.0}..{hi:.0}")
    };
    let w = groups
        .iter()
        .flat_map(|(_, cs)| cs.iter().map(|(c, _)| c.len()))
        .max()
        .unwrap_or(10)
        .max(10);
    let mut out = String::new();
    for (g, cs) in &groups {
        out.push_str(&format!("\n{g}\n"));
        out.push_str(&format!(
            "  {:<w$} {:>7} {:>12} {:>10} {:>10} {:>12} {:>12} {:>12}\n",
            "contender", "rounds", "Mbit/s", "range", "ratio", "CPU-s/GB", "server", "client"
        ));
        let base = cs.first().map(|(_, v)| med(v, goodput));
        for (c, v) in cs {
            let m = med(v, goodput);
            let ratio = match base {
                Some(b) if b > 0.0 => format!("{:.2}x", m / b),
                _ => "n/a".into(),
            };
            out.push_str(&format!(
                "  {:<w$} {:>7} {:>12.0} {:>10} {:>10} {:>12.2} {:>12.2} {:>12.2}\n",
                c,
                v.len(),
                m,
                span(v, goodput),
                ratio,
                med(v, |v| v.machine_cpu_s_gb),
                med(v, |v| v.server_cpu_s_gb),
                med(v, |v| v.client_cpu_s_gb),
            ));
        }
        let find = |name: &str| {
            cs.iter()
                .find(|(c, _)| c == name)
                .map(|(_, v)| med(v, goodput))
        };
        if let Some(a) = find("afxdp") {
            for other in ["kernel-nogso", "kernel-gso", "kernel-gso-segmented"] {
                if let Some(o) = find(other).filter(|o| *o > 0.0) {
                    out.push_str(&format!("  afxdp / {other}: {:.2}x\n", a / o));
                }
            }
        }
        let perf: Vec<(&String, &QRun)> = cs
            .iter()
            .filter_map(|(c, v)| v.iter().find(|r| r.values.has_perf()).map(|r| (c, *r)))
            .collect();
        if !perf.is_empty() {
            out.push_str(&format!(
                "  perf, % of busy samples (round 1):\n  {:<w$}",
                "contender"
            ));
            for cat in CATEGORIES {
                out.push_str(&format!(" {:>10}", short(cat)));
            }
            out.push('\n');
            for (c, run) in perf {
                out.push_str(&format!("  {c:<w$}"));
                for v in run.values.perf() {
                    out.push_str(&format!(" {:>10.1}", v.unwrap_or(0.0)));
                }
                out.push('\n');
            }
        }
    }
    out.push_str(
        "\nMbit/s: body bytes over the time from request to the body's end, median of the \
         rounds. CPU-s/GB: the machine's busy CPU over the download (both ends, the kernel \
         between them), then the server's and the client's processes. kernel-gso rides \
         veth's GSO: a 10-datagram super-packet crosses the veth as one skb and reaches the \
         client's GRO socket whole, a saving a NIC path does not share; kernel-gso-segmented \
         has the server's veth segment them (tx-udp-segmentation off), so datagrams cross.\n",
    );
    out
}

/// A run of `bench quic`.
type QRun = Run<QuicValues>;

/// `bench quic`'s result files: goodput and CPU per download.
pub struct BenchQuic;

/// Goodput per group and contender.
pub const GOODPUT: &str = "goodput";
/// Machine CPU per GB per group and contender.
pub const CPU: &str = "cpu";
/// Where the busy CPU went (perf), per contender.
pub const PERF: &str = "perf";

impl Report for BenchQuic {
    const KIND: &'static str = "bench-quic";
    type Values = QuicValues;

    fn table(r: &ResultFile<QuicValues>) -> String {
        table(r)
    }

    fn figures(r: &ResultFile<QuicValues>) -> Vec<Figure> {
        let bars = |name, title: &str, y_desc: &str, value: fn(&QuicValues) -> f64| {
            let (legend, groups) = bars_by_key(r, |_, run| Some(value(&run.values)));
            Figure {
                name,
                chart: Chart::Bars {
                    title: format!("{}: {title}", r.kind),
                    y_desc: y_desc.into(),
                    legend,
                    groups,
                },
            }
        };
        let mut f = vec![
            bars(
                GOODPUT,
                "HTTP/3 download goodput, median of the rounds (min-max); ratio to each group's first",
                "goodput (Mbit/s)",
                |v| v.goodput_mbit_s,
            ),
            bars(
                CPU,
                "machine CPU per GB downloaded (both ends and the kernel); ratio to each group's first",
                "CPU-seconds per GB",
                |v| v.machine_cpu_s_gb,
            ),
        ];
        if r.runs.iter().any(|run| run.values.has_perf()) {
            f.push(perf_figure(r));
        }
        f
    }
}

/// `--perf`: per contender (the first run that has shares), a bar per CPU
/// category, categories in the order of their names.
fn perf_figure(r: &ResultFile<QuicValues>) -> Figure {
    let mut order: Vec<usize> = (0..CATEGORIES.len()).collect();
    order.sort_by_key(|&i| CATEGORIES[i]);
    let mut categories: Vec<String> = Vec::new();
    let mut groups: Vec<BarGroup> = Vec::new();
    for run in &r.runs {
        let Some(key) = RunKey::parse(&run.label) else {
            continue;
        };
        if groups.iter().any(|g| g.label == key.contender) {
            continue;
        }
        let shares = run.values.perf();
        let mut bars = Vec::new();
        for &i in &order {
            let Some(v) = shares[i] else { continue };
            let cat = CATEGORIES[i];
            let ci = match categories.iter().position(|c| c == cat) {
                Some(ci) => ci,
                None => {
                    categories.push(cat.to_string());
                    categories.len() - 1
                }
            };
            bars.push(Bar {
                contender: ci,
                median: v,
                min: v,
                max: v,
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
    Figure {
        name: PERF,
        chart: Chart::Bars {
            title: format!("{}: where the busy CPU went (perf, first round)", r.kind),
            y_desc: "% of busy samples".into(),
            legend: categories,
            groups,
        },
    }
}

fn short(cat: &str) -> &str {
    match cat {
        "QUIC+HTTP/3" => "QUIC/H3",
        "packet I/O, user" => "pktio usr",
        "packet I/O, kernel" => "pktio krn",
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_lines_fall_into_categories() {
        let report = "\
    30.00%  [kernel.kallsyms]  [k] pv_native_safe_halt
    10.00%  peregrine          [.] ring_core_0_17_14__aes_gcm_enc_update_vaes_avx2
     5.00%  peregrine          [.] quinn_proto::connection::Connection::poll_transmit
     5.00%  [kernel.kallsyms]  [k] __xsk_generic_xmit
     5.00%  libc.so.6          [.] __memmove_avx_unaligned_erms
     5.00%  peregrine          [.] peregrine_stack::socket::UdpSocket::send_batch
     5.00%  [kernel.kallsyms]  [k] __schedule
     2.50%  peregrine          [.] peregrine_wire::checksum::fold
     2.50%  peregrine          [.] main
";
        let c: std::collections::HashMap<_, _> = categorize(report).into_iter().collect();
        // 70% of the samples were busy; shares are of those.
        let pct = |x: f64| x * 100.0 / 40.0;
        assert!((c["crypto"] - pct(10.0)).abs() < 1e-9);
        assert!((c["QUIC+HTTP/3"] - pct(5.0)).abs() < 1e-9);
        assert!((c["packet I/O, kernel"] - pct(5.0)).abs() < 1e-9);
        assert!((c["copies"] - pct(5.0)).abs() < 1e-9);
        assert!((c["runtime"] - pct(5.0)).abs() < 1e-9);
        assert!((c["packet I/O, user"] - pct(7.5)).abs() < 1e-9);
        assert!((c["other"] - pct(2.5)).abs() < 1e-9);
        assert!(categorize("").iter().all(|(_, v)| *v == 0.0));
    }

    #[test]
    fn ablation_groups_open_with_the_defaults() {
        let cfg = Plan {
            exe: "peregrine".into(),
            size: 1 << 30,
            contenders: QuicIo::ALL.to_vec(),
            ablations: vec![
                Ablation::TxBatch(1),
                Ablation::TxBatch(5),
                Ablation::Queues(2),
            ],
            repeats: 1,
            ipv6: false,
            perf: false,
            output: ResultOutput {
                out: ".".into(),
                name: "x".into(),
                json: false,
            },
        };
        let names: Vec<(String, String)> = setups(&cfg)
            .into_iter()
            .map(|s| (s.scenario, s.contender))
            .collect();
        let want = [
            ("download 1 GiB", "kernel-nogso"),
            ("download 1 GiB", "kernel-gso"),
            ("download 1 GiB", "kernel-gso-segmented"),
            ("download 1 GiB", "afxdp"),
            ("ablation: TX batch", "afxdp defaults"),
            ("ablation: TX batch", "afxdp tx-batch 1"),
            ("ablation: TX batch", "afxdp tx-batch 5"),
            ("ablation: queues", "afxdp defaults"),
            ("ablation: queues", "afxdp 2 queues"),
        ];
        assert_eq!(names.len(), want.len());
        for ((s, c), (ws, wc)) in names.iter().zip(want) {
            assert_eq!((s.as_str(), c.as_str()), (ws, wc));
        }
    }
}
