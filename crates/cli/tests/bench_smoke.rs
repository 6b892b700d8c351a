//! A short run of every `peregrine bench` subcommand, the showcase and
//! `gen`, as a user runs them: each writes a schema-valid result whose
//! figures hold together (RFC 2544 throughput is a measured offered rate of a
//! passing trial, every trial says what limited it, no window shows more
//! delivered than offered, unsent runs are marked), and a generator asked
//! for more than it can offer says so.
use std::path::Path;

use peregrine_bpf::testing::privileged;
use peregrine_lab::results::{Limiter, ResultFile};

mod common;
use common::{bin, ok, pair_lab_up, tmp};

/// Reads a result file and checks what every result must hold.
fn check_result(path: &Path) -> ResultFile {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let r = ResultFile::from_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!r.runs.is_empty());
    for run in &r.runs {
        assert!(run.placement.is_some(), "{}: no placement", run.label);
        for t in &run.trials {
            assert!(t.limited_by.is_some(), "{}: no limiter", run.label);
            assert!(t.offered_packets > 0, "{}: nothing offered", run.label);
            assert!(
                t.delivered_packets <= t.offered_packets,
                "{}: delivered {} > offered {}",
                run.label,
                t.delivered_packets,
                t.offered_packets
            );
            for w in &t.windows {
                // Delivery is read before what was sent: a window may trail
                // by frames in flight, never lead.
                assert!(
                    w.delivered_pps <= w.offered_pps * 1.001 + 1000.0,
                    "{}: window at {:.1}s delivered {:.0} > offered {:.0}",
                    run.label,
                    w.t_s,
                    w.delivered_pps,
                    w.offered_pps
                );
            }
            if let (Some(req), Some(l)) = (t.requested_pps, t.limited_by) {
                let short = t.offered_pps < req * 0.99;
                let lossy = t.loss_ratio > 0.0;
                if short && !lossy {
                    assert_eq!(l, Limiter::Generator, "{}: {t:?}", run.label);
                }
            }
        }
        if let Some(s) = &run.rfc2544 {
            let passing: Vec<f64> = run
                .trials
                .iter()
                .filter(|t| {
                    t.loss_ratio <= s.loss_tolerance && t.phase != "fixed" && t.phase != "latency"
                })
                .map(|t| t.offered_pps)
                .collect();
            if s.throughput_pps > 0.0 {
                assert!(
                    passing.contains(&s.throughput_pps),
                    "{}: throughput {} is not the offered rate of a passing trial {passing:?}",
                    run.label,
                    s.throughput_pps
                );
            }
            assert!(
                passing.iter().all(|&p| p <= s.throughput_pps),
                "{}: a passing trial offered more than the throughput",
                run.label
            );
            assert!(s.limited_by.is_some());
        }
    }
    r
}

#[test]
fn bench_gen_writes_to_peregrine_results_by_default() {
    if !privileged("bench_gen_writes_to_peregrine_results_by_default") {
        return;
    }
    let cwd = tmp("gen");
    let out = bin()
        .current_dir(&cwd)
        .args(["bench", "gen", "--duration", "500ms"])
        .output()
        .unwrap();
    ok(&out, "bench gen");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("limited by"), "{stdout}");
    let r = check_result(&cwd.join("peregrine-results/bench-gen.json"));
    assert!(cwd.join("peregrine-results/bench-gen.cmd").exists());
    assert!(cwd.join("peregrine-results/bench-gen-rates.png").exists());
    let unsent: Vec<_> = r.runs.iter().filter(|x| !x.params.sent).collect();
    assert_eq!(unsent.len(), 1, "the generator-alone run is marked unsent");
    let _ = std::fs::remove_dir_all(&cwd);
}

#[test]
fn bench_router_quick_run_holds_together() {
    if !privileged("bench_router_quick_run_holds_together") {
        return;
    }
    let dir = tmp("router");
    let out = bin()
        .args([
            "bench", "router", "--quick", "--rounds", "1", "--trial", "500ms",
        ])
        .args(["--resolution", "100k", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    ok(&out, "bench router");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ratio"), "{stdout}");
    let r = check_result(&dir.join("bench-router.json"));
    assert_eq!(r.runs.len(), 3, "linux, xdp, chain");
    for run in &r.runs {
        let p = run.placement.as_ref().unwrap();
        if std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            > 1
        {
            assert!(!p.dut_cpus.is_empty() && !p.dut_cpus.contains(&0), "{p:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_faas_quick_run_holds_together() {
    if !privileged("bench_faas_quick_run_holds_together") {
        return;
    }
    let dir = tmp("faas");
    let out = bin()
        .args([
            "bench",
            "faas",
            "--sizes",
            "200",
            "--configs",
            "mmsg:1,afxdp:1",
        ])
        .args(["--duration", "500ms", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    ok(&out, "bench faas");
    check_result(&dir.join("bench-faas.json"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn showcase_runs_and_its_search_uses_offered_rates() {
    if !privileged("showcase_runs_and_its_search_uses_offered_rates") {
        return;
    }
    let dir = tmp("showcase");
    let out = bin()
        .args(["showcase", "--trial", "500ms", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    ok(&out, "showcase");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("RFC 2544 throughput"), "{stdout}");
    check_result(&dir.join("showcase.json"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gen_warns_and_marks_a_rate_it_cannot_offer() {
    if !privileged("gen_warns_and_marks_a_rate_it_cannot_offer") {
        return;
    }
    let lab = "smokegen";
    pair_lab_up(lab);
    let run = |args: &[&str]| {
        bin()
            .args([
                "gen",
                "--lab",
                lab,
                "--from",
                "a:eth0",
                "--to",
                "198.18.0.2",
            ])
            .args(args)
            .output()
            .unwrap()
    };
    // A billion frames a second is beyond any generator here.
    let out = run(&[
        "--rate",
        "1000Mpps",
        "--duration",
        "1",
        "--sink",
        "b:eth0",
        "--json",
    ]);
    let down = bin().args(["lab", "down", lab]).output().unwrap();
    ok(&out, "gen");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning") && err.contains("generator-limited"),
        "{err}"
    );
    let r = ResultFile::from_json(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let t = &r.runs[0].trials[0];
    // The mark: what was offered, measured, stands beside what was asked.
    let asked = t.requested_pps.expect("a paced trial records its rate");
    assert!(t.offered_pps < asked * 0.99, "{t:?}");
    // The sink may also drop at the generator's full speed; then whoever
    // dropped is named (the delivered figure is theirs; gen tolerates no
    // loss unless --max-loss says so), else the generator.
    if t.delivered_packets == t.offered_packets {
        assert_eq!(t.limited_by, Some(Limiter::Generator), "{t:?}");
    } else {
        assert!(!matches!(t.limited_by, Some(Limiter::None) | None), "{t:?}");
    }
    assert!(t.delivered_pps > 0.0 && t.delivered_bps > 0.0);
    ok(&down, "lab down");
}

#[test]
fn gen_names_a_missing_interface() {
    if !privileged("gen_names_a_missing_interface") {
        return;
    }
    let lab = "smokeif";
    pair_lab_up(lab);
    let out = bin()
        .args([
            "gen",
            "--lab",
            lab,
            "--from",
            "a:eth9",
            "--to",
            "198.18.0.2",
        ])
        .args(["--count", "10"])
        .output()
        .unwrap();
    let down = bin().args(["lab", "down", lab]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no interface \"eth9\""), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    ok(&down, "lab down");
}
