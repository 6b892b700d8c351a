//! Control side of `bpf/lab/sink.bpf.c`, the receiver-side counting sink.
use std::mem::MaybeUninit;
use std::path::Path;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
pub use libbpf_rs::MapHandle;
use libbpf_rs::{MapCore, MapFlags};

use crate::error::{BpfError, Result};
use crate::fixture::XdpAction;
use crate::loader::Loaded;
use crate::skel::sink::{SinkSkel, SinkSkelBuilder};
use crate::xdp::{XdpLink, XdpMode};

pub use crate::skel::sink::types::sink_stats as SinkStats;

/// Sum of per-CPU `sink_stats` values.
pub fn sum_stats(per_cpu: &[Vec<u8>]) -> SinkStats {
    crate::pod::sum_per_cpu(per_cpu)
}

pub struct SinkProgram {
    skel: Loaded<SinkSkel<'static>>,
}

impl SinkProgram {
    /// Loads the sink; `verdict` is Drop for a drop sink, Pass when a socket
    /// behind it must receive the packets.
    pub fn load(verdict: XdpAction) -> Result<SinkProgram> {
        if !matches!(verdict, XdpAction::Drop | XdpAction::Pass) {
            return Err(BpfError::Invalid(format!(
                "sink verdict {verdict:?}: expected Drop or Pass"
            )));
        }
        let skel = Loaded::new(
            "sink.bpf.o",
            |storage: &'static mut MaybeUninit<libbpf_rs::OpenObject>| {
                let mut open = SinkSkelBuilder::default()
                    .open(storage)
                    .map_err(BpfError::libbpf("opening sink.bpf.o"))?;
                let rodata = open
                    .maps
                    .rodata_data
                    .as_deref_mut()
                    .ok_or_else(|| BpfError::Invalid("sink.bpf.o has no rodata".into()))?;
                rodata.sink_verdict = verdict.raw();
                open.load().map_err(BpfError::libbpf("loading sink.bpf.o"))
            },
        )?;
        Ok(SinkProgram { skel })
    }

    pub fn prog(&self) -> &libbpf_rs::ProgramMut<'static> {
        &self.skel.progs.sink
    }

    pub fn attach(&self, iface: &str, mode: XdpMode) -> Result<XdpLink> {
        XdpLink::attach(self.prog(), iface, mode)
    }

    pub fn stats(&self) -> Result<SinkStats> {
        let v = self
            .skel
            .maps
            .sink_stats_map
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(BpfError::libbpf("reading sink_stats_map"))?
            .unwrap_or_default();
        Ok(sum_stats(&v))
    }

    /// Pins the counters at `path`, where [`read_pinned_stats`] reads them
    /// from another process for as long as the pin exists.
    pub fn pin_stats(&mut self, path: &Path) -> Result<()> {
        self.skel
            .maps
            .sink_stats_map
            .pin(path)
            .map_err(BpfError::libbpf(format!(
                "pinning sink counters at {}",
                path.display()
            )))
    }
}

/// Reads counters pinned by `SinkProgram::pin_stats`.
pub fn read_pinned_stats(path: &Path) -> Result<SinkStats> {
    let map = MapHandle::from_pinned_path(path).map_err(BpfError::libbpf(format!(
        "opening pinned sink counters {}",
        path.display()
    )))?;
    let v = map
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(BpfError::libbpf("reading pinned sink counters"))?
        .unwrap_or_default();
    Ok(sum_stats(&v))
}

