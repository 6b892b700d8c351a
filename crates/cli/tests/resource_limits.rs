//! Resource faults (issue 28, item 5), as a user meets them: a shell's
//! `ulimit`, a process without CAP_IPC_LOCK. Each refusal is one line that
//! names the limit and how to raise it, exits 1, and leaves nothing behind.
use std::process::{Command, Output};

use peregrine_testbed::testing::{privileged_here, NsPair};

mod common;
use common::{has_xdp, pg_in, text};

const A: &str = "pg-rlim-a";
const B: &str = "pg-rlim-b";

/// `peregrine ARGS` in namespace A after the shell command `setup` (a
/// `ulimit`), through `ip netns exec`, under `prefix` (e.g. setpriv).
fn limited(prefix: &[&str], setup: &str, args: &str) -> Output {
    let pg = env!("CARGO_BIN_EXE_peregrine");
    Command::new("ip")
        .args(["netns", "exec", A])
        .args(prefix)
        .args([
            "bash",
            "-c",
            &format!("{setup}; exec timeout 10 {pg} {args}"),
        ])
        .output()
        .unwrap()
}

/// The error lines of `out` (warnings and reports on stdout aside).
fn errors(out: &Output) -> Vec<String> {
    text(&out.stderr)
        .lines()
        .filter(|l| !l.starts_with("peregrine: warning") && !l.starts_with("hook:"))
        .map(String::from)
        .collect()
}

/// Refused in one line that names `limit`, with exit status 1.
fn refused_naming(out: &Output, limit: &str, what: &str) {
    let e = errors(out);
    assert_eq!(out.status.code(), Some(1), "{what}: {e:?}");
    assert_eq!(e.len(), 1, "{what}: one line: {e:?}");
    assert!(
        e[0].starts_with("peregrine: error: ") && e[0].contains(limit),
        "{what}: {e:?}"
    );
}

fn no_router(ns: &str) -> bool {
    let v: serde_json::Value =
        serde_json::from_slice(&pg_in(ns, &["router", "list", "--json"]).stdout).unwrap();
    !v["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["namespace"] == ns)
}

/// Out of file descriptors (`ulimit -n`, soft and hard): `router attach`
/// and `faas serve` either work or say so in one line naming
/// RLIMIT_NOFILE, and leave no router and no XDP program. Every limit from
/// 12 to 36 is tried (before, the messages were libbpf's whole debug log,
/// "unknown interface", or a verifier complaint about a map descriptor).
/// A soft limit under a higher hard one is raised at start.
#[test]
fn out_of_file_descriptors_is_one_line_and_changes_nothing() {
    if !privileged_here() {
        return;
    }
    let _pair = NsPair::addressed(A, B);
    for n in (12..=36).step_by(4) {
        let setup = format!("ulimit -n {n}");
        let o = limited(&[], &setup, "router attach eth0");
        if o.status.success() {
            assert!(n > 20, "router attach worked with {n} descriptors?");
            pg_in(A, &["router", "detach", "--all"]);
        } else {
            refused_naming(&o, "RLIMIT_NOFILE", &format!("router attach, {n} files"));
        }
        assert!(no_router(A), "router left after {n} files");

        let o = limited(
            &[],
            &setup,
            "faas serve --iface eth0 --backend afxdp --functions 1232=reverse --duration 0.2",
        );
        if !o.status.success() {
            refused_naming(&o, "RLIMIT_NOFILE", &format!("faas serve, {n} files"));
        }
        assert!(!has_xdp(A, "eth0"), "XDP left after {n} files");
    }
    // A soft limit of 12 under the hard one: raised, and it works.
    let o = limited(&[], "ulimit -Sn 12", "router attach eth0");
    assert!(o.status.success(), "{}", text(&o.stderr));
    pg_in(A, &["router", "detach", "--all"]);
    assert!(no_router(A));
}

/// A UMEM over the locked-memory limit (a process without CAP_IPC_LOCK,
/// `ulimit -l 64`): one line naming RLIMIT_MEMLOCK and the sizes, not
/// "No buffer space available"; nothing left on the interface.
#[test]
fn a_umem_over_the_locked_memory_limit_is_named() {
    if !privileged_here() {
        return;
    }
    let _pair = NsPair::addressed(A, B);
    let o = limited(
        &["setpriv", "--bounding-set=-ipc_lock"],
        "ulimit -l 64",
        "faas serve --iface eth0 --backend afxdp --functions 1232=reverse --duration 0.2",
    );
    refused_naming(&o, "RLIMIT_MEMLOCK", "faas serve without CAP_IPC_LOCK");
    assert!(
        errors(&o)[0].contains("(64 KiB"),
        "the limit's value: {:?}",
        errors(&o)
    );
    assert!(!has_xdp(A, "eth0"), "XDP left on eth0");
}
