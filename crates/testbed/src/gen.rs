//! Control side of `bpf/lab/gen.bpf.c`, the live-frame traffic generator.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::{MapCore, MapFlags};
use peregrine_wire::{UdpFrameSpec, FCS_LEN};

use crate::skel::gen::types::{
    gen_class, gen_config, gen_flags, gen_magic, gen_meta, gen_pace, gen_pace_limits, gen_state,
    xdp_md,
};
use crate::skel::gen::{GenSkel, GenSkelBuilder};
use peregrine_bpf::error::{BpfError, Result};
use peregrine_bpf::link::{Hook, Link};
use peregrine_bpf::loader::{open_and_load, rodata, Loaded};
use peregrine_bpf::maps;
use peregrine_bpf::pod::Pod;
use peregrine_bpf::xdp::XdpMode;

/// Values of gen_kern_user.h's enums, as generated into the skeleton.
pub const GEN_F_IPV6: u32 = gen_flags::GEN_F_IPV6.0;
pub const GEN_F_STAMP: u32 = gen_flags::GEN_F_STAMP.0;
pub const GEN_F_DRY_RUN: u32 = gen_flags::GEN_F_DRY_RUN.0;
pub const GEN_F_VARY_DST: u32 = gen_flags::GEN_F_VARY_DST.0;
pub const GEN_F_PORTS_ONLY: u32 = gen_flags::GEN_F_PORTS_ONLY.0;

/// What the flows of a run differ in (each flow also has its own source port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlowVary {
    /// Source address and port.
    #[default]
    Source,
    /// Destination address (e.g. to exercise a large routing table) and
    /// source port.
    Destination,
    /// Source port only: every reply goes back to the one sending host.
    SourcePort,
}
pub const PEREGRINE_MAGIC: u32 = gen_magic::PEREGRINE_MAGIC.0;

/// Classic simple IMIX (frame sizes with FCS, weights 7:4:1).
pub const IMIX: [(usize, usize); 3] = [(64, 7), (594, 4), (1518, 1)];

/// How frame sizes are chosen. Sizes include the 4-byte FCS, as in RFC 2544.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameSizes {
    Fixed(usize),
    Imix,
}

impl FrameSizes {
    /// Distinct sizes and the repeating pattern of indices into them.
    pub fn classes(&self) -> (Vec<usize>, Vec<u8>) {
        match self {
            FrameSizes::Fixed(s) => (vec![*s], vec![0]),
            FrameSizes::Imix => {
                let sizes = IMIX.iter().map(|(s, _)| *s).collect();
                // Interleave so every window of the pattern has the mix.
                let pattern = vec![0, 1, 0, 1, 0, 2, 0, 1, 0, 1, 0, 0];
                (sizes, pattern)
            }
        }
    }

    /// Mean frame size (with FCS) over one pattern.
    pub fn mean_size(&self) -> f64 {
        let (sizes, pattern) = self.classes();
        pattern
            .iter()
            .map(|&i| sizes[i as usize] as f64)
            .sum::<f64>()
            / pattern.len() as f64
    }

    pub fn label(&self) -> String {
        match self {
            FrameSizes::Fixed(s) => s.to_string(),
            FrameSizes::Imix => "imix".into(),
        }
    }
}

impl std::str::FromStr for FrameSizes {
    type Err = BpfError;
    fn from_str(s: &str) -> Result<Self> {
        if s.eq_ignore_ascii_case("imix") {
            return Ok(FrameSizes::Imix);
        }
        s.parse::<usize>().map(FrameSizes::Fixed).map_err(|_| {
            BpfError::Invalid(format!(
                "frame size {s:?}: expected a number of bytes or 'imix'"
            ))
        })
    }
}

