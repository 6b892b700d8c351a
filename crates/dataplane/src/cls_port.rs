//! A router port at tc ingress as a cls_bpf filter in a clsact qdisc,
//! instead of a tcx link. Attaching a tcx link waits out an RCU grace
//! period in the kernel (13 ms a port measured here: 1.3 s for a router of
//! 100 ports); a filter is one netlink request (0.2 ms). The program and
//! what it does are the same: direct action, its return code the verdict.
//!
//! A filter is not a link: it names no interface a later command can read
//! from anywhere, and nothing removes it when its owner dies. So each port
//! keeps a record (`peregrine_bpf::cls`) in its own pin directory, made
//! before the filter: the program, the interface (which the kernel forgets
//! when the device goes), whether this attach made the clsact qdisc, and
//! the namespace.
//!
//! The user's state is left as it was: a clsact qdisc that was there is
//! kept, with every filter in it; a filter at our priority and handle that
//! is not ours makes the attach fail, and detach removes only a filter
//! running the recorded program. A clsact this attach made is removed with
//! the port's filter when no other filter is left in it.
//!
//! Known limits: checking for a clsact and then making one is two
//! requests (someone adding one in between makes the attach fail, with the
//! kernel's "File exists"); a chain with no filters in it keeps a clsact
//! we made (`holds_filters` sees filters, not empty chains); a clsact we
//! made that a user deleted and made again, empty, before our detach is
//! taken for ours; a filter removed by hand (`tc qdisc del ... clsact`)
//! reads as running from the record until its interface goes (`running`
//! asks the kernel: the agent does, and puts the filter back).
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use peregrine_bpf::cls;
use peregrine_host::netns;
use peregrine_host::tc::{Tc, CLSACT_EGRESS, CLSACT_INGRESS};

use crate::error::{DataplaneError, Result};

/// The filters' priority at clsact ingress: late, after filters a user
/// adds with `tc` (whose first priority is 49152 = 0xc000 by default; a
/// lower number runs first).
pub const PRIO: u16 = 0xff00;
/// The filters' handle within `PRIO`.
pub const HANDLE: u32 = 1;
/// The name `tc filter show` lists.
const NAME: &str = "peregrine";

fn other_namespace(tc: &Tc, record: &Path) -> DataplaneError {
    DataplaneError::Other(format!(
        "the tc port recorded at {} is not in the namespace this request works in (netns cookie {})",
        peregrine_bpf::bpffs::display(record),
        tc.netns_cookie()
    ))
}

/// Attaches `prog` to interface `ifindex` of `tc`'s namespace (which must
/// be the calling thread's) at clsact ingress, recording it in `record`
/// (a directory of its own, which must not hold a record); `commit` then
/// marks it kept. On error nothing of this call is left: no filter, no
/// clsact it made, no record.
pub fn attach(tc: &Tc, prog: BorrowedFd<'_>, ifindex: u32, record: &Path) -> Result<()> {
    if peregrine_host::netns::cookie()? != tc.netns_cookie() {
        return Err(other_namespace(tc, record));
    }
    let iface = peregrine_bpf::link::iface_name(ifindex);
    cls::create(record, prog, ifindex, tc.netns_cookie())?;
    let made = (|| -> Result<()> {
        match tc.ingress_qdisc(ifindex)?.as_deref() {
            None => {
                // Noted first: a run killed once it is made still knows.
                cls::note_made_clsact(record, ifindex)?;
                if let Err(e) = tc.add_clsact(ifindex) {
                    let _ = cls::forget_made_clsact(record);
                    return Err(e.into());
                }
            }
            Some("clsact") => {}
            Some(other) => {
                return Err(DataplaneError::Request(format!(
                    "{iface} has an {other} qdisc at ingress (someone's): a tc port needs clsact there; \
                     remove it or attach with tcx"
                )))
            }
        }
        tc.add_bpf_filter(ifindex, CLSACT_INGRESS, PRIO, HANDLE, prog, NAME)
            .map_err(|e| {
                DataplaneError::Other(format!(
                    "{iface}: a filter at clsact ingress priority {PRIO} handle {HANDLE}: {e}"
                ))
            })
    })();
    if let Err(e) = made {
        // What this call made goes (a filter the kernel made although it
        // answered with an error too); a record that cannot be cleared
        // stays, for its owner to find.
        let _ = detach(tc, record);
        return Err(e);
    }
    Ok(())
}

