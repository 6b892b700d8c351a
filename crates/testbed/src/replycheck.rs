//! Control side of `bpf/lab/replycheck.bpf.c`: checks, counts and times every
//! reply to the live-frame generator's function requests, in XDP on the
//! client's interface.
use crate::skel::replycheck::types::{replycheck_function, replycheck_limits};
use crate::skel::replycheck::{ReplycheckSkel, ReplycheckSkelBuilder};
use peregrine_bpf::error::{BpfError, Result};
use peregrine_bpf::link::{Hook, Link};
use peregrine_bpf::loader::{open_and_load, rodata};
use peregrine_bpf::maps;
use peregrine_bpf::tcx::TcxDirection;
use peregrine_bpf::xdp_program;

pub use crate::skel::replycheck::types::replycheck_stats as ReplyStats;

pub use peregrine_bpf::latency::{bucket_of, bucket_range, BUCKETS};
/// Longest payload the checker reads (bytes).
pub const MAX_PAYLOAD: usize = replycheck_limits::REPLYCHECK_MAX_WORDS.0 as usize * 8;
/// Shortest payload: the generator's meta (magic, sequence, send time).
pub const MIN_PAYLOAD: usize = replycheck_limits::REPLYCHECK_MIN_PAYLOAD.0 as usize;

/// The function whose replies are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckedFunction {
    Echo,
    Reverse,
}

impl CheckedFunction {
    /// The checkable built-in called `name`, if it is one.
    pub fn by_name(name: &str) -> Option<CheckedFunction> {
        match name {
            "echo" => Some(CheckedFunction::Echo),
            "reverse" => Some(CheckedFunction::Reverse),
            _ => None,
        }
    }

    fn raw(self) -> u32 {
        match self {
            CheckedFunction::Echo => replycheck_function::REPLYCHECK_ECHO.0,
            CheckedFunction::Reverse => replycheck_function::REPLYCHECK_REVERSE.0,
        }
    }
}

impl ReplyStats {
    /// Replies from the server port that were not correct.
    pub fn wrong(&self) -> u64 {
        self.bad_length + self.bad_payload + self.bad_checksum + self.truncated
    }
}

xdp_program!(ReplyCheckProgram, ReplycheckSkel, replycheck);

impl ReplyCheckProgram {
    /// Checks replies from UDP `server_port` to requests of `payload_len`
    /// bytes made by the generator (stamped).
    pub fn load(
        server_port: u16,
        payload_len: usize,
        function: CheckedFunction,
    ) -> Result<ReplyCheckProgram> {
        if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&payload_len) {
            return Err(BpfError::Invalid(format!(
                "checked payload of {payload_len} bytes: expected {MIN_PAYLOAD}..={MAX_PAYLOAD}"
            )));
        }
        let skel = open_and_load::<ReplycheckSkelBuilder>("replycheck.bpf.o", |open| {
            let cfg = &mut rodata(open.maps.rodata_data.as_deref_mut(), "replycheck.bpf.o")?.cfg;
            cfg.server_port = server_port.to_be();
            cfg.payload_len = payload_len as u16;
            cfg.function = function.raw();
            Ok(())
        })?;
        Ok(ReplyCheckProgram { skel })
    }

    /// The same check as a tc program.
    pub fn tc_prog(&self) -> &libbpf_rs::ProgramMut<'static> {
        &self.skel.progs.replycheck_tc
    }

    /// Checks at tcx ingress: on veth, cheaper for the sender than XDP, which
    /// copies every skb into an XDP frame first.
    pub fn attach_tcx(&self, iface: &str) -> Result<Link> {
        Link::attach(self.tc_prog(), iface, Hook::Tcx(TcxDirection::Ingress))
    }

    pub fn stats(&self) -> Result<ReplyStats> {
        maps::read_per_cpu(&self.skel.maps.replycheck_stats_map, &0u32.to_ne_bytes())
    }

    /// Replies per latency bucket (see `bucket_range`), summed over CPUs.
    pub fn latency_buckets(&self) -> Result<Vec<u64>> {
        (0..BUCKETS)
            .map(|b| maps::read_per_cpu(&self.skel.maps.replycheck_latency, &b.to_ne_bytes()))
            .collect()
    }
}

