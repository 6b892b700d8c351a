//! Resource faults (issue 28, item 5), as a user meets them: a shell's
//! `ulimit`, a process without CAP_IPC_LOCK. Each refusal is one line that
//! names the limit and how to raise it, exits 1, and leaves nothing behind.
//! Also a table filled at run time (a policer's rules) and a UMEM the
//! address space has no room for.
use std::process::{Command, Output};

use peregrine_bpf::policer::{MAX_MASKS, MAX_RULES};
use peregrine_testbed::testing::{privileged_here, NsPair};

mod common;
use common::{has_xdp, ok, pg_in, qos_apply, qos_rule, qos_stats, text, Topo};

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

/// The policer's rules file of `n` rules: rule 0 meters ICMP to B
/// (198.18.2.1) at 1000 pps; rules 1 to 13 are one each of 13 more match
/// shapes (UDP to 198.19.0.0/16 .. /28); the rest, all of one shape (TCP to
/// an address of 198.19.0.0/16, port 1 or 2), fill it up. 15 shapes.
fn policer_file(n: u32) -> String {
    let mut f =
        String::from("[[rule]]\ndst = \"198.18.2.1/32\"\nproto = \"icmp\"\nrate = \"1000pps\"\n");
    for len in 16..=28 {
        f += &format!("[[rule]]\ndst = \"198.19.0.0/{len}\"\nproto = \"udp\"\nrate = \"1Gbit\"\n");
    }
    for i in 0..n - 14 {
        f += &format!(
            "[[rule]]\ndst = \"198.19.{}.{}/32\"\nproto = \"tcp\"\ndport = {}\nrate = \"1Gbit\"\n",
            (i >> 8) & 255,
            i & 255,
            1 + (i >> 16)
        );
    }
    f
}

/// `qos rule add --iface a1 ARGS` in R, as a user would.
fn rule_add(t: &Topo, args: &str) -> Output {
    let mut a = vec!["qos", "rule", "add", "--iface", "a1"];
    a.extend(args.split(' '));
    pg_in(&t.ns("R"), &a)
}

/// `qos rule del --iface a1 ID` in R.
fn rule_del(t: &Topo, id: u32) {
    let o = pg_in(
        &t.ns("R"),
        &["qos", "rule", "del", "--iface", "a1", &id.to_string()],
    );
    ok(&o, "qos rule del");
}

/// The ids and matches of the rules of the policer on R's a1, by id.
fn rules_of(t: &Topo) -> (serde_json::Value, Vec<(u64, String)>) {
    let s = qos_stats(t);
    let mut r: Vec<(u64, String)> = s["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_u64().unwrap(),
                r["match"].as_str().unwrap().into(),
            )
        })
        .collect();
    r.sort();
    (s, r)
}

/// Five pings from A to B through the policer; then rule 0 (ICMP to B)
/// has counted `conform` packets in all.
fn pings_counted(t: &Topo, conform: u64, what: &str) {
    assert!(t.ping("198.18.2.1"), "{what}: ping through the policer");
    let s = qos_stats(t);
    assert_eq!(qos_rule(&s, 0)["conform_packets"], conform, "{what}");
    assert_eq!(qos_rule(&s, 0)["exceed_packets"], 0, "{what}");
}

