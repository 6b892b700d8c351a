//! The htb engine's kernel side: the HTB tree peregrine builds on the
//! shaped (egress) device through netlink, its record, and its counters.
//!
//! Handles (fixed, documented in docs/QOS.md; `7067` is "pg"):
//! - one TX queue: root `htb 7067:`, the link class `7067:ffff` (rate =
//!   ceil = the link), class id N at `7067:N`, its pfifo leaf `(7100+N):`;
//!   N runs 1..HTB_MAX_CLASSES-1 (16,383; `htb_limits` in
//!   htb_kern_user.h), all below the link class and every leaf below
//!   `ffff:`;
//! - n TX queues (n <= 16; built only on request, see `engine::HtbEngine`):
//!   root `mq 7067:`, queue q's `htb (7068+q):` at
//!   `7067:(q+1)`, its link class `(7068+q):ffff`, class N at
//!   `(7068+q):N`, its leaf `(7100+16384q+N):` (so only as many queues as
//!   leaf handles fit: two at the full class limit); every rate, ceiling
//!   and the link are split evenly over the queues (the classifier spreads
//!   flows by hash).
//!
//! A tree is built in netlink batches (`Tc::apply`, about 32 KiB of
//! requests per sendmsg and one ACK each): 10,000 classes and their leaves
//! are some 50 sendmsg calls, not 20,000 round trips.
//!
//! The record of what peregrine made is the classifier's `htb_port` map
//! (device, root handle, owner pid), found from its link pinned at
//! `<policer dir>/htb`: only a root qdisc with the recorded handle is ever
//! removed, and a root qdisc someone else made is never replaced.
use std::path::Path;

use peregrine_bpf::classify::{ClassifierMaps, HtbPort, MAX_TX_QUEUES};
use peregrine_bpf::link::{pinned_link, PinnedLink};
use peregrine_bpf::policer::{ClassCounters, HTB_MAX_CLASSES};
use peregrine_host::cpu::monotonic_ns;
use peregrine_host::tc::{handle, HtbClass, Tc, TcChange};

use crate::classes::{classes_in, SchedulerStats};
use crate::config::ClassIndex;
use crate::error::{QosError, Result};
use crate::sched::ClassConfig;

/// The root qdisc's handle major ("pg").
pub const ROOT_MAJOR: u16 = 0x7067;
/// The link class's minor, in every HTB.
pub const LINK_MINOR: u16 = 0xffff;
/// Queue q's HTB under an MQ root: `MQ_HTB_MAJOR + q`.
pub const MQ_HTB_MAJOR: u16 = 0x7068;
/// Leaf pfifo qdiscs: `LEAF_MAJOR + HTB_MAX_CLASSES q + class id`.
pub const LEAF_MAJOR: u16 = 0x7100;
/// The classifier's link, beside the policer's in its directory.
pub const HTB_PIN: &str = "htb";

/// The tree's shape on one device: how many HTBs, which majors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tree {
    pub ifindex: u32,
    /// 1: one HTB at the root; n: n HTBs under mq.
    pub queues: u16,
}

impl Tree {
    /// The HTB major of TX queue `q`.
    pub fn major(&self, q: u16) -> u16 {
        if self.queues > 1 {
            MQ_HTB_MAJOR + q
        } else {
            ROOT_MAJOR
        }
    }

    /// The handle major of class `id`'s leaf in queue q's HTB; none left
    /// for it past `ffff:` (an MQ tree of more queues than the handles
    /// hold at that class id).
    fn leaf(&self, q: u16, id: u32) -> Result<u16> {
        let major = u32::from(LEAF_MAJOR) + HTB_MAX_CLASSES * u32::from(q) + id;
        u16::try_from(major)
            .ok()
            .filter(|&m| m < 0xffff)
            .ok_or_else(|| {
                QosError::Config(format!(
                    "class id {id}: no leaf qdisc handle left in TX queue {q}'s HTB"
                ))
            })
    }

    /// The record the classifier keeps of this tree.
    pub fn port(&self, link_bps: u64) -> HtbPort {
        HtbPort {
            egress_ifindex: self.ifindex,
            owner_pid: std::process::id(),
            root_major: ROOT_MAJOR,
            major: self.major(0),
            queues: self.queues,
            link_bps,
            ..Default::default()
        }
    }

    fn of(port: &HtbPort) -> Tree {
        Tree {
            ifindex: port.egress_ifindex,
            queues: port.queues.max(1),
        }
    }

