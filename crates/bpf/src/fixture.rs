//! BPF_PROG_RUN fixtures: an input frame, the verdict the program must return
//! and the frame it must leave behind. Each program's fixtures live in its
//! control code's `#[cfg(test)]` module (`gen.rs`, `sink.rs`, ...); the
//! router's, which need a namespace with routes, in
//! `crates/lab/tests/router_fixtures.rs`.
use std::fmt;
use std::os::fd::{AsFd, AsRawFd};

use crate::error::{BpfError, Result};
use crate::skel::uapi::types::{xdp_action, xdp_md};

/// Smallest frame BPF_PROG_RUN accepts for XDP (an Ethernet header).
pub const MIN_TEST_FRAME: usize = 14;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAction {
    Aborted,
    Drop,
    Pass,
    Tx,
    Redirect,
}

impl XdpAction {
    const ALL: [XdpAction; 5] = [
        XdpAction::Aborted,
        XdpAction::Drop,
        XdpAction::Pass,
        XdpAction::Tx,
        XdpAction::Redirect,
    ];

    pub fn from_raw(v: u32) -> Option<XdpAction> {
        Self::ALL.into_iter().find(|a| a.raw() == v)
    }

    /// The kernel's value (<linux/bpf.h> enum xdp_action, through BTF).
    pub fn raw(self) -> u32 {
        match self {
            XdpAction::Aborted => xdp_action::XDP_ABORTED.0,
            XdpAction::Drop => xdp_action::XDP_DROP.0,
            XdpAction::Pass => xdp_action::XDP_PASS.0,
            XdpAction::Tx => xdp_action::XDP_TX.0,
            XdpAction::Redirect => xdp_action::XDP_REDIRECT.0,
        }
    }
}

/// What the program must leave in the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// The frame comes back byte for byte as it went in.
    Unchanged,
    /// The frame comes back as exactly these bytes.
    Frame(Vec<u8>),
}

#[derive(Debug, Clone)]
pub struct Fixture {
    pub name: String,
    pub input: Vec<u8>,
    pub verdict: XdpAction,
    pub output: Expect,
    /// Interface the frame arrives on (in the calling thread's namespace);
    /// None: BPF_PROG_RUN's default, the loopback device.
    pub ingress: Option<u32>,
}

impl Fixture {
    pub fn new(
        name: impl Into<String>,
        input: Vec<u8>,
        verdict: XdpAction,
        output: Expect,
    ) -> Self {
        Fixture {
            name: name.into(),
            input,
            verdict,
            output,
            ingress: None,
        }
    }

    /// The same fixture arriving on interface `ifindex`.
    pub fn on(mut self, ifindex: u32) -> Self {
        self.ingress = Some(ifindex);
        self
    }
}

/// One BPF_PROG_RUN of `prog` on `input`: the raw verdict and the frame after.
pub fn run_once(prog: &impl AsFd, input: &[u8]) -> Result<(u32, Vec<u8>)> {
    run_once_on(prog, input, None)
}

/// As `run_once`, with the frame arriving on interface `ingress`.
pub fn run_once_on(prog: &impl AsFd, input: &[u8], ingress: Option<u32>) -> Result<(u32, Vec<u8>)> {
    if input.len() < MIN_TEST_FRAME {
        return Err(BpfError::Invalid(format!(
            "fixture frame of {} bytes: BPF_PROG_RUN needs at least {MIN_TEST_FRAME}",
            input.len()
        )));
    }
    let mut out = vec![0u8; input.len() + 512];
    // Safety: zeroed is the valid empty options struct; `sz` is set below.
    let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of_val(&opts) as _;
    opts.data_in = input.as_ptr().cast();
    opts.data_size_in = input.len() as u32;
    opts.data_out = out.as_mut_ptr().cast();
    opts.data_size_out = out.len() as u32;
    opts.repeat = 1;
    let mut ctx = xdp_md {
        data_end: input.len() as u32,
        ingress_ifindex: ingress.unwrap_or(0),
        ..Default::default()
    };
    if ingress.is_some() {
        opts.ctx_in = (&mut ctx as *mut xdp_md).cast();
        opts.ctx_size_in = std::mem::size_of_val(&ctx) as u32;
    }
    // Safety: buffers are valid for the sizes given and outlive the call.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_fd().as_raw_fd(), &mut opts) };
    if rc < 0 {
        return Err(BpfError::Io {
            what: "BPF_PROG_RUN".into(),
            source: std::io::Error::from_raw_os_error(-rc),
        });
    }
    out.truncate(opts.data_size_out as usize);
    Ok((opts.retval, out))
}

/// A fixture that did not hold.
#[derive(Debug)]
pub struct Mismatch {
    pub name: String,
    pub detail: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fixture {:?}: {}", self.name, self.detail)
    }
}

/// Runs `fx` and compares verdict and output frame.
pub fn check(prog: &impl AsFd, fx: &Fixture) -> std::result::Result<(), Mismatch> {
    let fail = |detail: String| Mismatch {
        name: fx.name.clone(),
        detail,
    };
    let (ret, out) = run_once_on(prog, &fx.input, fx.ingress).map_err(|e| fail(e.to_string()))?;
    let got = XdpAction::from_raw(ret);
    if got != Some(fx.verdict) {
        return Err(fail(format!(
            "verdict {got:?} (raw {ret}), expected {:?}",
            fx.verdict
        )));
    }
    let want = match &fx.output {
        Expect::Unchanged => &fx.input,
        Expect::Frame(f) => f,
    };
    if &out != want {
        let first = out
            .iter()
            .zip(want.iter())
            .position(|(a, b)| a != b)
            .unwrap_or(out.len().min(want.len()));
        return Err(fail(format!(
            "output frame differs at byte {first} (got {} bytes, expected {})",
            out.len(),
            want.len()
        )));
    }
    Ok(())
}

/// Runs every fixture and returns all mismatches (not just the first), so one
/// test run shows every broken case.
pub fn check_all(prog: &impl AsFd, fixtures: &[Fixture]) -> Vec<Mismatch> {
    fixtures
        .iter()
        .filter_map(|f| check(prog, f).err())
        .collect()
}

/// Every prefix of `frame` from the smallest runnable length up to `upto`
/// bytes (exclusive): cuts at and between every header boundary.
pub fn truncations(frame: &[u8], upto: usize) -> impl Iterator<Item = (usize, Vec<u8>)> + '_ {
    (MIN_TEST_FRAME..upto.min(frame.len())).map(move |n| (n, frame[..n].to_vec()))
}
