use std::fmt;
use std::str::FromStr;

/// An Ethernet MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// Broadcast or multicast: the group bit (the low bit of the first
    /// byte) set. No host sends from one.
    pub fn is_group(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// A locally administered unicast address derived from `seed`, so labs get
    /// stable, recognisable MACs (02:50:47:..: "PG").
    pub fn local(seed: u32) -> MacAddr {
        let b = seed.to_be_bytes();
        MacAddr([0x02, 0x50, b[0], b[1], b[2], b[3]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("invalid MAC address {0:?}: expected six hex bytes like 02:00:00:00:00:01")]
pub struct MacParseError(String);

impl FromStr for MacAddr {
    type Err = MacParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for b in out.iter_mut() {
            let p = parts.next().ok_or_else(|| MacParseError(s.into()))?;
            if p.is_empty() || p.len() > 2 {
                return Err(MacParseError(s.into()));
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| MacParseError(s.into()))?;
        }
        if parts.next().is_some() {
            return Err(MacParseError(s.into()));
        }
        Ok(MacAddr(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text_tests::{parses_as, refuses};

    #[test]
    fn parse_and_print_round_trip() {
        let m: MacAddr = parses_as("02:50:0a:0B:0c:ff", "02:50:0a:0b:0c:ff");
        assert_eq!(m, MacAddr([0x02, 0x50, 0x0a, 0x0b, 0x0c, 0xff]));
        refuses::<MacAddr>(&[
            "02:50:0a:0b:0c",
            "02:50:0a:0b:0c:ff:00",
            "zz:50:0a:0b:0c:ff",
        ]);
    }
}
