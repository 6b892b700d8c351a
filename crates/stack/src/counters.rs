//! What the stack moved and every datagram it dropped, by reason. Frames
//! the steering program passes to the kernel are the kernel's; they are not
//! counted here.
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Declares the counters once: the atomic set the stack bumps and the
/// plain snapshot it reports, with each counter's meaning.
macro_rules! counters {
    ($($(#[doc = $doc:expr])* $name:ident,)*) => {
        #[derive(Default)]
        pub(crate) struct Counters {
            $(pub(crate) $name: AtomicU64,)*
        }

        /// A snapshot of the stack's counters.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct StackCounters {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> StackCounters {
                StackCounters {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }

        impl StackCounters {
            /// (name, value) of every counter, in declaration order.
            pub fn all(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// Datagrams delivered to a socket's queue or straight to its caller.
    rx_datagrams,
    /// Their payload bytes.
    rx_bytes,
    /// Datagrams queued on a TX ring.
    tx_datagrams,
    /// Their payload bytes.
    tx_bytes,
    /// Received frames cut short inside a header or the datagram.
    rx_truncated,
    /// Received frames with an inconsistent header (version, lengths).
    rx_malformed,
    /// Received IPv4 headers whose checksum is wrong.
    rx_bad_ip_checksum,
    /// Received UDP datagrams whose checksum is wrong (neither full nor
    /// the partial pseudo-header sum of a local sender).
    rx_bad_udp_checksum,
    /// Received frames that are not UDP over untagged IPv4/IPv6.
    rx_not_udp,
    /// Received frames addressed to another MAC (unicast, not ours).
    rx_other_host,
    /// Received datagrams from a source no host has: a broadcast,
    /// multicast, unspecified or loopback address, or a group source MAC
    /// (the kernel's input drops them as martians).
    rx_bad_source,
    /// Received datagrams for an address and port no socket has (a socket
    /// closed while its datagrams were in flight).
    rx_no_socket,
    /// Received datagrams dropped because their socket's queue was full.
    rx_socket_full,
    /// Datagrams sent before their next hop was resolved, held until it is.
    tx_held,
    /// Held datagrams dropped: the next hop did not resolve in time, the
    /// route left through another interface, or too many were held.
    tx_no_neighbour,
    /// Datagrams refused because the TX ring or the UMEM had no room.
    tx_ring_full,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

impl StackCounters {
    /// Every drop counter summed.
    pub fn drops(&self) -> u64 {
        self.all()
            .iter()
            .filter(|(n, _)| {
                !matches!(
                    *n,
                    "rx_datagrams" | "rx_bytes" | "tx_datagrams" | "tx_bytes" | "tx_held"
                )
            })
            .map(|(_, v)| v)
            .sum()
    }
}

impl fmt::Display for StackCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (n, v)) in self.all().iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{n}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_sum_only_the_drop_counters() {
        let c = Counters::default();
        Counters::add(&c.rx_datagrams, 5);
        Counters::add(&c.tx_held, 2);
        Counters::add(&c.rx_truncated, 1);
        Counters::add(&c.tx_ring_full, 3);
        let s = c.snapshot();
        assert_eq!(s.drops(), 4);
        assert!(s.to_string().starts_with("rx_datagrams=5 rx_bytes=0"));
    }
}
