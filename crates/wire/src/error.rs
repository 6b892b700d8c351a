//! The one error every parser and builder in this crate returns.
use std::fmt;

/// The header a [`FrameError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    Ethernet,
    /// An 802.1Q or 802.1ad (QinQ outer) tag.
    Vlan,
    Ipv4,
    Ipv6,
    Udp,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "802.1Q",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Udp => "UDP",
        })
    }
}

/// Why a frame was refused. Each names the header and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The buffer ends inside the header, or before the length the header
    /// claims (IPv4 total length, IPv6 payload length, UDP length).
    #[error("frame cut short in the {0} layer")]
    Truncated(Layer),
    #[error("not an IPv4/IPv6 frame (ethertype {0:#06x})")]
    NotIp(u16),
    #[error("malformed {0} header: {1}")]
    Malformed(Layer, &'static str),
    #[error("not UDP (IP protocol {0})")]
    NotUdp(u8),
    #[error("bad {0} checksum")]
    BadChecksum(Layer),
    #[error("frame size {size} outside {min}..={max} for this address family")]
    BadSize { size: usize, min: usize, max: usize },
    #[error("source and destination address families differ")]
    MixedFamilies,
}

pub type Result<T> = std::result::Result<T, FrameError>;