/// A policer's rule map filled at run time (`qos rule add` past
/// `MAX_RULES`, 131,072; filled by `qos apply` of a file of that many
/// rules, the fast path, then one `qos rule add` at a time), and its mask
/// map (16 match shapes): each refusal is one line naming the map and its
/// maximum, exit 1; the rules before keep policing with their counters,
/// the refused rule leaves no entry and no mask, and a rule fits again once
/// one is removed. Two adds racing for the last place: one wins, the other
/// is told the same (before, the loser got "adding a policer rule: Argument
/// list too long (os error 7)" and a full map "the policer already holds
/// 131072 rules").
#[test]
fn a_full_policer_refuses_the_next_rule_by_name_and_keeps_the_rest() {
    let Some(t) = Topo::privileged_up("pg-rlim-q") else {
        return;
    };
    let full = format!(
        "peregrine: error: the policer is full: its rule map (policer_rules) holds at most \
         {MAX_RULES} rules; remove one first (qos rule del)"
    );
    let o = qos_apply(&t, "rlim-full", &policer_file(MAX_RULES), &[]);
    ok(&o, "qos apply of a full rule map");
    assert_eq!(
        text(&o.stdout).trim(),
        format!("policer attached on a1 (tc hook): {MAX_RULES} rule(s)")
    );
    pings_counted(&t, 5, "full policer");
    let (_, before) = rules_of(&t);
    assert_eq!(before.len(), MAX_RULES as usize);

    // One more, of a 16th shape: refused for the rule map.
    let o = rule_add(&t, "--dst 198.19.0.0/29 --proto udp --rate 1Mbit");
    refused_naming(&o, "policer_rules", "a rule past the maximum");
    assert_eq!(errors(&o), std::slice::from_ref(&full));
    assert!(text(&o.stdout).is_empty());
    let (_, after) = rules_of(&t);
    assert_eq!(after, before, "the refused rule changed the rules");
    pings_counted(&t, 10, "after the refusal");

    // Room for one: a 16th shape fits (the refused one kept no mask)...
    rule_del(&t, 100);
    let o = rule_add(&t, "--dst 198.19.0.0/30 --proto udp --rate 1Mbit");
    ok(&o, "a 16th shape");
    assert_eq!(text(&o.stdout).trim(), "rule 100 added on a1");
    // ...a 17th does not, the mask map being full.
    rule_del(&t, 101);
    let o = rule_add(&t, "--dst 198.19.0.0/29 --proto udp --rate 1Mbit");
    refused_naming(&o, "policer_masks", "a 17th match shape");
    assert_eq!(
        errors(&o),
        [format!(
            "peregrine: error: the policer's mask map (policer_masks) is full: its rules may use \
             at most {MAX_MASKS} distinct match shapes (which fields and prefix lengths a rule \
             compares) and this rule needs another"
        )]
    );
    let o = rule_add(
        &t,
        "--dst 198.19.255.254 --proto tcp --dport 3 --rate 1Gbit",
    );
    ok(&o, "a rule of a shape in use");
    assert_eq!(text(&o.stdout).trim(), "rule 101 added on a1");

    // Two adds race for the last place: one wins, one is refused by name.
    rule_del(&t, 102);
    let racer = |dst: &str| {
        Command::new("ip")
            .args(["netns", "exec", &t.ns("R"), "timeout", "30"])
            .arg(env!("CARGO_BIN_EXE_peregrine"))
            .args(["qos", "rule", "add", "--iface", "a1", "--dst", dst])
            .args(["--proto", "tcp", "--dport", "3", "--rate", "1Gbit"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (x, y) = (racer("198.19.255.250"), racer("198.19.255.251"));
    let (x, y) = (x.wait_with_output().unwrap(), y.wait_with_output().unwrap());
    let (won, lost) = if x.status.success() { (x, y) } else { (y, x) };
    assert_eq!(
        text(&won.stdout).trim(),
        "rule 102 added on a1",
        "{}",
        text(&won.stderr)
    );
    refused_naming(&lost, "policer_rules", "the loser of the race");
    assert_eq!(errors(&lost), [full]);

    let (s, after) = rules_of(&t);
    assert_eq!(after.len(), MAX_RULES as usize);
    let ids: Vec<u64> = after.iter().map(|r| r.0).collect();
    assert_eq!(ids, (0..u64::from(MAX_RULES)).collect::<Vec<_>>());
    assert!(
        !after.iter().any(|r| r.1.contains("/29")),
        "the refused rule is there"
    );
    assert_eq!(after[100].1, "dst 198.19.0.0/30 udp");
    assert_eq!(qos_rule(&s, 0)["conform_packets"], 10);
    pings_counted(&t, 15, "at the end");
}

/// A UMEM bigger than the address space left (`ulimit -v 200000`, 195
/// MiB, and `--frames 131072`, 256 MiB): one line naming RLIMIT_AS, its
/// value and the size asked (before: "allocating the UMEM: Cannot allocate
/// memory (os error 12)"); nothing left on the interface. Under the same
/// limit the default UMEM (8 MiB) serves.
#[test]
fn a_umem_over_the_address_space_limit_is_named() {
    if !privileged_here() {
        return;
    }
    let _pair = NsPair::addressed(A, B);
    let o = limited(&[], "ulimit -v 200000", &format!("{SERVE} --frames 131072"));
    refused_naming(&o, "RLIMIT_AS", "faas serve under ulimit -v");
    assert_eq!(
        errors(&o),
        [
            "peregrine: error: AF_XDP on eth0 queue 0: allocating the UMEM (262144 KiB) went over \
          the address-space limit (200000 KiB, RLIMIT_AS); raise it (ulimit -v)"
        ]
    );
    assert!(text(&o.stdout).is_empty(), "{}", text(&o.stdout));
    assert!(!has_xdp(A, "eth0"), "XDP left on eth0");

    let o = limited(&[], "ulimit -v 200000", SERVE);
    ok(&o, "faas serve under ulimit -v with the default UMEM");
    assert!(!has_xdp(A, "eth0"), "XDP left on eth0 after serving");
}

const SERVE: &str =
    "faas serve --iface eth0 --backend afxdp --functions 1232=reverse --duration 0.2";

/// The address-space limit swept upwards from just above where the binary
/// starts at all (`peregrine --version` runs; below that exec(2) fails and
/// no process exists to answer), 2 MB at a time over 12 MB: `faas serve`
/// and `quic serve --io afxdp` each either serve or stop within 10 s in one
/// line naming RLIMIT_AS, exit 1, leaving no XDP program. On the way it meets the UMEM, the worker
/// thread's stack and the housekeeping thread's stack not fitting (before:
/// the last two panicked in `std::thread::spawn`; with RUST_BACKTRACE set
/// the panic's backtrace ran out of memory under the backtrace lock and the
/// process hung, deaf to SIGTERM).
#[test]
fn an_address_space_limit_is_named_wherever_it_bites() {
    if !privileged_here() {
        return;
    }
    let _pair = NsPair::addressed(A, B);
    let pg = env!("CARGO_BIN_EXE_peregrine");
    let starts = |kib: u32| {
        Command::new("bash")
            .args(["-c", &format!("ulimit -v {kib}; exec {pg} --version")])
            .output()
            .unwrap()
            .status
            .success()
    };
    let floor = (10_000..400_000)
        .step_by(1000)
        .find(|&k| starts(k))
        .expect("peregrine --version runs under some address-space limit");
    let mut seen = Vec::new();
    for (what, command) in [("faas serve", SERVE), ("quic serve", QUIC_SERVE)] {
        for kib in (floor + 6000..=floor + 18_000).step_by(2000) {
            let o = Command::new("ip")
                .args(["netns", "exec", A, "bash", "-c"])
                .arg(format!(
                    "ulimit -v {kib}; exec timeout -s KILL 10 {pg} {command}"
                ))
                .env("RUST_BACKTRACE", "1")
                .output()
                .unwrap();
            if !o.status.success() {
                refused_naming(&o, "RLIMIT_AS", &format!("{what} under ulimit -v {kib}"));
                let e = &errors(&o)[0];
                assert!(e.contains(&format!("({kib} KiB, RLIMIT_AS)")), "{e}");
                seen.push(e.clone());
            }
            assert!(
                !has_xdp(A, "eth0"),
                "{what}: XDP left under ulimit -v {kib}"
            );
        }
    }
    eprintln!("from {} KiB: {seen:#?}", floor + 6000);
}

/// `quic serve` on peregrine's stack (AF_XDP), for 0.2 s.
const QUIC_SERVE: &str =
    "quic serve --listen 198.18.0.1:4433 --io afxdp --memory f=1KiB --duration 0.2s";
