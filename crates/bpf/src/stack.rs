//! Control side of `bpf/stack/steer.bpf.c`, the UDP/IP stack's steering:
//! bound (address, port) pairs and the AF_XDP socket of each RX queue.
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::RawFd;

use crate::error::{BpfError, Result};
use crate::link::xdp_program;
use crate::loader::open_and_load;
use crate::maps;
use crate::pod::Pod;
use crate::skel::steer::types::{stack_bind_key, stack_limits};
use crate::skel::steer::{SteerSkel, SteerSkelBuilder};

pub use crate::skel::steer::types::stack_steer_stats as SteerStats;
pub use libbpf_rs::MapHandle;

/// Bound (address, port) pairs one program holds.
pub const MAX_BINDINGS: u32 = stack_limits::STACK_MAX_BINDINGS.0;
/// RX queues that can have a socket (XSKMAP slot = queue index).
pub const MAX_QUEUES: u32 = stack_limits::STACK_MAX_QUEUES.0;

xdp_program!(SteerProgram, SteerSkel, stack_steer);

/// The map key of a binding: IPv4 addresses IPv4-mapped, the port in
/// network order (as the header defines it).
fn bind_key(addr: IpAddr, port: u16) -> stack_bind_key {
    let v6 = match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    stack_bind_key {
        addr: v6.octets(),
        port: port.to_be(),
        pad: 0,
    }
}

impl SteerProgram {
    pub fn load() -> Result<SteerProgram> {
        // Nothing to configure: bindings and sockets live in maps.
        let skel = open_and_load::<SteerSkelBuilder>("steer.bpf.o", |_| Ok(()))?;
        Ok(SteerProgram { skel })
    }

    /// Steers UDP datagrams to `addr`:`port` to the stack (`addr`
    /// unspecified: to any address of the interface).
    pub fn bind(&self, addr: IpAddr, port: u16) -> Result<()> {
        maps::update(
            &self.skel.maps.stack_bindings,
            bind_key(addr, port).as_bytes(),
            &1u32.to_ne_bytes(),
            &format!("binding {}", show(addr, port)),
        )
    }

    /// Gives `addr`:`port` back to the kernel.
    pub fn unbind(&self, addr: IpAddr, port: u16) -> Result<()> {
        maps::delete(
            &self.skel.maps.stack_bindings,
            bind_key(addr, port).as_bytes(),
            &format!("unbinding {}", show(addr, port)),
        )
    }

    fn check_queue(queue: u32) -> Result<()> {
        if queue >= MAX_QUEUES {
            return Err(BpfError::Invalid(format!(
                "RX queue {queue}: at most {MAX_QUEUES} queues"
            )));
        }
        Ok(())
    }

    /// Puts the AF_XDP socket `fd` bound to RX queue `queue` in its slot.
    pub fn register_socket(&self, queue: u32, fd: RawFd) -> Result<()> {
        Self::check_queue(queue)?;
        maps::update(
            &self.skel.maps.stack_xsks,
            &queue.to_ne_bytes(),
            &(fd as u32).to_ne_bytes(),
            &format!("registering the AF_XDP socket of RX queue {queue}"),
        )
    }

    pub fn unregister_socket(&self, queue: u32) -> Result<()> {
        Self::check_queue(queue)?;
        maps::delete(
            &self.skel.maps.stack_xsks,
            &queue.to_ne_bytes(),
            &format!("clearing the socket of RX queue {queue}"),
        )
    }

    /// The program's counters, summed over CPUs.
    pub fn stats(&self) -> Result<SteerStats> {
        maps::read_per_cpu(&self.skel.maps.stack_steer_stats_map, &0u32.to_ne_bytes())
    }
}

/// An address and port as written in URLs: `[v6]:port` or `v4:port`.
fn show(addr: IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(addr, port).to_string()
}