/// Everything the generator program needs to know before it is loaded.
#[derive(Debug, Clone)]
pub struct GenSetup {
    /// Flow 0's addresses and ports; `frame_len` is ignored (see `sizes`).
    pub spec: UdpFrameSpec,
    pub sizes: FrameSizes,
    pub flows: u32,
    /// Stamp sequence number and transmit time into each frame.
    pub stamp: bool,
    /// With `stamp`: every Nth frame (a power of two; 1: all) carries its
    /// send time, the others zero (reading the clock is dear on a VM).
    pub latency_sample: u32,
    /// Interface the frames leave through (in the generator's namespace).
    pub ifindex: u32,
    /// Build frames but drop them (measures the generator alone).
    pub dry_run: bool,
    pub vary: FlowVary,
}

/// Smallest and largest frame size (with FCS) for an address family.
pub fn size_limits(v6: bool) -> (usize, usize) {
    // IPv6 needs 62 header bytes + FCS; 78 is RFC 5180's smallest IPv6 frame.
    if v6 {
        (78, 1518)
    } else {
        (64, 1518)
    }
}

impl GenSetup {
    fn validate(&self) -> Result<()> {
        if !self.latency_sample.is_power_of_two() {
            return Err(BpfError::Invalid(format!(
                "latency sample every {} frames: expected a power of two",
                self.latency_sample
            )));
        }
        let v6 = self.spec.src_ip.is_ipv6();
        let (min, max) = size_limits(v6);
        let (sizes, _) = self.sizes.classes();
        for s in sizes {
            if s < min || s > max {
                return Err(BpfError::Invalid(format!(
                    "frame size {s} outside {min}..={max} for {}",
                    if v6 { "IPv6" } else { "IPv4" }
                )));
            }
        }
        if self.flows == 0 || self.flows > 1 << 20 {
            return Err(BpfError::Invalid(format!(
                "flows {}: expected 1..=1048576",
                self.flows
            )));
        }
        if self.spec.src_ip.is_ipv6() != self.spec.dst_ip.is_ipv6() {
            return Err(BpfError::Invalid(
                "source and destination address families differ".into(),
            ));
        }
        Ok(())
    }

    /// The frame of one size class as the generator sends it for flow 0,
    /// sequence 0, time 0.
    pub fn frame(&self, size_with_fcs: usize) -> Result<Vec<u8>> {
        let mut spec = self.spec.clone();
        spec.frame_len = size_with_fcs - FCS_LEN;
        let meta = gen_meta {
            magic: PEREGRINE_MAGIC,
            seq: 0,
            tx_ns: 0,
        };
        let room = spec.frame_len - spec.header_len();
        spec.build(&meta.as_bytes()[..meta_len(room)])
            .map_err(|e| BpfError::Invalid(e.to_string()))
    }

    /// The rodata configuration: one header template per size class.
    pub fn config(&self) -> Result<(gen_config, Vec<u8>)> {
        self.validate()?;
        let (sizes, pattern) = self.sizes.classes();
        let mut cfg = gen_config {
            ifindex: self.ifindex,
            nflows: self.flows,
            pattern_len: pattern.len() as u32,
            flags: if self.spec.src_ip.is_ipv6() {
                GEN_F_IPV6
            } else {
                0
            } | if self.stamp { GEN_F_STAMP } else { 0 }
                | if self.dry_run { GEN_F_DRY_RUN } else { 0 }
                | match self.vary {
                    FlowVary::Source => 0,
                    FlowVary::Destination => GEN_F_VARY_DST,
                    FlowVary::SourcePort => GEN_F_PORTS_ONLY,
                },
            src_port: u32::from(self.spec.src_port),
            stamp_mask: self.latency_sample.max(1) - 1,
            ..Default::default()
        };
        cfg.pattern[..pattern.len()].copy_from_slice(&pattern);
        let mut largest = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let f = self.frame(s)?;
            let c: &mut gen_class = &mut cfg.classes[i];
            let n = c.hdr.len().min(f.len());
            c.hdr[..n].copy_from_slice(&f[..n]);
            c.frame_len = f.len() as u16;
            c.meta_len = meta_len(f.len() - self.spec.header_len()) as u16;
            if f.len() > largest.len() {
                largest = f;
            }
        }
        cfg.template_len = largest.len() as u32;
        Ok((cfg, largest))
    }
}

