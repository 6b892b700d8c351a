//! Container network modes as lab topologies (`topologies/netmodes/*.toml`,
//! built by `Lab::up`), with where each mode's sender and receiver sit, and
//! one measured run of an I/O path through a mode (`run_pair`): the
//! receiver's checks, the kernel's drop counters along the way, CPU.
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::iopath::{self, IoPath, Receiver, RecvConfig, RecvReport, SendConfig, SendReport};
use crate::measure::CpuSnapshot;
use crate::pacing::{Limit, Rate};
use crate::{Endpoint, Lab, Lifetime, Topology};

/// The UDP port receivers listen on (published by the bridge mode's NAT).
pub const PORT: u16 = 5001;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum NetMode {
    Host,
    Bridge,
    Macvlan,
    Overlay,
    SameHost,
}

/// Where a mode's traffic starts and ends.
struct Ends {
    tx: &'static str,
    rx: &'static str,
    /// Where the sender sends (the receiver's address, or the address that
    /// publishes its port), v4 and v6.
    dst: [&'static str; 2],
    /// The receiver's own address, v4 and v6.
    local: [&'static str; 2],
}

impl NetMode {
    pub const ALL: [NetMode; 5] = [
        NetMode::Host,
        NetMode::Bridge,
        NetMode::Macvlan,
        NetMode::Overlay,
        NetMode::SameHost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NetMode::Host => "host",
            NetMode::Bridge => "bridge",
            NetMode::Macvlan => "macvlan",
            NetMode::Overlay => "overlay",
            NetMode::SameHost => "same-host",
        }
    }

    /// The mode's topology file (the built-in `netmode-<mode>`).
    pub fn topology_toml(self) -> &'static str {
        crate::topology::builtin::get(&format!("netmode-{}", self.as_str()))
            .expect("every mode has a built-in topology")
    }

    pub fn topology(self) -> Result<Topology> {
        Topology::from_toml(self.topology_toml())
    }

    fn ends(self) -> Ends {
        match self {
            NetMode::Host => Ends {
                tx: "a",
                rx: "b",
                dst: ["198.18.0.2", "2001:db8::2"],
                local: ["198.18.0.2", "2001:db8::2"],
            },
            NetMode::Bridge => Ends {
                tx: "c1",
                rx: "c2",
                dst: ["198.18.0.2", "2001:db8::2"],
                local: ["198.19.2.2", "2001:db8:2::2"],
            },
            NetMode::Macvlan => Ends {
                tx: "c1",
                rx: "c2",
                dst: ["198.18.0.12", "2001:db8::12"],
                local: ["198.18.0.12", "2001:db8::12"],
            },
            NetMode::Overlay | NetMode::SameHost => Ends {
                tx: "c1",
                rx: "c2",
                dst: ["198.19.0.2", "2001:db8:19::2"],
                local: ["198.19.0.2", "2001:db8:19::2"],
            },
        }
    }
}

impl std::fmt::Display for NetMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for NetMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if let Some(u) = UNAVAILABLE.iter().find(|u| u.0 == s) {
            return Err(format!(
                "network mode {s:?} cannot be built here: {}",
                probe_unavailable(u.1)
                    .unwrap_or_else(|| "it needs a kernel feature this machine lacks".into())
            ));
        }
        NetMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown network mode {s:?}: expected host, bridge, macvlan, overlay or same-host"
                )
            })
    }
}

/// Modes container runtimes offer that need kernel features, by name and
/// what they need.
const UNAVAILABLE: [(&str, Feature); 3] = [
    ("macvlan-8021q", Feature::Vlan),
    ("ipvlan", Feature::Ipvlan),
    ("ovs-bridge", Feature::Openvswitch),
];

#[derive(Debug, Clone, Copy)]
enum Feature {
    Vlan,
    Ipvlan,
    Openvswitch,
}

/// A mode that cannot be built on this kernel, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Unavailable {
    pub mode: String,
    pub reason: String,
}

