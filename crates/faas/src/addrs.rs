//! Which requests a server may answer, as the kernel's UDP sockets decide:
//! unicast requests to one of this host's own addresses, from a valid
//! unicast source with a non-zero source port. Anything else answered would
//! make the server a reflector (a reply to a spoofed broadcast source) or an
//! amplifier (one broadcast or multicast request, one reply per server).
//!
//! The AF_XDP invoker sees raw frames, so it checks everything here against
//! the served interface's MAC and addresses (`LocalAddrs`, re-read every
//! second by the invoker). The socket backends get the kernel's checks for
//! the MAC and for martian sources, and check the rest from IP_PKTINFO.
use std::net::{IpAddr, Ipv4Addr};

pub use peregrine_wire::ip::{group_address, invalid_source};
use peregrine_wire::{MacAddr, UdpFrame};

/// Why a request is not answered (each has its own counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Sent to a broadcast or multicast MAC or IP address.
    NotUnicast,
    /// Sent to a unicast MAC or IP address that is not this interface's.
    NotOurs,
    /// From an address no unicast host has (unspecified, broadcast,
    /// multicast, loopback from the wire, or one of ours), or from a group
    /// (broadcast or multicast) source MAC.
    BadSource,
    /// From UDP source port 0, which no reply can be sent to.
    SourcePortZero,
}

/// The served interface's MAC, unicast addresses (v4 and v6, link-local
/// included) and IPv4 broadcast addresses, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalAddrs {
    pub mac: Option<MacAddr>,
    pub unicast: Vec<IpAddr>,
    pub broadcast: Vec<Ipv4Addr>,
}

impl LocalAddrs {
    /// Reads `iface`'s addresses in the calling thread's namespace.
    pub fn read(iface: &str) -> Result<LocalAddrs, String> {
        let all = nix::ifaddrs::getifaddrs()
            .map_err(|e| format!("reading the addresses of {iface}: {e}"))?;
        let mut l = LocalAddrs::default();
        for a in all.filter(|a| a.interface_name == iface) {
            let Some(addr) = a.address else { continue };
            if let Some(ll) = addr.as_link_addr() {
                l.mac = ll.addr().map(MacAddr);
            } else if let Some(v4) = addr.as_sockaddr_in() {
                let ip = v4.ip();
                l.unicast.push(IpAddr::V4(ip));
                // The kernel routes the prefix's all-ones address as
                // broadcast (prefixes shorter than /31) whether or not a
                // `brd` was given; getifaddrs reports the address itself in
                // the broadcast field when none was.
                let mask = a
                    .netmask
                    .as_ref()
                    .and_then(|m| m.as_sockaddr_in())
                    .map(|m| m.ip());
                if let Some(m) = mask.filter(|m| u32::from(*m).count_ones() < 31) {
                    l.broadcast
                        .push(Ipv4Addr::from(u32::from(ip) | !u32::from(m)));
                }
                if let Some(b) = a.broadcast.as_ref().and_then(|b| b.as_sockaddr_in()) {
                    if b.ip() != ip {
                        l.broadcast.push(b.ip());
                    }
                }
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                l.unicast.push(IpAddr::V6(v6.ip()));
            }
        }
        l.unicast.sort();
        l.broadcast.sort();
        l.broadcast.dedup();
        Ok(l)
    }

    fn is_broadcast(&self, ip: IpAddr) -> bool {
        matches!(ip, IpAddr::V4(a) if self.broadcast.contains(&a))
    }

