//! Real TCP through a device under test: iperf3 between two namespaces, in
//! Gbit/s and CPU per Gbit/s, the figures `bench router` compares
//! forwarding paths by. iperf3 is the peer every reader knows; its JSON
//! report is read, never its text.
use std::net::IpAddr;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use peregrine_host::{netns, signals};
use peregrine_lab::measure::CpuSnapshot;
use peregrine_lab::results::TcpFigure;

/// One transfer: `streams` parallel TCP streams from `client_ns` to
/// `server` (an address in `server_ns`) for `duration`.
#[derive(Debug, Clone)]
pub struct TcpTransfer {
    pub client_ns: String,
    pub server_ns: String,
    pub server: IpAddr,
    pub streams: u32,
    pub duration: Duration,
}

/// iperf3's default port.
const PORT: u16 = 5201;
/// How long iperf3 may take beyond the transfer (connect, report).
const SLACK: Duration = Duration::from_secs(15);

/// A child process killed (and reaped) when dropped: no iperf3 outlives
/// the benchmark, on error or Ctrl-C.
pub(crate) struct Reaped(pub(crate) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for `child` to exit within `limit`; its stdout. The report is
/// read while the child runs: a long transfer's JSON outgrows the pipe, and
/// a child blocked writing it would never exit.
pub(crate) fn finish(mut child: Reaped, limit: Duration, what: &str) -> Result<String> {
    let stdout = child.0.stdout.take();
    let (status, out) = wait_reading(&mut child, stdout, limit, what)?;
    if !status.success() {
        // iperf3 -J reports its error inside the JSON.
        let err = serde_json::from_str::<serde_json::Value>(&out)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("exit status {status}"));
        bail!("{what}: {err}");
    }
    Ok(out)
}

/// Waits for `child` to exit within `limit` (Ctrl-C ends the wait),
/// reading `pipe` (its stdout or stderr) meanwhile, so that a child that
/// writes more than a pipe holds still exits: its exit status and what it
/// wrote there. On a timeout the caller drops `child`, which kills it and
/// so ends the reader too.
pub(crate) fn wait_reading(
    child: &mut Reaped,
    pipe: Option<impl std::io::Read + Send + 'static>,
    limit: Duration,
    what: &str,
) -> Result<(std::process::ExitStatus, String)> {
    let reader = pipe.map(|mut p| {
        std::thread::spawn(move || {
            let mut out = String::new();
            p.read_to_string(&mut out).map(|_| out)
        })
    });
    let start = Instant::now();
    let status = loop {
        signals::check()?;
        if let Some(st) = child.0.try_wait()? {
            break st;
        }
        if start.elapsed() > limit {
            bail!("{what}: not done within {:.0} s", limit.as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = match reader {
        Some(r) => r
            .join()
            .map_err(|_| anyhow!("{what}: reading its output panicked"))??,
        None => String::new(),
    };
    Ok((status, out))
}

/// Runs the transfer and reads its figures; CPU is measured over the
/// client's run.
pub fn iperf3(t: &TcpTransfer) -> Result<TcpFigure> {
    let server = Reaped(
        netns::command(&t.server_ns, "iperf3")?
            .args([
                "-s",
                "-1",
                "-B",
                &t.server.to_string(),
                "-p",
                &PORT.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting iperf3 -s (scripts/setup.sh installs iperf3)")?,
    );
    let secs = t.duration.as_secs_f64().ceil().max(1.0) as u64;
    let mut last = None;
    // The server needs a moment to listen; a refused connection is retried.
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        let cpu0 = CpuSnapshot::take();
        let client = Reaped(
            netns::command(&t.client_ns, "iperf3")?
                .args(["-c", &t.server.to_string(), "-p", &PORT.to_string()])
                .args(["-t", &secs.to_string(), "-P", &t.streams.to_string(), "-J"])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .context("starting iperf3 -c")?,
        );
        match finish(client, t.duration + SLACK, "iperf3 client") {
            Ok(json) => {
                let cpu = CpuSnapshot::take().usage_since(&cpu0);
                drop(server);
                return figure(&json, t.streams, cpu);
            }
            Err(e) if e.to_string().contains("unable to connect") => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow!("iperf3 server never listened")))
}

/// The figures of an `iperf3 -c -J` report.
fn figure(
    json: &str,
    streams: u32,
    cpu: Vec<peregrine_lab::results::CoreCpu>,
) -> Result<TcpFigure> {
    let v: serde_json::Value =
        serde_json::from_str(json).context("iperf3 -J output is not JSON")?;
    let end = &v["end"];
    let bps = end["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| anyhow!("iperf3 report without end.sum_received.bits_per_second"))?;
    let seconds = end["sum_received"]["seconds"].as_f64().unwrap_or(0.0);
    let retransmits = end["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    let gbit_s = bps / 1e9;
    let cpu_cores: f64 = cpu.iter().map(|c| (100.0 - c.idle_pct) / 100.0).sum();
    Ok(TcpFigure {
        streams,
        seconds,
        gbit_s,
        retransmits,
        cpu_cores,
        cpu_cores_per_gbit_s: if gbit_s > 0.0 {
            cpu_cores / gbit_s
        } else {
            f64::INFINITY
        },
        cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_iperf3_json() {
        let json = r#"{"start":{},"intervals":[],"end":{"sum_sent":{"seconds":2.0,"bytes":2500000000,"bits_per_second":1.0e10,"retransmits":7},"sum_received":{"seconds":2.0,"bytes":2500000000,"bits_per_second":9.9e9}}}"#;
        let cpu = vec![
            peregrine_lab::results::CoreCpu {
                core: 0,
                user_pct: 50.0,
                system_pct: 20.0,
                softirq_pct: 10.0,
                irq_pct: 0.0,
                idle_pct: 20.0,
            },
            peregrine_lab::results::CoreCpu {
                core: 1,
                user_pct: 10.0,
                system_pct: 30.0,
                softirq_pct: 20.0,
                irq_pct: 0.0,
                idle_pct: 40.0,
            },
        ];
        let f = figure(json, 8, cpu).unwrap();
        assert_eq!((f.streams, f.retransmits), (8, 7));
        assert!((f.gbit_s - 9.9).abs() < 1e-9);
        assert!((f.cpu_cores - 1.4).abs() < 1e-9);
        assert!((f.cpu_cores_per_gbit_s - 1.4 / 9.9).abs() < 1e-9);
        assert!(figure("{}", 1, vec![]).is_err());
    }
}
