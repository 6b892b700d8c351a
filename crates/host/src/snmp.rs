//! The kernel's per-namespace protocol counters (`/proc/net/snmp` and
//! `snmp6`), for losses no interface counter sees: a UDP datagram dropped
//! because its socket's receive buffer was full counts only here.
use crate::error::{HostError, Result};
use crate::netns;

/// Datagrams the kernel dropped because a UDP socket's receive buffer was
/// full (`RcvbufErrors` of `Udp` and `Udp6`), in namespace `ns`.
pub fn udp_receive_buffer_errors(ns: &str) -> Result<u64> {
    netns::run_in(ns, udp_receive_buffer_errors_here)?
}

/// The same for the calling thread's namespace (`/proc/thread-self/net`
/// is the thread's; `/proc/net` would be the process leader's).
pub fn udp_receive_buffer_errors_here() -> Result<u64> {
    let read = |file: &str| {
        std::fs::read_to_string(format!("/proc/thread-self/net/{file}"))
            .map_err(|e| HostError::Other(format!("reading /proc/net/{file}: {e}")))
    };
    let v4 = snmp_field(&read("snmp")?, "Udp", "RcvbufErrors");
    // Without IPv6 the namespace has no snmp6; its count is then none.
    let v6 = read("snmp6")
        .ok()
        .and_then(|t| snmp6_field(&t, "Udp6RcvbufErrors"))
        .unwrap_or(0);
    let v4 = v4.ok_or_else(|| HostError::Other("/proc/net/snmp has no Udp RcvbufErrors".into()))?;
    Ok(v4 + v6)
}

/// A field of `/proc/net/snmp`: each protocol has a line of names
/// (`Udp: InDatagrams NoPorts ...`) followed by a line of values.
fn snmp_field(text: &str, proto: &str, field: &str) -> Option<u64> {
    let prefix = format!("{proto}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// A field of `/proc/net/snmp6`: one `Name value` pair per line.
fn snmp6_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next()? == field).then(|| it.next()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
        Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
        Udp: 10 1 7 9 5 0 2 0 0\n\
        UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
        UdpLite: 0 0 0 0 99 0 0 0 0\n";

    #[test]
    fn snmp_field_reads_the_value_under_its_name() {
        assert_eq!(snmp_field(SNMP, "Udp", "RcvbufErrors"), Some(5));
        assert_eq!(snmp_field(SNMP, "Udp", "InCsumErrors"), Some(2));
        // UdpLite's line is not Udp's.
        assert_eq!(snmp_field(SNMP, "UdpLite", "RcvbufErrors"), Some(99));
        assert_eq!(snmp_field(SNMP, "Udp", "Nope"), None);
        assert_eq!(snmp_field(SNMP, "Tcp", "RcvbufErrors"), None);
        assert_eq!(
            snmp_field("Udp: RcvbufErrors\n", "Udp", "RcvbufErrors"),
            None
        );
    }

    #[test]
    fn snmp6_field_reads_its_line() {
        let t = "Udp6InDatagrams                 \t12\nUdp6RcvbufErrors                \t3\n";
        assert_eq!(snmp6_field(t, "Udp6RcvbufErrors"), Some(3));
        assert_eq!(snmp6_field(t, "Udp6InErrors"), None);
    }

    /// Kernel UDP sockets in namespaces made with plain `ip`, over a veth
    /// at its default offloads: a receiver with a small buffer reads
    /// nothing while 2000 datagrams arrive. Every datagram it did not get
    /// is counted, exactly, in its namespace's count (read from this
    /// process, whose own namespace is another).
    #[test]
    fn a_full_receive_buffer_counts_every_datagram_it_refused() {
        if !peregrine_testbed::testing::privileged_here() {
            return;
        }
        use nix::sys::socket::{setsockopt, sockopt};
        let pair = peregrine_testbed::testing::NsPair::addressed("pg-snmp-a", "pg-snmp-b");
        let rx = netns::run_in(&pair.b, || {
            let rx = std::net::UdpSocket::bind("198.18.0.2:0").unwrap();
            setsockopt(&rx, sockopt::RcvBuf, &4096).unwrap();
            rx
        })
        .unwrap();
        let tx = netns::run_in(&pair.a, || {
            std::net::UdpSocket::bind("198.18.0.1:0").unwrap()
        })
        .unwrap();
        // One datagram through first: the sender's neighbour entry is
        // resolved before the count starts (datagrams held for ARP are not
        // the receiver's).
        rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        tx.send_to(b"first", rx.local_addr().unwrap()).unwrap();
        rx.recv(&mut [0u8; 16]).unwrap();
        let before = udp_receive_buffer_errors(&pair.b).unwrap();
        const SENT: usize = 2000;
        for i in 0..SENT {
            tx.send_to(&(i as u32).to_be_bytes(), rx.local_addr().unwrap())
                .unwrap();
        }
        rx.set_nonblocking(true).unwrap();
        let mut got = 0;
        let mut buf = [0u8; 16];
        while rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        let refused = udp_receive_buffer_errors(&pair.b).unwrap() - before;
        assert!(got > 0 && got < SENT, "received {got} of {SENT}");
        assert_eq!(refused as usize, SENT - got, "received {got} of {SENT}");
    }

    #[test]
    fn this_namespace_has_a_count() {
        // /proc/net/snmp exists in every namespace, without privileges.
        udp_receive_buffer_errors_here().unwrap();
    }
}