/// The modes that need what this kernel lacks (802.1Q VLANs for macvlan
/// trunks, ipvlan, Open vSwitch for the seed's Docker bridge), found by
/// asking the kernel, not assumed.
pub fn unavailable_modes() -> Vec<Unavailable> {
    UNAVAILABLE
        .iter()
        .filter_map(|(mode, f)| {
            probe_unavailable(*f).map(|reason| Unavailable {
                mode: mode.to_string(),
                reason,
            })
        })
        .collect()
}

/// Namespaces of kernel probes: `pg-probe-<pid>`.
const PROBE_PREFIX: &str = "pg-probe-";

/// Why `f` is unavailable, or None if the kernel has it. Link kinds are
/// tried for real in a throwaway namespace (removed again); Open vSwitch's
/// datapath is a module that is either loaded or not.
fn probe_unavailable(f: Feature) -> Option<String> {
    let kind = match f {
        Feature::Openvswitch => {
            return (!std::path::Path::new("/sys/module/openvswitch").exists()).then(|| {
                "the kernel has no Open vSwitch datapath (module openvswitch not loaded)".into()
            })
        }
        Feature::Vlan => "vlan",
        Feature::Ipvlan => "ipvlan",
    };
    // Probes a killed run left behind go first (named by their pid).
    for stale in peregrine_host::netns::list() {
        let pid = stale
            .strip_prefix(PROBE_PREFIX)
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !std::path::Path::new(&format!("/proc/{p}")).exists()) {
            let _ = peregrine_host::netns::delete(&stale);
        }
    }
    let ns = format!("{PROBE_PREFIX}{}", std::process::id());
    let _ = peregrine_host::netns::delete(&ns);
    peregrine_host::netns::create(&ns).ok()?;
    let ip = |args: &[&str]| {
        std::process::Command::new("ip")
            .args(["-n", &ns])
            .args(args)
            .output()
    };
    let _ = ip(&["link", "add", "pr0", "type", "veth", "peer", "name", "pr1"]);
    let extra: &[&str] = match f {
        Feature::Vlan => &["id", "10"],
        _ => &["mode", "l2"],
    };
    let mut args = vec!["link", "add", "link", "pr0", "name", "pr2", "type", kind];
    args.extend_from_slice(extra);
    let out = ip(&args);
    let _ = peregrine_host::netns::delete(&ns);
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "the kernel refuses {kind} links ({})",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("cannot probe {kind} links: {e}")),
    }
}

/// A mode's lab, up, with its two ends.
pub struct ModeLab {
    pub mode: NetMode,
    pub lab: Lab,
}

impl ModeLab {
    /// Builds the mode's lab (removed on drop, also on Ctrl-C).
    pub fn up(mode: NetMode) -> Result<ModeLab> {
        let lab = Lab::up(mode.topology()?, Lifetime::Ephemeral)?;
        let ml = ModeLab { mode, lab };
        for v6 in [false, true] {
            ml.wait_until_carrying(v6, Duration::from_secs(5))?;
        }
        Ok(ml)
    }

    /// Sends a probe datagram every 10 ms from the sender's host to the
    /// receiver's address until one arrives: bridges, NAT and neighbours
    /// settle for a moment after a lab is built, and what is sent before is
    /// lost.
    fn wait_until_carrying(&self, v6: bool, timeout: Duration) -> Result<()> {
        use peregrine_host::netns::run_in;
        let io = |e: std::io::Error| LabError::Other(format!("mode {} probe: {e}", self.mode));
        let rx =
            run_in(&self.rx_ns(), || std::net::UdpSocket::bind(self.local(v6)))?.map_err(io)?;
        rx.set_nonblocking(true).map_err(io)?;
        let any: SocketAddr = if v6 { "[::]:0" } else { "0.0.0.0:0" }
            .parse()
            .expect("literal");
        let tx = run_in(&self.tx_ns(), || std::net::UdpSocket::bind(any))?.map_err(io)?;
        let start = Instant::now();
        let mut buf = [0u8; 64];
        while start.elapsed() < timeout {
            peregrine_host::signals::check()?;
            let _ = tx.send_to(b"peregrine probe", self.dst(v6));
            std::thread::sleep(Duration::from_millis(10));
            if rx.recv(&mut buf).is_ok() {
                // Late probes still in flight must not reach a receiver.
                std::thread::sleep(Duration::from_millis(20));
                while rx.recv(&mut buf).is_ok() {}
                return Ok(());
            }
        }
        Err(LabError::Other(format!(
            "mode {} carried no IPv{} datagram from {} to {} in {timeout:?}",
            self.mode,
            if v6 { 6 } else { 4 },
            self.dst(v6),
            self.local(v6)
        )))
    }

