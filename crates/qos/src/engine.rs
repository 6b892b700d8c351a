//! The scheduling engines behind `qos serve` and `qos class`: the file's
//! `[scheduler] engine` picks the AF_XDP scheduler (`serve`) or the
//! kernel's HTB (`HtbEngine`, below); the CLI calls `serve` and
//! `change_class` here and never chooses itself.
//!
//! The htb engine, on `qos serve FILE --iface IN` with egress OUT:
//! 1. the file's rules go on IN as a policer at the tc hook (`attach::apply`:
//!    meters, counters, `qos rule`), pinned as today;
//! 2. the HTB tree is built on OUT through netlink (`htb::build`), after
//!    refusing a root qdisc peregrine did not make;
//! 3. the classifier (`classify.bpf.c`) is loaded on the policer's own
//!    rule maps, given the tree's record and the classes, attached at tcx
//!    egress of OUT and pinned beside the policer (`<dir>/htb`).
//!
//! Anything that fails part-way removes what was made; a stop (Ctrl-C,
//! SIGTERM, `stop`) removes all of it; a killed run's remains are removed
//! by `qos detach`, `qos detach --all`, or the next `qos serve` / `qos
//! apply` on IN.
use std::path::PathBuf;
use std::time::Duration;

use peregrine_bpf::classify::ClassifierProgram;
use peregrine_bpf::policer::ClassSlot;
use peregrine_bpf::Hook;
use peregrine_dataplane::peer::refresh_port_logged;
use peregrine_host::tc::Tc;

use crate::attach::{self, PolicerStats};
use crate::classes::{class_slot, plan_change, slot_after, ClassChange};
use crate::config::{ClassIndex, Engine, PolicerConfig, SchedulerConfig};
use crate::error::{QosError, Result};
use crate::htb::{self, Tree, Was};
use crate::serve::{ServeOptions, ServeSummary};

