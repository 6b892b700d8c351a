//! Ctrl-C and SIGTERM: set a flag that every long loop checks, so runs stop
//! promptly and their guards tear down what they created.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use crate::error::{HostError, Result};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: nix::libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handlers (idempotent). Without SA_RESTART, blocking calls
/// return EINTR so loops notice the flag quickly.
pub fn install() {
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // Safety: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let _ = sigaction(s, &act);
        }
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// `Err(Interrupted)` once a stop was requested.
pub fn check() -> Result<()> {
    if stop_requested() {
        Err(HostError::Interrupted)
    } else {
        Ok(())
    }
}

/// Sleeps up to `d`, returning early when a stop is requested.
pub fn sleep(d: std::time::Duration) {
    let end = std::time::Instant::now() + d;
    while !stop_requested() {
        let now = std::time::Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(std::time::Duration::from_millis(50)));
    }
}

static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_hup(_: nix::libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
}

/// SIGHUP asks for a reload (`take_reload`) instead of a stop: what
/// daemons do (the agent re-reads its declaration).
pub fn reload_on_hup() {
    let act = SigAction::new(
        SigHandler::Handler(on_hup),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // Safety: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let _ = sigaction(Signal::SIGHUP, &act);
    }
}

/// Whether a reload was asked for since the last call.
pub fn take_reload() -> bool {
    RELOAD.swap(false, Ordering::SeqCst)
}

/// Asks process `pid` to stop as Ctrl-C would (SIGINT).
pub fn interrupt(pid: u32) -> std::io::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGINT)
        .map_err(std::io::Error::from)
}

/// Stops child process `c` as a service manager would: SIGTERM, up to
/// `grace` to exit, then SIGKILL; reaped either way.
pub fn terminate(c: &mut std::process::Child, grace: std::time::Duration) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), Signal::SIGTERM);
    let end = std::time::Instant::now() + grace;
    while std::time::Instant::now() < end && c.try_wait().ok().flatten().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = c.kill();
    let _ = c.wait();
}
