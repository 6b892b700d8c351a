//! The one parser for units, on the command line and in config files. Every
//! flag and file field that takes a rate, a duration or a size parses it
//! here (clap value parsers, serde fields), so the help text, the docs
//! (docs/CLI.md, "Units") and the parser agree.
//!
//! - Rates: a number with an optional SI prefix (`k`, `M`, `G`; case-blind,
//!   as iperf3's `-b 10m`) and an optional unit. No unit or `pps` (also
//!   `req/s`, `/s`) counts packets (or requests) per second: `200k`, `1M`,
//!   `1Mpps`, `250kpps`, `1e6`. `bps`, `bit`, `bit/s` or `b/s` counts bits per
//!   second of Ethernet frames (FCS included): `500Mbps`, `1Gbit`, `10Gbit/s`.
//! - Durations: a number with an optional unit, seconds by default: `10`,
//!   `10s`, `1.5s`, `500ms`, `250us`, `2m` (minutes), `1h`.
//! - Frame sizes: bytes with FCS (`64`, `1500`) or `imix`.
//! - Byte sizes (payloads): bytes, with an optional unit: `200`, `200B`,
//!   `1k` or `1kB` (1000), `1KiB` (1024), `1M`/`1MB`, `1MiB`.
//! - Microseconds (`--busy-poll`): a bare number is microseconds (as
//!   SO_BUSY_POLL takes it); a unit may be given: `50`, `50us`, `0.1ms`.
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

mod table;
pub use table::Table;

/// A rate as set: packets (requests) per second, or bits per second of
/// Ethernet frames that become packets per second once the frame size is
/// known.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateSetting {
    Pps(f64),
    Bps(f64),
}

/// Highest rate accepted, in packets per second (far above any veth).
const MAX_PPS: f64 = 1e9;

impl RateSetting {
    /// Packets per second for frames of `mean_frame_bytes` (FCS included).
    pub fn pps(self, mean_frame_bytes: f64) -> f64 {
        match self {
            RateSetting::Pps(p) => p,
            RateSetting::Bps(b) => b / (mean_frame_bytes * 8.0),
        }
    }
}

impl fmt::Display for RateSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateSetting::Pps(p) => write!(f, "{p} pps"),
            RateSetting::Bps(b) => write!(f, "{b} bit/s"),
        }
    }
}

/// Splits "1.5Mpps" into (1.5, "mpps"): the number, then the rest in
/// lower case with blanks removed.
fn split_number(s: &str) -> Option<(f64, String)> {
    let t: String = s
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    // A number may hold an exponent (1e6): the unit starts at the first
    // letter that is not an exponent marker followed by a digit or sign.
    let bytes = t.as_bytes();
    let mut end = 0;
    while end < bytes.len() {
        let c = bytes[end] as char;
        let exp = c == 'e'
            && end > 0
            && bytes
                .get(end + 1)
                .is_some_and(|n| n.is_ascii_digit() || *n == b'-' || *n == b'+');
        if c.is_ascii_digit()
            || c == '.'
            || exp
            || ((c == '-' || c == '+') && end > 0 && bytes[end - 1] == b'e')
        {
            end += 1;
        } else {
            break;
        }
    }
    let v: f64 = t[..end].parse().ok()?;
    Some((v, t[end..].to_string()))
}

/// A unit's names (as `split_number` leaves them: lower case) and the
/// number's value in the base unit: `v * mul / div` (a divisor, so that
/// `500ms` is exactly `500 / 1e3` s).
type Unit = (&'static [&'static str], f64, f64);

/// A scaled quantity's units and how its errors word things: the one
/// parser for every scaled flag, each kind a table of its own below.
struct Scale {
    /// Names the value in errors: `{what}{s:?}`.
    what: &'static str,
    /// What a value looks like, for a value that is not a number.
    expected: &'static str,
    units: &'static [Unit],
    /// The units to use, for an unknown one.
    use_: &'static str,
}

impl Scale {
    /// `s` as a number with one of the units, in the base unit.
    fn parse(&self, s: &str) -> Result<f64, String> {
        let what = self.what;
        let (v, unit) =
            split_number(s).ok_or_else(|| format!("{what}{s:?}: expected {}", self.expected))?;
        match self
            .units
            .iter()
            .find(|(names, _, _)| names.contains(&unit.as_str()))
        {
            Some((_, mul, div)) => Ok(v * mul / div),
            None => Err(format!(
                "{what}{s:?}: unknown unit {unit:?} (use {})",
                self.use_
            )),
        }
    }
}

/// Durations, in seconds.
const SECONDS: Scale = Scale {
    what: "duration ",
    expected: "a number with an optional unit: 10, 10s, 500ms",
    units: &[
        (&["", "s", "sec", "secs"], 1.0, 1.0),
        (&["ms"], 1.0, 1e3),
        (&["us", "µs"], 1.0, 1e6),
        (&["m", "min"], 60.0, 1.0),
        (&["h"], 3600.0, 1.0),
    ],
    use_: "s, ms, us, m or h",
};

