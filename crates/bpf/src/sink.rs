//! Control side of `bpf/sink.bpf.c`, the receiver-side counting sink.
use std::mem::MaybeUninit;
use std::path::Path;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::error::{BpfError, Result};
use crate::fixture::XdpAction;
use crate::loader::Loaded;
use crate::pod::Pod;
use crate::skel::sink::{SinkSkel, SinkSkelBuilder};
use crate::xdp::{XdpLink, XdpMode};

pub use crate::skel::sink::types::sink_stats as SinkStats;

/// Sum of per-CPU `sink_stats` values.
pub fn sum_stats(per_cpu: &[Vec<u8>]) -> SinkStats {
    per_cpu
        .iter()
        .filter_map(|v| SinkStats::from_bytes(v))
        .fold(SinkStats::default(), |a, b| SinkStats {
            packets: a.packets + b.packets,
            bytes: a.bytes + b.bytes,
            gen_packets: a.gen_packets + b.gen_packets,
            gen_bytes: a.gen_bytes + b.gen_bytes,
            malformed: a.malformed + b.malformed,
        })
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

    /// Pins the counters so other processes (`peregrine sink stats`) can read them.
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