    /// Class `c` (id `id`, parent id `parent`, 0: the link) in queue q's HTB.
    fn class(&self, q: u16, id: u32, parent: u32, c: &ClassConfig) -> HtbClass {
        let n = u64::from(self.queues);
        let major = self.major(q);
        let parent_minor = if parent == 0 {
            LINK_MINOR
        } else {
            parent as u16
        };
        HtbClass {
            classid: handle(major, id as u16),
            parent: handle(major, parent_minor),
            rate_bps: (c.rate_bps / n).max(8),
            ceil_bps: (c.ceil_bps / n).max(8),
            burst: c.burst,
            cburst: c.burst,
            prio: u32::from(c.priority.min(7)),
            quantum: c.weight.saturating_mul(1514).max(1514),
        }
    }
}

/// The TX queues a tree on `ifindex` could give an HTB each (an MQ
/// root). `start` builds one root HTB instead (see `engine`); the record
/// and every change handle both shapes.
pub fn queues_of(tc: &Tc, ifindex: u32) -> Result<u16> {
    Ok(tc.tx_queues(ifindex)?.clamp(1, MAX_TX_QUEUES) as u16)
}

/// Refuses (one line) when the root qdisc of `egress` is someone else's:
/// any root with a handle other than the kernel default's (0) and ours.
pub fn check_root_free(tc: &Tc, ifindex: u32, egress: &str) -> Result<()> {
    match tc.root_qdisc(ifindex)? {
        Some(q) if q.handle >> 16 != u32::from(ROOT_MAJOR) => Err(QosError::Request(format!(
            "{egress} has a root qdisc peregrine did not make ({} {:x}:): not replacing it; \
             remove it first (`tc qdisc del dev {egress} root`) to shape {egress} with the htb engine",
            q.kind,
            q.handle >> 16
        ))),
        _ => Ok(()),
    }
}

/// Builds the tree on the device: the root (htb, or mq and one htb per
/// queue), each HTB's link class, then `classes` (parents first) with
/// pfifo leaves of their queue limits. A root of ours left from a killed
/// run is replaced; anything else at the root was refused before.
pub fn build(
    tc: &Tc,
    tree: &Tree,
    link_bps: u64,
    link_burst: u64,
    classes: &[(u32, ClassConfig)],
) -> Result<()> {
    if let Some(q) = tc.root_qdisc(tree.ifindex)? {
        if q.handle >> 16 == u32::from(ROOT_MAJOR) {
            tc.del_root(tree.ifindex, q.handle)?;
        }
    }
    let n = u64::from(tree.queues);
    if tree.queues > 1 {
        tc.add_root_mq(tree.ifindex, ROOT_MAJOR)?;
    }
    for q in 0..tree.queues {
        let major = tree.major(q);
        let parent = (tree.queues > 1).then(|| handle(ROOT_MAJOR, q + 1));
        tc.add_htb(tree.ifindex, parent, major, 0)?;
        tc.set_htb_class(
            tree.ifindex,
            &HtbClass {
                classid: handle(major, LINK_MINOR),
                parent: handle(major, 0),
                rate_bps: link_bps / n,
                ceil_bps: link_bps / n,
                burst: link_burst,
                cburst: link_burst,
                prio: 0,
                quantum: 1514,
            },
            true,
        )?;
    }
    // Every class and leaf, parents first, in netlink batches.
    let mut changes = Vec::with_capacity(2 * classes.len() * usize::from(tree.queues));
    let index = ClassIndex::new(classes);
    for (id, c) in classes {
        let (parent, leaf) = (index.parent_id(c), index.is_leaf(&c.name));
        class_changes(tree, *id, parent, c, leaf, false, &mut changes)?;
    }
    tc.apply(&changes)?;
    Ok(())
}

/// The requests that add (or with `replace`, change) class `id` in every
/// queue's HTB, and its leaf's pfifo.
fn class_changes(
    tree: &Tree,
    id: u32,
    parent: u32,
    c: &ClassConfig,
    leaf: bool,
    replace: bool,
    out: &mut Vec<TcChange>,
) -> Result<()> {
    for q in 0..tree.queues {
        let hc = tree.class(q, id, parent, c);
        out.push(TcChange::HtbClass {
            ifindex: tree.ifindex,
            class: hc,
            create: !replace,
        });
        if leaf {
            out.push(leaf_queue(tree, q, id, c, replace)?);
        }
    }
    Ok(())
}

/// The request that gives class `id` of queue q's HTB its pfifo of `c`'s
/// queue limit (or with `change`, changes that pfifo's limit).
fn leaf_queue(tree: &Tree, q: u16, id: u32, c: &ClassConfig, change: bool) -> Result<TcChange> {
    Ok(TcChange::Pfifo {
        ifindex: tree.ifindex,
        parent: handle(tree.major(q), id as u16),
        major: tree.leaf(q, id)?,
        limit: c.queue_limit as u32,
        change,
    })
}