    pub fn tx_ns(&self) -> String {
        self.lab.ns(self.mode.ends().tx)
    }

    pub fn rx_ns(&self) -> String {
        self.lab.ns(self.mode.ends().rx)
    }

    /// Where the sender sends, v4 or v6.
    pub fn dst(&self, v6: bool) -> SocketAddr {
        let ip: IpAddr = self.mode.ends().dst[usize::from(v6)]
            .parse()
            .expect("literal");
        SocketAddr::new(ip, PORT)
    }

    /// The receiver's address, v4 or v6.
    pub fn local(&self, v6: bool) -> SocketAddr {
        let ip: IpAddr = self.mode.ends().local[usize::from(v6)]
            .parse()
            .expect("literal");
        SocketAddr::new(ip, PORT)
    }

    /// The MTU of the sender's link.
    pub fn mtu(&self) -> u32 {
        let tx = Endpoint {
            host: self.mode.ends().tx.into(),
            iface: "eth0".into(),
        };
        let t = self.lab.topology();
        t.links
            .iter()
            .find(|l| l.a == tx || l.b == tx)
            .map(|l| l.mtu)
            .unwrap_or(1500)
    }

    /// Refuses a payload the sender's link cannot carry unfragmented.
    pub fn check_fits(&self, payload_len: usize, v6: bool) -> Result<()> {
        iopath::check_mtu(payload_len, v6, self.mtu(), &format!("mode {}", self.mode))
    }
}

/// One run of a path through a mode.
#[derive(Debug, Clone, Copy)]
pub struct PairSpec {
    pub path: IoPath,
    pub payload_len: usize,
    pub v6: bool,
    pub rate: Rate,
    pub limit: Limit,
    /// CPUs for the sender and the receiver threads.
    pub cpus: Option<(usize, usize)>,
}

/// Where lost datagrams went, as the kernel counted them.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct LossSplit {
    /// Refused or dropped as they left the sender (send errors, ENOBUFS).
    pub sender: u64,
    /// Dropped by devices and queues on the way (interfaces' TX and RX
    /// drop counters in every namespace of the lab, the CPUs' backlog).
    pub path: u64,
    /// Dropped at the receiving socket or ring (socket buffer full,
    /// PACKET_MMAP ring full, AF_XDP ring full).
    pub receiver: u64,
    /// Lost with no counter to say where (kept visible, never folded in).
    pub unattributed: u64,
}

/// One measured run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PairRun {
    pub mode: NetMode,
    pub path: IoPath,
    pub payload_len: usize,
    pub sent: SendReport,
    pub received: RecvReport,
    /// Sequence numbers sent that never arrived.
    pub lost: u64,
    pub loss: LossSplit,
    /// Busy CPU time of the whole machine during the run, seconds.
    pub busy_cpu_s: f64,
    /// From the first datagram sent to the last one received (at least
    /// the sender's time): what the delivered rate is over. A receiver
    /// still draining its queue after the sender stopped counts.
    pub window_s: f64,
}

impl PairRun {
    /// Delivered datagrams per second, over the delivery window.
    pub fn delivered_pps(&self) -> f64 {
        self.received.packets as f64 / self.window_s.max(1e-9)
    }

    /// CPU of the sending and receiving threads per delivered datagram,
    /// nanoseconds: scheduler run time, exact, and with it the kernel work
    /// done in their context (veth's receive side runs in the sender's).
    pub fn cpu_ns_per_packet(&self) -> f64 {
        (self.sent.cpu_s + self.received.cpu_s) * 1e9 / self.received.packets.max(1) as f64
    }