/// Runs the file's scheduler on `iface` with the engine the file names,
/// until a stop is requested (Ctrl-C, SIGTERM); `ready` once traffic is
/// scheduled.
pub fn serve(
    iface: &str,
    cfg: &PolicerConfig,
    opts: &ServeOptions,
    ready: impl FnOnce(),
) -> Result<ServeSummary> {
    let sc = cfg.scheduler.as_ref().ok_or_else(|| {
        QosError::Config(
            "the file has no [scheduler] table: `qos apply` installs rules alone".into(),
        )
    })?;
    match sc.engine {
        Engine::Htb => {
            let engine = HtbEngine::start(iface, cfg)?;
            ready();
            let mut summary = ServeSummary::default();
            while !opts.stopped() {
                // `qos detach` took it away: nothing left to serve.
                if !engine.pin().exists() {
                    return Ok(summary);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let stats = engine.stats()?;
            if let Some(s) = stats.scheduler {
                summary.sent = s.classes.iter().map(|(_, _, k)| k.sent_packets).sum();
                summary.received = s.classes.iter().map(|(_, _, k)| k.enqueued_packets).sum();
            }
            engine.stop()?;
            Ok(summary)
        }
        Engine::Afxdp => crate::serve::serve_afxdp(iface, cfg, sc, opts, ready),
    }
}

/// Applies `change` to the scheduler serving `iface` here, whichever
/// engine it is; the class's id.
pub fn change_class(iface: &str, change: &ClassChange) -> Result<u32> {
    // A change reads the classes (and the rules naming them) and writes on
    // from what it read: one at a time, as rule changes.
    let _lock = attach::lock_changes()?;
    match attach::htb_here(iface)? {
        Some(r) if r.live_owner().is_some() => htb_change_class(iface, &r, change),
        _ => crate::serve::change_class(iface, change),
    }
}

/// `change` on the htb engine: checked whole as the AF_XDP scheduler
/// checks it, then the HTB class changed through netlink (the tree is not
/// rebuilt) and the classifier's class table written: a new class gets
/// traffic only once its HTB class exists, a deleted one none before its
/// HTB class goes.
fn htb_change_class(iface: &str, r: &htb::Record, change: &ClassChange) -> Result<u32> {
    let maps = r.maps()?;
    let classes = htb::classes(&maps)?;
    let rules = attach::maps_here(iface)?.rules()?;
    let link_burst = (r.port.link_bps / 8 / 1000).max(10 * 1514);
    let named = |name: &str| classes.iter().find(|(_, o)| o.name == name).cloned();
    // The class as it is (changed or deleted), and for an add the parent
    // when it is a leaf now (its first child makes it inner).
    let (before, leaf_parent) = match change {
        ClassChange::Change(c) => (named(&c.name), None),
        ClassChange::Delete(n) => (named(n), None),
        ClassChange::Add(c) => {
            let index = ClassIndex::new(&classes);
            let p = c.parent.as_deref().filter(|p| index.is_leaf(p));
            (None, p.and_then(named))
        }
    };
    if let (ClassChange::Change(c), Some((_, old))) = (change, &before) {
        if old.parent != c.parent {
            return Err(QosError::Config(format!(
                "class {:?}: the htb engine cannot move a class to another parent; delete it and add it again",
                c.name
            )));
        }
    }
    let (id, ordered) = plan_change(
        iface,
        classes,
        change,
        &rules,
        r.port.link_bps,
        link_burst,
        Engine::Htb.max_classes(),
    )?;
    let tree = r.tree();
    let tc = Tc::open()?;
    let slot = slot_after(change, &ordered);
    match change {
        ClassChange::Add(c) | ClassChange::Change(c) => {
            let leaf = ClassIndex::new(&ordered).is_leaf(&c.name);
            let was = Was {
                class: before.as_ref().map(|(_, o)| o),
                leaf_parent: leaf_parent.as_ref().map(|(_, p)| p),
            };
            htb::set_class(&tc, &tree, id, slot.parent, c, leaf, was)?;
            maps.set_class_slot(id, &slot)?;
        }
        ClassChange::Delete(name) => {
            let old_slot = maps.class_slot(id)?;
            maps.set_class_slot(id, &ClassSlot::default())?;
            if let Err(e) = htb::del_class(&tc, &tree, id) {
                // Refused (a user's filter bound to the class): the class
                // stays, and so does its slot.
                maps.set_class_slot(id, &old_slot)?;
                return Err(e);
            }
            // A parent whose last child went is a leaf again: its queue.
            let index = ClassIndex::new(&ordered);
            let parent = before.and_then(|(_, c)| c.parent);
            if let Some((pid, p)) = parent
                .filter(|p| index.is_leaf(p))
                .and_then(|p| index.position(&p))
                .map(|k| &ordered[k])
            {
                // The class is gone either way: a queue the kernel
                // refuses is said, not the delete's failure.
                if let Err(e) = htb::set_leaf_queue(&tc, &tree, *pid, p) {
                    tracing::error!(
                        "class {name:?} deleted; its parent {:?} keeps the kernel's default queue: {e}",
                        p.name
                    );
                }
            }
        }
    }
    Ok(id)
}

/// A running htb engine (see the module's text): made by `start`, read by
/// `stats`, removed by `stop` or when dropped.
pub struct HtbEngine {
    iface: String,
    dir: PathBuf,
    stopped: bool,
}

impl HtbEngine {
    /// Puts `cfg` (a file with an htb `[scheduler]`) on `iface` here. A
    /// refusal or a failure part-way leaves nothing applied.
    pub fn start(iface: &str, cfg: &PolicerConfig) -> Result<HtbEngine> {
        let sc = cfg
            .scheduler
            .as_ref()
            .filter(|s| s.engine == Engine::Htb)
            .ok_or_else(|| {
                QosError::Config("the file has no [scheduler] with engine = \"htb\"".into())
            })?;
        crate::config::interface_here(iface)?;
        let egress_ifindex = peregrine_bpf::link::ifindex(&sc.egress)
            .map_err(|_| QosError::Config(format!("no interface {} here", sc.egress)))?;
        // One step under the policer lock, from the owner check until the
        // classifier (the record of this owner) is pinned: a `qos apply`
        // from another process waits, then finds the owner and refuses.
        let held = attach::lock_changes()?;
        if let Some(pid) = attach::scheduler_owner(iface)? {
            return Err(QosError::Other(format!(
                "a scheduler (pid {pid}) already serves {iface}: stop it first"
            )));
        }
        // A killed run's remains (its pins, its tree) go first.
        if attach::htb_here(iface).ok().flatten().is_some() {
            attach::detach_locked(&held, iface)?;
        }
        let tc = Tc::open()?;
        htb::check_root_free(&tc, egress_ifindex, &sc.egress)?;
        // One HTB at the root, whatever the device's TX queues: the queue
        // is picked after tcx egress, and on this kernel a queue_mapping
        // written there is not what the pick keeps (measured: under mq,
        // half the flows landed on another queue's HTB and went out
        // unshaped), so an HTB per queue cannot be told its flows.
        let tree = Tree {
            ifindex: egress_ifindex,
            queues: 1,
        };
        let dir = attach::dir_here(iface)?;
        attach::apply_locked(&held, iface, Hook::TC, &cfg.rules)?;
        let mut engine = HtbEngine {
            iface: iface.to_string(),
            dir,
            stopped: false,
        };
        if let Err(e) = engine.install(&tc, &tree, sc) {
            // Undone under the lock held here (a second flock in this
            // process would wait for this one).
            engine.stopped = true;
            if engine.dir.exists() {
                if let Err(d) = attach::detach_locked(&held, iface) {
                    tracing::warn!("removing the htb engine of {iface}: {d}");
                }
            }
            return Err(e);
        }
        drop(held);
        Ok(engine)
    }

    fn pin(&self) -> PathBuf {
        self.dir.join(htb::HTB_PIN)
    }

    /// The tree, the classifier on the policer's maps, its pin.
    fn install(&mut self, tc: &Tc, tree: &Tree, sc: &SchedulerConfig) -> Result<()> {
        let policer = attach::maps_here(&self.iface)?;
        let prog = ClassifierProgram::load(&policer)?;
        let maps = prog.maps()?;
        maps.set_port(&tree.port(sc.link_bps))?;
        let classes: Vec<(u32, crate::sched::ClassConfig)> = sc
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| (i as u32 + 1, c.clone()))
            .collect();
        // A file is checked when parsed; a config made otherwise, here.
        Engine::Htb
            .check_class_count(classes.len())
            .map_err(QosError::Config)?;
        // The table is new (every slot free): the classes' slots alone.
        let index = ClassIndex::new(&classes);
        for (id, c) in &classes {
            maps.set_class_slot(*id, &class_slot(c, index.parent_id(c)))?;
        }
        let made = (|| {
            htb::build(tc, tree, sc.link_bps, sc.link_burst, &classes)?;
            let link = prog.attach(&sc.egress)?;
            // Pinned, or undone: the link detaches when dropped unpinned.
            link.pin(&self.pin())?;
            Ok::<_, QosError>(())
        })();
        if made.is_err() {
            // No record yet: the tree goes here (the policer with `self`).
            htb::remove_unrecorded(tc, tree.ifindex);
        } else {
            // A tc router port there delivers through the tree from now on.
            refresh_port_logged(tree.ifindex);
        }
        made
    }

    /// The policer's counters and the classes' (from the kernel).
    pub fn stats(&self) -> Result<PolicerStats> {
        attach::stats(&self.iface)
    }

    /// Removes the tree, the classifier and the policer.
    pub fn stop(mut self) -> Result<()> {
        self.stopped = true;
        self.remove()
    }

    fn remove(&self) -> Result<()> {
        if self.dir.exists() {
            attach::detach(&self.iface)?;
        }
        Ok(())
    }
}

impl Drop for HtbEngine {
    fn drop(&mut self) {
        if !self.stopped {
            if let Err(e) = self.remove() {
                tracing::warn!("removing the htb engine of {}: {e}", self.iface);
            }
        }
    }
}