/// Counters of a peregrine sink already attached to `ifindex` (in the calling
/// thread's namespace), e.g. the pass-through a data plane put on a veth
/// peer. None if no XDP program runs there or it is not our sink.
pub fn attached_sink_stats(ifindex: u32) -> Result<Option<MapHandle>> {
    let Some(id) = crate::xdp::attached_prog_id(ifindex)? else {
        return Ok(None);
    };
    // Safety: plain syscall wrappers; the fd is owned right after.
    let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if fd < 0 {
        return Ok(None);
    }
    // Safety: a non-negative return is a new fd we own.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut map_ids = [0u32; 8];
    // Safety: zeroed is the valid empty info struct.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    info.nr_map_ids = map_ids.len() as u32;
    info.map_ids = map_ids.as_mut_ptr() as u64;
    let mut len = std::mem::size_of_val(&info) as u32;
    // Safety: info and map_ids outlive the call; len is info's size.
    let rc = unsafe {
        libbpf_sys::bpf_prog_get_info_by_fd(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &mut info,
            &mut len,
        )
    };
    if rc < 0 {
        return Ok(None);
    }
    let name: Vec<u8> = info
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    if name != b"sink" {
        return Ok(None);
    }
    for &mid in map_ids.iter().take(info.nr_map_ids.min(8) as usize) {
        if let Ok(m) = MapHandle::from_map_id(mid) {
            if m.name() == "sink_stats_map" {
                return Ok(Some(m));
            }
        }
    }
    Ok(None)
}

/// Reads counters from a map found by `attached_sink_stats`.
pub fn read_stats(map: &MapHandle) -> Result<SinkStats> {
    let v = map
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(BpfError::libbpf("reading sink counters"))?
        .unwrap_or_default();
    Ok(sum_stats(&v))
}

