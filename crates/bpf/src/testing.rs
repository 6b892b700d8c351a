//! Helpers for privileged tests: they run in CI (root) and fail there when
//! they cannot; elsewhere they skip with the reason printed.

/// True when the caller may run a privileged test. Outside CI without root
/// it prints why the test is skipped and returns false; in CI (CI set) it
/// panics instead, so a test that cannot run is a red build, not a silent skip.
pub fn privileged(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if root {
        return true;
    }
    let why = "needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN) for BPF and network namespaces";
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why}, and CI must run it");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}