/// How much of gen_meta fits in a payload of `room` bytes: whole fields only
/// (each field ends where the next begins in the generated layout).
pub fn meta_len(room: usize) -> usize {
    [
        std::mem::size_of::<gen_meta>(),
        std::mem::offset_of!(gen_meta, tx_ns),
        std::mem::offset_of!(gen_meta, seq),
    ]
    .into_iter()
    .find(|&n| room >= n)
    .unwrap_or(0)
}

/// The gen_meta at the start of a UDP payload, read through the generated
/// layout: None unless the magic is there; fields the payload has no room
/// for read as zero (as an unsampled send time does).
pub fn read_meta(payload: &[u8]) -> Option<gen_meta> {
    let n = meta_len(payload.len());
    let mut whole = [0u8; std::mem::size_of::<gen_meta>()];
    whole[..n].copy_from_slice(&payload[..n]);
    let m = gen_meta::from_bytes(&whole)?;
    (n > 0 && m.magic == PEREGRINE_MAGIC).then_some(m)
}

/// The loaded generator program with the frame it is run on.
pub struct GenProgram {
    skel: Loaded<GenSkel<'static>>,
    template: Vec<u8>,
    ifindex: u32,
}

impl GenProgram {
    pub fn load(setup: &GenSetup) -> Result<GenProgram> {
        let (cfg, template) = setup.config()?;
        let skel = open_and_load::<GenSkelBuilder>("gen.bpf.o", |open| {
            rodata(open.maps.rodata_data.as_deref_mut(), "gen.bpf.o")?.cfg = cfg;
            let cpus = libbpf_rs::num_possible_cpus().map_err(BpfError::libbpf("counting CPUs"))?;
            open.maps
                .gen_pace_map
                .set_max_entries(cpus as u32)
                .map_err(BpfError::libbpf("sizing gen_pace_map"))
        })?;
        Ok(GenProgram {
            skel,
            template,
            ifindex: setup.ifindex,
        })
    }

    pub fn prog(&self) -> &libbpf_rs::ProgramMut<'static> {
        &self.skel.progs.gen
    }

    /// Attaches the program in generic mode to `iface` (the namespace's
    /// loopback), where it passes every frame untouched. While attached, the
    /// program stays registered in the kernel's XDP dispatcher, so each
    /// BPF_PROG_RUN skips the dispatcher update and its synchronize_rcu()
    /// (measured: 2.4 Mpps without, 11 Mpps with, one thread, 64 B).
    pub fn anchor(&self, iface: &str) -> Result<Link> {
        Link::attach(self.prog(), iface, Hook::Xdp(XdpMode::Generic))
    }

    pub fn template(&self) -> &[u8] {
        &self.template
    }

    /// Makes and transmits `repeat` frames with BPF_F_TEST_XDP_LIVE_FRAMES on
    /// the calling CPU. The calling thread must be in the namespace of the
    /// egress interface.
    pub fn run_live(&self, repeat: u32) -> Result<()> {
        let mut input = self.template.clone();
        let mut ctx = xdp_md {
            data: 0,
            data_end: input.len() as u32,
            ingress_ifindex: self.ifindex,
            ..Default::default()
        };
        // Safety: zeroed is the valid empty options struct; `sz` is set below.
        let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of_val(&opts) as _;
        opts.data_in = input.as_mut_ptr().cast();
        opts.data_size_in = input.len() as u32;
        opts.ctx_in = (&mut ctx as *mut xdp_md).cast();
        opts.ctx_size_in = std::mem::size_of::<xdp_md>() as u32;
        opts.flags = libbpf_sys::BPF_F_TEST_XDP_LIVE_FRAMES;
        opts.repeat = repeat as i32;
        // 128 measured best here (64: -2%, 256: -2%): fewer flushes, warm page pool.
        opts.batch_size = 128;
        // Safety: input and ctx buffers are valid for their sizes during the call.
        let rc = unsafe {
            libbpf_sys::bpf_prog_test_run_opts(self.prog().as_fd().as_raw_fd(), &mut opts)
        };
        if rc < 0 {
            let err = std::io::Error::from_raw_os_error(-rc);
            if -rc == libc::EINVAL {
                return Err(BpfError::MissingFeature(format!(
                    "BPF_PROG_RUN refused live frames ({err}); needs Linux >= 5.18 (BPF_F_TEST_XDP_LIVE_FRAMES) and the egress interface in this namespace"
                )));
            }
            return Err(BpfError::Io {
                what: "running the generator (BPF_PROG_RUN)".into(),
                source: err,
            });
        }
        Ok(())
    }

    /// Sets the pacing of `cpu`'s sender for the next runs: one frame every
    /// 1e9/`pps` ns (None: unpaced), at most `limit` frames (None: no limit).
    pub fn set_pace(&self, cpu: usize, pps: Option<f64>, limit: Option<u64>) -> Result<()> {
        let shift = gen_pace_limits::GEN_FP_SHIFT.0;
        let gap_fp = match pps {
            Some(p) if p > 0.0 => (1e9 * f64::from(1u32 << shift) / p).round() as u64,
            _ => 0,
        };
        let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
            .map_err(|e| BpfError::Io {
                what: "reading CLOCK_MONOTONIC".into(),
                source: e.into(),
            })?;
        let p = gen_pace {
            gap_fp,
            next_fp: now << shift,
            limit: limit.unwrap_or(0),
            sent: 0,
        };
        maps::update(
            &self.skel.maps.gen_pace_map,
            &(cpu as u32).to_ne_bytes(),
            p.as_bytes(),
            &format!("setting the pace of cpu {cpu}"),
        )
    }

    /// Frames `cpu`'s sender has sent since its last `set_pace`.
    pub fn pace_sent(&self, cpu: usize) -> Result<u64> {
        let v = self
            .skel
            .maps
            .gen_pace_map
            .lookup(&(cpu as u32).to_ne_bytes(), MapFlags::ANY)
            .map_err(BpfError::libbpf("reading gen_pace_map"))?
            .and_then(|b| gen_pace::from_bytes(&b))
            .unwrap_or_default();
        Ok(v.sent)
    }

    /// Frames made and build errors, summed over CPUs.
    pub fn state(&self) -> Result<gen_state> {
        maps::read_per_cpu(&self.skel.maps.gen_state_map, &0u32.to_ne_bytes())
    }
}