/// Marks the port recorded at `record` as kept by its owner: from here on
/// its record reads it as running. Until then (an attach killed part-way,
/// a new router not yet whole) it reads as stale, and the next run
/// removes it.
pub fn commit(record: &Path) -> Result<()> {
    Ok(cls::note_attached(record)?)
}

/// The filter `record` says was attached is there: its interface lives,
/// and the filter at `PRIO`/`HANDLE` runs the recorded program.
pub fn running(tc: &Tc, record: &Path) -> Result<bool> {
    let r = cls::read(record)?;
    if !r.live() || r.netns_cookie != tc.netns_cookie() {
        return Ok(false);
    }
    ours(tc, r.ifindex, r.prog_id)
}

/// Whether the filter at `PRIO`/`HANDLE` of `ifindex` runs `prog_id`.
fn ours(tc: &Tc, ifindex: u32, prog_id: u32) -> Result<bool> {
    Ok(tc
        .bpf_filters(ifindex, CLSACT_INGRESS)?
        .iter()
        .any(|f| f.prio == PRIO && f.handle == HANDLE && f.prog_id == Some(prog_id)))
}

/// The programs at tc ingress of `ifindex` in the calling thread's
/// namespace, in the order the kernel runs them: the tcx links first,
/// then the clsact qdisc's cls_bpf filters by priority (what the tcx
/// programs pass on reaches the filters).
pub fn tc_ingress_programs(ifindex: u32) -> Result<Vec<u32>> {
    let mut ids = peregrine_bpf::tcx::attached_ids(ifindex, peregrine_bpf::TcxDirection::Ingress)?;
    let filters = Tc::open()?.bpf_filters(ifindex, CLSACT_INGRESS)?;
    ids.extend(filters.into_iter().filter_map(|f| f.prog_id));
    Ok(ids)
}

/// Detaches the port recorded at `record` (in `tc`'s namespace, which
/// must be the record's while its interface lives) and removes the
/// record: the filter goes if it runs the recorded program, and the
/// clsact too if this port's attach made it and no filter is left in it.
/// A record whose interface is gone is only removed (the filter and the
/// clsact went with the device); no record there is removed already. A
/// record of an attach killed part-way is detached the same way (what it
/// made, and only that, goes).
pub fn detach(tc: &Tc, record: &Path) -> Result<()> {
    if !cls::is_record(record) {
        // A create killed part-way leaves pins without the devmap.
        return Ok(cls::remove(record)?);
    }
    let r = cls::read(record)?;
    // Its interface is there (the filter may be, attached or not yet
    // marked so).
    if r.ifindex != 0 {
        if r.netns_cookie != tc.netns_cookie() {
            return Err(other_namespace(tc, record));
        }
        if ours(tc, r.ifindex, r.prog_id)? {
            tc.del_filter(r.ifindex, CLSACT_INGRESS, PRIO, HANDLE)?;
        }
        if r.made_clsact
            && tc.ingress_qdisc(r.ifindex)?.as_deref() == Some("clsact")
            && !tc.holds_filters(r.ifindex, CLSACT_INGRESS)?
            && !tc.holds_filters(r.ifindex, CLSACT_EGRESS)?
        {
            tc.del_clsact(r.ifindex)?;
        }
    }
    Ok(cls::remove(record)?)
}

/// The program a recorded port runs, to attach further ports with.
pub fn program(record: &Path) -> Result<impl AsFd> {
    Ok(cls::program(record)?)
}

