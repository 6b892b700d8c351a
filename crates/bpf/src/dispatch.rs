//! Control side of `bpf/xsk/dispatch.bpf.c`: UDP port -> function -> AF_XDP socket.
use std::os::fd::RawFd;

#[cfg(test)]
use libbpf_rs::{MapCore, MapFlags};

use crate::error::{BpfError, Result};
use crate::link::xdp_program;
use crate::loader::open_and_load;
use crate::maps;
use crate::pod::Pod;
use crate::skel::dispatch::types::{dispatch_func, dispatch_limits, dispatch_policy};
use crate::skel::dispatch::{DispatchSkel, DispatchSkelBuilder};

pub use crate::skel::dispatch::types::dispatch_stats as DispatchStats;
pub use libbpf_rs::MapHandle;

pub const MAX_FUNCS: u32 = dispatch_limits::DISPATCH_MAX_FUNCS.0;
pub const MAX_SOCKS: u32 = dispatch_limits::DISPATCH_MAX_SOCKS.0;
pub const MAX_QUEUES: u32 = dispatch_limits::DISPATCH_MAX_QUEUES.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    RoundRobin,
    FlowHash,
}

impl Policy {
    fn raw(self) -> u32 {
        match self {
            Policy::RoundRobin => dispatch_policy::DISPATCH_ROUND_ROBIN.0,
            Policy::FlowHash => dispatch_policy::DISPATCH_FLOW_HASH.0,
        }
    }
}

/// XSKMAP slot of function `id`'s worker `worker` on RX queue `queue`.
pub fn slot(id: u32, queue: u32, worker: u32) -> u32 {
    (id * MAX_QUEUES + queue) * MAX_SOCKS + worker
}

xdp_program!(DispatchProgram, DispatchSkel, dispatch);

impl DispatchProgram {
    pub fn load() -> Result<DispatchProgram> {
        // Nothing to configure: functions and sockets are set in maps.
        let skel = open_and_load::<DispatchSkelBuilder>("dispatch.bpf.o", |_| Ok(()))?;
        Ok(DispatchProgram { skel })
    }

    fn check_id(id: u32) -> Result<()> {
        if id >= MAX_FUNCS {
            return Err(BpfError::Invalid(format!(
                "function id {id}: at most {MAX_FUNCS} functions"
            )));
        }
        Ok(())
    }

    /// Routes UDP port `port` to function `id` with `workers` sockets per RX
    /// queue (0: registered but off; its datagrams go to the kernel).
    pub fn set_function(&self, id: u32, port: u16, workers: u32, policy: Policy) -> Result<()> {
        Self::check_id(id)?;
        self.set_workers(id, workers, policy)?;
        maps::update(
            &self.skel.maps.ports,
            &port.to_be_bytes(),
            &id.to_ne_bytes(),
            &format!("routing UDP port {port} to function {id}"),
        )
    }

    /// Changes how many workers per queue a function uses, at run time.
    pub fn set_workers(&self, id: u32, workers: u32, policy: Policy) -> Result<()> {
        Self::check_id(id)?;
        if workers > MAX_SOCKS {
            return Err(BpfError::Invalid(format!(
                "{workers} workers per queue: at most {MAX_SOCKS}"
            )));
        }
        let f = dispatch_func {
            socks: workers,
            policy: policy.raw(),
        };
        maps::update(
            &self.skel.maps.funcs,
            &id.to_ne_bytes(),
            f.as_bytes(),
            &format!("configuring function {id}"),
        )
    }

    /// Stops routing `port` (its datagrams go to the kernel again).
    pub fn remove_port(&self, port: u16) -> Result<()> {
        maps::delete(
            &self.skel.maps.ports,
            &port.to_be_bytes(),
            &format!("removing UDP port {port}"),
        )
    }

    /// Puts an AF_XDP socket (its fd) in slot `slot`.
    pub fn register_socket(&self, slot: u32, fd: RawFd) -> Result<()> {
        maps::update(
            &self.skel.maps.xsks,
            &slot.to_ne_bytes(),
            &(fd as u32).to_ne_bytes(),
            &format!("registering an AF_XDP socket in slot {slot}"),
        )
    }

    pub fn unregister_socket(&self, slot: u32) -> Result<()> {
        maps::delete(
            &self.skel.maps.xsks,
            &slot.to_ne_bytes(),
            &format!("clearing slot {slot}"),
        )
    }

    pub fn stats(&self, id: u32) -> Result<DispatchStats> {
        maps::read_per_cpu(&self.skel.maps.dispatch_stats_map, &id.to_ne_bytes())
    }

