//! Packet formats peregrine reads and writes: Ethernet (with one optional
//! 802.1Q tag), IPv4, IPv6 and UDP.
//!
//! Each layer has a module with its field table (`field`), a zero-copy view
//! of a buffer (`new_checked` refuses a buffer shorter than any length the
//! header claims), setters for mutable buffers, and a `Repr` that parses a
//! view (with the layer's semantic checks) and emits one. Untrusted bytes are
//! parsed once, through these; `frame` puts them together for whole UDP
//! frames. Builders produce complete frames with valid checksums; the
//! generator's templates, the BPF fixtures and the socket paths all use them.

mod bytes;
pub mod checksum;
pub mod error;
pub mod ethernet;
pub mod frame;
pub mod ipv4;
pub mod ipv6;
pub mod mac;
pub mod prefix;
pub mod udp;
mod view;
pub mod vlan;

pub use bytes::Field;
pub use error::{FrameError, Layer};
pub use frame::{parse_udp_frame, reply_in_place, UdpFrame, UdpFrameSpec};
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

pub const ETH_HLEN: usize = ethernet::HEADER_LEN;
pub const VLAN_HLEN: usize = vlan::HEADER_LEN;
/// Without options.
pub const IPV4_HLEN: usize = ipv4::HEADER_LEN;
pub const IPV6_HLEN: usize = ipv6::HEADER_LEN;
pub const UDP_HLEN: usize = udp::HEADER_LEN;
/// Frame check sequence: counted in "frame size" figures, never in buffers.
pub const FCS_LEN: usize = 4;
/// Preamble, start delimiter and inter-frame gap: the per-frame overhead on
/// the wire used to turn frame rates into line bit rates.
pub const WIRE_OVERHEAD: usize = 20;

/// Size of an untagged Ethernet frame carrying `payload` bytes of UDP, FCS
/// included: the "frame size" of benchmark figures.
pub const fn udp_frame_size(ipv6: bool, payload: usize) -> usize {
    let ip = if ipv6 { IPV6_HLEN } else { IPV4_HLEN };
    ETH_HLEN + ip + UDP_HLEN + payload + FCS_LEN
}