    /// Whether the request may be answered, and if not, why.
    pub fn check(&self, req: &UdpFrame<'_>) -> Result<(), Refusal> {
        // Group bit: broadcast (all ones) and multicast MACs.
        if req.dst_mac.is_group() || group_address(req.dst_ip) || self.is_broadcast(req.dst_ip) {
            return Err(Refusal::NotUnicast);
        }
        if Some(req.dst_mac) != self.mac || !self.unicast.contains(&req.dst_ip) {
            return Err(Refusal::NotOurs);
        }
        // A group source MAC (broadcast or multicast) is no host's: the
        // reply would go to every host on the link. The kernel replies to
        // the neighbour's unicast MAC; a frame source can only be spoofed.
        if req.src_mac.is_group()
            || invalid_source(req.src_ip, true)
            || self.is_broadcast(req.src_ip)
            || self.unicast.contains(&req.src_ip)
        {
            return Err(Refusal::BadSource);
        }
        if req.src_port == 0 {
            return Err(Refusal::SourcePortZero);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_wire::{parse_udp_frame, UdpFrameSpec};

    fn local() -> LocalAddrs {
        LocalAddrs {
            mac: Some(MacAddr([2, 0, 0, 0, 0, 2])),
            unicast: vec![
                "198.18.0.2".parse().unwrap(),
                "2001:db8::2".parse().unwrap(),
            ],
            broadcast: vec!["198.18.0.255".parse().unwrap()],
        }
    }

    fn check(src: &str, dst: &str, mac: [u8; 6], sport: u16) -> Result<(), Refusal> {
        check_from([2, 0, 0, 0, 0, 1], src, dst, mac, sport)
    }

    fn check_from(
        src_mac: [u8; 6],
        src: &str,
        dst: &str,
        mac: [u8; 6],
        sport: u16,
    ) -> Result<(), Refusal> {
        let spec = UdpFrameSpec {
            src_mac: MacAddr(src_mac),
            dst_mac: MacAddr(mac),
            src_ip: src.parse().unwrap(),
            dst_ip: dst.parse().unwrap(),
            src_port: sport,
            dst_port: 1232,
            ttl: 64,
            frame_len: 80,
        };
        let f = spec.build(b"x").unwrap();
        local().check(&parse_udp_frame(&f).unwrap())
    }

    #[test]
    fn only_unicast_to_us_from_unicast_with_a_port_is_answered() {
        use Refusal::*;
        let ours = [2, 0, 0, 0, 0, 2];
        let bcast = [0xff; 6];
        // Requests (source, destination, destination MAC; from port 40000),
        // and what each group of them must get.
        type Requests<'a> = &'a [(&'a str, &'a str, [u8; 6])];
        let groups: [(Result<(), Refusal>, Requests); 4] = [
            (
                Ok(()),
                &[
                    ("198.18.0.1", "198.18.0.2", ours),
                    ("2001:db8::1", "2001:db8::2", ours),
                ],
            ),
            (
                Err(NotUnicast),
                &[
                    ("198.18.0.1", "255.255.255.255", bcast),
                    ("198.18.0.1", "198.18.0.255", bcast),
                    ("198.18.0.1", "198.18.0.255", ours),
                    ("198.18.0.1", "239.1.1.1", [1, 0, 0x5e, 1, 1, 1]),
                    ("198.18.0.1", "198.18.0.2", bcast),
                    ("2001:db8::1", "ff02::1", [0x33, 0x33, 0, 0, 0, 1]),
                ],
            ),
            (
                Err(NotOurs),
                &[
                    ("198.18.0.1", "198.18.0.3", ours),
                    ("198.18.0.1", "198.18.0.2", [2, 0, 0, 0, 0, 9]),
                    ("2001:db8::1", "2001:db8::3", ours),
                ],
            ),
            (
                Err(BadSource),
                &[
                    ("255.255.255.255", "198.18.0.2", ours),
                    ("239.1.1.1", "198.18.0.2", ours),
                    ("0.0.0.0", "198.18.0.2", ours),
                    ("127.0.0.1", "198.18.0.2", ours),
                    ("198.18.0.255", "198.18.0.2", ours),
                    ("198.18.0.2", "198.18.0.2", ours),
                    ("ff02::1", "2001:db8::2", ours),
                    ("::", "2001:db8::2", ours),
                ],
            ),
        ];
        for (want, requests) in groups {
            for &(src, dst, mac) in requests {
                assert_eq!(check(src, dst, mac, 40000), want, "{src} -> {dst} {mac:x?}");
            }
        }
        // A request good but for its group source MAC: the reply would go
        // to every host on the link.
        for src_mac in [[0xff; 6], [1, 0, 0x5e, 0, 0, 1], [0x33, 0x33, 0, 0, 0, 1]] {
            for (src, dst) in [("198.18.0.1", "198.18.0.2"), ("2001:db8::1", "2001:db8::2")] {
                let got = check_from(src_mac, src, dst, ours, 40000);
                assert_eq!(got, Err(BadSource), "{src} from {src_mac:x?}");
            }
        }
        // A request good but for its source port 0.
        for (src, dst) in [("198.18.0.1", "198.18.0.2"), ("2001:db8::1", "2001:db8::2")] {
            assert_eq!(check(src, dst, ours, 0), Err(SourcePortZero), "{src}");
        }
    }
}
