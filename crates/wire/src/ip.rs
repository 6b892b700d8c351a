//! Either IP version, for the layers above that do not care which (as
//! smoltcp's `IpRepr`): one place turns addresses into a v4 or v6 header
//! and a received header into addresses, protocol and lengths.
use std::net::IpAddr;

use crate::error::{FrameError, Result};
use crate::{ethertype, ipv4, ipv6};

/// An IPv4 or IPv6 header's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    V4(ipv4::Repr),
    V6(ipv6::Repr),
}

impl Repr {
    /// A header from `src` to `dst` (one family) carrying `payload_len`
    /// bytes of `protocol`, with `ttl` as TTL or hop limit.
    pub fn new(
        src: IpAddr,
        dst: IpAddr,
        protocol: u8,
        payload_len: usize,
        ttl: u8,
    ) -> Result<Repr> {
        match (src, dst) {
            (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => Ok(Repr::V4(ipv4::Repr {
                src_addr,
                dst_addr,
                protocol,
                payload_len,
                ttl,
            })),
            (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => Ok(Repr::V6(ipv6::Repr {
                src_addr,
                dst_addr,
                next_header: protocol,
                payload_len,
                hop_limit: ttl,
            })),
            _ => Err(FrameError::MixedFamilies),
        }
    }

    /// Parses the packet at the start of `buf`, of the family `ethertype`
    /// names, with each version's checks (`ipv4::Repr::parse`,
    /// `ipv6::Repr::parse`). Also returns the received header's length,
    /// IPv4 options included: where the payload starts.
    pub fn parse(ethertype: u16, buf: &[u8]) -> Result<(Repr, usize)> {
        match ethertype {
            ethertype::IPV4 => {
                let p = ipv4::Packet::new_unchecked(buf);
                Ok((Repr::V4(ipv4::Repr::parse(&p)?), p.header_len()))
            }
            ethertype::IPV6 => {
                let p = ipv6::Packet::new_unchecked(buf);
                Ok((Repr::V6(ipv6::Repr::parse(&p)?), ipv6::HEADER_LEN))
            }
            other => Err(FrameError::NotIp(other)),
        }
    }

    pub fn src_addr(&self) -> IpAddr {
        match self {
            Repr::V4(r) => r.src_addr.into(),
            Repr::V6(r) => r.src_addr.into(),
        }
    }

    pub fn dst_addr(&self) -> IpAddr {
        match self {
            Repr::V4(r) => r.dst_addr.into(),
            Repr::V6(r) => r.dst_addr.into(),
        }
    }

    /// IPv4 protocol or IPv6 next header.
    pub fn protocol(&self) -> u8 {
        match self {
            Repr::V4(r) => r.protocol,
            Repr::V6(r) => r.next_header,
        }
    }

    /// TTL or hop limit.
    pub fn ttl(&self) -> u8 {
        match self {
            Repr::V4(r) => r.ttl,
            Repr::V6(r) => r.hop_limit,
        }
    }

    pub fn payload_len(&self) -> usize {
        match self {
            Repr::V4(r) => r.payload_len,
            Repr::V6(r) => r.payload_len,
        }
    }

    /// The Ethernet type that announces this header.
    pub fn ethertype(&self) -> u16 {
        match self {
            Repr::V4(_) => ethertype::IPV4,
            Repr::V6(_) => ethertype::IPV6,
        }
    }

    /// Header bytes `emit` writes.
    pub fn header_len(&self) -> usize {
        match self {
            Repr::V4(r) => r.header_len(),
            Repr::V6(r) => r.header_len(),
        }
    }

    /// Header and payload.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len()
    }

    /// Writes the header at the start of `buf` (which holds at least
    /// `header_len()` bytes); the payload is the caller's.
    pub fn emit(&self, buf: &mut [u8]) {
        match self {
            Repr::V4(r) => r.emit(&mut ipv4::Packet::new_unchecked(buf)),
            Repr::V6(r) => r.emit(&mut ipv6::Packet::new_unchecked(buf)),
        }
    }
}

/// The length of the header `Repr::new` makes for addresses of `a`'s family.
pub fn header_len_for(a: IpAddr) -> usize {
    if a.is_ipv4() {
        ipv4::HEADER_LEN
    } else {
        ipv6::HEADER_LEN
    }
}

/// A source no reply may go to, mostly what the kernel's input drops as
/// a martian: "this network" 0/8 (a host that does not know its address
/// yet; Linux 6.18 drops only 0.0.0.0 of it), limited broadcast, multicast, and loopback when `from_wire` (it came in
/// on an Ethernet interface, where a loopback source is a spoof; a socket
/// may see it from a local client).
pub fn invalid_source(ip: IpAddr, from_wire: bool) -> bool {
    match ip {
        IpAddr::V4(a) => {
            a.octets()[0] == 0
                || a.is_broadcast()
                || a.is_multicast()
                || (from_wire && a.is_loopback())
        }
        IpAddr::V6(a) => a.is_unspecified() || a.is_multicast() || (from_wire && a.is_loopback()),
    }
}

/// A destination address that is never one host's: limited broadcast or
/// multicast (a subnet's broadcast address needs the prefix).
pub fn group_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_broadcast() || a.is_multicast(),
        IpAddr::V6(a) => a.is_multicast(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layer;
    use proptest::prelude::*;

    /// Any header of either family, with up to 200 payload bytes.
    fn any_repr() -> impl Strategy<Value = Repr> {
        let v4 = (any::<[u8; 4]>(), any::<[u8; 4]>())
            .prop_map(|(s, d)| (IpAddr::from(s), IpAddr::from(d)));
        let v6 = (any::<[u8; 16]>(), any::<[u8; 16]>())
            .prop_map(|(s, d)| (IpAddr::from(s), IpAddr::from(d)));
        (prop_oneof![v4, v6], any::<u8>(), 0usize..200, any::<u8>())
            .prop_map(|((s, d), proto, len, ttl)| Repr::new(s, d, proto, len, ttl).unwrap())
    }

    fn layer(r: &Repr) -> Layer {
        match r {
            Repr::V4(_) => Layer::Ipv4,
            Repr::V6(_) => Layer::Ipv6,
        }
    }

    proptest! {
        /// Emitted then parsed (Ethernet padding after it or not): the same
        /// header, and the payload where it says.
        #[test]
        fn emit_then_parse_round_trips(r in any_repr(), pad in 0usize..8) {
            let mut buf = vec![0u8; r.buffer_len() + pad];
            r.emit(&mut buf);
            prop_assert_eq!(Repr::parse(r.ethertype(), &buf).unwrap(), (r, r.header_len()));
            prop_assert_eq!(header_len_for(r.src_addr()), r.header_len());
            let payload = match r {
                Repr::V4(_) => {
                    let p = ipv4::Packet::new_checked(&buf[..]).unwrap();
                    prop_assert!(p.dont_frag() && !p.is_fragment());
                    p.payload().len()
                }
                Repr::V6(_) => ipv6::Packet::new_checked(&buf[..]).unwrap().payload().len(),
            };
            prop_assert_eq!(payload, r.payload_len());
        }

        /// Cut anywhere short of its total length: refused as a truncated
        /// packet of its own version.
        #[test]
        fn every_truncation_is_refused(r in any_repr()) {
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf);
            for cut in 0..buf.len() {
                prop_assert_eq!(Repr::parse(r.ethertype(), &buf[..cut]).unwrap_err(), FrameError::Truncated(layer(&r)));
            }
        }
    }

    #[test]
    fn families_are_not_mixed_and_only_ip_parses() {
        let (v4, v6): (IpAddr, IpAddr) = (
            "198.18.0.1".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
        );
        assert_eq!(Repr::new(v4, v6, 17, 0, 64), Err(FrameError::MixedFamilies));
        assert_eq!(
            Repr::parse(ethertype::ARP, &[0; 64]),
            Err(FrameError::NotIp(ethertype::ARP))
        );
    }
}