/// Byte sizes, in bytes.
const BYTES: Scale = Scale {
    what: "size ",
    expected: "bytes with an optional unit: 200, 1500B, 1KiB, 64k",
    units: &[
        (&["", "b"], 1.0, 1.0),
        (&["k", "kb"], 1e3, 1.0),
        (&["kib"], 1024.0, 1.0),
        (&["m", "mb"], 1e6, 1.0),
        (&["mib"], 1024.0 * 1024.0, 1.0),
        (&["g", "gb"], 1e9, 1.0),
        (&["gib"], 1024.0 * 1024.0 * 1024.0, 1.0),
    ],
    use_: "B, k, KiB, M, MiB, G, GiB",
};

/// Busy-poll times, in microseconds.
const MICROS: Scale = Scale {
    what: "",
    expected: "microseconds: 50, 50us, 0.1ms",
    units: &[
        (&["", "us", "µs"], 1.0, 1.0),
        (&["ms"], 1e3, 1.0),
        (&["s"], 1e6, 1.0),
    ],
    use_: "us, ms or s",
};

impl FromStr for RateSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("rate {s:?}: expected a number with an optional unit: 200k, 1M, 1Mpps, 500Mbps, 1Gbit")
        };
        let (v, unit) = split_number(s).ok_or_else(bad)?;
        let (mult, rest) = match unit.chars().next() {
            Some('k') => (1e3, &unit[1..]),
            Some('m') => (1e6, &unit[1..]),
            Some('g') => (1e9, &unit[1..]),
            _ => (1.0, unit.as_str()),
        };
        let r = match rest {
            "" | "pps" | "p/s" | "/s" | "req/s" | "rps" => RateSetting::Pps(v * mult),
            "bps" | "bit" | "bits" | "bit/s" | "b/s" => RateSetting::Bps(v * mult),
            _ => {
                return Err(format!(
                    "rate {s:?}: unknown unit {unit:?} (use pps, kpps, Mpps, bps, Mbps, Gbit, or none for per second)"
                ))
            }
        };
        let x = match r {
            RateSetting::Pps(p) | RateSetting::Bps(p) => p,
        };
        if !(x.is_finite() && x > 0.0) {
            return Err(format!("rate {s:?}: must be above 0"));
        }
        // No rate is a 20-digit number: refused here rather than clipped
        // to u64::MAX where a caller rounds it.
        if x >= 1e18 {
            return Err(format!("rate {s:?}: too large (at most 1e18 per second)"));
        }
        // Bits are checked once the frame size is known (pps()).
        if let RateSetting::Pps(p) = r {
            if p > MAX_PPS {
                return Err(format!("rate {s:?}: at most 1G packets/s"));
            }
        }
        Ok(r)
    }
}

/// A duration: seconds by default, or with a unit (ms, us, s, m, h).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DurationArg(pub Duration);

/// Longest run accepted (loops are always bounded).
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

impl FromStr for DurationArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let secs = SECONDS.parse(s)?;
        if !(secs.is_finite() && secs > 0.0) {
            return Err(format!("duration {s:?}: must be above 0"));
        }
        let d = Duration::from_secs_f64(secs);
        if d > MAX_DURATION {
            return Err(format!("duration {s:?}: at most 24h"));
        }
        Ok(DurationArg(d))
    }
}

impl fmt::Display for DurationArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0.as_secs_f64())
    }
}

impl From<DurationArg> for Duration {
    fn from(d: DurationArg) -> Duration {
        d.0
    }
}

