//! Control side of `bpf/lab/sink.bpf.c`, the receiver-side counting sink.
use std::path::Path;

use libbpf_rs::MapCore;
pub use libbpf_rs::MapHandle;

use crate::error::{BpfError, Result};
use crate::fixture::XdpAction;
use crate::link::xdp_program;
use crate::loader::{open_and_load, rodata};
use crate::maps;
use crate::skel::sink::{SinkSkel, SinkSkelBuilder};

pub use crate::skel::sink::types::sink_stats as SinkStats;

xdp_program!(SinkProgram, SinkSkel, sink);

impl SinkProgram {
    /// Loads the sink; `verdict` is Drop for a drop sink, Pass when a socket
    /// behind it must receive the packets.
    pub fn load(verdict: XdpAction) -> Result<SinkProgram> {
        if !matches!(verdict, XdpAction::Drop | XdpAction::Pass) {
            return Err(BpfError::Invalid(format!(
                "sink verdict {verdict:?}: expected Drop or Pass"
            )));
        }
        let skel = open_and_load::<SinkSkelBuilder>("sink.bpf.o", |open| {
            rodata(open.maps.rodata_data.as_deref_mut(), "sink.bpf.o")?.sink_verdict =
                verdict.raw();
            Ok(())
        })?;
        Ok(SinkProgram { skel })
    }

    pub fn stats(&self) -> Result<SinkStats> {
        read_stats(&self.skel.maps.sink_stats_map)
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
    maps::read_pinned_per_cpu(path, &0u32.to_ne_bytes(), "is a sink running?")
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

/// Reads a sink's counters map: its own, or one found by `attached_sink_stats`.
pub fn read_stats(map: &impl MapCore) -> Result<SinkStats> {
    maps::read_per_cpu(map, &0u32.to_ne_bytes())
}

/// UDP checksum variants of a fixture frame for the programs that check
/// checksums (sink, replycheck): a change to a frame from `fixture::frames`,
/// either family, untagged.
#[cfg(test)]
pub(crate) mod checksums {
    use peregrine_wire::{checksum, ipproto, parse_udp_frame};

    /// Where the UDP checksum is and the partial value a CHECKSUM_PARTIAL
    /// frame would carry there: the folded pseudo-header sum, not
    /// complemented.
    fn partial_at(frame: &[u8]) -> (usize, u16) {
        let p = parse_udp_frame(frame).expect("a valid UDP frame to change");
        let l4 = p.l4_offset;
        let ulen = u16::from_be_bytes([frame[l4 + 4], frame[l4 + 5]]);
        let sum = checksum::pseudo_header_sum(p.src_ip, p.dst_ip, ipproto::UDP, ulen.into());
        (l4 + 6, !checksum::finish(sum))
    }

    fn with_udp_checksum(frame: &[u8], at: usize, v: u16) -> Vec<u8> {
        let mut f = frame.to_vec();
        f[at..at + 2].copy_from_slice(&v.to_be_bytes());
        f
    }

    /// `frame` as a local sender at default veth offloads leaves it.
    pub(crate) fn partial(frame: &[u8]) -> Vec<u8> {
        let (at, v) = partial_at(frame);
        with_udp_checksum(frame, at, v)
    }

    /// `frame` with a UDP checksum that is neither the full nor the
    /// partial value (nor zero).
    pub(crate) fn wrong(frame: &[u8]) -> Vec<u8> {
        let (at, partial) = partial_at(frame);
        let full = u16::from_be_bytes([frame[at], frame[at + 1]]);
        let v = (1u16..)
            .map(|d| partial.wrapping_add(d))
            .find(|v| ![0, full, partial].contains(v))
            .expect("a wrong value");
        with_udp_checksum(frame, at, v)
    }

    /// `frame` with a zero UDP checksum ("none": IPv4 only).
    pub(crate) fn zero(frame: &[u8]) -> Vec<u8> {
        let (at, _) = partial_at(frame);
        with_udp_checksum(frame, at, 0)
    }
}

/// BPF_PROG_RUN fixtures: frame in, verdict and frame out, and the exact
/// counter change each frame must cause.
#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::frames::{
        arp, bad_ip4_checksum, garbage, ip4_fragment, ip4_options, ip_first_byte, udp_ports, vlan,
        with_protocol,
    };
    use crate::fixture::{assert_counters, gen_setup, truncations, Case, Expect, Fixture};
    use crate::gen::FrameSizes;
    use crate::testing::privileged;
    use crate::XdpProgram;
    use peregrine_wire::{ethertype, ipproto};