/// BPF_PROG_RUN fixtures for gen.bpf.c. Without live frames the kernel runs
/// the program once per call on the frame given and returns what it made, so
/// each output can be compared with a frame built from scratch by `wire`.
#[cfg(test)]
mod fixtures {
    use std::net::IpAddr;

    use super::*;
    use crate::fixture::gen_setup as setup;
    use crate::fixture::{assert_passed, check, check_all, run_once, truncations, Expect, Fixture};
    use crate::testing::privileged;
    use peregrine_bpf::XdpAction;
    use peregrine_wire::parse_udp_frame;

    /// Smallest frame with FCS: 64 bytes, 78 for IPv6's longer header.
    fn min_size(v6: bool) -> usize {
        if v6 {
            78
        } else {
            64
        }
    }

    /// A generator of one unstamped flow of `min_size` frames, its setup
    /// and a copy of its template (the frame every run must leave behind).
    fn load_one_flow(v6: bool) -> (GenSetup, GenProgram, Vec<u8>) {
        let s = setup(v6, FrameSizes::Fixed(min_size(v6)), 1, false);
        let g = GenProgram::load(&s).unwrap();
        let tmpl = g.template().to_vec();
        (s, g, tmpl)
    }

    /// Runs test `test`'s checks on a one-flow generator (`load_one_flow`)
    /// of each family, IPv4 then IPv6, when privileged to load one.
    fn on_one_flow_of_each_family(
        test: &str,
        checks: impl Fn(bool, GenSetup, GenProgram, Vec<u8>),
    ) {
        if !privileged(test) {
            return;
        }
        for v6 in [false, true] {
            let (s, g, tmpl) = load_one_flow(v6);
            checks(v6, s, g, tmpl);
        }
    }

