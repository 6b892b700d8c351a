//! IP prefixes ("198.18.0.0/15", "2001:db8::/32"), parsed once from text.
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address and a prefix length valid for its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        fn masked(bytes: &[u8], len: u8) -> impl Iterator<Item = u8> + '_ {
            bytes.iter().enumerate().map(move |(i, b)| {
                let bits = (len as usize).saturating_sub(i * 8).min(8);
                b & (0xffu16 << (8 - bits)) as u8
            })
        }
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                masked(&a.octets(), self.len).eq(masked(&b.octets(), self.len))
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                masked(&a.octets(), self.len).eq(masked(&b.octets(), self.len))
            }
            _ => false,
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Prefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Prefix, String> {
        let (a, p) = s
            .split_once('/')
            .ok_or_else(|| format!("address {s:?}: expected address/prefix"))?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("address {s:?}: {a:?} is not an IP address"))?;
        let len: u8 = p
            .parse()
            .map_err(|_| format!("address {s:?}: bad prefix length"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return Err(format!("address {s:?}: prefix length above {max}"));
        }
        Ok(Prefix { addr, len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text_tests::{parses_as, refuses};

    #[test]
    fn parses_checks_and_matches() {
        let p: Prefix = parses_as("198.18.0.0/15", "198.18.0.0/15");
        assert!(p.contains("198.19.255.1".parse().unwrap()));
        assert!(!p.contains("198.20.0.1".parse().unwrap()));
        assert!(!p.contains("2001:db8::1".parse().unwrap()));
        let p6: Prefix = "2001:db8::/32".parse().unwrap();
        assert!(p6.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!p6.contains("2001:db9::1".parse().unwrap()));
        refuses::<Prefix>(&["10.0.0.1", "10.0.0.1/33", "x/8", "::/129", "1.2.3.4/-1"]);
        let all: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
    }
}