/// A byte count: `200`, `200B`, `1k`/`1kB` (10^3), `1KiB` (2^10), `M`, `MiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let b = BYTES.parse(s)?;
        if !(b.is_finite() && b >= 0.0) || b.fract() != 0.0 || b > u64::MAX as f64 {
            return Err(format!("size {s:?}: expected a whole number of bytes"));
        }
        Ok(ByteSize(b as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Clap value parser for microseconds: a bare number is microseconds, or a
/// duration with a unit (`50us`, `0.1ms`).
pub fn micros(s: &str) -> Result<u32, String> {
    let us = MICROS.parse(s)?;
    if !(us.is_finite() && us >= 0.0 && us <= u32::MAX as f64) {
        return Err(format!("{s:?}: expected 0..={} microseconds", u32::MAX));
    }
    Ok(us.round() as u32)
}

/// Clap value parser for a share: a fraction (0.001) or a percentage
/// (0.1%), in 0..=1.
pub fn fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().trim_end_matches('%').parse().map_err(|_| {
        format!("{s:?}: expected a fraction such as 0.001, or a percentage such as 0.1%")
    })?;
    let v = if s.trim().ends_with('%') {
        v / 100.0
    } else {
        v
    };
    if !(0.0..=1.0).contains(&v) {
        return Err(format!(
            "{s:?}: expected a fraction in 0..=1 (or 0%..=100%)"
        ));
    }
    Ok(v)
}

/// `v` scaled to the largest of `units` (10^9, 10^6, 10^3) it reaches, or
/// None below 10^3: the one scaling for rates and times.
fn scaled(v: f64, units: [&str; 3]) -> Option<String> {
    let [g, m, k] = units;
    [(1e9, 2, g), (1e6, 2, m), (1e3, 1, k)]
        .into_iter()
        .find(|(scale, _, _)| v.abs() >= *scale)
        .map(|(scale, prec, unit)| format!("{:.prec$}{unit}", v / scale))
}

/// A rate for people: 1.23M, 45.6k, 789.
pub fn si(v: f64) -> String {
    scaled(v, ["G", "M", "k"]).unwrap_or_else(|| format!("{v:.0}"))
}

/// Nanoseconds for people: 850ns, 12.3us, 4.56ms, 1.20s.
pub fn ns(v: u64) -> String {
    scaled(v as f64, ["s", "ms", "us"]).unwrap_or_else(|| format!("{v}ns"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_as_documented() {
        let table: &[(&str, RateSetting)] = &[
            ("200k", RateSetting::Pps(200e3)),
            ("1M", RateSetting::Pps(1e6)),
            ("1m", RateSetting::Pps(1e6)),
            ("1Mpps", RateSetting::Pps(1e6)),
            ("250kpps", RateSetting::Pps(250e3)),
            ("1000000", RateSetting::Pps(1e6)),
            ("1e6", RateSetting::Pps(1e6)),
            ("1.5e3pps", RateSetting::Pps(1500.0)),
            ("2.5Mpps", RateSetting::Pps(2.5e6)),
            ("100k req/s", RateSetting::Pps(100e3)),
            ("500Mbps", RateSetting::Bps(500e6)),
            ("1Gbit", RateSetting::Bps(1e9)),
            ("10Gbit/s", RateSetting::Bps(10e9)),
            ("10gbps", RateSetting::Bps(10e9)),
            ("64kbit", RateSetting::Bps(64e3)),
            ("800bps", RateSetting::Bps(800.0)),
        ];
        for (s, want) in table {
            assert_eq!(s.parse::<RateSetting>().as_ref(), Ok(want), "{s}");
        }
        assert_eq!(RateSetting::Bps(512e6).pps(64.0), 1e6);
    }

    /// Asserts that each value is refused as a `T` with an error that says
    /// what its case says; the errors.
    fn refusals<T: FromStr<Err = String> + fmt::Debug>(cases: &[(&str, &str)]) -> Vec<String> {
        cases
            .iter()
            .map(|(s, says)| {
                let e = s.parse::<T>().unwrap_err();
                assert!(e.contains(says), "{s}: {e}");
                e
            })
            .collect()
    }

    #[test]
    fn bad_rates_name_the_problem() {
        let errors = refusals::<RateSetting>(&[
            ("", "expected a number"),
            ("fast", "expected a number"),
            ("1Tpps", "unknown unit"),
            ("1Mfoo", "unknown unit"),
            ("0", "above 0"),
            ("-5", "expected a number"),
            ("2G", "at most"),
            // Issue 28: read as 18446744073709551615 bit/s (clipped).
            ("999999999999Gbit", "too large"),
        ]);
        for e in errors {
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn durations_parse_as_documented() {
        let table: &[(&str, f64)] = &[
            ("10", 10.0),
            ("10s", 10.0),
            ("1.5s", 1.5),
            ("500ms", 0.5),
            ("250us", 250e-6),
            ("2m", 120.0),
            ("1h", 3600.0),
        ];
        for (s, secs) in table {
            let d = s.parse::<DurationArg>().unwrap();
            assert!((d.0.as_secs_f64() - secs).abs() < 1e-12, "{s}");
        }
        for s in ["", "0", "ten", "5 parsecs", "25h"] {
            assert!(s.parse::<DurationArg>().is_err(), "{s}");
        }
    }

    #[test]
    fn byte_sizes_parse_as_documented() {
        let table: &[(&str, u64)] = &[
            ("200", 200),
            ("200B", 200),
            ("1k", 1000),
            ("1kB", 1000),
            ("1KiB", 1024),
            ("1.5k", 1500),
            ("2M", 2_000_000),
            ("1MiB", 1 << 20),
            ("1GiB", 1 << 30),
        ];
        for (s, want) in table {
            assert_eq!(s.parse::<ByteSize>(), Ok(ByteSize(*want)), "{s}");
        }
        refusals::<ByteSize>(&[
            ("", "expected bytes"),
            ("big", "expected bytes"),
            ("1.5", "whole number"),
            ("3parsecs", "unknown unit"),
        ]);
    }

    #[test]
    fn microseconds_parse_as_documented() {
        assert_eq!(micros("50"), Ok(50));
        assert_eq!(micros("50us"), Ok(50));
        assert_eq!(micros("0.1ms"), Ok(100));
        assert_eq!(micros("1s"), Ok(1_000_000));
        assert!(micros("fast").is_err());
        assert!(micros("5h").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn shares_and_figures_for_people() {
        assert_eq!(fraction("0.001"), Ok(0.001));
        assert_eq!(fraction("0.1%"), Ok(0.001));
        assert!(fraction("2").unwrap_err().contains("0..=1"));
        assert!(fraction("x").is_err());
        assert_eq!(si(1_234_000.0), "1.23M");
        assert_eq!(ns(850), "850ns");
    }
}