/// Gives class `id`, a leaf again, its pfifo of `c`'s queue limit in
/// every queue's HTB. When an HTB class loses its last child (deleted, or
/// an add taken back) the kernel makes it a leaf with a default queue of
/// the device's length; the class's own limit is this one.
pub fn set_leaf_queue(tc: &Tc, tree: &Tree, id: u32, c: &ClassConfig) -> Result<()> {
    let changes = (0..tree.queues)
        .map(|q| leaf_queue(tree, q, id, c, false))
        .collect::<Result<Vec<_>>>()?;
    tc.apply(&changes)?;
    Ok(())
}

/// What a class change finds, to put back if the kernel refuses it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Was<'a> {
    /// The class's settings now (None: the class is new).
    pub class: Option<&'a ClassConfig>,
    /// The parent's settings when it is a leaf now: a new class is its
    /// first child.
    pub leaf_parent: Option<&'a ClassConfig>,
}

/// Adds class `id` in every queue's HTB (a leaf gets its pfifo), or, when
/// `was` has its settings, gives the existing class new ones (its parent
/// stays).
pub fn set_class(
    tc: &Tc,
    tree: &Tree,
    id: u32,
    parent: u32,
    c: &ClassConfig,
    leaf: bool,
    was: Was<'_>,
) -> Result<()> {
    let mut changes = Vec::with_capacity(2 * usize::from(tree.queues));
    class_changes(tree, id, parent, c, leaf, was.class.is_some(), &mut changes)?;
    // What puts things back, made before anything changes: the requests
    // for the old settings are those of `c`, one for one; the parent's
    // queue, one per HTB.
    let mut back = Vec::new();
    if let Some(old) = was.class {
        class_changes(tree, id, parent, old, leaf, true, &mut back)?;
    }
    let parent_queues = match was.leaf_parent {
        Some(p) => (0..tree.queues)
            .map(|q| leaf_queue(tree, q, parent, p, false))
            .collect::<Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    // One request at a time: a batch goes on past a refused request, and
    // a class whose change was refused must not get its queue changed.
    // Refused part-way, nothing is left half-done: an add takes back the
    // classes it made (their pfifos with them; the same add may be tried
    // again) and gives a parent it made inner its queue back; a change
    // puts back the settings the kernel took before the refusal. What
    // cannot be put back is said on the same line.
    let mut made = Vec::new();
    for (i, ch) in changes.iter().enumerate() {
        let Err(e) = tc.apply(std::slice::from_ref(ch)) else {
            if let TcChange::HtbClass {
                class,
                create: true,
                ..
            } = ch
            {
                made.push(class.classid);
            }
            continue;
        };
        let mut unput = Vec::new();
        let mut taken_back = Vec::new();
        for &classid in made.iter().rev() {
            match tc.del_class(tree.ifindex, classid) {
                Ok(()) => taken_back.push(classid),
                Err(d) => unput.push(format!("taking back its class {}: {d}", shown(classid))),
            }
        }
        // A parent is a leaf again in each HTB where its child was taken
        // back (queue q's parent queue is the q-th request).
        let queues: Vec<TcChange> = (0..tree.queues)
            .zip(&parent_queues)
            .filter(|(q, _)| taken_back.contains(&handle(tree.major(*q), id as u16)))
            .map(|(_, r)| *r)
            .collect();
        if let Err(d) = tc.apply(&queues) {
            unput.push(format!("giving its parent its queue back: {d}"));
        }
        if !back.is_empty() {
            if let Err(d) = tc.apply(&back[..i]) {
                unput.push(format!("putting back its old settings: {d}"));
            }
        }
        let unput: String = unput.iter().map(|u| format!("; {u}")).collect();
        return Err(QosError::Other(format!(
            "class {:?}: {}: {e}{unput}",
            c.name,
            refused_what(ch)
        )));
    }
    Ok(())
}

/// A handle as `tc` shows it, `major:minor` in hex.
fn shown(id: u32) -> String {
    format!("{:x}:{:x}", id >> 16, id & 0xffff)
}

/// What a refused change of `set_class` was making, with its handles, for
/// the one line that says so: a queue's pfifo refused on creation is most
/// often a handle a qdisc peregrine did not make already holds.
fn refused_what(ch: &TcChange) -> String {
    let h = shown;
    match ch {
        TcChange::HtbClass { class, .. } => format!("its HTB class {}", h(class.classid)),
        TcChange::Pfifo {
            parent,
            major,
            change: false,
            ..
        } => format!(
            "its queue (pfifo {major:x}: under {}; is that handle held by a qdisc peregrine did not make?)",
            h(*parent)
        ),
        TcChange::Pfifo { parent, major, .. } => {
            format!("its queue (pfifo {major:x}: under {})", h(*parent))
        }
    }
}

/// Removes class `id` from every queue's HTB.
pub fn del_class(tc: &Tc, tree: &Tree, id: u32) -> Result<()> {
    for q in 0..tree.queues {
        tc.del_class(tree.ifindex, handle(tree.major(q), id as u16))?;
    }
    Ok(())
}

/// The record of the htb engine in a policer's directory: its classifier
/// link and what the classifier's map says.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    pub link: PinnedLink,
    pub port: HtbPort,
}

