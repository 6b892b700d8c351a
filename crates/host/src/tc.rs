//! Queueing disciplines and classes of the calling thread's namespace,
//! over rtnetlink (never through `tc`): root qdiscs read and removed, an
//! MQ root, HTB qdiscs and classes made and changed, FIFO leaves with a
//! packet limit, and each class's counters (TCA_STATS2, HTB's xstats);
//! clsact qdiscs and the cls_bpf filters in them (a tc program per device
//! made in one netlink request, where a tcx link waits out an RCU grace
//! period).
//!
//! Building a tree of thousands of classes goes in batches
//! (`Tc::apply`): many requests per sendmsg on a plain netlink socket, one
//! ACK asked for per batch (the kernel answers every failed request with
//! its error anyway), instead of one round trip per class and leaf. A
//! batch holds no more requests than the socket's receive buffer has room
//! for answers, and answers are matched to requests by sequence number.
//!
//! HTB's options are built here from the kernel's own structs
//! (`tc_htb_glob`, `tc_htb_opt`, `tc_ratespec`, `tc_fifo_qopt`, generated
//! by bindgen from <linux/pkt_sched.h> into `crate::uapi`). Rates go in
//! `tc_ratespec.rate` (bytes/s, capped at u32) and, above that, in
//! TCA_HTB_RATE64/CEIL64; the rate specs say "Ethernet link layer", so the
//! kernel needs no rate tables (it asks for TCA_HTB_RTAB/CTAB only from
//! specs of an unaware link layer, the old `tc`'s).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use netlink_packet_core::{
    DefaultNla, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_ECHO, NLM_F_EXCL,
};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcOption, TcStats2, TcXstats};
use netlink_packet_route::RouteNetlinkMessage;

use peregrine_bpf::pod::Pod;

use crate::error::{HostError, Result};
use crate::nl::NetlinkHere;
use crate::uapi;

/// The parent of a root qdisc (TC_H_ROOT, <linux/pkt_sched.h>).
const TC_H_ROOT: u32 = 0xffff_ffff;

/// A handle `major:minor` as one u32, as the kernel keeps it.
pub const fn handle(major: u16, minor: u16) -> u32 {
    ((major as u32) << 16) | minor as u32
}

/// The parent of an ingress or clsact qdisc (TC_H_INGRESS, TC_H_CLSACT).
const TC_H_INGRESS: u32 = 0xffff_fff1;
/// A clsact qdisc's handle, `ffff:`.
const CLSACT_HANDLE: u32 = 0xffff_0000;
/// The parent of filters at a clsact's ingress side (`tc filter add dev D
/// ingress`: TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)).
pub const CLSACT_INGRESS: u32 = 0xffff_fff2;
/// The parent of filters at a clsact's egress side.
pub const CLSACT_EGRESS: u32 = 0xffff_fff3;
/// ETH_P_ALL (<linux/if_ether.h>): a filter for every protocol.
const ETH_P_ALL: u16 = 0x0003;

/// A filter's `tcm_info`: its priority above, its protocol (network order)
/// below.
fn filter_info(prio: u16) -> u32 {
    (u32::from(prio) << 16) | u32::from(u16::from_ne_bytes(ETH_P_ALL.to_be_bytes()))
}

/// A cls_bpf filter as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfFilter {
    pub prio: u16,
    pub handle: u32,
    /// The program it runs (None: the kernel did not say).
    pub prog_id: Option<u32>,
    /// Its name (`TCA_BPF_NAME`).
    pub name: String,
}

/// A qdisc as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qdisc {
    pub handle: u32,
    pub parent: u32,
    pub kind: String,
}

impl Qdisc {
    /// Attached at the device's root.
    pub fn is_root(&self) -> bool {
        self.parent == TC_H_ROOT
    }
}

/// A class's counters: bytes and packets it sent, packets dropped (its
/// leaf queue full), its queue now, and how often it borrowed (HTB).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassStats {
    pub classid: u32,
    pub parent: u32,
    pub bytes: u64,
    pub packets: u64,
    pub drops: u64,
    pub overlimits: u64,
    pub qlen: u64,
    pub backlog: u64,
    pub borrows: u64,
}

/// One HTB class's settings: rates in bit/s, bursts in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HtbClass {
    pub classid: u32,
    pub parent: u32,
    pub rate_bps: u64,
    pub ceil_bps: u64,
    pub burst: u64,
    pub cburst: u64,
    /// 0 (first) .. 7.
    pub prio: u32,
    /// Bytes a class may send per round among its priority's peers.
    pub quantum: u32,
}

