//! BPF_PROG_RUN fixtures: an input frame, the verdict the program must return
//! and the frame it must leave behind. Each program's fixtures are a table of
//! `Case`s (fixture + expected counter effect, run by `check_table`) built
//! with `frames`, in its control code's `#[cfg(test)]` module (`sink.rs`,
//! `router.rs`, ...); the router's that need a namespace with routes and
//! neighbours are in `crates/lab/tests/router_fixtures.rs`. `fuzz` (tests
//! only) holds what the differential tests share: mutated frames and wire's
//! reading of them.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::fmt;
use std::os::fd::{AsFd, AsRawFd};

use crate::error::{BpfError, Result};
use crate::skel::uapi::types::{__sk_buff, peregrine_tc_act, xdp_action, xdp_md};

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

/// A tc program's verdict (<linux/pkt_cls.h>, through prog_uapi.h and BTF).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcAction {
    Ok,
    Shot,
    Redirect,
    /// TC_ACT_UNSPEC, which tcx reads as TCX_NEXT: run the interface's next
    /// program, then the stack.
    Next,
}

impl TcAction {
    const ALL: [TcAction; 4] = [
        TcAction::Ok,
        TcAction::Shot,
        TcAction::Redirect,
        TcAction::Next,
    ];

    pub fn from_raw(v: u32) -> Option<TcAction> {
        Self::ALL.into_iter().find(|a| a.raw() == v)
    }

    /// The kernel's value (TC_ACT_*).
    pub fn raw(self) -> u32 {
        let v = match self {
            TcAction::Ok => peregrine_tc_act::PG_TC_ACT_OK,
            TcAction::Shot => peregrine_tc_act::PG_TC_ACT_SHOT,
            TcAction::Redirect => peregrine_tc_act::PG_TC_ACT_REDIRECT,
            TcAction::Next => peregrine_tc_act::PG_TC_ACT_NEXT,
        };
        v.0
    }
}

/// The verdict a fixture expects, which also says how the program is run:
/// an XDP verdict runs it on an `xdp_md` (XDP), a tc verdict on an
/// `__sk_buff` (tc: the frame is an skb, as at tcx ingress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Xdp(XdpAction),
    Tc(TcAction),
}

impl From<XdpAction> for Verdict {
    fn from(a: XdpAction) -> Self {
        Verdict::Xdp(a)
    }
}

impl From<TcAction> for Verdict {
    fn from(a: TcAction) -> Self {
        Verdict::Tc(a)
    }
}

impl PartialEq<XdpAction> for Verdict {
    fn eq(&self, other: &XdpAction) -> bool {
        *self == Verdict::Xdp(*other)
    }
}