impl Record {
    pub fn tree(&self) -> Tree {
        Tree::of(&self.port)
    }

    /// The serving process, when alive.
    pub fn live_owner(&self) -> Option<u32> {
        let pid = self.port.owner_pid;
        (pid != 0 && Path::new(&format!("/proc/{pid}")).exists()).then_some(pid)
    }

    /// Its device is gone, or the process that served it.
    pub fn stale(&self) -> bool {
        !self.link.live() || self.live_owner().is_none()
    }

    pub fn maps(&self) -> Result<ClassifierMaps> {
        Ok(ClassifierMaps::of_program(self.link.prog_id)?)
    }
}

/// The htb engine's record in `dir`, if there is one. A pin whose program
/// cannot be read counts as a record of nothing (stale).
pub fn record(dir: &Path) -> Option<Result<Record>> {
    let pin = dir.join(HTB_PIN);
    if !pin.exists() {
        return None;
    }
    Some((|| {
        let link = pinned_link(&pin)?;
        let port = ClassifierMaps::of_program(link.prog_id)?.port()?;
        Ok(Record { link, port })
    })())
}

/// Removes the tree the record in `dir` names (only a root qdisc with the
/// recorded handle; in the calling thread's namespace, which must be the
/// record's) and detaches the classifier.
pub fn remove_here(dir: &Path) -> Result<()> {
    if let Some(Ok(r)) = record(dir) {
        if r.link.live() {
            let tc = Tc::open()?;
            let root = handle(r.port.root_major, 0);
            if tc
                .root_qdisc(r.port.egress_ifindex)?
                .is_some_and(|q| q.handle == root)
            {
                tc.del_root(r.port.egress_ifindex, root)?;
            }
            peregrine_bpf::link::detach_pinned(&dir.join(HTB_PIN))?;
            // A tc router port there may take bpf_redirect_peer again.
            peregrine_dataplane::peer::refresh_port_logged(r.port.egress_ifindex);
            return Ok(());
        }
    }
    peregrine_bpf::link::detach_pinned(&dir.join(HTB_PIN))?;
    Ok(())
}

/// Removes a tree of ours a failed start left before its record was
/// pinned (the root with our handle; nothing else).
pub fn remove_unrecorded(tc: &Tc, ifindex: u32) {
    if let Ok(Some(q)) = tc.root_qdisc(ifindex) {
        if q.handle == handle(ROOT_MAJOR, 0) {
            let _ = tc.del_root(ifindex, q.handle);
        }
    }
}

/// The classes the classifier's table holds, parents first.
pub fn classes(maps: &ClassifierMaps) -> Result<Vec<(u32, ClassConfig)>> {
    classes_in(HTB_MAX_CLASSES, |id| Ok(maps.class_slot(id)?))
}

/// The engine's classes and their counters from the kernel (TCA_STATS2,
/// HTB's borrow count), summed over the queues' HTBs; in the calling
/// thread's namespace.
pub fn scheduler_stats(r: &Record) -> Result<SchedulerStats> {
    let maps = r.maps()?;
    let tree = r.tree();
    let tc = Tc::open()?;
    let counted_at_ns = monotonic_ns();
    let mut by_id = vec![ClassCounters::default(); HTB_MAX_CLASSES as usize];
    for q in 0..tree.queues {
        for s in tc.classes(tree.ifindex, tree.major(q))? {
            let id = (s.classid & 0xffff) as usize;
            let Some(k) = by_id.get_mut(id) else { continue };
            k.sent_packets += s.packets;
            k.sent_bytes += s.bytes;
            k.dropped_packets += s.drops;
            k.borrowed_packets += s.borrows;
            k.queue_depth += s.qlen;
            k.enqueued_packets += s.packets + s.drops + s.qlen;
        }
    }
    let totals = maps.totals()?;
    Ok(SchedulerStats {
        engine: "htb",
        egress_ifindex: r.port.egress_ifindex,
        owner: r.live_owner(),
        link_bps: r.port.link_bps,
        classes: classes(&maps)?
            .into_iter()
            .map(|(id, c)| (id, c, by_id[id as usize]))
            .collect(),
        unclassified: ClassCounters {
            sent_packets: totals.unclassified + totals.not_ip + totals.malformed,
            ..Default::default()
        },
        counted_at_ns,
        early_dropped_packets: 0,
    })
}