    /// The per-function counters map, as a handle another thread can read
    /// (`read_stats`) while the program stays with its owner.
    pub fn stats_map(&self) -> Result<MapHandle> {
        MapHandle::try_from(&self.skel.maps.dispatch_stats_map)
            .map_err(BpfError::libbpf("opening the dispatch counters"))
    }
}

/// Function `id`'s counters from a handle of `stats_map`.
pub fn read_stats(map: &MapHandle, id: u32) -> Result<DispatchStats> {
    maps::read_per_cpu(map, &id.to_ne_bytes())
}

#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::frames::{
        arp, garbage, ip4_fragment, ip4_options, ip6_fragment, udp_ports, vlan, with_protocol,
    };
    use crate::fixture::{assert_counters, truncations, Case, Expect, Fixture};
    use crate::XdpAction;
    use crate::XdpProgram;
    use peregrine_testbed::testing::privileged;
    use peregrine_wire::{ethertype, ipproto};

    fn udp_frame(dst: &str, port: u16) -> Vec<u8> {
        let v6 = dst.contains(':');
        let src = if v6 { "2001:db8::1" } else { "198.18.0.1" };
        udp_ports((src, dst), (3333, port), 200, b"request")
    }

    /// What one frame adds: function 1's no_socket, function 2's disabled,
    /// both functions' redirected packets, and function 1's fragments.
    type Deltas = [u64; 4];

    fn check(d: &DispatchProgram, cases: &[Case<Deltas>]) {
        let stats = || (d.stats(1).unwrap(), d.stats(2).unwrap());
        assert_counters("dispatch", d.prog(), cases, stats, |(s1, s2)| {
            [
                s1.no_socket,
                s2.disabled,
                s1.packets + s2.packets,
                s1.fragments,
            ]
        });
    }

    #[test]
    fn everything_without_a_socket_goes_to_the_kernel_and_is_counted() {
        if !privileged("everything_without_a_socket_goes_to_the_kernel_and_is_counted") {
            return;
        }
        let d = DispatchProgram::load().unwrap();
        d.set_function(1, 1232, 2, Policy::RoundRobin).unwrap();
        d.set_function(2, 7000, 0, Policy::FlowHash).unwrap();
        let pass = |n: &str, f: Vec<u8>, effect: Deltas| {
            Case::new(
                Fixture::new(n, f, XdpAction::Pass, Expect::Unchanged),
                effect,
            )
        };
        let (no_socket, disabled, nothing) = ([1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]);
        let drop = |n: &str, f: Vec<u8>, effect: Deltas| {
            Case::new(
                Fixture::new(n, f, XdpAction::Drop, Expect::Unchanged),
                effect,
            )
        };
        let v4 = udp_frame("198.18.0.2", 1232);
        let mut cut_datagram = v4.clone();
        cut_datagram.truncate(100);
        let mut fx = vec![
            pass("v4 to a function without sockets", v4.clone(), no_socket),
            pass(
                "v6 to a function without sockets",
                udp_frame("2001:db8::2", 1232),
                no_socket,
            ),
            pass(
                "v4 with options to a function without sockets",
                ip4_options(&v4, 1),
                no_socket,
            ),
            pass(
                "v4 to a disabled function",
                udp_frame("198.18.0.2", 7000),
                disabled,
            ),
            pass(
                "v4 to an unknown port",
                udp_frame("198.18.0.2", 53),
                nothing,
            ),
            pass("arp", arp(), nothing),
            pass("garbage", garbage(64), nothing),
            // Issue 9: a request larger than one frame is counted and
            // dropped (was: passed to a kernel with no socket on the port).
            drop(
                "v4 first fragment to a function",
                ip4_fragment(&v4, true, 0),
                [0, 0, 0, 1],
            ),
            drop(
                "v6 first fragment to a function",
                ip6_fragment(&udp_frame("2001:db8::2", 1232), true, 0),
                [0, 0, 0, 1],
            ),
            // Later fragments carry no port: the kernel's.
            pass("v4 later fragment", ip4_fragment(&v4, false, 8), nothing),
            pass(
                "v6 later fragment",
                ip6_fragment(&udp_frame("2001:db8::2", 1232), false, 8),
                nothing,
            ),
            pass(
                "v4 first fragment to an unknown port",
                ip4_fragment(&udp_frame("198.18.0.2", 53), true, 0),
                nothing,
            ),
            pass(
                "v6 first fragment to an unknown port",
                ip6_fragment(&udp_frame("2001:db8::2", 53), true, 0),
                nothing,
            ),
            pass("tcp", with_protocol(&v4, ipproto::TCP), nothing),
            // Tagged frames are the VLAN device's: not looked into.
            pass("802.1Q tagged", vlan(&v4, ethertype::VLAN, 3), nothing),
            // parse.h's rule: a datagram cut short of its total length is
            // not a function's request (was: dispatched).
            pass("v4 cut inside the payload", cut_datagram, nothing),
        ];
        for (n, cut) in truncations(&v4, 42) {
            fx.push(pass(&format!("cut at {n}"), cut, nothing));
        }
        check(&d, &fx);
        // Removing the port: the function no longer sees its datagrams.
        d.remove_port(1232).unwrap();
        check(&d, &[pass("after removal", v4, nothing)]);
    }

    /// Function ids, workers per queue and XSKMAP slots beyond the limits are
    /// refused by the control side before anything is written, and the BPF
    /// side refuses a worker count past MAX_SOCKS written behind its back.
    #[test]
    fn slot_limits_are_refused() {
        if !privileged("slot_limits_are_refused") {
            return;
        }
        let d = DispatchProgram::load().unwrap();
        let invalid = |r: Result<()>, what: &str| match r {
            Err(BpfError::Invalid(m)) => m,
            other => panic!("{what}: expected a refusal, got {other:?}"),
        };
        // The last id and the largest worker count are accepted.
        d.set_function(MAX_FUNCS - 1, 1300, MAX_SOCKS, Policy::RoundRobin)
            .unwrap();
        d.set_workers(MAX_FUNCS - 1, MAX_SOCKS, Policy::FlowHash)
            .unwrap();
        let m = invalid(
            d.set_function(MAX_FUNCS, 1301, 1, Policy::RoundRobin),
            "id MAX_FUNCS",
        );
        assert!(m.contains(&format!("at most {MAX_FUNCS} functions")), "{m}");
        invalid(
            d.set_workers(MAX_FUNCS, 1, Policy::RoundRobin),
            "set_workers id MAX_FUNCS",
        );
        let m = invalid(
            d.set_workers(0, MAX_SOCKS + 1, Policy::RoundRobin),
            "MAX_SOCKS + 1 workers",
        );
        assert!(m.contains(&format!("at most {MAX_SOCKS}")), "{m}");
        invalid(
            d.set_function(0, 1302, MAX_SOCKS + 1, Policy::RoundRobin),
            "set_function with MAX_SOCKS + 1 workers",
        );
        // Refused calls wrote nothing: port 1301 and 1302 are not routed.
        for port in [1301u16, 1302] {
            let routed = d
                .skel
                .maps
                .ports
                .lookup(&port.to_be_bytes(), MapFlags::ANY)
                .unwrap();
            assert!(routed.is_none(), "port {port} routed by a refused call");
        }
        // Slots: the last one exists in the XSKMAP, the next does not. The
        // kernel checks the index before the fd, so a plain UDP socket shows
        // which refusal is which: out of range (E2BIG) vs not an XSK.
        let last = slot(MAX_FUNCS - 1, MAX_QUEUES - 1, MAX_SOCKS - 1);
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsRawFd;
        let fd = udp.as_raw_fd();
        let e = d.register_socket(last + 1, fd).unwrap_err().to_string();
        assert!(e.contains(&format!("slot {}", last + 1)), "{e}");
        let e_last = d.register_socket(last, fd).unwrap_err().to_string();
        assert_ne!(e, e_last, "past the map vs a non-XSK fd in a valid slot");
        // A worker count past MAX_SOCKS written straight into the map (an
        // older or foreign control program): the BPF side counts the
        // function disabled and passes its datagrams.
        let f = dispatch_func {
            socks: MAX_SOCKS + 1,
            policy: Policy::RoundRobin.raw(),
        };
        d.set_function(2, 1303, 1, Policy::RoundRobin).unwrap();
        d.skel
            .maps
            .funcs
            .update(&2u32.to_ne_bytes(), f.as_bytes(), MapFlags::ANY)
            .unwrap();
        let fx = Fixture::new(
            "too many workers in the map",
            udp_frame("198.18.0.2", 1303),
            XdpAction::Pass,
            Expect::Unchanged,
        );
        // Function 2's disabled counter moves; nothing is redirected.
        check(&d, &[Case::new(fx, [0, 1, 0, 0])]);
        let s = d.stats(2).unwrap();
        assert_eq!((s.packets, s.no_socket, s.disabled), (0, 0, 1));
    }

    #[test]
    fn limits_are_checked() {
        assert_eq!(slot(0, 0, 0), 0);
        assert_eq!(slot(1, 0, 0), MAX_QUEUES * MAX_SOCKS);
        assert_eq!(slot(0, 1, 3), MAX_SOCKS + 3);
    }
}
