//! Helpers for privileged tests: they run in CI (root) and fail there when
//! they cannot; elsewhere they skip, and the skip is visible: when the test
//! binary exits it writes one line naming how many tests were skipped,
//! straight to fd 2, past the harness's output capture (which swallows the
//! per-test "SKIPPED" lines of tests that "pass").
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

static SKIPPED: AtomicUsize = AtomicUsize::new(0);
static REPORT_AT_EXIT: Once = Once::new();

/// Privileged tests skipped so far in this process.
pub fn skipped() -> usize {
    SKIPPED.load(Ordering::Relaxed)
}

/// The line written at exit when `n` tests were skipped.
fn skip_line(n: usize) -> String {
    let tests = if n == 1 { "test" } else { "tests" };
    format!(
        "peregrine: {n} privileged {tests} skipped in this binary (not root; run as root or in CI)\n"
    )
}

extern "C" fn report_skips() {
    let n = skipped();
    if n == 0 {
        return;
    }
    let line = skip_line(n);
    let mut rest = line.as_bytes();
    while !rest.is_empty() {
        // Safety: `rest` is a live byte slice for the call; fd 2 is the
        // process's stderr (a failed or closed fd only makes write fail).
        let w = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if w <= 0 {
            return;
        }
        rest = &rest[w as usize..];
    }
}

/// True when the caller may run a privileged test. Outside CI without root
/// it prints why the test is skipped, counts the skip (reported once at
/// exit) and returns false; in CI (CI set) it panics instead, so a test that
/// cannot run is a red build, not a silent skip.
pub fn privileged(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if root {
        return true;
    }
    let why = "needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN) for BPF and network namespaces";
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why}, and CI must run it");
    }
    SKIPPED.fetch_add(1, Ordering::Relaxed);
    REPORT_AT_EXIT.call_once(|| {
        // Safety: `report_skips` is a plain extern "C" fn taking nothing; it
        // only reads an atomic and writes to fd 2, fine during exit.
        let rc = unsafe { libc::atexit(report_skips) };
        if rc != 0 {
            eprintln!("peregrine: could not register the skipped-test report");
        }
    });
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// `privileged` for the test running on this thread, under the name the
/// test harness gives that thread (the test's own), so that a test need
/// not spell its name again.
pub fn privileged_here() -> bool {
    let test = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_owned();
    privileged(&test)
}

/// Polls `done` every 5 ms until it holds or `timeout` passes; whether it
/// held. Tests wait for readiness with this instead of fixed sleeps.
pub fn wait_until(timeout: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Runs `ip args` to the end; panics with what ip said if it fails.
pub fn ip(args: &[&str]) {
    run("ip", args);
}

/// Runs `program args` (ip, tc, ...) to the end; panics with what it said
/// if it fails.
pub fn run(program: &str, args: &[&str]) {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Namespaces `a` and `b` joined by a veth pair, eth0 at both ends, made
/// with plain `ip` as a user's own would be (the kernel's default
/// offloads), nothing set on either end yet. Removed on drop, and first
/// when a killed run left them.
pub struct NsPair {
    pub a: String,
    pub b: String,
}

impl NsPair {
    pub fn new(a: &str, b: &str) -> NsPair {
        let p = NsPair {
            a: a.into(),
            b: b.into(),
        };
        p.remove();
        ip(&["netns", "add", a]);
        ip(&["netns", "add", b]);
        ip(&[
            "link", "add", "eth0", "netns", a, "type", "veth", "peer", "name", "eth0", "netns", b,
        ]);
        p
    }

    /// `new`, then 198.18.0.1/24 and 2001:db8::1/64 on `a`'s eth0,
    /// 198.18.0.2/24 and 2001:db8::2/64 on `b`'s (no duplicate address
    /// detection), eth0 and lo up at both ends.
    pub fn addressed(a: &str, b: &str) -> NsPair {
        let p = NsPair::new(a, b);
        for (ns, v4, v6) in [
            (a, "198.18.0.1/24", "2001:db8::1/64"),
            (b, "198.18.0.2/24", "2001:db8::2/64"),
        ] {
            ip(&["-n", ns, "addr", "add", v4, "dev", "eth0"]);
            ip(&["-n", ns, "addr", "add", v6, "dev", "eth0", "nodad"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        p
    }

    fn remove(&self) {
        for ns in [&self.a, &self.b] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .output();
        }
    }
}

impl Drop for NsPair {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A pin directory of a test's own below the pin root
/// (`_test-<name>-<pid>`: no lab and no namespace's router), removed with
/// everything pinned below it on drop.
pub struct TestPins(pub std::path::PathBuf);

impl TestPins {
    pub fn new(name: &str) -> TestPins {
        let sub = format!("_test-{name}-{}", std::process::id());
        TestPins(peregrine_bpf::bpffs::pin_dir(&sub).expect("a test pin directory"))
    }
}

impl Drop for TestPins {
    fn drop(&mut self) {
        let _ = peregrine_bpf::bpffs::remove_pin_dir(&self.0);
    }
}

/// Runs `f` on a thread in a network namespace of its own, unnamed (only
/// `lo`): what it makes there goes with the thread, and nothing else on the
/// machine is touched.
pub fn in_fresh_netns<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("a network namespace of the test's own");
            f()
        })
        .join()
        .expect("the test thread")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_skip_line_names_the_count() {
        assert_eq!(
            skip_line(12),
            "peregrine: 12 privileged tests skipped in this binary (not root; run as root or in CI)\n"
        );
        assert!(skip_line(1).starts_with("peregrine: 1 privileged test skipped"));
    }
}