    /// Busy CPU of the whole machine per delivered datagram (/proc/stat:
    /// tick-sampled, so runs much shorter than a second read coarse).
    pub fn machine_cpu_ns_per_packet(&self) -> f64 {
        self.busy_cpu_s * 1e9 / self.received.packets.max(1) as f64
    }
}

/// Drop counters of every interface of the lab, summed, and the CPUs'
/// backlog drops (`/proc/net/softnet_stat`).
fn path_drops(lab: &Lab) -> Result<u64> {
    let mut nl = peregrine_host::nl::Netlink::new()?;
    let mut sum = 0;
    for ep in lab.topology().interfaces()? {
        let c = nl.link_counters(&lab.ns(&ep.host), &ep.iface)?;
        sum += c.rx_dropped + c.tx_dropped;
    }
    Ok(sum + softnet_drops())
}

fn softnet_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .sum()
}

fn busy_seconds(before: &CpuSnapshot, after: &CpuSnapshot, elapsed: Duration) -> f64 {
    after
        .usage_since(before)
        .iter()
        .map(|c| (100.0 - c.idle_pct) / 100.0 * elapsed.as_secs_f64())
        .sum()
}

/// Sends `spec` through `ml` and checks what arrives: a receiver on the
/// receiving container's eth0, a sender on the sending one's, each on its
/// own thread in its namespace.
pub fn run_pair(ml: &ModeLab, spec: &PairSpec) -> Result<PairRun> {
    ml.check_fits(spec.payload_len, spec.v6)?;
    let (tx_ns, rx_ns) = (ml.tx_ns(), ml.rx_ns());
    let dst = ml.dst(spec.v6);
    let rx = Receiver::start(
        Some(&rx_ns),
        RecvConfig {
            path: spec.path,
            iface: "eth0".into(),
            local: ml.local(spec.v6),
        },
        spec.cpus.map(|c| c.1),
    )?;
    let cfg = peregrine_host::netns::run_in(&tx_ns, || {
        SendConfig::toward(spec.path, dst, 40000, spec.payload_len, spec.limit)
    })??;
    let cfg = SendConfig {
        rate: spec.rate,
        ..cfg
    };
    let drops0 = path_drops(&ml.lab)?;
    let cpu0 = CpuSnapshot::take();
    let t0 = Instant::now();
    let progress = AtomicU64::new(0);
    let cpu = spec.cpus.map(|c| c.0);
    let sent = std::thread::scope(|s| {
        s.spawn(|| -> Result<SendReport> {
            if let Some(c) = cpu {
                peregrine_host::cpu::pin_to_cpu(c)?;
            }
            let _g = peregrine_host::netns::NetnsGuard::enter(&tx_ns)?;
            iopath::send(&cfg, &progress)
        })
        .join()
        .unwrap_or_else(|_| Err(LabError::Other("sender thread panicked".into())))
    })?;
    let (received, lost) = rx.finish(Some(sent.sent), Duration::from_secs(3))?;
    let busy = busy_seconds(&cpu0, &CpuSnapshot::take(), t0.elapsed());
    let path = path_drops(&ml.lab)?.saturating_sub(drops0);
    let mut loss = LossSplit {
        sender: sent.send_drops.min(lost),
        receiver: received.kernel_drops,
        path,
        unattributed: 0,
    };
    loss.receiver = loss.receiver.min(lost - loss.sender);
    loss.path = loss.path.min(lost - loss.sender - loss.receiver);
    loss.unattributed = lost - loss.sender - loss.receiver - loss.path;
    let drained = match (sent.started, received.last_arrival) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    Ok(PairRun {
        window_s: drained.max(sent.elapsed_s),
        mode: ml.mode,
        path: spec.path,
        payload_len: spec.payload_len,
        sent,
        received,
        lost,
        loss,
        busy_cpu_s: busy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_topology_is_valid() {
        for m in NetMode::ALL {
            let t = m.topology().unwrap();
            t.validate().unwrap();
            assert_eq!(m.as_str().parse::<NetMode>().unwrap(), m);
        }
        assert!("vlan9".parse::<NetMode>().is_err());
    }
}
