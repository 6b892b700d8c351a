//! Device settings netlink does not carry here: veth offloads through the
//! ethtool ioctl (struct and command numbers generated from the kernel's
//! headers by build.rs, see `uapi`).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::uapi::ethtool_value;

use crate::error::{HostError, Result};
use crate::netns;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    /// TX checksum offload. On veth it leaves TCP/UDP checksums to be filled
    /// in later (CHECKSUM_PARTIAL), which an XDP redirect never does: the
    /// receiver then drops the datagram.
    TxChecksum,
    /// Generic segmentation offload: the sender hands the device TCP
    /// super-packets that an XDP program sees as one oversized frame.
    Gso,
    /// Generic receive offload. On veth it also gives the receiving end a
    /// NAPI instance (ring and poll) instead of the sending CPU's backlog,
    /// which threaded NAPI can then move to a CPU of one's choice.
    Gro,
    /// TCP segmentation offload. On veth, with it on at the sender, only
    /// socket-owned skbs may take the receiver's NAPI (GRO) path; others
    /// (AF_XDP's) go to the sending CPU's backlog.
    Tso,
}

impl Offload {
    /// The ethtool (get, set) commands.
    fn commands(self) -> (u32, u32) {
        use crate::uapi::*;
        match self {
            Offload::TxChecksum => (ETHTOOL_GTXCSUM, ETHTOOL_STXCSUM),
            Offload::Gso => (ETHTOOL_GGSO, ETHTOOL_SGSO),
            Offload::Gro => (ETHTOOL_GGRO, ETHTOOL_SGRO),
            Offload::Tso => (ETHTOOL_GTSO, ETHTOOL_STSO),
        }
    }

    /// The name `ethtool -k` shows.
    pub fn ethtool_name(self) -> &'static str {
        match self {
            Offload::TxChecksum => "tx-checksumming",
            Offload::Gso => "generic-segmentation-offload",
            Offload::Gro => "generic-receive-offload",
            Offload::Tso => "tcp-segmentation-offload",
        }
    }
}

/// Turns an offload of `ns:iface` on or off.
pub fn set_offload(ns: &str, iface: &str, offload: Offload, on: bool) -> Result<()> {
    netns::run_in(ns, || ethtool(iface, offload.commands().1, u32::from(on)))?
        .map(|_| ())
        .map_err(|e| {
            HostError::Other(format!(
                "setting {} {} on {ns}:{iface}: {e}",
                offload.ethtool_name(),
                if on { "on" } else { "off" }
            ))
        })
}

/// Whether an offload of `iface` in the calling thread's namespace is on.
pub fn offload_here(iface: &str, offload: Offload) -> Result<bool> {
    ethtool(iface, offload.commands().0, 0)
        .map(|v| v != 0)
        .map_err(|e| {
            HostError::Other(format!(
                "reading {} of {iface}: {e}",
                offload.ethtool_name()
            ))
        })
}

/// Whether an offload of `ns:iface` is on.
pub fn offload(ns: &str, iface: &str, offload: Offload) -> Result<bool> {
    netns::run_in(ns, || offload_here(iface, offload))?
}

/// An offload set on some interfaces for a while: each is put back as it
/// was when this is dropped (on error and Ctrl-C too).
pub struct OffloadOverride {
    offload: Offload,
    /// (namespace, interface, value before).
    before: Vec<(String, String, bool)>,
}

impl OffloadOverride {
    /// Sets `offload` to `on` on every (namespace, interface) of `ends`.
    pub fn set(
        ends: impl IntoIterator<Item = (String, String)>,
        offload: Offload,
        on: bool,
    ) -> Result<OffloadOverride> {
        let mut set = OffloadOverride {
            offload,
            before: Vec::new(),
        };
        for (ns, iface) in ends {
            let was = self::offload(&ns, &iface, offload)?;
            set_offload(&ns, &iface, offload, on)?;
            set.before.push((ns, iface, was));
        }
        Ok(set)
    }
}

impl Drop for OffloadOverride {
    fn drop(&mut self) {
        for (ns, iface, was) in &self.before {
            if let Err(e) = set_offload(ns, iface, self.offload, *was) {
                eprintln!(
                    "peregrine: restoring {} on {ns}:{iface}: {e}",
                    self.offload.ethtool_name()
                );
            }
        }
    }
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
        [
            (self.tx_checksum, Offload::TxChecksum),
            (self.gso, Offload::Gso),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, o)| o.ethtool_name())
        .collect()
    }
}

/// TX checksum offload and GSO of `iface` in the calling thread's namespace.
pub fn tx_offloads(iface: &str) -> Result<TxOffloads> {
    Ok(TxOffloads {
        tx_checksum: offload_here(iface, Offload::TxChecksum)?,
        gso: offload_here(iface, Offload::Gso)?,
    })
}

/// One ethtool command that carries a `struct ethtool_value` (get or set)
/// on `iface` in the calling thread's namespace; the value the kernel left
/// in the struct.
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
            crate::uapi::SIOCETHTOOL as libc::c_ulong,
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

/// RX queues of `iface` in the calling thread's namespace, as its sysfs
/// directory lists them (0 when it cannot be read). An AF_XDP consumer
/// must bind one socket per queue: a packet reaches only a socket bound to
/// the queue it arrived on. Under `ip netns exec` /sys is the namespace's.
pub fn rx_queues_here(iface: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(0)
}
