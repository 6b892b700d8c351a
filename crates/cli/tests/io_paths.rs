//! `peregrine io send|recv` as a user runs them, through `ip netns exec` in
//! a mode's lab: a receiver checks what a sender sends, and bad input (a
//! mode this kernel cannot build, a payload the route's MTU cannot carry)
//! is refused in one line.
use std::process::Stdio;

use peregrine_testbed::testing::privileged_here;

mod common;
use common::{bin, json, ok, run};

/// `ip netns exec NS peregrine ARGS`.
fn in_ns(ns: &str, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_peregrine")])
        .args(args)
        .env_remove("RUST_BACKTRACE");
    c
}

#[test]
fn io_send_and_recv_check_each_other_on_every_path() {
    if !privileged_here() {
        return;
    }
    let _ = run(&["lab", "down", "nmsamehost"]);
    ok(&run(&["lab", "up", "netmode-same-host"]), "lab up");
    for path in ["udp", "mmsg", "mmsg-gso", "mmap", "afxdp"] {
        let rx = in_ns(
            "pg-nmsamehost-c2",
            &[
                "io",
                "recv",
                "--path",
                path,
                "--listen",
                "198.19.0.2:5001",
                "--iface",
                "eth0",
                "--count",
                "2000",
                "--duration",
                "10s",
                "--json",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        let sent = json(
            &in_ns(
                "pg-nmsamehost-c1",
                &[
                    "io",
                    "send",
                    "--path",
                    path,
                    "--to",
                    "198.19.0.2:5001",
                    "--payload",
                    "100",
                    "--rate",
                    "20k",
                    "--count",
                    "2000",
                    "--json",
                ],
            )
            .output()
            .unwrap(),
            "io send",
        );
        let got = json(&rx.wait_with_output().unwrap(), "io recv");
        assert_eq!(sent["sent"], 2000, "{path}: {sent}");
        assert_eq!(got["packets"], 2000, "{path}: {got}");
        assert_eq!(got["bytes"], 200_000, "{path}: {got}");
        for k in ["out_of_order", "duplicates", "corrupt"] {
            assert_eq!(got[k], 0, "{path}: {k}: {got}");
        }
    }
    ok(&run(&["lab", "down", "nmsamehost"]), "lab down");
}

/// One line on stderr, and a failure.
fn refused(out: &std::process::Output, what: &str, says: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{what} succeeded");
    assert_eq!(err.trim().lines().count(), 1, "{what}: {err}");
    assert!(err.contains(says), "{what}: {err}");
}

#[test]
fn bad_modes_and_sizes_are_refused_in_one_line() {
    if !privileged_here() {
        return;
    }
    let out = bin()
        .args(["bench", "netmodes", "--modes", "ipvlan", "--quick"])
        .output()
        .unwrap();
    refused(
        &out,
        "bench netmodes --modes ipvlan",
        "cannot be built here",
    );
    assert_eq!(out.status.code(), Some(2));
    let _ = run(&["lab", "down", "nmoverlay"]);
    ok(&run(&["lab", "up", "netmode-overlay"]), "lab up");
    let out = in_ns(
        "pg-nmoverlay-c1",
        &[
            "io",
            "send",
            "--path",
            "mmap",
            "--to",
            "198.19.0.2:5001",
            "--payload",
            "1472",
            "--count",
            "10",
        ],
    )
    .output()
    .unwrap();
    refused(&out, "io send 1472 B over overlay", "MTU of 1450");
    ok(&run(&["lab", "down", "nmoverlay"]), "lab down");
    let left: Vec<String> = peregrine_host::netns::list()
        .into_iter()
        .filter(|n| n.starts_with("pg-nm") || n.starts_with("pg-probe"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