#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::frames::{
        arp, bad_ip4_checksum, bad_udp_checksum, garbage, ip4_fragment, spec, udp, with_protocol,
    };
    use crate::fixture::{assert_passed, check_table, truncations, Case, Expect, Fixture};
    use crate::gen::PEREGRINE_MAGIC;
    use crate::skel::gen::types::gen_meta;
    use crate::testing::privileged;
    use peregrine_bpf::pod::Pod;
    use peregrine_bpf::skel::uapi::types::peregrine_tc_act;
    use peregrine_bpf::XdpAction;
    use peregrine_bpf::XdpProgram;
    use peregrine_wire::{ipproto, MacAddr, UdpFrameSpec};

    const SERVER_PORT: u16 = 1232;
    const TC_ACT_OK: u32 = peregrine_tc_act::PG_TC_ACT_OK.0;
    const TC_ACT_SHOT: u32 = peregrine_tc_act::PG_TC_ACT_SHOT.0;

    /// The generator's request payload: meta, then zeros.
    fn request(len: usize, seq: u32, tx_ns: u64) -> Vec<u8> {
        let meta = gen_meta {
            magic: PEREGRINE_MAGIC,
            seq,
            tx_ns,
        };
        let mut p = vec![0u8; len];
        p[..MIN_PAYLOAD].copy_from_slice(meta.as_bytes());
        p
    }

    fn reply(v6: bool, src_port: u16, payload: &[u8]) -> Vec<u8> {
        // From the server back to the client the generator's requests came from.
        let server_to_client = match v6 {
            true => spec("2001:db8::2", "2001:db8::1"),
            false => spec("198.18.0.2", "198.18.0.1"),
        };
        let spec = UdpFrameSpec {
            src_mac: MacAddr::local(2),
            dst_mac: MacAddr::local(1),
            src_port,
            dst_port: 40000,
            ..server_to_client
        };
        let spec = UdpFrameSpec {
            frame_len: spec.min_frame_len() + payload.len(),
            ..spec
        };
        udp(&spec, payload)
    }

    /// Counter deltas of one run: replies, bad_payload, bad_checksum,
    /// bad_length, truncated.
    type Deltas = (u64, u64, u64, u64, u64);

    fn deltas(b: &ReplyStats, a: &ReplyStats) -> Deltas {
        (
            a.replies - b.replies,
            a.bad_payload - b.bad_payload,
            a.bad_checksum - b.bad_checksum,
            a.bad_length - b.bad_length,
            a.truncated - b.truncated,
        )
    }

    fn reversed(mut p: Vec<u8>) -> Vec<u8> {
        p.reverse();
        p
    }

    /// Every outcome is counted exactly once; correct replies of either
    /// function and family, odd and even sizes, are dropped after counting;
    /// anything else from the server port is dropped as wrong; other traffic
    /// is passed untouched.
    #[test]
    fn every_reply_is_checked_and_counted() {
        if !privileged("every_reply_is_checked_and_counted") {
            return;
        }
        let now = 1_000; // earlier than any run: latency recorded
        for (function, len) in [
            (CheckedFunction::Reverse, 200),
            (CheckedFunction::Reverse, 201),
            (CheckedFunction::Echo, 200),
            (CheckedFunction::Echo, 1451),
        ] {
            let prog = ReplyCheckProgram::load(SERVER_PORT, len, function).unwrap();
            let answer = |p: Vec<u8>| match function {
                CheckedFunction::Reverse => reversed(p),
                CheckedFunction::Echo => p,
            };
            let drop =
                |n: String, f: Vec<u8>| Fixture::new(n, f, XdpAction::Drop, Expect::Unchanged);
            let pass =
                |n: String, f: Vec<u8>| Fixture::new(n, f, XdpAction::Pass, Expect::Unchanged);
            let tag = format!("{function:?} {len}");
            let mut good = vec![];
            for v6 in [false, true] {
                for seq in [0, 7, u32::MAX] {
                    good.push(drop(
                        format!("{tag} v6={v6} seq {seq}"),
                        reply(
                            v6,
                            SERVER_PORT,
                            &answer(request(len, seq, now + u64::from(seq))),
                        ),
                    ));
                }
            }
            // Issue 9: a server on kernel sockets at default veth offloads
            // replies with the partial pseudo-header checksum: a reply.
            {
                use crate::fixture::checksums::partial;
                for v6 in [false, true] {
                    good.push(drop(
                        format!("{tag} v6={v6} partial checksum"),
                        partial(&reply(v6, SERVER_PORT, &answer(request(len, 5, now)))),
                    ));
                }
            }
            let ok = reply(false, SERVER_PORT, &answer(request(len, 3, now)));
            let mut wrong_payload = vec![];
            // A request's bytes sent back unchanged by a reversing server (or
            // the other way round), one flipped zero byte, a wrong magic.
            let other = match function {
                CheckedFunction::Reverse => request(len, 3, now),
                CheckedFunction::Echo => reversed(request(len, 3, now)),
            };
            wrong_payload.push(drop(
                format!("{tag} other function"),
                reply(false, SERVER_PORT, &other),
            ));
            // The zeros after the meta: the first, a middle and the last
            // zero byte of the reply (the meta is at the front of an echo
            // and at the back of a reversal), each flipped in its own case.
            let zeros = match function {
                CheckedFunction::Echo => MIN_PAYLOAD..len,
                CheckedFunction::Reverse => 0..len - MIN_PAYLOAD,
            };
            let flips = [zeros.start, (zeros.start + zeros.end) / 2, zeros.end - 1];
            for at in flips {
                let mut p = answer(request(len, 3, now));
                assert_eq!(p[at], 0, "{tag}: byte {at} is one of the zeros");
                p[at] = 0x40;
                wrong_payload.push(drop(
                    format!("{tag} byte {at} not zero"),
                    reply(false, SERVER_PORT, &p),
                ));
            }
            // Other function, three flipped zeros, wrong magic: every case.
            assert_eq!(wrong_payload.len(), 4, "{tag}");
            let mut bad_magic = request(len, 3, now);
            bad_magic[0] ^= 1;
            wrong_payload.push(drop(
                format!("{tag} magic"),
                reply(true, SERVER_PORT, &answer(bad_magic)),
            ));

            let mut bad_sum = vec![];
            bad_sum.push(drop(format!("{tag} udp checksum"), bad_udp_checksum(&ok)));
            // Neither full nor partial, v4 and v6 (issue 9).
            for v6 in [false, true] {
                let r = reply(v6, SERVER_PORT, &answer(request(len, 9, now)));
                bad_sum.push(drop(
                    format!("{tag} v6={v6} neither full nor partial"),
                    crate::fixture::checksums::wrong(&r),
                ));
            }
            bad_sum.push(drop(format!("{tag} ip checksum"), bad_ip4_checksum(&ok)));
            // The checksum covers the meta bytes carried back.
            let mut seq_changed = ok.clone();
            let seq_at = match function {
                CheckedFunction::Reverse => 42 + len - 6,
                CheckedFunction::Echo => 42 + 5,
            };
            seq_changed[seq_at] ^= 0x01;
            bad_sum.push(drop(format!("{tag} meta changed"), seq_changed));

            let mut bad_len = vec![];
            bad_len.push(drop(
                format!("{tag} shorter payload"),
                reply(false, SERVER_PORT, &answer(request(len - 1, 3, now))),
            ));
            bad_len.push(drop(
                format!("{tag} v6 longer payload"),
                reply(true, SERVER_PORT, &answer(request(len + 1, 3, now))),
            ));

            let mut cut = vec![];
            for (n, f) in truncations(&ok, ok.len()).filter(|(n, _)| *n >= 42) {
                cut.push(drop(format!("{tag} cut at {n}"), f));
            }

            let mut others = vec![
                pass(
                    format!("{tag} other port"),
                    reply(false, 53, &answer(request(len, 3, now))),
                ),
                pass(format!("{tag} garbage"), garbage(64)),
                pass(format!("{tag} arp"), arp()),
            ];
            others.push(pass(format!("{tag} tcp"), with_protocol(&ok, ipproto::TCP)));
            others.push(pass(format!("{tag} fragment"), ip4_fragment(&ok, true, 0)));
            // Cut inside the UDP header: not recognisably a reply.
            for (n, f) in truncations(&ok, 42) {
                others.push(pass(format!("{tag} cut at {n}"), f));
            }

            // Each group with the one counter its frames move.
            let groups: [(&Vec<Fixture>, Deltas); 6] = [
                (&good, (1, 0, 0, 0, 0)),
                (&wrong_payload, (0, 1, 0, 0, 0)),
                (&bad_sum, (0, 0, 1, 0, 0)),
                (&bad_len, (0, 0, 0, 1, 0)),
                (&cut, (0, 0, 0, 0, 1)),
                (&others, (0, 0, 0, 0, 0)),
            ];
            let table: Vec<Case<Deltas>> = groups
                .iter()
                .flat_map(|(fx, effect)| fx.iter().map(|f| Case::new(f.clone(), *effect)))
                .collect();
            let bad = check_table(prog.prog(), &table, || prog.stats().unwrap(), deltas);
            assert_passed(&tag, &bad);
            let all: Vec<Fixture> = table.into_iter().map(|c| c.fixture).collect();
            // The tc program gives the same verdicts (TC_ACT_SHOT for every
            // reply, TC_ACT_OK for the rest) and counts into the same maps.
            // (BPF_PROG_RUN refuses tc frames cut inside the network header:
            // those are passed, uncounted, cases anyway.)
            for fx in all.iter().filter(|f| f.input.len() >= 14 + 40) {
                let (ret, out) = crate::fixture::run_once(prog.tc_prog(), &fx.input)
                    .unwrap_or_else(|e| panic!("tc: {}: {e}", fx.name));
                let want = if fx.verdict == XdpAction::Drop {
                    TC_ACT_SHOT
                } else {
                    TC_ACT_OK
                };
                assert_eq!(ret, want, "tc: {}", fx.name);
                assert_eq!(out, fx.input, "tc: {}", fx.name);
            }
            let s = prog.stats().unwrap();
            // Each frame ran in XDP, and in tc unless cut short of 54 bytes.
            let runs = |v: &[Fixture]| {
                v.len() as u64 + v.iter().filter(|f| f.input.len() >= 14 + 40).count() as u64
            };
            assert_eq!(
                (
                    good.len(),
                    wrong_payload.len(),
                    bad_sum.len(),
                    bad_len.len()
                ),
                (8, 5, 5, 2),
                "{tag}: every case built and run"
            );
            assert_eq!(s.replies, runs(&good), "{tag}");
            assert_eq!(s.bad_payload, runs(&wrong_payload), "{tag}");
            assert_eq!(s.bad_checksum, runs(&bad_sum), "{tag}");
            assert_eq!(s.bad_length, runs(&bad_len), "{tag}");
            assert_eq!(s.truncated, runs(&cut), "{tag}");
            let buckets = prog.latency_buckets().unwrap();
            assert_eq!(buckets.iter().sum::<u64>(), runs(&good), "{tag}");
        }
    }
}