/// `detach` of each of `records` from wherever the caller is: in the
/// record's namespace, found by its cookie among the namespaces this
/// process can see (named, or held by a process), entered once for all
/// its records. A record whose interface is gone is only removed.
pub fn detach_recorded(records: &[PathBuf]) -> Result<()> {
    let mut by_ns: std::collections::BTreeMap<u64, Vec<&Path>> = Default::default();
    for record in records {
        if !cls::is_record(record) {
            cls::remove(record)?;
            continue;
        }
        let r = cls::read(record)?;
        if r.ifindex == 0 {
            cls::remove(record)?;
            continue;
        }
        by_ns.entry(r.netns_cookie).or_default().push(record);
    }
    for (cookie, records) in by_ns {
        let here = || -> Result<()> {
            let tc = Tc::open()?;
            records.iter().try_for_each(|r| detach(&tc, r))
        };
        if netns::run_in_cookie(cookie, here).transpose()?.is_none() {
            return Err(DataplaneError::Other(format!(
                "the tc port recorded at {} is in a network namespace this process cannot reach (netns cookie {cookie}); remove it from there",
                peregrine_bpf::bpffs::display(records[0]),
            )));
        }
    }
    Ok(())
}

/// A port this process attached as a filter (`attach`): detached when
/// dropped (on an error path, a panic's unwinding) unless `keep` said its
/// record is where its owner finds it.
pub struct ClsPort {
    pub ifindex: u32,
    pub record: PathBuf,
    /// The namespace it was attached in (None: the caller's).
    ns: Option<String>,
    kept: bool,
}

impl ClsPort {
    /// `attach` in namespace `ns` (None: the caller's), where `tc` was
    /// opened: `prog` on `iface`, recorded at `record`.
    pub fn attach(
        ns: Option<&str>,
        tc: &Tc,
        prog: BorrowedFd<'_>,
        iface: &str,
        record: &Path,
    ) -> Result<ClsPort> {
        let ifindex = netns::run_in_opt(ns, || -> Result<u32> {
            let ifindex = peregrine_bpf::link::ifindex(iface)?;
            attach(tc, prog, ifindex, record)?;
            Ok(ifindex)
        })??;
        Ok(ClsPort {
            ifindex,
            record: record.to_path_buf(),
            ns: ns.map(str::to_string),
            kept: false,
        })
    }

    /// Leaves the port attached when this value drops, its record marked
    /// kept (`commit`): it is pinned where its owner finds it.
    pub fn keep(&mut self) -> Result<()> {
        commit(&self.record)?;
        self.kept = true;
        Ok(())
    }
}

