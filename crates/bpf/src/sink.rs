//! Control side of `bpf/lab/sink.bpf.c`, the receiver-side counting sink.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
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
    if crate::maps::info_name(&info) != "sink" {
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