/// BPF_PROG_RUN fixtures: frame in, verdict and frame out, and the exact
/// counter change each frame must cause.
#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::{check, truncations, Expect, Fixture};
    use crate::gen::{FrameSizes, GenSetup};
    use crate::testing::privileged;
    use peregrine_wire::{MacAddr, UdpFrameSpec};

    /// What one frame adds to the counters.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Counted {
        Generator,
        Other,
        Malformed,
    }

    fn spec(v6: bool, len: usize) -> UdpFrameSpec {
        let (s, d) = if v6 {
            ("2001:db8::1", "2001:db8::2")
        } else {
            ("198.18.0.1", "198.18.0.2")
        };
        UdpFrameSpec {
            src_mac: MacAddr::local(1),
            dst_mac: MacAddr::local(2),
            src_ip: s.parse().unwrap(),
            dst_ip: d.parse().unwrap(),
            src_port: 1024,
            dst_port: 9,
            ttl: 64,
            frame_len: len,
        }
    }

    /// A frame exactly as the generator makes it (`len` without FCS).
    fn gen_frame(v6: bool, len: usize) -> Vec<u8> {
        let setup = GenSetup {
            spec: spec(v6, 0),
            sizes: FrameSizes::Fixed(len + 4),
            flows: 1,
            stamp: false,
            latency_sample: 1,
            ifindex: 1,
            dry_run: false,
            vary: crate::gen::FlowVary::Source,
        };
        setup.frame(len + 4).unwrap()
    }

    fn vlan(frame: &[u8]) -> Vec<u8> {
        let mut f = frame[..12].to_vec();
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
        f.extend_from_slice(&frame[12..]);
        f
    }

    fn cases() -> Vec<(Fixture, Counted)> {
        let mut v = Vec::new();
        let mut add = |name: String, input: Vec<u8>, c: Counted| {
            v.push((
                Fixture::new(name, input, XdpAction::Drop, Expect::Unchanged),
                c,
            ));
        };
        add(
            "ipv4 generator frame".into(),
            gen_frame(false, 60),
            Counted::Generator,
        );
        add(
            "ipv6 generator frame".into(),
            gen_frame(true, 74),
            Counted::Generator,
        );
        add(
            "ipv4 1514-byte generator frame".into(),
            gen_frame(false, 1514),
            Counted::Generator,
        );
        add(
            "802.1Q-tagged ipv4 generator frame".into(),
            vlan(&gen_frame(false, 60)),
            Counted::Generator,
        );
        add(
            "802.1Q-tagged ipv6 generator frame".into(),
            vlan(&gen_frame(true, 74)),
            Counted::Generator,
        );
        add(
            "udp without the magic".into(),
            spec(false, 60).build(b"hello, not ours!").unwrap(),
            Counted::Other,
        );
        add(
            "udp payload too short for meta".into(),
            spec(false, 50).build(&[]).unwrap(),
            Counted::Other,
        );
        // IPv4 with 4 bytes of options (NOPs): the sink must skip them.
        let mut opt = gen_frame(false, 64);
        opt.insert(34, 0x01);
        opt.insert(34, 0x01);
        opt.insert(34, 0x01);
        opt.insert(34, 0x01);
        opt[14] = 0x46;
        opt.truncate(64);
        add("ipv4 with options".into(), opt.clone(), Counted::Generator);
        let mut frag = gen_frame(false, 60);
        frag[20] = 0x20; // more fragments, offset 0 is still a fragment
        frag[21] = 0x01;
        add("ipv4 fragment".into(), frag, Counted::Other);
        let mut bad_ihl = gen_frame(false, 60);
        bad_ihl[14] = 0x44;
        add(
            "ipv4 header length below 5 words".into(),
            bad_ihl,
            Counted::Other,
        );
        let mut bad_ver = gen_frame(false, 60);
        bad_ver[14] = 0x65;
        add("ipv4 ethertype, version 6".into(), bad_ver, Counted::Other);
        let mut tcp = gen_frame(false, 60);
        tcp[23] = 6;
        add("ipv4 tcp".into(), tcp, Counted::Other);
        let mut icmp6 = gen_frame(true, 74);
        icmp6[20] = 58;
        add("ipv6 icmp".into(), icmp6, Counted::Other);
        let mut arp = vec![0xffu8; 6];
        arp.extend_from_slice(&MacAddr::local(1).0);
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        add("arp".into(), arp, Counted::Other);
        add(
            "garbage".into(),
            (0..64u32)
                .map(|i| (i.wrapping_mul(151) ^ 0x5a) as u8)
                .collect(),
            Counted::Other,
        );

        // Truncated at and between every header boundary and inside the
        // payload: a frame shorter than the headers or the datagram it
        // announces is malformed, never delivered traffic.
        for (label, frame) in [
            ("ipv4", gen_frame(false, 60)),
            ("ipv6", gen_frame(true, 74)),
            ("vlan ipv4", vlan(&gen_frame(false, 60))),
            ("vlan ipv6", vlan(&gen_frame(true, 74))),
            ("ipv4 options", opt),
        ] {
            let full = frame.len();
            for (n, cut) in truncations(&frame, full) {
                add(format!("{label} cut at {n} bytes"), cut, Counted::Malformed);
            }
        }
        v
    }

    fn check_with_counters(prog: &SinkProgram, verdict: XdpAction) {
        let mut failures = Vec::new();
        for (mut fx, counted) in cases() {
            fx.verdict = if counted == Counted::Generator {
                verdict
            } else {
                XdpAction::Pass
            };
            let before = prog.stats().unwrap();
            if let Err(m) = check(prog.prog(), &fx) {
                failures.push(m.to_string());
                continue;
            }
            let after = prog.stats().unwrap();
            let len = fx.input.len() as u64;
            let want = match counted {
                Counted::Generator => (1, len, 1, len, 0),
                Counted::Other => (1, len, 0, 0, 0),
                Counted::Malformed => (1, len, 0, 0, 1),
            };
            let got = (
                after.packets - before.packets,
                after.bytes - before.bytes,
                after.gen_packets - before.gen_packets,
                after.gen_bytes - before.gen_bytes,
                after.malformed - before.malformed,
            );
            if got != want {
                failures.push(format!(
                    "fixture {:?}: counters {got:?}, expected {want:?}",
                    fx.name
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{} fixture(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    #[test]
    fn drop_sink_fixtures() {
        if !privileged("drop_sink_fixtures") {
            return;
        }
        check_with_counters(
            &SinkProgram::load(XdpAction::Drop).unwrap(),
            XdpAction::Drop,
        );
    }

    #[test]
    fn pass_sink_fixtures() {
        if !privileged("pass_sink_fixtures") {
            return;
        }
        check_with_counters(
            &SinkProgram::load(XdpAction::Pass).unwrap(),
            XdpAction::Pass,
        );
    }

    #[test]
    fn sink_refuses_other_verdicts() {
        assert!(SinkProgram::load(XdpAction::Tx).is_err());
    }
}