/// The unspecified address of `addr`'s family (what binds every address).
pub fn unspecified_like(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::frames::{
        arp, garbage, ip4_fragment, ip4_options, ip6_ext_header, ip6_fragment, ip_first_byte,
        udp_ports, vlan, with_protocol, IPV6_DSTOPTS, IPV6_HOPOPTS,
    };
    use crate::fixture::{assert_counters, truncations, Case, Expect, Fixture};
    use crate::{XdpAction, XdpProgram};
    use peregrine_testbed::testing::privileged_here;
    use peregrine_wire::{ethertype, ipproto, ETH_HLEN, IPV4_HLEN, IPV6_HLEN, UDP_HLEN};

    fn udp_to(dst: &str, port: u16) -> Vec<u8> {
        let v6 = dst.contains(':');
        let src = if v6 { "2001:db8::1" } else { "198.18.0.1" };
        udp_ports((src, dst), (40000, port), 100, b"quic initial")
    }

    /// What one frame adds: redirected, no_socket, fragments.
    type Deltas = [u64; 3];
    const NOTHING: Deltas = [0, 0, 0];
    const NO_SOCKET: Deltas = [0, 1, 0];
    const FRAGMENT: Deltas = [0, 0, 1];

    fn pass(n: &str, f: Vec<u8>, effect: Deltas) -> Case<Deltas> {
        Case::new(
            Fixture::new(n, f, XdpAction::Pass, Expect::Unchanged),
            effect,
        )
    }

    fn drop(n: &str, f: Vec<u8>, effect: Deltas) -> Case<Deltas> {
        Case::new(
            Fixture::new(n, f, XdpAction::Drop, Expect::Unchanged),
            effect,
        )
    }

    fn check(p: &SteerProgram, cases: &[Case<Deltas>]) {
        assert_counters(
            "stack steer",
            p.prog(),
            cases,
            || p.stats().unwrap(),
            |s| [s.redirected, s.no_socket, s.fragments],
        );
    }

    /// Without a socket in the XSKMAP every frame ends in the kernel; a
    /// bound one is counted as no_socket, which is how these fixtures see
    /// that it was recognised as the stack's. (The redirect itself, with a
    /// real AF_XDP socket in the map, is a fixture of crates/stack's tests.)
    #[test]
    fn bound_datagrams_are_recognised_and_everything_else_passes() {
        if !privileged_here() {
            return;
        }
        let p = SteerProgram::load().unwrap();
        p.bind("198.18.0.2".parse().unwrap(), 4433).unwrap();
        p.bind("2001:db8::2".parse().unwrap(), 4433).unwrap();
        p.bind("0.0.0.0".parse().unwrap(), 5000).unwrap();
        p.bind("::".parse().unwrap(), 5000).unwrap();
        let v4 = udp_to("198.18.0.2", 4433);
        let v6 = udp_to("2001:db8::2", 4433);
        let mut cut4 = v4.clone();
        cut4.truncate(v4.len() - 1);
        let mut cut6 = v6.clone();
        cut6.truncate(v6.len() - 1);
        let mut fx = vec![
            pass("v4 bound", v4.clone(), NO_SOCKET),
            pass("v6 bound", v6.clone(), NO_SOCKET),
            pass("v4 with options, bound", ip4_options(&v4, 2), NO_SOCKET),
            pass(
                "v4 any-address binding",
                udp_to("198.18.7.7", 5000),
                NO_SOCKET,
            ),
            pass(
                "v6 any-address binding",
                udp_to("2001:db8::77", 5000),
                NO_SOCKET,
            ),
            pass("v4 other port", udp_to("198.18.0.2", 4434), NOTHING),
            pass("v6 other port", udp_to("2001:db8::2", 4434), NOTHING),
            pass("v4 other address", udp_to("198.18.0.3", 4433), NOTHING),
            pass("v6 other address", udp_to("2001:db8::3", 4433), NOTHING),
            // A v4 any-address binding is not a v6 one and the other way round.
            pass(
                "v6 to a port bound on v4 any only",
                {
                    p.bind("0.0.0.0".parse().unwrap(), 6000).unwrap();
                    udp_to("2001:db8::2", 6000)
                },
                NOTHING,
            ),
            pass("arp", arp(), NOTHING),
            pass("garbage", garbage(80), NOTHING),
            pass("icmp", with_protocol(&v4, ipproto::ICMP), NOTHING),
            pass(
                "icmpv6 (ND, echo)",
                with_protocol(&v6, ipproto::ICMPV6),
                NOTHING,
            ),
            pass(
                "tcp to a bound port v4",
                with_protocol(&v4, ipproto::TCP),
                NOTHING,
            ),
            pass(
                "tcp to a bound port v6",
                with_protocol(&v6, ipproto::TCP),
                NOTHING,
            ),
            pass("802.1Q tagged", vlan(&v4, ethertype::VLAN, 3), NOTHING),
            pass("ip version 5", ip_first_byte(&v4, 0x55), NOTHING),
            pass("ihl 4", ip_first_byte(&v4, 0x44), NOTHING),
            pass("v4 cut inside the payload", cut4, NOTHING),
            pass("v6 cut inside the payload", cut6, NOTHING),
            drop(
                "v4 first fragment, bound",
                ip4_fragment(&v4, true, 0),
                FRAGMENT,
            ),
            drop(
                "v6 first fragment, bound",
                ip6_fragment(&v6, true, 0),
                FRAGMENT,
            ),
            pass("v4 later fragment", ip4_fragment(&v4, false, 8), NOTHING),
            pass("v6 later fragment", ip6_fragment(&v6, false, 8), NOTHING),
            pass(
                "v4 first fragment, other port",
                ip4_fragment(&udp_to("198.18.0.2", 53), true, 0),
                NOTHING,
            ),
            pass(
                "v6 first fragment, other port",
                ip6_fragment(&udp_to("2001:db8::2", 53), true, 0),
                NOTHING,
            ),
            // Extension headers other than the fragment header are not
            // walked (documented in steer.bpf.c): the kernel's.
            pass(
                "v6 hop-by-hop, bound",
                ip6_ext_header(&v6, IPV6_HOPOPTS),
                NOTHING,
            ),
            pass(
                "v6 destination options, bound",
                ip6_ext_header(&v6, IPV6_DSTOPTS),
                NOTHING,
            ),
        ];
        // Cut at every byte through Ethernet, IP and UDP headers.
        for (frame, upto, fam) in [
            (&v4, ETH_HLEN + IPV4_HLEN + UDP_HLEN, "v4"),
            (&v6, ETH_HLEN + IPV6_HLEN + UDP_HLEN, "v6"),
        ] {
            for (n, cut) in truncations(frame, upto + 1) {
                fx.push(pass(&format!("{fam} cut at {n}"), cut, NOTHING));
            }
        }
        let frag6 = ip6_fragment(&v6, true, 0);
        for (n, cut) in truncations(&frag6, ETH_HLEN + IPV6_HLEN + 8 + UDP_HLEN) {
            fx.push(pass(&format!("v6 first fragment cut at {n}"), cut, NOTHING));
        }
        check(&p, &fx);
        p.unbind("198.18.0.2".parse().unwrap(), 4433).unwrap();
        p.unbind("::".parse().unwrap(), 5000).unwrap();
        check(
            &p,
            &[
                pass("v4 after unbind", v4, NOTHING),
                pass(
                    "v6 any-address after unbind",
                    udp_to("2001:db8::77", 5000),
                    NOTHING,
                ),
                pass("v6 still bound", v6, NO_SOCKET),
            ],
        );
    }

    #[test]
    fn queues_past_the_map_are_refused() {
        if !privileged_here() {
            return;
        }
        let p = SteerProgram::load().unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsRawFd;
        let e = p
            .register_socket(MAX_QUEUES, udp.as_raw_fd())
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("at most {MAX_QUEUES} queues")), "{e}");
        // A slot in range still refuses what is not an AF_XDP socket.
        assert!(p.register_socket(0, udp.as_raw_fd()).is_err());
    }

    #[test]
    fn keys_map_v4_into_v6() {
        let k = bind_key("198.18.0.2".parse().unwrap(), 4433);
        assert_eq!(&k.addr[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&k.addr[12..], &[198, 18, 0, 2]);
        assert_eq!(k.port, 4433u16.to_be());
        assert_eq!(
            unspecified_like("2001:db8::1".parse().unwrap()),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        );
    }
}