    /// What one frame adds to the counters.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Counted {
        Generator,
        Other,
        Malformed,
        /// Carries the magic, checksum wrong: dropped whatever the verdict.
        BadChecksum,
    }

    /// A frame exactly as the generator makes it (`len` without FCS).
    fn gen_frame(v6: bool, len: usize) -> Vec<u8> {
        gen_setup(v6, FrameSizes::Fixed(len + 4), 1, false)
            .frame(len + 4)
            .unwrap()
    }

    fn tagged(frame: &[u8]) -> Vec<u8> {
        vlan(frame, ethertype::VLAN, 42)
    }

    fn qinq(frame: &[u8]) -> Vec<u8> {
        vlan(&tagged(frame), ethertype::QINQ, 7)
    }

    /// The table: name, frame, how it is counted.
    fn table() -> Vec<(String, Vec<u8>, Counted)> {
        use Counted::*;
        let v4 = gen_frame(false, 60);
        let v6 = gen_frame(true, 74);
        // IPv4 with 4 bytes of options (NOPs): the sink must skip them.
        let opt = ip4_options(&gen_frame(false, 60), 1);
        let mut t: Vec<(String, Vec<u8>, Counted)> = vec![
            ("ipv4 generator frame".into(), v4.clone(), Generator),
            ("ipv6 generator frame".into(), v6.clone(), Generator),
            (
                "ipv4 1514-byte generator frame".into(),
                gen_frame(false, 1514),
                Generator,
            ),
            (
                "802.1Q-tagged ipv4 generator frame".into(),
                tagged(&v4),
                Generator,
            ),
            (
                "802.1Q-tagged ipv6 generator frame".into(),
                tagged(&v6),
                Generator,
            ),
            // Parsed with parse.h's rule: two tags (was: one).
            ("QinQ ipv4 generator frame".into(), qinq(&v4), Generator),
            ("QinQ ipv6 generator frame".into(), qinq(&v6), Generator),
            (
                "three tags".into(),
                vlan(&qinq(&v4), ethertype::QINQ, 9),
                Other,
            ),
            (
                "udp without the magic".into(),
                udp_ports(
                    ("198.18.0.1", "198.18.0.2"),
                    (1024, 9),
                    60,
                    b"hello, not ours!",
                ),
                Other,
            ),
            (
                "udp payload too short for meta".into(),
                udp_ports(("198.18.0.1", "198.18.0.2"), (1024, 9), 50, &[]),
                Other,
            ),
            ("ipv4 with options".into(), opt.clone(), Generator),
            ("ipv4 fragment".into(), ip4_fragment(&v4, true, 1), Other),
            // Any fragment is not a whole datagram (was: a first fragment
            // carrying the magic counted as the generator's).
            (
                "ipv4 first fragment".into(),
                ip4_fragment(&v4, true, 0),
                Other,
            ),
            (
                "ipv4 later fragment".into(),
                ip4_fragment(&v4, false, 16),
                Other,
            ),
            (
                "ipv4 header length below 5 words".into(),
                ip_first_byte(&v4, 0x44),
                Other,
            ),
            (
                "ipv4 ethertype, version 6".into(),
                ip_first_byte(&v4, 0x65),
                Other,
            ),
            // A total length shorter than the header (was: counted).
            (
                "ipv4 total length below its header".into(),
                {
                    let mut f = v4.clone();
                    f[16..18].copy_from_slice(&19u16.to_be_bytes());
                    f
                },
                Other,
            ),
            ("ipv4 tcp".into(), with_protocol(&v4, ipproto::TCP), Other),
            (
                "ipv6 icmp".into(),
                with_protocol(&v6, ipproto::ICMPV6),
                Other,
            ),
            ("arp".into(), arp(), Other),
            ("garbage".into(), garbage(64), Other),
        ];
        // Issue 9: the checksum rule of wire's parse_udp_frame (full, or
        // exactly the partial pseudo-header value; zero only on IPv4).
        use super::checksums::{partial, wrong, zero};
        let v6_big = gen_frame(true, 1514);
        for (fam, f) in [("ipv4", &v4), ("ipv6", &v6), ("ipv6 1514-byte", &v6_big)] {
            t.push((format!("{fam} partial checksum"), partial(f), Generator));
            t.push((format!("{fam} wrong checksum"), wrong(f), BadChecksum));
            t.push((
                format!("802.1Q {fam} partial checksum"),
                tagged(&partial(f)),
                Generator,
            ));
            t.push((
                format!("802.1Q {fam} wrong checksum"),
                tagged(&wrong(f)),
                BadChecksum,
            ));
        }
        t.push(("ipv4 zero checksum (none)".into(), zero(&v4), Generator));
        t.push(("ipv6 zero checksum".into(), zero(&v6), BadChecksum));
        t.push((
            "ipv4 1514-byte wrong checksum".into(),
            wrong(&gen_frame(false, 1514)),
            BadChecksum,
        ));
        t.push((
            "ipv4 wrong header checksum".into(),
            bad_ip4_checksum(&v4),
            BadChecksum,
        ));
        t.push((
            "ipv4 with options, wrong checksum".into(),
            ip4_options(&wrong(&v4), 1),
            BadChecksum,
        ));
        // A payload byte changed: the full checksum no longer holds.
        let mut flipped = gen_frame(false, 200);
        flipped[150] ^= 1;
        t.push(("ipv4 payload byte flipped".into(), flipped, BadChecksum));
        let mut flipped = partial(&gen_frame(true, 201));
        flipped[150] ^= 1;
        // The partial value covers no data: a flipped byte still passes, as
        // it does through the kernel's sockets (nothing verifies it).
        t.push((
            "ipv6 odd length, partial, payload changed".into(),
            flipped,
            Generator,
        ));

        // Truncated at and between every header boundary and inside the
        // payload: a frame shorter than the headers or the datagram it
        // announces is malformed, never delivered traffic.
        for (label, frame) in [
            ("ipv4", v4.clone()),
            ("ipv6", v6.clone()),
            ("vlan ipv4", tagged(&v4)),
            ("vlan ipv6", tagged(&v6)),
            ("qinq ipv4", qinq(&v4)),
            ("ipv4 options", opt),
        ] {
            for (n, cut) in truncations(&frame, frame.len()) {
                t.push((format!("{label} cut at {n} bytes"), cut, Malformed));
            }
        }
        t
    }

    /// Counter deltas: packets, bytes, gen_packets, gen_bytes, malformed,
    /// bad_checksum.
    type Deltas = [u64; 6];

    /// Loads a sink with `verdict` and runs the table on it (the drop and
    /// pass sinks differ only in the verdict for generator frames).
    fn check_with_counters(test: &str, verdict: XdpAction) {
        if !privileged(test) {
            return;
        }
        let prog = &SinkProgram::load(verdict).unwrap();
        let cases: Vec<Case<Deltas>> = table()
            .into_iter()
            .map(|(name, input, counted)| {
                let len = input.len() as u64;
                let (v, effect) = match counted {
                    Counted::Generator => (verdict, [1, len, 1, len, 0, 0]),
                    Counted::Other => (XdpAction::Pass, [1, len, 0, 0, 0, 0]),
                    Counted::Malformed => (XdpAction::Pass, [1, len, 0, 0, 1, 0]),
                    Counted::BadChecksum => (XdpAction::Drop, [1, len, 0, 0, 0, 1]),
                };
                Case::new(Fixture::new(name, input, v, Expect::Unchanged), effect)
            })
            .collect();
        assert_counters(
            &format!("{verdict:?} sink"),
            prog.prog(),
            &cases,
            || prog.stats().unwrap(),
            |s| {
                [
                    s.packets,
                    s.bytes,
                    s.gen_packets,
                    s.gen_bytes,
                    s.malformed,
                    s.bad_checksum,
                ]
            },
        );
    }

    #[test]
    fn drop_sink_fixtures() {
        check_with_counters("drop_sink_fixtures", XdpAction::Drop);
    }

    #[test]
    fn pass_sink_fixtures() {
        check_with_counters("pass_sink_fixtures", XdpAction::Pass);
    }

    #[test]
    fn sink_refuses_other_verdicts() {
        assert!(SinkProgram::load(XdpAction::Tx).is_err());
    }
}