// Safety: bindgen's <linux/pkt_sched.h> structs below are repr(C), plain
// integers without padding (sizes checked in the tests), and accept every
// bit pattern.
unsafe impl Pod for uapi::tc_htb_glob {}
// Safety: as above.
unsafe impl Pod for uapi::tc_htb_opt {}
// Safety: as above.
unsafe impl Pod for uapi::tc_fifo_qopt {}
// Safety: as above.
unsafe impl Pod for uapi::tc_htb_xstats {}

/// The bytes of a plain kernel struct, for a netlink attribute.
fn bytes_of<T: Pod>(v: &T) -> Vec<u8> {
    v.as_bytes().to_vec()
}

fn opt(kind: u32, value: Vec<u8>) -> TcOption {
    TcOption::Other(DefaultNla::new(kind as u16, value))
}

/// A rate spec for `bps` (bit/s) on Ethernet: bytes/s, capped at u32 (the
/// 64-bit attribute carries more).
fn ratespec(bps: u64) -> uapi::tc_ratespec {
    uapi::tc_ratespec {
        linklayer: uapi::TC_LINKLAYER_ETHERNET as u8,
        rate: (bps / 8).clamp(1, u64::from(u32::MAX)) as u32,
        ..Default::default()
    }
}

/// Psched ticks (64 ns) `bytes` take at `bps`: HTB's bucket depth.
fn ticks(bytes: u64, bps: u64) -> u32 {
    let ns = (bytes as u128 * 8 * 1_000_000_000) / u128::from(bps.max(1));
    (ns >> 6).min(u128::from(u32::MAX)) as u32
}

/// One change of a batch (`Tc::apply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcChange {
    /// `Tc::set_htb_class`.
    HtbClass {
        ifindex: u32,
        class: HtbClass,
        create: bool,
    },
    /// `Tc::set_pfifo`.
    Pfifo {
        ifindex: u32,
        parent: u32,
        major: u16,
        limit: u32,
        change: bool,
    },
}

/// Bytes of requests per sendmsg of a batch: well under a netlink
/// socket's default send buffer (net.core.wmem_default, 208 KiB), which
/// bounds one message of the socket.
const BATCH_BYTES: usize = 32 * 1024;
/// Receive-buffer bytes one answer of a batch is counted at, with room to
/// spare: the kernel queues the answers to every request of one sendmsg
/// before the sender can read any, and charges each its buffer's true
/// size (832 bytes measured for an error answer on Linux 6.18 x86_64, not
/// its 36), so a batch of more requests than the buffer has room for
/// answers to would have the answers past that dropped and the read fail
/// with ENOBUFS instead of telling the first error.
const ANSWER_ROOM: usize = 2048;
/// Requests per sendmsg of a batch at most, whatever the buffer.
const BATCH_REQUESTS: usize = 256;
/// How long `Tc::apply` waits for the kernel's answer to a batch.
const BATCH_TIMEOUT_S: i64 = 10;
/// `NLMSG_ERROR` (<linux/netlink.h>): an error, or the ACK (code 0).
const NLMSG_ERROR: u16 = 2;

/// rtnetlink for tc in the calling thread's namespace.
pub struct Tc {
    nl: NetlinkHere,
    /// A plain socket for batches (`apply`), opened with `nl` (in the
    /// opening thread's namespace).
    raw: std::cell::OnceCell<rtnetlink::sys::Socket>,
    /// Requests per sendmsg of a batch: as many as `raw`'s receive buffer
    /// has room for answers to (`ANSWER_ROOM`).
    per_send: std::cell::Cell<usize>,
    seq: std::cell::Cell<u32>,
    /// The cookie of the namespace `nl` works in.
    netns_cookie: u64,
}

impl Tc {
    pub fn open() -> Result<Tc> {
        let tc = Tc {
            nl: NetlinkHere::open()?,
            raw: std::cell::OnceCell::new(),
            per_send: std::cell::Cell::new(1),
            seq: std::cell::Cell::new(1),
            netns_cookie: crate::netns::cookie()?,
        };
        // In the namespace of the opening thread, as `nl`.
        tc.raw()?;
        Ok(tc)
    }

