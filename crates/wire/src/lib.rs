//! Packet formats peregrine reads and writes: Ethernet (with one optional
//! 802.1Q tag), IPv4, IPv6 and UDP.
//!
//! Untrusted bytes are parsed once, here, by checked constructors that refuse
//! a buffer too short for the header it claims to hold. Builders produce
//! complete frames with valid checksums; the generator's templates, the BPF
//! fixtures and the socket paths all use them.

pub mod checksum;
pub mod frame;
pub mod mac;
pub mod prefix;

pub use frame::{parse_udp_frame, reply_in_place, FrameError, UdpFrame, UdpFrameSpec};
pub use mac::MacAddr;
pub use prefix::Prefix;

/// Ethernet type numbers used on our paths.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const QINQ: u16 = 0x88a8;
    pub const IPV6: u16 = 0x86dd;
}

/// IP protocol numbers used on our paths.
pub mod ipproto {
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
}

pub const ETH_HLEN: usize = 14;
pub const VLAN_HLEN: usize = 4;
pub const IPV4_HLEN: usize = 20;
pub const IPV6_HLEN: usize = 40;
pub const UDP_HLEN: usize = 8;
/// Frame check sequence: counted in "frame size" figures, never in buffers.
pub const FCS_LEN: usize = 4;
/// Preamble, start delimiter and inter-frame gap: the per-frame overhead on
/// the wire used to turn frame rates into line bit rates.
pub const WIRE_OVERHEAD: usize = 20;
