//! Device settings netlink does not carry here: veth offloads through the
//! ethtool ioctl (struct and command numbers generated from the kernel's
//! headers, see bpf/include/peregrine/netdev_uapi.h).
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use peregrine_bpf::skel::uapi::types::{
    ethtool_value, peregrine_ethtool_cmd, peregrine_ethtool_get,
};

use crate::error::{HostError, Result};
use crate::netns;

#[derive(Debug, Clone, Copy)]
pub enum Offload {
    /// TX checksum offload. On veth it leaves TCP/UDP checksums to be filled
    /// in later, which an XDP redirect never does: the receiver then drops
    /// the datagram. Labs turn it off so frames carry full checksums.
    TxChecksum,
}

/// Turns an offload of `ns:iface` on or off.
pub fn set_offload(ns: &str, iface: &str, offload: Offload, on: bool) -> Result<()> {
    let cmd = match offload {
        Offload::TxChecksum => peregrine_ethtool_cmd::PG_ETHTOOL_STXCSUM.0,
    };
    let res = netns::run_in(ns, || ethtool(iface, cmd, u32::from(on)))?;
    res.map(|_| ()).map_err(|e| {
        HostError::Other(format!(
            "setting {offload:?} {} on {ns}:{iface}: {e}",
            if on { "on" } else { "off" }
        ))
    })
}

/// The offloads that decide whether XDP may redirect what an interface
/// sends: with either on, a local sender's frames leave it with a partial
/// checksum (TX checksum offload) or as GSO super-packets, state an XDP
/// redirect loses and the receiver then drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxOffloads {
    /// `tx-checksumming` (ethtool -k).
    pub tx_checksum: bool,
    /// `generic-segmentation-offload`.
    pub gso: bool,
}

impl TxOffloads {
    /// The settings that are on, by their `ethtool -k` names.
    pub fn on(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.tx_checksum {
            v.push("tx-checksumming");
        }
        if self.gso {
            v.push("generic-segmentation-offload");
        }
        v
    }
}

/// TX checksum offload and GSO of `iface` in the calling thread's namespace.
pub fn tx_offloads(iface: &str) -> Result<TxOffloads> {
    let get = |cmd: u32, what: &str| {
        ethtool(iface, cmd, 0)
            .map(|v| v != 0)
            .map_err(|e| HostError::Other(format!("reading {what} of {iface}: {e}")))
    };
    Ok(TxOffloads {
        tx_checksum: get(
            peregrine_ethtool_get::PG_ETHTOOL_GTXCSUM.0,
            "tx-checksumming",
        )?,
        gso: get(
            peregrine_ethtool_get::PG_ETHTOOL_GGSO.0,
            "generic-segmentation-offload",
        )?,
    })
}

/// One ethtool_value command (get or set) on `iface` in the calling
/// thread's namespace; the value the kernel left in the struct.
fn ethtool(iface: &str, cmd: u32, data: u32) -> std::io::Result<u32> {
    let mut val = ethtool_value { cmd, data };
    // Safety: plain socket(2); the fd is owned right after.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Safety: fd was just returned by socket(2) and is owned here only.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // Safety: ifreq is plain data; zeroed is a valid empty request.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = iface.as_bytes();
    if name.len() >= req.ifr_name.len() {
        return Err(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    for (d, s) in req.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut val as *mut ethtool_value).cast();
    // Safety: req points at a valid ifreq whose data points at `val`,
    // both alive for the call.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            peregrine_ethtool_cmd::PG_SIOCETHTOOL.0 as libc::c_ulong,
            &mut req,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(val.data)
}

/// Receive Packet Steering on every RX queue of `ns:iface`: packets the
/// device receives outside NAPI (on veth, all skbs it is handed without XDP)
/// are processed on `cpus` instead of the sender's CPU. Restored on drop.
pub struct Rps {
    ns: String,
    iface: String,
    before: Vec<(std::path::PathBuf, String)>,
}

pub fn steer_receive(ns: &str, iface: &str, cpus: &[usize]) -> Result<Rps> {
    let mask: u64 = cpus.iter().fold(0, |m, &c| m | 1u64 << c);
    let dir = format!("/sys/class/net/{iface}/queues");
    let before = netns::with_sysfs(
        ns,
        || -> std::io::Result<Vec<(std::path::PathBuf, String)>> {
            let mut before = Vec::new();
            for e in std::fs::read_dir(&dir)? {
                let e = e?;
                if !e.file_name().to_string_lossy().starts_with("rx-") {
                    continue;
                }
                let path = e.path().join("rps_cpus");
                let old = std::fs::read_to_string(&path)?.trim().to_string();
                std::fs::write(&path, format!("{mask:x}"))?;
                before.push((path, old));
            }
            Ok(before)
        },
    )?
    .map_err(|e| HostError::Other(format!("RPS on {ns}:{iface}: {e}")))?;
    Ok(Rps {
        ns: ns.into(),
        iface: iface.into(),
        before,
    })
}

impl Drop for Rps {
    fn drop(&mut self) {
        let before = std::mem::take(&mut self.before);
        let restored = netns::with_sysfs(&self.ns, || {
            before.iter().all(|(p, old)| std::fs::write(p, old).is_ok())
        });
        if !matches!(restored, Ok(true)) {
            tracing::warn!("could not restore RPS on {}:{}", self.ns, self.iface);
        }
    }
}