impl Verdict {
    /// The verdict the program returned as a raw value, read in this
    /// verdict's hook (None: no verdict of that hook has this value).
    fn same_hook(self, raw: u32) -> Option<Verdict> {
        match self {
            Verdict::Xdp(_) => XdpAction::from_raw(raw).map(Verdict::Xdp),
            Verdict::Tc(_) => TcAction::from_raw(raw).map(Verdict::Tc),
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
    /// The expected verdict, of the hook the fixture runs at.
    pub verdict: Verdict,
    pub output: Expect,
    /// Interface the frame arrives on (in the calling thread's namespace);
    /// None: BPF_PROG_RUN's default, the loopback device.
    pub ingress: Option<u32>,
    /// The skb's GSO state (tc only): `gso_segs` and `gso_size`, as a
    /// sender's super-packet carries them; None: a plain frame.
    pub gso: Option<(u32, u32)>,
}

impl Fixture {
    pub fn new(
        name: impl Into<String>,
        input: Vec<u8>,
        verdict: impl Into<Verdict>,
        output: Expect,
    ) -> Self {
        Fixture {
            name: name.into(),
            input,
            verdict: verdict.into(),
            output,
            ingress: None,
            gso: None,
        }
    }

    /// The same fixture as a GSO super-packet of `segs` segments of
    /// `size` bytes (tc).
    pub fn gso(mut self, segs: u32, size: u32) -> Self {
        self.gso = Some((segs, size));
        self
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
    let mut ctx = xdp_md {
        data_end: input.len() as u32,
        ingress_ifindex: ingress.unwrap_or(0),
        ..Default::default()
    };
    // Safety: xdp_md is plain integers; the bytes are read for the call only.
    let ctx_bytes = ingress.map(|_| unsafe { as_bytes_mut(&mut ctx) });
    test_run(prog, input, ctx_bytes, "BPF_PROG_RUN")
}

/// One BPF_PROG_RUN of the tc program `prog` on `input` as an skb: the raw
/// verdict and the frame after (from the Ethernet header, as tc sees it).
/// `ingress`: the device the skb arrives on (its `ifindex` and
/// `ingress_ifindex`, and the device whose MAC sets `pkt_type`); None:
/// the loopback device. `gso`: the skb's `gso_segs` and `gso_size`.
pub fn run_once_skb(
    prog: &impl AsFd,
    input: &[u8],
    ingress: Option<u32>,
    gso: Option<(u32, u32)>,
) -> Result<(u32, Vec<u8>)> {
    // The kernel refuses a ctx with any byte set outside the few fields it
    // takes, padding included: start from zeroed memory, not a struct
    // literal (whose padding bytes Rust leaves undefined).
    // Safety: __sk_buff is plain integers and nullable pointers in unions;
    // all-zero bytes are a valid value.
    let mut ctx: __sk_buff = unsafe { std::mem::zeroed() };
    ctx.ifindex = ingress.unwrap_or(0);
    if let Some((segs, size)) = gso {
        ctx.gso_segs = segs;
        ctx.gso_size = size;
    }
    // Safety: __sk_buff was zeroed whole, padding included, so every byte
    // is initialized; read for the call only.
    let ctx_bytes = (ingress.is_some() || gso.is_some()).then(|| unsafe { as_bytes_mut(&mut ctx) });
    test_run(prog, input, ctx_bytes, "BPF_PROG_RUN (skb)")
}

/// One BPF_PROG_RUN of the tc program `prog` on `input` as an skb: the raw
/// verdict and the skb's `priority` after (BPF_PROG_RUN copies back the
/// fields a program may set: priority, mark, cb, ...; not queue_mapping).
pub fn run_once_skb_priority(prog: &impl AsFd, input: &[u8]) -> Result<(u32, u32)> {
    run_once_skb_priority_frame(prog, input).map(|(verdict, _, priority)| (verdict, priority))
}

/// As `run_once_skb_priority`, with the frame after as well: the raw
/// verdict, the frame (from the Ethernet header) and the skb's `priority`.
pub fn run_once_skb_priority_frame(prog: &impl AsFd, input: &[u8]) -> Result<(u32, Vec<u8>, u32)> {
    if input.len() < MIN_TEST_FRAME {
        return Err(BpfError::Invalid(format!(
            "fixture frame of {} bytes: BPF_PROG_RUN needs at least {MIN_TEST_FRAME}",
            input.len()
        )));
    }
    // Safety: __sk_buff is plain integers and nullable pointers in unions;
    // all-zero bytes are a valid value.
    let mut ctx: __sk_buff = unsafe { std::mem::zeroed() };
    let mut data = vec![0u8; input.len() + 512];
    // Safety: zeroed is the valid empty options struct; `sz` is set below.
    let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of_val(&opts) as _;
    opts.data_in = input.as_ptr().cast();
    opts.data_size_in = input.len() as u32;
    opts.data_out = data.as_mut_ptr().cast();
    opts.data_size_out = data.len() as u32;
    opts.repeat = 1;
    opts.ctx_out = (&mut ctx as *mut __sk_buff).cast();
    opts.ctx_size_out = std::mem::size_of::<__sk_buff>() as u32;
    // Safety: the input, `data` and `ctx` are valid for the sizes given
    // and outlive the call.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_fd().as_raw_fd(), &mut opts) };
    if rc < 0 {
        return Err(BpfError::Io {
            what: "BPF_PROG_RUN (skb, frame and ctx out)".into(),
            source: std::io::Error::from_raw_os_error(-rc),
        });
    }
    data.truncate(opts.data_size_out as usize);
    Ok((opts.retval, data, ctx.priority))
}

/// The bytes of a plain-data context struct, for BPF_PROG_RUN's `ctx_in`.
///
/// # Safety
/// Every byte of `*v` must be initialized (no padding left undefined).
unsafe fn as_bytes_mut<T>(v: &mut T) -> &mut [u8] {
    // Safety: the caller vouches every byte is initialized; the slice
    // borrows `v` mutably for its whole life.
    unsafe { std::slice::from_raw_parts_mut((v as *mut T).cast(), std::mem::size_of::<T>()) }
}

/// BPF_PROG_RUN of `prog` on `input` (at least `MIN_TEST_FRAME` bytes)
/// with an optional context: the raw verdict and the frame after.
fn test_run(
    prog: &impl AsFd,
    input: &[u8],
    ctx: Option<&mut [u8]>,
    what: &str,
) -> Result<(u32, Vec<u8>)> {
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
    if let Some(ctx) = ctx {
        opts.ctx_size_in = ctx.len() as u32;
        opts.ctx_in = ctx.as_mut_ptr().cast();
    }
    // Safety: buffers are valid for the sizes given and outlive the call.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_fd().as_raw_fd(), &mut opts) };
    if rc < 0 {
        return Err(BpfError::Io {
            what: what.into(),
            source: std::io::Error::from_raw_os_error(-rc),
        });
    }
    out.truncate(opts.data_size_out as usize);
    Ok((opts.retval, out))
}

/// Whether BPF_PROG_RUN takes `frame` as an skb: it refuses (EINVAL) one
/// whose EtherType says IPv4 or IPv6 but which ends before the fixed IP
/// header does (14 + 20, 14 + 40 bytes), so tc fixtures cannot cut there;
/// XDP runs take every frame from `MIN_TEST_FRAME` bytes.
pub fn skb_runnable(frame: &[u8]) -> bool {
    use peregrine_wire::{ethertype, ETH_HLEN, IPV4_HLEN, IPV6_HLEN};
    let Some(t) = frame.get(12..14) else {
        return false;
    };
    match u16::from_be_bytes([t[0], t[1]]) {
        ethertype::IPV4 => frame.len() >= ETH_HLEN + IPV4_HLEN,
        ethertype::IPV6 => frame.len() >= ETH_HLEN + IPV6_HLEN,
        _ => frame.len() >= MIN_TEST_FRAME,
    }
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

/// Runs `fx` at its verdict's hook and compares verdict and output frame.
pub fn check(prog: &impl AsFd, fx: &Fixture) -> std::result::Result<(), Mismatch> {
    let fail = |detail: String| Mismatch {
        name: fx.name.clone(),
        detail,
    };
    let run = match fx.verdict {
        Verdict::Xdp(_) => run_once_on(prog, &fx.input, fx.ingress),
        Verdict::Tc(_) => run_once_skb(prog, &fx.input, fx.ingress, fx.gso),
    };
    let (ret, out) = run.map_err(|e| fail(e.to_string()))?;
    let got = fx.verdict.same_hook(ret);
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

/// One row of a program's fixture table: the fixture and what running it
/// must change besides the frame (counter deltas, ...), as the table's
/// `effect` function observes it; `()` when only verdict and frame count.
#[derive(Debug, Clone)]
pub struct Case<E = ()> {
    pub fixture: Fixture,
    pub effect: E,
}

impl<E> Case<E> {
    pub fn new(fixture: Fixture, effect: E) -> Self {
        Case { fixture, effect }
    }
}

/// Runs a fixture table in order: each case's verdict and output frame as
/// `check`, and `effect(before, after)` over `state()` read around the run
/// must equal the case's effect. Returns every mismatch, not just the first.
pub fn check_table<S, E: PartialEq + fmt::Debug>(
    prog: &impl AsFd,
    cases: &[Case<E>],
    mut state: impl FnMut() -> S,
    effect: impl Fn(&S, &S) -> E,
) -> Vec<Mismatch> {
    let mut bad = Vec::new();
    for case in cases {
        let before = state();
        if let Err(m) = check(prog, &case.fixture) {
            bad.push(m);
            continue;
        }
        let got = effect(&before, &state());
        if got != case.effect {
            bad.push(Mismatch {
                name: case.fixture.name.clone(),
                detail: format!("effect {got:?}, expected {:?}", case.effect),
            });
        }
    }
    bad
}

/// Runs a table whose effect is how far some counters moved (`counters`
/// picks them, in the order the cases list them, from the state read before
/// and after each run), as `check_table`, and panics as `assert_passed`
/// (naming the table `what`) on any mismatch.
pub fn assert_counters<S, const N: usize>(
    what: &str,
    prog: &impl AsFd,
    cases: &[Case<[u64; N]>],
    state: impl FnMut() -> S,
    counters: impl Fn(&S) -> [u64; N],
) {
    let bad = check_table(prog, cases, state, |before, after| {
        let (b, a) = (counters(before), counters(after));
        std::array::from_fn(|i| a[i] - b[i])
    });
    assert_passed(what, &bad);
}

/// A router fixture's effect: the actions whose packet counter at the
/// ingress port moved (exactly one for every frame).
pub fn router_actions_moved(
    before: &crate::router::PortStats,
    after: &crate::router::PortStats,
) -> Vec<&'static str> {
    (0..crate::router::ACTIONS)
        .filter(|&i| after.packets[i] != before.packets[i])
        .map(crate::router::action_name)
        .collect()
}

/// Panics with every mismatch of a table, one per line, if there is any.
pub fn assert_passed(what: &str, mismatches: &[Mismatch]) {
    assert!(
        mismatches.is_empty(),
        "{what}: {} fixture(s) failed:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .map(|m| m.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Differential fuzzing: mutated frames, wire's reading of them, the tally.
#[cfg(test)]
pub mod fuzz;

/// The differential tests of the policer, dispatcher, stack steering,
/// network function, HTB classifier, sink and reply checker (the router's
/// are in router.rs).
#[cfg(test)]
mod differential;

/// The fixtures' one packet builder: a UDP frame from a `peregrine_wire`
/// `UdpFrameSpec`, then the changes a case needs (options, fragments, other
/// protocols, bad checksums, VLAN tags; `truncations` cuts it). Offsets are
/// those of an untagged frame, so tag last.
pub mod frames {
    use std::net::Ipv4Addr;

    use peregrine_wire::checksum::checksum;
    use peregrine_wire::{
        ethertype, MacAddr, UdpFrameSpec, ETH_HLEN, IPV4_HLEN, IPV6_HLEN, VLAN_HLEN,
    };

    /// Where the IPv4/IPv6 header and its fields are in an untagged frame.
    const L3: usize = ETH_HLEN;
    const IP4_TOT_LEN: usize = L3 + 2;
    const IP4_FRAG: usize = L3 + 6;
    const IP4_PROTO: usize = L3 + 9;
    const IP4_CHECK: usize = L3 + 10;
    const IP6_PLEN: usize = L3 + 4;
    const IP6_NEXTHDR: usize = L3 + 6;
    const ETHERTYPE: usize = 2 * 6;

    /// A UDP frame spec from `src` to `dst` (addresses of one family),
    /// ports 1024 to 9, otherwise `UdpFrameSpec::between`'s with the
    /// smallest frame; cases change what they need with `..spec(..)`.
    pub fn spec(src: &str, dst: &str) -> UdpFrameSpec {
        let ip = |a: &str| a.parse::<std::net::IpAddr>().unwrap();
        UdpFrameSpec::between((ip(src), 1024).into(), (ip(dst), 9).into(), 0)
    }

    /// `spec`'s frame with `payload` at the start of the UDP payload.
    pub fn udp(spec: &UdpFrameSpec, payload: &[u8]) -> Vec<u8> {
        spec.build(payload)
            .unwrap_or_else(|e| panic!("fixture frame {spec:?}: {e}"))
    }

    /// A `spec(src, dst)` frame with ports `sport` to `dport`, `frame_len`
    /// bytes long (at least the headers and `payload`).
    pub fn udp_ports(
        (src, dst): (&str, &str),
        (sport, dport): (u16, u16),
        frame_len: usize,
        payload: &[u8],
    ) -> Vec<u8> {
        let spec = UdpFrameSpec {
            src_port: sport,
            dst_port: dport,
            frame_len,
            ..spec(src, dst)
        };
        udp(&spec, payload)
    }

    fn is_ip4(f: &[u8]) -> bool {
        f[ETHERTYPE..ETHERTYPE + 2] == ethertype::IPV4.to_be_bytes()
    }

    /// Recomputes an IPv4 header checksum after a change (no-op on IPv6).
    fn fix_ip4_checksum(f: &mut [u8]) {
        if !is_ip4(f) {
            return;
        }
        let hlen = usize::from(f[L3] & 0xf) * 4;
        f[IP4_CHECK..IP4_CHECK + 2].fill(0);
        let sum = checksum(&f[L3..L3 + hlen.max(IPV4_HLEN)]);
        f[IP4_CHECK..IP4_CHECK + 2].copy_from_slice(&sum.to_be_bytes());
    }

    /// `frame` with its DSCP set to `dscp` (ECN kept; IPv4's header
    /// checksum recomputed).
    pub fn with_dscp(frame: &[u8], dscp: u8) -> Vec<u8> {
        let mut f = frame.to_vec();
        if is_ip4(&f) {
            f[L3 + 1] = (dscp << 2) | (f[L3 + 1] & 3);
            fix_ip4_checksum(&mut f);
        } else {
            // version(4) | traffic class(8) | flow label(20)
            let word = u32::from_be_bytes(f[L3..L3 + 4].try_into().unwrap());
            let word = (word & !(0x3f << 22)) | (u32::from(dscp) << 22);
            f[L3..L3 + 4].copy_from_slice(&word.to_be_bytes());
        }
        f
    }

    /// `frame` with a VLAN tag (TPID `tpid`: `ethertype::VLAN`, or
    /// `ethertype::QINQ` for the outer tag of a QinQ frame) before its
    /// EtherType.
    pub fn vlan(frame: &[u8], tpid: u16, vid: u16) -> Vec<u8> {
        let mut f = frame[..ETHERTYPE].to_vec();
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&vid.to_be_bytes());
        debug_assert_eq!(f.len() - ETHERTYPE, VLAN_HLEN);
        f.extend_from_slice(&frame[ETHERTYPE..]);
        f
    }

    /// An IPv4 `frame` with `words` 4-byte words of NOP options after the
    /// fixed header; IHL, total length and header checksum follow.
    pub fn ip4_options(frame: &[u8], words: u8) -> Vec<u8> {
        let mut f = frame.to_vec();
        let at = L3 + IPV4_HLEN;
        f.splice(at..at, std::iter::repeat_n(1u8, usize::from(words) * 4));
        f[L3] += words;
        let tot = u16::from_be_bytes([f[IP4_TOT_LEN], f[IP4_TOT_LEN + 1]]) + u16::from(words) * 4;
        f[IP4_TOT_LEN..IP4_TOT_LEN + 2].copy_from_slice(&tot.to_be_bytes());
        fix_ip4_checksum(&mut f);
        f
    }

    /// An IPv4 `frame` made a fragment: more fragments to come, at
    /// `offset` 8-byte units into the datagram.
    pub fn ip4_fragment(frame: &[u8], more: bool, offset: u16) -> Vec<u8> {
        let mut f = frame.to_vec();
        let v = (u16::from(more) << 13) | (offset & 0x1fff);
        f[IP4_FRAG..IP4_FRAG + 2].copy_from_slice(&v.to_be_bytes());
        fix_ip4_checksum(&mut f);
        f
    }

    /// An IPv6 `frame` made a fragment: the 8-byte fragment header after the
    /// fixed header, more fragments to come, at `offset` 8-byte units.
    pub fn ip6_fragment(frame: &[u8], more: bool, offset: u16) -> Vec<u8> {
        let mut f = frame.to_vec();
        let next = f[IP6_NEXTHDR];
        f[IP6_NEXTHDR] = 44; // IPPROTO_FRAGMENT
        let plen = u16::from_be_bytes([f[IP6_PLEN], f[IP6_PLEN + 1]]) + 8;
        f[IP6_PLEN..IP6_PLEN + 2].copy_from_slice(&plen.to_be_bytes());
        let off = (offset << 3) | u16::from(more);
        let mut hdr = vec![next, 0];
        hdr.extend_from_slice(&off.to_be_bytes());
        hdr.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        let at = L3 + IPV6_HLEN;
        f.splice(at..at, hdr);
        f
    }

    /// `frame` carrying IP protocol (IPv6: next header) `proto`, e.g.
    /// `ipproto::TCP`; the L4 bytes stay, and UDP's ports are where TCP's are.
    pub fn with_protocol(frame: &[u8], proto: u8) -> Vec<u8> {
        let mut f = frame.to_vec();
        if is_ip4(&f) {
            f[IP4_PROTO] = proto;
            fix_ip4_checksum(&mut f);
        } else {
            f[IP6_NEXTHDR] = proto;
        }
        f
    }

    /// `frame` with the IP header's first byte (version and IHL) set to
    /// `byte`, checksum left as it was: a header no parser may accept.
    pub fn ip_first_byte(frame: &[u8], byte: u8) -> Vec<u8> {
        let mut f = frame.to_vec();
        f[L3] = byte;
        f
    }

    /// An IPv4 `frame` whose header checksum is wrong.
    pub fn bad_ip4_checksum(frame: &[u8]) -> Vec<u8> {
        let mut f = frame.to_vec();
        f[IP4_CHECK] ^= 0x10;
        f
    }

    /// An IPv4 `frame` whose UDP checksum is wrong.
    pub fn bad_udp_checksum(frame: &[u8]) -> Vec<u8> {
        let mut f = frame.to_vec();
        let hlen = usize::from(f[L3] & 0xf) * 4;
        f[L3 + hlen + 6] ^= 0x10;
        f
    }

    /// IPv6 extension header types (IANA protocol numbers) `ip6_ext_header`
    /// inserts.
    pub const IPV6_HOPOPTS: u8 = 0;
    pub const IPV6_DSTOPTS: u8 = 60;

    /// An IPv6 `frame` with an 8-byte extension header of type `kind`
    /// (`IPV6_HOPOPTS`, `IPV6_DSTOPTS`: PadN only) between
    /// the IPv6 header and the L4 header; payload length and next headers
    /// follow (the UDP checksum does not cover them).
    pub fn ip6_ext_header(frame: &[u8], kind: u8) -> Vec<u8> {
        let mut f = frame.to_vec();
        let at = L3 + IPV6_HLEN;
        // Next header, length 0 (8 bytes), PadN of 4 bytes of data.
        let ext = [f[IP6_NEXTHDR], 0, 1, 4, 0, 0, 0, 0];
        f.splice(at..at, ext);
        f[IP6_NEXTHDR] = kind;
        let plen = u16::from_be_bytes([f[IP6_PLEN], f[IP6_PLEN + 1]]) + 8;
        f[IP6_PLEN..IP6_PLEN + 2].copy_from_slice(&plen.to_be_bytes());
        f
    }

    /// `frame` with `n` bytes after the IP datagram that its header does
    /// not count (padding, or a sender's trailer): Linux trims them.
    pub fn with_trailer(frame: &[u8], n: usize) -> Vec<u8> {
        let mut f = frame.to_vec();
        f.extend(std::iter::repeat_n(0xee, n));
        f
    }

    /// A broadcast ARP request from `mac`/`sender` for `target`.
    pub fn arp_request(mac: MacAddr, sender: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&mac.0);
        f.extend_from_slice(&ethertype::ARP.to_be_bytes());
        // Ethernet, IPv4, 6-byte MACs, 4-byte addresses, request.
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&mac.0);
        f.extend_from_slice(&sender.octets());
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&target.octets());
        f
    }

    /// The ARP request the tables use as "not IP": from `MacAddr::local(1)`,
    /// 198.18.0.1 asking for 198.18.0.2.
    pub fn arp() -> Vec<u8> {
        arp_request(
            MacAddr::local(1),
            Ipv4Addr::new(198, 18, 0, 1),
            Ipv4Addr::new(198, 18, 0, 2),
        )
    }

    /// `len` bytes of noise whose EtherType is neither IP nor a VLAN tag.
    pub fn garbage(len: usize) -> Vec<u8> {
        let f: Vec<u8> = (0..len as u32)
            .map(|i| (i.wrapping_mul(151) ^ 0x5a) as u8)
            .collect();
        debug_assert!(!is_ip4(&f));
        f
    }
}

/// Every prefix of `frame` from the smallest runnable length up to `upto`
/// bytes (exclusive): cuts at and between every header boundary.
pub fn truncations(frame: &[u8], upto: usize) -> impl Iterator<Item = (usize, Vec<u8>)> + '_ {
    (MIN_TEST_FRAME..upto.min(frame.len())).map(move |n| (n, frame[..n].to_vec()))
}