impl Drop for ClsPort {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let done = netns::run_in_opt(self.ns.as_deref(), || -> Result<()> {
            detach(&Tc::open()?, &self.record)
        });
        if let Err(e) = done.map_err(DataplaneError::from).and_then(|r| r) {
            tracing::warn!(
                "detaching the tc port recorded at {}: {e}",
                self.record.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_bpf::router::RouterProgram;
    use peregrine_testbed::testing::{in_fresh_netns, privileged_here, run, TestPins};

    /// `tc ARGS` (in the calling thread's namespace); its output.
    fn tc_out(args: &[&str]) -> String {
        let out = std::process::Command::new("tc")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The ingress filters of `dev` as `tc -j` lists them (kind, prio),
    /// each once (u32 lists its hash table beside its filter).
    fn filters(dev: &str) -> Vec<(String, u64)> {
        let v: serde_json::Value =
            serde_json::from_str(&tc_out(&["-j", "filter", "show", "dev", dev, "ingress"]))
                .unwrap_or(serde_json::Value::Array(Vec::new()));
        v.as_array()
            .unwrap()
            .iter()
            .filter(|f| f.get("options").is_some())
            .map(|f| {
                (
                    f["kind"].as_str().unwrap().to_string(),
                    f["pref"].as_u64().unwrap(),
                )
            })
            .fold(Vec::new(), |mut out, f| {
                if !out.contains(&f) {
                    out.push(f);
                }
                out
            })
    }

    /// The kinds of `dev`'s qdiscs as `tc -j` lists them.
    fn qdiscs(dev: &str) -> Vec<String> {
        let v: serde_json::Value =
            serde_json::from_str(&tc_out(&["-j", "qdisc", "show", "dev", dev])).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|q| q["kind"].as_str().unwrap().to_string())
            .collect()
    }

    /// Runs `f` (when privileged) in a fresh namespace with a router
    /// program loaded, veth `pg0` (its index), a `Tc` there and a record
    /// path in a pin directory of the test's own.
    fn on_a_veth(name: &str, f: impl FnOnce(&RouterProgram, u32, &Tc, &Path) + Send) {
        if !privileged_here() {
            return;
        }
        let pins = TestPins::new(name);
        in_fresh_netns(|| {
            let router = RouterProgram::load(peregrine_bpf::router::FibMode::Full).unwrap();
            let ifindex = veth();
            let tc = Tc::open().unwrap();
            f(&router, ifindex, &tc, &pins.0.join("port"));
        });
    }

    /// A veth pair `pg0`/`pg1` in the calling thread's namespace, up.
    fn veth() -> u32 {
        run(
            "ip",
            &["link", "add", "pg0", "type", "veth", "peer", "name", "pg1"],
        );
        run("ip", &["link", "set", "pg0", "up"]);
        run("ip", &["link", "set", "pg1", "up"]);
        peregrine_bpf::link::ifindex("pg0").unwrap()
    }

    /// On a device with no qdisc at ingress: the attach makes a clsact and
    /// our filter, both listed by `tc`, the record says so; detach takes
    /// both away, and the record.
    #[test]
    fn a_port_on_a_bare_device_leaves_it_bare() {
        on_a_veth("cls-bare", |router, ifindex, tc, rec| {
            attach(tc, router.tc_prog().as_fd(), ifindex, rec).unwrap();
            // Not kept yet: its record reads as a stale port.
            assert!(!running(tc, rec).unwrap());
            commit(rec).unwrap();
            assert!(qdiscs("pg0").contains(&"clsact".to_string()));
            assert_eq!(filters("pg0"), vec![("bpf".to_string(), u64::from(PRIO))]);
            assert!(running(tc, rec).unwrap());
            let r = cls::read(rec).unwrap();
            assert!(r.live() && r.made_clsact && r.ifindex == ifindex);
            assert_eq!(
                r.prog_id,
                peregrine_bpf::maps::program_id(router.tc_prog().as_fd()).unwrap()
            );
            // A second record of the same port is refused; the first stays.
            assert!(attach(tc, router.tc_prog().as_fd(), ifindex, rec).is_err());
            assert!(running(tc, rec).unwrap());
            detach(tc, rec).unwrap();
            assert!(!qdiscs("pg0").contains(&"clsact".to_string()));
            assert!(!rec.exists());
            // Detached twice: nothing there, nothing to do.
            detach(tc, rec).unwrap();
        });
    }

    /// A user's clsact with a filter of theirs: the port joins it, and
    /// detach leaves the clsact and their filter as they were. A clsact
    /// we made that a user put a filter in since is theirs too: kept.
    #[test]
    fn the_users_clsact_and_filters_stay() {
        on_a_veth("cls-users", |router, ifindex, tc, rec| {
            run("tc", &["qdisc", "add", "dev", "pg0", "clsact"]);
            let theirs = [
                "filter", "add", "dev", "pg0", "ingress", "prio", "7", "u32", "match", "u32", "0",
                "0", "flowid", "1:1",
            ];
            run("tc", &theirs);
            attach(tc, router.tc_prog().as_fd(), ifindex, rec).unwrap();
            assert!(!cls::read(rec).unwrap().made_clsact);
            assert_eq!(
                filters("pg0"),
                vec![("u32".to_string(), 7), ("bpf".to_string(), u64::from(PRIO))]
            );
            detach(tc, rec).unwrap();
            assert_eq!(filters("pg0"), vec![("u32".to_string(), 7)]);
            assert!(qdiscs("pg0").contains(&"clsact".to_string()));
            run("tc", &["qdisc", "del", "dev", "pg0", "clsact"]);

            // Ours at first; a user's filter since.
            attach(tc, router.tc_prog().as_fd(), ifindex, rec).unwrap();
            run("tc", &theirs);
            detach(tc, rec).unwrap();
            assert_eq!(filters("pg0"), vec![("u32".to_string(), 7)]);
            assert!(qdiscs("pg0").contains(&"clsact".to_string()));
        });
    }

    /// What the port cannot share is refused in one line, with nothing of
    /// the attach left: a user's filter at our priority (of another kind:
    /// the kernel keeps one kind per priority), a user's ingress qdisc
    /// (not clsact).
    #[test]
    fn what_is_in_the_way_is_refused_and_left_alone() {
        on_a_veth("cls-refused", |router, ifindex, tc, rec| {
            run("tc", &["qdisc", "add", "dev", "pg0", "clsact"]);
            let prio = PRIO.to_string();
            run(
                "tc",
                &[
                    "filter", "add", "dev", "pg0", "ingress", "prio", &prio, "u32", "match", "u32",
                    "0", "0", "flowid", "1:1",
                ],
            );
            let before = tc_out(&["filter", "show", "dev", "pg0", "ingress"]);
            let e = attach(tc, router.tc_prog().as_fd(), ifindex, rec)
                .unwrap_err()
                .to_string();
            assert!(e.contains("pg0") && e.lines().count() == 1, "{e}");
            assert!(!rec.exists(), "the record of a refused attach stayed");
            assert_eq!(tc_out(&["filter", "show", "dev", "pg0", "ingress"]), before);
            assert!(qdiscs("pg0").contains(&"clsact".to_string()));
            run("tc", &["qdisc", "del", "dev", "pg0", "clsact"]);

            run("tc", &["qdisc", "add", "dev", "pg0", "ingress"]);
            let e = attach(tc, router.tc_prog().as_fd(), ifindex, rec)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("an ingress qdisc") && e.lines().count() == 1,
                "{e}"
            );
            assert!(!rec.exists());
            assert!(qdiscs("pg0").contains(&"ingress".to_string()));
        });
    }

    /// The kernel forgets the interface of a record when the device goes:
    /// the record says so from anywhere, and detach removes the record
    /// alone. A record a killed attach left before its filter (the
    /// record, no filter) is removed and nothing else touched; one it left
    /// after its filter, not yet marked attached, reads as not running and
    /// its detach removes that filter.
    #[test]
    fn a_gone_device_or_a_half_made_port_leaves_only_its_record() {
        on_a_veth("cls-gone", |router, ifindex, tc, rec| {
            attach(tc, router.tc_prog().as_fd(), ifindex, rec).unwrap();
            commit(rec).unwrap();
            assert!(cls::read(rec).unwrap().live());
            run("ip", &["link", "del", "pg0"]);
            let r = cls::read(rec).unwrap();
            assert!(!r.live(), "the device went: {r:?}");
            assert!(!running(tc, rec).unwrap());
            detach(tc, rec).unwrap();
            assert!(!rec.exists());

            let ifindex = veth();
            run("tc", &["qdisc", "add", "dev", "pg0", "clsact"]);
            cls::create(rec, router.tc_prog().as_fd(), ifindex, tc.netns_cookie()).unwrap();
            assert!(!running(tc, rec).unwrap());
            detach(tc, rec).unwrap();
            assert!(!rec.exists());
            assert!(
                qdiscs("pg0").contains(&"clsact".to_string()),
                "the user's clsact went"
            );

            // Killed after its filter, before marking the record: not
            // running by the record; detach takes the filter it made.
            let prog = router.tc_prog().as_fd();
            cls::create(rec, prog, ifindex, tc.netns_cookie()).unwrap();
            tc.add_bpf_filter(ifindex, CLSACT_INGRESS, PRIO, HANDLE, prog, NAME)
                .unwrap();
            assert!(!cls::read(rec).unwrap().live());
            assert_eq!(filters("pg0"), vec![("bpf".to_string(), u64::from(PRIO))]);
            detach(tc, rec).unwrap();
            assert!(filters("pg0").is_empty() && !rec.exists());
            assert!(qdiscs("pg0").contains(&"clsact".to_string()));
        });
    }
}