    fn raw(&self) -> Result<&rtnetlink::sys::Socket> {
        if let Some(s) = self.raw.get() {
            return Ok(s);
        }
        let err = |e: std::io::Error| HostError::Netlink(format!("opening netlink for tc: {e}"));
        let mut s =
            rtnetlink::sys::Socket::new(rtnetlink::sys::constants::NETLINK_ROUTE).map_err(err)?;
        s.bind_auto().map_err(err)?;
        s.connect(&rtnetlink::sys::SocketAddr::new(0, 0))
            .map_err(err)?;
        // An error answer is its code and the request's header alone.
        s.set_cap_ack(true).map_err(err)?;
        nix::sys::socket::setsockopt(
            &s,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(BATCH_TIMEOUT_S, 0),
        )
        .map_err(|e| err(e.into()))?;
        let rcvbuf = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::RcvBuf)
            .map_err(|e| err(e.into()))?;
        self.per_send
            .set((rcvbuf / ANSWER_ROOM).clamp(1, BATCH_REQUESTS));
        Ok(self.raw.get_or_init(|| s))
    }

    /// Makes `changes` in order, in batches (see the module's text): far
    /// fewer round trips than one call each, for the thousands of classes
    /// of a large tree. The first request the kernel refuses is the
    /// error; the requests after it in its batch were still tried, and
    /// no batch after it is sent.
    pub fn apply(&self, changes: &[TcChange]) -> Result<()> {
        let sock = self.raw()?;
        let per_send = self.per_send.get();
        let mut buf: Vec<u8> = Vec::with_capacity(BATCH_BYTES + 4096);
        // (sequence number, what) of each request in `buf`.
        let mut sent: Vec<(u32, &'static str)> = Vec::new();
        for (k, c) in changes.iter().enumerate() {
            let last_at = buf.len();
            sent.push(self.push_request(&mut buf, c));
            if buf.len() >= BATCH_BYTES || sent.len() >= per_send || k + 1 == changes.len() {
                Self::send_batch(sock, &mut buf, last_at, &sent)?;
                buf.clear();
                sent.clear();
            }
        }
        Ok(())
    }

    /// Appends the request `c` is to `buf` under the next sequence
    /// number (NLM_F_ACK left to `send_batch`): that number and what the
    /// request does.
    fn push_request(&self, buf: &mut Vec<u8>, c: &TcChange) -> (u32, &'static str) {
        let (msg, flags, what) = Self::request_of(c);
        let seq = self.seq.get();
        self.seq.set(seq.wrapping_add(1));
        let mut m = netlink_packet_core::NetlinkMessage::from(msg);
        m.header.flags = netlink_packet_core::NLM_F_REQUEST | flags;
        m.header.sequence_number = seq;
        m.finalize();
        let len = m.buffer_len();
        let at = buf.len();
        buf.resize(at + len.next_multiple_of(4), 0);
        m.serialize(&mut buf[at..at + len]);
        (seq, what)
    }

    /// Sends the requests in `buf` at once, the last (at `last_at`) with
    /// NLM_F_ACK, and reads answers up to that one's: the first error
    /// among them is the error. Answers to requests of no batch of this
    /// call (left by one that gave up reading: a timeout, a failed
    /// receive) are skipped.
    fn send_batch(
        sock: &rtnetlink::sys::Socket,
        buf: &mut [u8],
        last_at: usize,
        sent: &[(u32, &'static str)],
    ) -> Result<()> {
        let (Some(&(first_seq, _)), Some(&(last_seq, last_what))) = (sent.first(), sent.last())
        else {
            return Ok(());
        };
        // Sequence numbers run on (wrapping) from batch to batch.
        let ours = |seq: u32| seq.wrapping_sub(first_seq) <= last_seq.wrapping_sub(first_seq);
        // nlmsghdr: len u32, type u16, flags u16, seq u32, pid u32.
        let fl = u16::from_ne_bytes([buf[last_at + 6], buf[last_at + 7]]) | NLM_F_ACK;
        buf[last_at + 6..last_at + 8].copy_from_slice(&fl.to_ne_bytes());
        let n = sock
            .send(buf, 0)
            .map_err(|e| HostError::Netlink(format!("{last_what} (a batch): {e}")))?;
        if n != buf.len() {
            return Err(HostError::Netlink(format!(
                "{last_what} (a batch): sent {n} of {} bytes",
                buf.len()
            )));
        }
        let mut first_error: Option<(u32, i32)> = None;
        loop {
            let (data, _) = sock.recv_from_full().map_err(|e| {
                let e = if e.kind() == std::io::ErrorKind::WouldBlock {
                    format!("no answer from the kernel in {BATCH_TIMEOUT_S} s")
                } else {
                    e.to_string()
                };
                HostError::Netlink(format!("{last_what} (a batch): {e}"))
            })?;
            let mut off = 0usize;
            let mut done = false;
            while off + 16 <= data.len() {
                let word = |at: usize| {
                    u32::from_ne_bytes(data[off + at..off + at + 4].try_into().expect("4 bytes"))
                };
                let len = word(0) as usize;
                if len < 16 || off + len > data.len() {
                    break;
                }
                let kind = u16::from_ne_bytes([data[off + 4], data[off + 5]]);
                let seq = word(8);
                if kind == NLMSG_ERROR && len >= 20 && ours(seq) {
                    let code = word(16) as i32;
                    if code != 0 && first_error.is_none() {
                        first_error = Some((seq, code));
                    }
                    if seq == last_seq {
                        done = true;
                    }
                }
                off += len.next_multiple_of(4);
            }
            if done {
                break;
            }
        }
        match first_error {
            None => Ok(()),
            Some((seq, code)) => {
                let what = sent
                    .iter()
                    .find(|(s, _)| *s == seq)
                    .map_or(last_what, |(_, w)| w);
                Err(HostError::Netlink(format!(
                    "{what}: {}",
                    std::io::Error::from_raw_os_error(-code)
                )))
            }
        }
    }

    /// The request `c` is: message, flags (NLM_F_REQUEST and NLM_F_ACK
    /// left to the sender), what it does.
    fn request_of(c: &TcChange) -> (RouteNetlinkMessage, u16, &'static str) {
        match *c {
            TcChange::HtbClass {
                ifindex,
                ref class,
                create,
            } => Self::htb_class_request(ifindex, class, create),
            TcChange::Pfifo {
                ifindex,
                parent,
                major,
                limit,
                change,
            } => Self::pfifo_request(ifindex, parent, major, limit, change),
        }
    }

    fn message(ifindex: u32, handle: u32, parent: u32, kind: Option<&str>) -> TcMessage {
        let mut m = TcMessage::with_index(ifindex as i32);
        m.header.handle = TcHandle::from(handle);
        m.header.parent = TcHandle::from(parent);
        if let Some(k) = kind {
            m.attributes.push(TcAttribute::Kind(k.to_string()));
        }
        m
    }

    /// How many TX queues device `ifindex` uses.
    pub fn tx_queues(&self, ifindex: u32) -> Result<u32> {
        use netlink_packet_route::link::{LinkAttribute, LinkMessage};
        let mut m = LinkMessage::default();
        m.header.index = ifindex;
        let msgs = self.nl.request(
            RouteNetlinkMessage::GetLink(m),
            0,
            "reading a link's TX queues",
        )?;
        Ok(msgs
            .iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => l.attributes.iter().find_map(|a| match a {
                    LinkAttribute::NumTxQueues(n) => Some(*n),
                    _ => None,
                }),
                _ => None,
            })
            .unwrap_or(1))
    }

    /// The qdiscs of device `ifindex`.
    pub fn qdiscs(&self, ifindex: u32) -> Result<Vec<Qdisc>> {
        let msgs = self.nl.request(
            RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
            NLM_F_DUMP,
            "listing qdiscs",
        )?;
        Ok(Self::qdiscs_of(msgs, ifindex))
    }

    /// The qdisc at the device's root (None: the kernel's default, which
    /// it lists with handle 0). One request for that device alone, not a
    /// dump of every device's (the agent asks this of every port each
    /// second). The kernel sends a single qdisc back to the asker only
    /// with NLM_F_ECHO (otherwise to the tc multicast group alone), and for
    /// a built-in default (veth's noqueue) nothing at all: the ACK ends the
    /// answer either way.
    pub fn root_qdisc(&self, ifindex: u32) -> Result<Option<Qdisc>> {
        let msgs = self.nl.request(
            RouteNetlinkMessage::GetQueueDiscipline(Self::message(ifindex, 0, TC_H_ROOT, None)),
            NLM_F_ACK | NLM_F_ECHO,
            "reading the root qdisc",
        )?;
        Ok(Self::qdiscs_of(msgs, ifindex)
            .into_iter()
            .find(|q| q.is_root() && q.handle != 0))
    }

    /// The qdiscs of device `ifindex` among netlink answers.
    fn qdiscs_of(msgs: Vec<RouteNetlinkMessage>, ifindex: u32) -> Vec<Qdisc> {
        msgs.into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewQueueDiscipline(m) if m.header.index == ifindex as i32 => {
                    Some(Qdisc {
                        handle: handle(m.header.handle.major, m.header.handle.minor),
                        parent: handle(m.header.parent.major, m.header.parent.minor),
                        kind: m
                            .attributes
                            .iter()
                            .find_map(|a| match a {
                                TcAttribute::Kind(k) => Some(k.clone()),
                                _ => None,
                            })
                            .unwrap_or_default(),
                    })
                }
                _ => None,
            })
            .collect()
    }

    fn new_qdisc(&self, m: TcMessage, flags: u16, what: &str) -> Result<()> {
        self.ack(RouteNetlinkMessage::NewQueueDiscipline(m), flags, what)
    }

    /// An MQ root qdisc `major:` (one child qdisc per TX queue, at parents
    /// `major:1`, `major:2`, ...), replacing the kernel's default root.
    pub fn add_root_mq(&self, ifindex: u32, major: u16) -> Result<()> {
        let m = Self::message(ifindex, handle(major, 0), TC_H_ROOT, Some("mq"));
        self.new_qdisc(m, NLM_F_CREATE | NLM_F_EXCL, "adding the mq root qdisc")
    }

    /// An HTB qdisc `major:` at `parent` (TC_H_ROOT: the device's root);
    /// traffic of no class goes to class `major:default_minor`, or out
    /// unshaped with 0.
    pub fn add_htb(
        &self,
        ifindex: u32,
        parent: Option<u32>,
        major: u16,
        default_minor: u16,
    ) -> Result<()> {
        let glob = uapi::tc_htb_glob {
            version: uapi::TC_HTB_PROTOVER,
            rate2quantum: 10,
            defcls: u32::from(default_minor),
            ..Default::default()
        };
        let mut m = Self::message(
            ifindex,
            handle(major, 0),
            parent.unwrap_or(TC_H_ROOT),
            Some("htb"),
        );
        m.attributes.push(TcAttribute::Options(vec![opt(
            uapi::TCA_HTB_INIT,
            bytes_of(&glob),
        )]));
        self.new_qdisc(m, NLM_F_CREATE | NLM_F_EXCL, "adding an htb qdisc")
    }

    /// A pfifo qdisc `major:` of `limit` packets under class `parent`, or
    /// a new limit for the one there (`change`).
    pub fn set_pfifo(
        &self,
        ifindex: u32,
        parent: u32,
        major: u16,
        limit: u32,
        change: bool,
    ) -> Result<()> {
        let (m, flags, what) = Self::pfifo_request(ifindex, parent, major, limit, change);
        self.ack(m, flags, what)
    }

    fn pfifo_request(
        ifindex: u32,
        parent: u32,
        major: u16,
        limit: u32,
        change: bool,
    ) -> (RouteNetlinkMessage, u16, &'static str) {
        let q = uapi::tc_fifo_qopt { limit };
        let mut m = Self::message(ifindex, handle(major, 0), parent, Some("pfifo"));
        // pfifo's options are the bare struct, not nested attributes.
        m.attributes.push(TcAttribute::Other(DefaultNla::new(
            2, /* TCA_OPTIONS */
            bytes_of(&q),
        )));
        let flags = if change { 0 } else { NLM_F_CREATE | NLM_F_EXCL };
        (
            RouteNetlinkMessage::NewQueueDiscipline(m),
            flags,
            "setting a class's queue limit (pfifo)",
        )
    }

    /// Removes the root qdisc `handle` of the device (and everything under
    /// it); a root that is not `handle` is left alone.
    pub fn del_root(&self, ifindex: u32, h: u32) -> Result<()> {
        let m = Self::message(ifindex, h, TC_H_ROOT, None);
        self.ack(
            RouteNetlinkMessage::DelQueueDiscipline(m),
            0,
            "removing the root qdisc",
        )
    }

    /// The kind of the qdisc at device `ifindex`'s ingress side ("clsact",
    /// "ingress"; None: there is none). One request for that device alone,
    /// as `root_qdisc`.
    pub fn ingress_qdisc(&self, ifindex: u32) -> Result<Option<String>> {
        // None: no ingress queue on the device yet, or none left on it.
        let Some(msgs) = self.ask_if_there(
            RouteNetlinkMessage::GetQueueDiscipline(Self::message(ifindex, 0, TC_H_INGRESS, None)),
            NLM_F_ACK | NLM_F_ECHO,
            "reading the ingress qdisc",
        )?
        else {
            return Ok(None);
        };
        // A device whose clsact went keeps an ingress queue running the
        // noop qdisc, listed with handle 0: none.
        Ok(Self::qdiscs_of(msgs, ifindex)
            .into_iter()
            .find(|q| q.parent == TC_H_INGRESS && q.handle != 0)
            .map(|q| q.kind))
    }

    /// A clsact qdisc on device `ifindex` (where tc BPF filters run at
    /// ingress and egress); an error when the device has one already, or
    /// an ingress qdisc.
    pub fn add_clsact(&self, ifindex: u32) -> Result<()> {
        let m = Self::message(ifindex, CLSACT_HANDLE, TC_H_INGRESS, Some("clsact"));
        self.new_qdisc(m, NLM_F_CREATE | NLM_F_EXCL, "adding a clsact qdisc")
    }

    /// Removes device `ifindex`'s clsact qdisc and every filter in it.
    pub fn del_clsact(&self, ifindex: u32) -> Result<()> {
        let m = Self::message(ifindex, CLSACT_HANDLE, TC_H_INGRESS, Some("clsact"));
        self.ack(
            RouteNetlinkMessage::DelQueueDiscipline(m),
            0,
            "removing a clsact qdisc",
        )
    }

    /// A filter message at `parent` of device `ifindex` for every protocol,
    /// at priority `prio`, handle `handle`.
    fn filter_message(ifindex: u32, parent: u32, prio: u16, handle: u32) -> TcMessage {
        let mut m = Self::message(ifindex, handle, parent, Some("bpf"));
        m.header.info = filter_info(prio);
        m
    }

    /// A cls_bpf filter running program `prog` (direct action: its return
    /// code is the verdict) at `parent` (`CLSACT_INGRESS`, `CLSACT_EGRESS`)
    /// of device `ifindex`, for every protocol, at priority `prio` and
    /// handle `handle`; an error when a filter has that priority and
    /// handle already. `name` is what `tc filter show` lists.
    pub fn add_bpf_filter(
        &self,
        ifindex: u32,
        parent: u32,
        prio: u16,
        handle: u32,
        prog: std::os::fd::BorrowedFd<'_>,
        name: &str,
    ) -> Result<()> {
        use netlink_packet_route::tc::{TcBpfFlags, TcFilterBpfOption};
        use std::os::fd::AsRawFd;
        let mut m = Self::filter_message(ifindex, parent, prio, handle);
        m.attributes.push(TcAttribute::Options(vec![
            TcOption::Bpf(TcFilterBpfOption::ProgFd(prog.as_raw_fd() as u32)),
            TcOption::Bpf(TcFilterBpfOption::ProgName(name.to_string())),
            TcOption::Bpf(TcFilterBpfOption::Flags(TcBpfFlags::DirectAction)),
        ]));
        self.ack(
            RouteNetlinkMessage::NewTrafficFilter(m),
            NLM_F_CREATE | NLM_F_EXCL,
            "adding a tc bpf filter",
        )
    }

    /// The cls_bpf filters at `parent` of device `ifindex` (none when it
    /// has no clsact).
    pub fn bpf_filters(&self, ifindex: u32, parent: u32) -> Result<Vec<BpfFilter>> {
        use netlink_packet_route::tc::TcFilterBpfOption;
        let mut out = Vec::new();
        for m in self.filters_at(ifindex, parent)? {
            let RouteNetlinkMessage::NewTrafficFilter(m) = m else {
                continue;
            };
            let h = handle(m.header.handle.major, m.header.handle.minor);
            // Each priority is listed once bare (no handle) before its
            // filters.
            if m.header.index != ifindex as i32 || h == 0 {
                continue;
            }
            let mut f = BpfFilter {
                prio: (m.header.info >> 16) as u16,
                handle: h,
                prog_id: None,
                name: String::new(),
            };
            let mut bpf = false;
            for a in &m.attributes {
                match a {
                    TcAttribute::Kind(k) => bpf = k == "bpf",
                    TcAttribute::Options(opts) => {
                        for o in opts {
                            match o {
                                TcOption::Bpf(TcFilterBpfOption::ProgId(id)) => {
                                    f.prog_id = Some(*id)
                                }
                                TcOption::Bpf(TcFilterBpfOption::ProgName(n)) => f.name = n.clone(),
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
            if bpf {
                out.push(f);
            }
        }
        Ok(out)
    }

    /// Whether `parent` of device `ifindex` holds any filter (of any
    /// kind), one request: a clsact that does is someone's.
    pub fn holds_filters(&self, ifindex: u32, parent: u32) -> Result<bool> {
        Ok(self.filters_at(ifindex, parent)?.iter().any(|m| {
            matches!(m, RouteNetlinkMessage::NewTrafficFilter(f) if f.header.index == ifindex as i32)
        }))
    }

    /// Removes the cls_bpf filter at `parent` of device `ifindex` with
    /// priority `prio` and handle `handle`.
    pub fn del_filter(&self, ifindex: u32, parent: u32, prio: u16, handle: u32) -> Result<()> {
        let m = Self::filter_message(ifindex, parent, prio, handle);
        self.ack(
            RouteNetlinkMessage::DelTrafficFilter(m),
            0,
            "removing a tc bpf filter",
        )
    }

    /// Every filter at `parent` of device `ifindex` as the kernel lists
    /// them (none when it has no clsact there).
    fn filters_at(&self, ifindex: u32, parent: u32) -> Result<Vec<RouteNetlinkMessage>> {
        let mut req = TcMessage::with_index(ifindex as i32);
        req.header.parent = TcHandle::from(parent);
        Ok(self
            .ask_if_there(
                RouteNetlinkMessage::GetTrafficFilter(req),
                NLM_F_DUMP,
                "listing tc filters",
            )?
            .unwrap_or_default())
    }

    /// A request about something that may not be there: the kernel's
    /// ENOENT or EINVAL (no such qdisc, no such block) is None.
    fn ask_if_there(
        &self,
        msg: RouteNetlinkMessage,
        flags: u16,
        what: &str,
    ) -> Result<Option<Vec<RouteNetlinkMessage>>> {
        match self.nl.request_or_errno(msg, flags, what)? {
            Ok(msgs) => Ok(Some(msgs)),
            Err(libc::ENOENT | libc::EINVAL) => Ok(None),
            Err(e) => Err(HostError::Netlink(format!(
                "{what}: {}",
                std::io::Error::from_raw_os_error(e)
            ))),
        }
    }

    /// Sends `msg` and waits for the kernel's ACK.
    fn ack(&self, msg: RouteNetlinkMessage, flags: u16, what: &str) -> Result<()> {
        self.nl.request(msg, NLM_F_ACK | flags, what).map(|_| ())
    }

    /// The cookie of the network namespace this `Tc` works in (the
    /// opening thread's).
    pub fn netns_cookie(&self) -> u64 {
        self.netns_cookie
    }

    /// Makes (`create`) or changes HTB class `c`.
    pub fn set_htb_class(&self, ifindex: u32, c: &HtbClass, create: bool) -> Result<()> {
        let (m, flags, what) = Self::htb_class_request(ifindex, c, create);
        self.ack(m, flags, what)
    }

    fn htb_class_request(
        ifindex: u32,
        c: &HtbClass,
        create: bool,
    ) -> (RouteNetlinkMessage, u16, &'static str) {
        let parms = uapi::tc_htb_opt {
            rate: ratespec(c.rate_bps),
            ceil: ratespec(c.ceil_bps),
            buffer: ticks(c.burst, c.rate_bps),
            cbuffer: ticks(c.cburst, c.ceil_bps),
            quantum: c.quantum,
            prio: c.prio,
            ..Default::default()
        };
        let mut opts = vec![opt(uapi::TCA_HTB_PARMS, bytes_of(&parms))];
        if c.rate_bps / 8 > u64::from(u32::MAX) {
            opts.push(opt(
                uapi::TCA_HTB_RATE64,
                (c.rate_bps / 8).to_ne_bytes().to_vec(),
            ));
        }
        if c.ceil_bps / 8 > u64::from(u32::MAX) {
            opts.push(opt(
                uapi::TCA_HTB_CEIL64,
                (c.ceil_bps / 8).to_ne_bytes().to_vec(),
            ));
        }
        let mut m = Self::message(ifindex, c.classid, c.parent, Some("htb"));
        m.attributes.push(TcAttribute::Options(opts));
        let flags = if create { NLM_F_CREATE | NLM_F_EXCL } else { 0 };
        let what = if create {
            "adding an htb class"
        } else {
            "changing an htb class"
        };
        (RouteNetlinkMessage::NewTrafficClass(m), flags, what)
    }

    /// Removes class `classid` (and its leaf qdisc).
    pub fn del_class(&self, ifindex: u32, classid: u32) -> Result<()> {
        let m = Self::message(ifindex, classid, 0, None);
        self.ack(
            RouteNetlinkMessage::DelTrafficClass(m),
            0,
            "removing an htb class",
        )
    }

    /// Every class of qdisc `major:` on the device, with its counters.
    pub fn classes(&self, ifindex: u32, major: u16) -> Result<Vec<ClassStats>> {
        let mut req = TcMessage::with_index(ifindex as i32);
        req.header.parent = TcHandle::from(handle(major, 0));
        let msgs = self.nl.request(
            RouteNetlinkMessage::GetTrafficClass(req),
            NLM_F_DUMP,
            "listing classes",
        )?;
        let mut out = Vec::new();
        for m in msgs {
            let RouteNetlinkMessage::NewTrafficClass(m) = m else {
                continue;
            };
            if m.header.index != ifindex as i32 || m.header.handle.major != major {
                continue;
            }
            let mut s = ClassStats {
                classid: handle(m.header.handle.major, m.header.handle.minor),
                parent: handle(m.header.parent.major, m.header.parent.minor),
                ..Default::default()
            };
            for a in &m.attributes {
                match a {
                    TcAttribute::Stats2(v) => {
                        for st in v {
                            match st {
                                TcStats2::Basic(b) => {
                                    s.bytes = b.bytes;
                                    s.packets = u64::from(b.packets);
                                }
                                TcStats2::Queue(q) => {
                                    s.drops = u64::from(q.drops);
                                    s.overlimits = u64::from(q.overlimits);
                                    s.qlen = u64::from(q.qlen);
                                    s.backlog = u64::from(q.backlog);
                                }
                                _ => {}
                            }
                        }
                    }
                    TcAttribute::Xstats(TcXstats::Other(b)) => {
                        if let Some(x) = uapi::tc_htb_xstats::from_bytes(b) {
                            s.borrows = u64::from(x.borrows);
                        }
                    }
                    _ => {}
                }
            }
            out.push(s);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_testbed::testing::{in_fresh_netns, privileged_here};

    /// `lo`'s index, in every network namespace.
    const LO: u32 = 1;

    /// `n` HTB classes `major:1..=n` on `lo`, under qdisc `major:`.
    fn classes(major: u16, n: u16) -> Vec<TcChange> {
        (1..=n)
            .map(|minor| TcChange::HtbClass {
                ifindex: LO,
                class: HtbClass {
                    classid: handle(major, minor),
                    parent: handle(major, 0),
                    rate_bps: 1_000_000,
                    ceil_bps: 10_000_000,
                    burst: 1514,
                    cburst: 1514,
                    prio: 0,
                    quantum: 1514,
                },
                create: true,
            })
            .collect()
    }

    /// A batch whose every request fails (classes under a qdisc `lo` does
    /// not have) tells its first request's error. 4,000 error answers are
    /// far more than a receive buffer of the default size (208 KiB, at 832
    /// bytes an answer) holds: batches sent 32 KiB at a time overflowed it
    /// and told ENOBUFS instead. The socket is fit for work after.
    #[test]
    fn a_batch_that_fails_whole_tells_its_first_error() {
        if !privileged_here() {
            return;
        }
        in_fresh_netns(|| {
            let tc = Tc::open().expect("netlink");
            let e = tc.apply(&classes(0x7067, 4000)).unwrap_err().to_string();
            assert!(
                e.contains("adding an htb class: No such file or directory")
                    && e.lines().count() == 1,
                "{e}"
            );
            tc.add_htb(LO, None, 0x7067, 0).expect("an htb qdisc on lo");
            tc.apply(&classes(0x7067, 600)).expect("600 classes");
            assert_eq!(tc.classes(LO, 0x7067).expect("the classes").len(), 600);
        });
    }

    /// Answers a batch left unread (its sender gave up: a receive that
    /// timed out or failed) are not taken for a later batch's: that one
    /// succeeds, and its own error is told as its own. Before answers were
    /// matched by sequence number, the later batch failed with the earlier
    /// one's error.
    #[test]
    fn answers_left_by_an_abandoned_batch_are_skipped() {
        if !privileged_here() {
            return;
        }
        in_fresh_netns(|| {
            let tc = Tc::open().expect("netlink");
            tc.add_htb(LO, None, 0x7067, 0).expect("an htb qdisc on lo");
            // 50 requests that each fail (no qdisc 0x7068:), sent the way
            // `apply` sends them and never read.
            let mut buf = Vec::new();
            for c in classes(0x7068, 50) {
                tc.push_request(&mut buf, &c);
            }
            let sock = tc.raw().expect("the batch socket");
            assert_eq!(sock.send(&buf, 0).expect("the abandoned batch"), buf.len());
            tc.apply(&classes(0x7067, 10)).expect("10 classes");
            assert_eq!(tc.classes(LO, 0x7067).expect("the classes").len(), 10);
            // The same classes again: each exists, the batch's own error.
            let e = tc.apply(&classes(0x7067, 10)).unwrap_err().to_string();
            assert!(e.contains("adding an htb class: File exists"), "{e}");
        });
    }

    #[test]
    fn options_have_the_kernels_layout() {
        assert_eq!(std::mem::size_of::<uapi::tc_ratespec>(), 12);
        assert_eq!(std::mem::size_of::<uapi::tc_htb_opt>(), 44);
        assert_eq!(std::mem::size_of::<uapi::tc_htb_glob>(), 20);
        assert_eq!(handle(0x7067, 0xffff), 0x7067_ffff);
        // 1500 bytes at 12 Mbit/s: 1 ms, 15625 ticks of 64 ns.
        assert_eq!(ticks(1500, 12_000_000), 15_625);
        assert_eq!(ratespec(80_000_000_000).rate, u32::MAX);
    }
}
