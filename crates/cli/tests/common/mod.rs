//! Shared by the `peregrine` binary's integration tests (cli, bench_smoke):
//! running the binary, scratch directories, and a pair lab brought up from
//! a topology file as a user would.
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `peregrine` binary under test, without RUST_BACKTRACE (errors are
/// checked as a user sees them).
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_peregrine"));
    c.env_remove("RUST_BACKTRACE");
    c
}

/// Runs `peregrine` with `args` to the end.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("peregrine runs")
}

/// An empty scratch directory for test `name` (emptied if a run left it).
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("peregrine-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Asserts that `out` succeeded, printing what it wrote if not.
pub fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({:?}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The built-in pair topology (a:eth0 <-> b:eth0) renamed `name`.
pub fn pair_topology(name: &str) -> String {
    let topo = peregrine_lab::topology::builtin::PAIR.replacen(
        "name = \"pair\"",
        &format!("name = \"{name}\""),
        1,
    );
    assert!(topo.contains(name), "the built-in pair names its lab");
    topo
}

/// Writes `text` to `dir/name.toml`; the path.
pub fn topology_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

/// Brings up the built-in pair topology as lab `name` (from a file, as a
/// user would), after removing what a failed earlier run may have left.
pub fn pair_lab_up(name: &str) {
    let file = topology_file(&tmp(name), name, &pair_topology(name));
    let _ = run(&["lab", "down", name]);
    ok(&run(&["lab", "up", &file]), "lab up");
}