    /// Flow `k`'s frame built from scratch: source port + k, and source (or
    /// destination) address + k unless only ports vary.
    fn flow_frame(s: &GenSetup, k: u32, size: usize) -> Vec<u8> {
        let mut f = s.clone();
        f.spec.src_port = f.spec.src_port.wrapping_add(k as u16);
        let bump = |ip: IpAddr| match ip {
            IpAddr::V4(a) => IpAddr::V4((u32::from(a) + k).into()),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a) + u128::from(k)).into()),
        };
        match s.vary {
            FlowVary::Destination => f.spec.dst_ip = bump(f.spec.dst_ip),
            FlowVary::Source => f.spec.src_ip = bump(f.spec.src_ip),
            FlowVary::SourcePort => {}
        }
        f.frame(size).unwrap()
    }

    /// The per-CPU sequence must advance on one CPU for exact expectations.
    fn pin_cpu0() {
        let mut set = nix::sched::CpuSet::new();
        set.set(0).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
    }

    #[test]
    fn fixed_size_frames_are_rewritten_whole() {
        on_one_flow_of_each_family("fixed_size_frames_are_rewritten_whole", |v6, s, g, tmpl| {
            let mut dirty = tmpl.clone();
            // What a receiver may leave in a recycled page: every header byte wrong.
            for b in dirty.iter_mut().take(s.spec.header_len() + 4) {
                *b ^= 0xa5;
            }
            let fx = [
                Fixture::new(
                    "template",
                    tmpl.clone(),
                    XdpAction::Redirect,
                    Expect::Unchanged,
                ),
                Fixture::new(
                    "page with garbage headers",
                    dirty,
                    XdpAction::Redirect,
                    Expect::Frame(tmpl.clone()),
                ),
            ];
            assert_passed(&format!("v6={v6}"), &check_all(g.prog(), &fx));
            assert_eq!(
                parse_udp_frame(&tmpl).unwrap().payload.len(),
                min_size(v6) - 4 - s.spec.header_len()
            );
        });
    }

    #[test]
    fn flows_match_frames_built_from_scratch() {
        if !privileged("flows_match_frames_built_from_scratch") {
            return;
        }
        pin_cpu0();
        let varies = [
            FlowVary::Source,
            FlowVary::Destination,
            FlowVary::SourcePort,
        ];
        for (v6, vary) in varies.iter().flat_map(|&v| [(false, v), (true, v)]) {
            let size = min_size(v6);
            let mut s = setup(v6, FrameSizes::Fixed(size), 5, false);
            s.vary = vary;
            let g = GenProgram::load(&s).unwrap();
            for i in 0..12u32 {
                let want = flow_frame(&s, i % 5, size);
                let fx = Fixture::new(
                    format!("v6={v6} vary={vary:?} run {i}"),
                    g.template().to_vec(),
                    XdpAction::Redirect,
                    Expect::Frame(want),
                );
                check(g.prog(), &fx).unwrap();
            }
            assert_eq!(g.state().unwrap().seq, 12);
        }
    }

    #[test]
    fn stamped_frames_carry_sequence_time_and_valid_checksums() {
        if !privileged("stamped_frames_carry_sequence_time_and_valid_checksums") {
            return;
        }
        pin_cpu0();
        for (v6, size, has_time) in [(false, 64, true), (true, 78, false), (true, 128, true)] {
            let s = setup(v6, FrameSizes::Fixed(size), 3, true);
            let g = GenProgram::load(&s).unwrap();
            for i in 0..6u32 {
                let (ret, out) = run_once(g.prog(), g.template()).unwrap();
                assert_eq!(XdpAction::from_raw(ret), Some(XdpAction::Redirect));
                let p = parse_udp_frame(&out)
                    .unwrap_or_else(|e| panic!("v6={v6} size={size} run {i}: {e}"));
                assert_eq!(p.src_port, 1024 + (i % 3) as u16);
                let meta = read_meta(p.payload).expect("magic written");
                assert_eq!(meta.seq, i);
                if has_time {
                    assert!(meta.tx_ns > 0, "timestamp written");
                }
            }
        }
    }

    /// With a latency sample of 4, frames 0, 4, 8.. carry the time and the
    /// rest zero, even when the page comes back holding an earlier stamp
    /// (each run is fed the previous output, as veth returns pages).
    #[test]
    fn sampled_stamps_leave_the_rest_zero() {
        if !privileged("sampled_stamps_leave_the_rest_zero") {
            return;
        }
        pin_cpu0();
        for v6 in [false, true] {
            let mut s = setup(v6, FrameSizes::Fixed(128), 2, true);
            s.latency_sample = 4;
            let g = GenProgram::load(&s).unwrap();
            let mut page = g.template().to_vec();
            for i in 0..12u32 {
                let (ret, out) = run_once(g.prog(), &page).unwrap();
                assert_eq!(XdpAction::from_raw(ret), Some(XdpAction::Redirect));
                let p = parse_udp_frame(&out).unwrap_or_else(|e| panic!("v6={v6} run {i}: {e}"));
                let t = read_meta(p.payload).expect("magic written").tx_ns;
                assert_eq!(t > 0, i % 4 == 0, "v6={v6} run {i}: time {t}");
                page = out;
            }
        }
        let mut s = setup(false, FrameSizes::Fixed(128), 2, true);
        s.latency_sample = 3;
        assert!(GenProgram::load(&s).is_err(), "3 is not a power of two");
    }

    #[test]
    fn imix_follows_the_pattern() {
        if !privileged("imix_follows_the_pattern") {
            return;
        }
        pin_cpu0();
        let s = setup(false, FrameSizes::Imix, 1, true);
        let g = GenProgram::load(&s).unwrap();
        let (sizes, pattern) = FrameSizes::Imix.classes();
        for i in 0..24 {
            let (ret, out) = run_once(g.prog(), g.template()).unwrap();
            assert_eq!(XdpAction::from_raw(ret), Some(XdpAction::Redirect));
            assert_eq!(
                out.len() + 4,
                sizes[pattern[i % pattern.len()] as usize],
                "run {i}"
            );
            parse_udp_frame(&out).unwrap_or_else(|e| panic!("run {i}: {e}"));
        }
        let mean = FrameSizes::Imix.mean_size();
        assert!((mean - (7.0 * 64.0 + 4.0 * 594.0 + 1518.0) / 12.0).abs() < 1e-9);
    }

    #[test]
    fn short_or_foreign_frames_are_left_alone() {
        on_one_flow_of_each_family(
            "short_or_foreign_frames_are_left_alone",
            |v6, s, g, tmpl| {
                let words = if v6 { 64 } else { 48 };
                let before = g.state().unwrap().errors;
                let fx: Vec<Fixture> = truncations(&tmpl, words)
                    .map(|(n, cut)| {
                        Fixture::new(
                            format!("v6={v6} cut at {n}"),
                            cut,
                            XdpAction::Drop,
                            Expect::Unchanged,
                        )
                    })
                    .collect();
                assert_passed(&format!("v6={v6}"), &check_all(g.prog(), &fx));
                assert_eq!(
                    g.state().unwrap().errors - before,
                    fx.len() as u64,
                    "every short frame counted as an error"
                );

                // Attached to lo as the dispatcher anchor, it must pass real frames.
                let mut other = s.clone();
                other.ifindex = 4242;
                let g2 = GenProgram::load(&other).unwrap();
                check(
                    g2.prog(),
                    &Fixture::new(
                        "frame on another interface",
                        tmpl,
                        XdpAction::Pass,
                        Expect::Unchanged,
                    ),
                )
                .unwrap();
            },
        );
    }

    #[test]
    fn bad_setups_are_refused() {
        let mut s = setup(true, FrameSizes::Fixed(64), 1, false);
        assert!(s
            .config()
            .unwrap_err()
            .to_string()
            .contains("outside 78..=1518 for IPv6"));
        s.sizes = FrameSizes::Fixed(2000);
        assert!(s.config().is_err());
        s.sizes = FrameSizes::Fixed(128);
        s.flows = 0;
        assert!(s.config().unwrap_err().to_string().contains("flows"));
        assert!("jumbo".parse::<FrameSizes>().is_err());
    }
}
