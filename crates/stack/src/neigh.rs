//! Next hops from the kernel: which neighbour a destination is reached
//! through (the kernel's route, `ip route get`) and that neighbour's MAC
//! (the kernel's neighbour table, kept current from netlink events).
//! Nothing here talks to netlink: the stack's service thread asks the
//! kernel and feeds the answers in, so a sender never blocks on it (and a
//! sender inside an async runtime never starts one).
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use peregrine_host::nl::{Neighbour, NeighbourUse};
use peregrine_wire::MacAddr;

/// A route as the stack uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// Through neighbour `via` (the destination itself when on-link), with
    /// the source address the kernel would pick.
    Via { via: IpAddr, src: Option<IpAddr> },
    /// The kernel routes the destination out of another interface (or has
    /// no route): the stack cannot send there.
    Elsewhere,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: Option<MacAddr>,
    state: NeighbourUse,
}

/// A datagram waiting for its next hop.
pub(crate) struct Held {
    /// The sending socket's address.
    pub(crate) from: SocketAddr,
    /// The destination port (the address is the key it is held under).
    pub(crate) to_port: u16,
    pub(crate) payload: Vec<u8>,
}

struct Waiting {
    since: Instant,
    datagrams: Vec<Held>,
}

/// What a sender learns about a destination.
pub(crate) enum Lookup {
    /// Send to this MAC, from this source address (for a socket bound to
    /// the unspecified address).
    Send(MacAddr, Option<IpAddr>),
    /// Not known yet: hold the datagram (the service thread resolves it).
    Hold,
    /// No route through this interface.
    Unreachable,
}

#[derive(Default)]
pub(crate) struct NextHops {
    routes: HashMap<IpAddr, Route>,
    neighbours: HashMap<IpAddr, Entry>,
    waiting: HashMap<IpAddr, Waiting>,
    /// Neighbours a sender found STALE: the kernel is asked to confirm
    /// them (once per `reconfirm_every`).
    reconfirm: HashMap<IpAddr, Instant>,
    /// Neighbours last asked for, to ask at most every `ask_every`.
    asked: HashMap<IpAddr, Instant>,
}

/// How often the kernel is asked about one neighbour at most.
pub(crate) const ASK_EVERY: Duration = Duration::from_millis(500);

impl NextHops {
    pub(crate) fn lookup(&mut self, dst: IpAddr, now: Instant) -> Lookup {
        let (via, src) = match self.routes.get(&dst) {
            Some(Route::Via { via, src }) => (*via, *src),
            Some(Route::Elsewhere) => return Lookup::Unreachable,
            None => return Lookup::Hold,
        };
        match self.neighbours.get(&via) {
            Some(Entry {
                mac: Some(mac),
                state: NeighbourUse::Valid,
            }) => Lookup::Send(*mac, src),
            Some(Entry {
                mac: Some(mac),
                state: NeighbourUse::Stale,
            }) => {
                self.reconfirm.entry(via).or_insert(now);
                Lookup::Send(*mac, src)
            }
            _ => Lookup::Hold,
        }
    }

    /// Holds a datagram for `dst`; false when `limit` are held already.
    pub(crate) fn hold(&mut self, dst: IpAddr, held: Held, limit: usize, now: Instant) -> bool {
        let w = self.waiting.entry(dst).or_insert_with(|| Waiting {
            since: now,
            datagrams: Vec::new(),
        });
        if w.datagrams.len() >= limit {
            return false;
        }
        w.datagrams.push(held);
        true
    }

    /// Destinations with held datagrams and no route known yet.
    pub(crate) fn unrouted(&self) -> Vec<IpAddr> {
        self.waiting
            .keys()
            .filter(|d| !self.routes.contains_key(d))
            .copied()
            .collect()
    }

    pub(crate) fn set_route(&mut self, dst: IpAddr, r: Route) {
        self.routes.insert(dst, r);
    }

    /// Neighbours the kernel should be asked to resolve or confirm now:
    /// next hops of held datagrams without a usable MAC, and stale ones
    /// a sender used. Each at most every `ASK_EVERY`.
    pub(crate) fn due_asks(&mut self, now: Instant) -> Vec<IpAddr> {
        let mut want: Vec<IpAddr> = self
            .waiting
            .keys()
            .filter_map(|d| match self.routes.get(d) {
                Some(Route::Via { via, .. }) => Some(*via),
                _ => None,
            })
            .filter(|via| {
                !matches!(
                    self.neighbours.get(via),
                    Some(Entry {
                        mac: Some(_),
                        state: NeighbourUse::Valid | NeighbourUse::Stale
                    })
                )
            })
            .collect();
        want.extend(self.reconfirm.drain().map(|(ip, _)| ip));
        want.sort();
        want.dedup();
        want.retain(|ip| match self.asked.get(ip) {
            Some(t) if now.duration_since(*t) < ASK_EVERY => false,
            _ => {
                self.asked.insert(*ip, now);
                true
            }
        });
        want
    }

    /// Held datagrams that can go now: (destination, MAC, source, held).
    pub(crate) fn ready(
        &mut self,
        now: Instant,
    ) -> Vec<(IpAddr, MacAddr, Option<IpAddr>, Vec<Held>)> {
        let dsts: Vec<IpAddr> = self.waiting.keys().copied().collect();
        let mut out = Vec::new();
        for d in dsts {
            if let Lookup::Send(mac, src) = self.lookup(d, now) {
                if let Some(w) = self.waiting.remove(&d) {
                    out.push((d, mac, src, w.datagrams));
                }
            }
        }
        out
    }

    /// Held datagrams that waited longer than `timeout`, or whose
    /// destination is routed elsewhere: removed, their count returned.
    pub(crate) fn expire(&mut self, now: Instant, timeout: Duration) -> usize {
        let routes = &self.routes;
        let mut dropped = 0;
        self.waiting.retain(|d, w| {
            let gone = now.duration_since(w.since) > timeout
                || matches!(routes.get(d), Some(Route::Elsewhere));
            if gone {
                dropped += w.datagrams.len();
            }
            !gone
        });
        dropped
    }

    /// A neighbour entry of our interface as the kernel has it now.
    pub(crate) fn neighbour(&mut self, n: &Neighbour) {
        self.neighbours.insert(
            n.ip,
            Entry {
                mac: n.mac,
                state: n.state,
            },
        );
    }

    /// The MAC of neighbour `ip` if it may be used.
    pub(crate) fn mac_of(&self, ip: IpAddr) -> Option<MacAddr> {
        match self.neighbours.get(&ip) {
            Some(Entry {
                mac: Some(m),
                state: NeighbourUse::Valid | NeighbourUse::Stale,
            }) => Some(*m),
            _ => None,
        }
    }

    pub(crate) fn neighbour_gone(&mut self, ip: IpAddr) {
        self.neighbours.remove(&ip);
    }

    /// Routes changed: every destination is looked up again.
    pub(crate) fn forget_routes(&mut self) {
        self.routes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(ip: &str, mac: Option<u32>, state: NeighbourUse) -> Neighbour {
        Neighbour {
            ifindex: 1,
            ip: ip.parse().unwrap(),
            mac: mac.map(MacAddr::local),
            state,
        }
    }

    fn held() -> Held {
        Held {
            from: "198.18.0.1:1".parse().unwrap(),
            to_port: 9,
            payload: vec![1],
        }
    }

    #[test]
    fn a_destination_goes_from_held_to_sent_as_route_and_neighbour_arrive() {
        let mut h = NextHops::default();
        let now = Instant::now();
        let dst: IpAddr = "198.18.0.2".parse().unwrap();
        assert!(matches!(h.lookup(dst, now), Lookup::Hold));
        assert!(h.hold(dst, held(), 2, now));
        assert!(h.hold(dst, held(), 2, now));
        assert!(!h.hold(dst, held(), 2, now), "limit");
        assert_eq!(h.unrouted(), vec![dst]);
        h.set_route(
            dst,
            Route::Via {
                via: dst,
                src: None,
            },
        );
        assert_eq!(h.due_asks(now), vec![dst]);
        assert!(h.due_asks(now).is_empty(), "asked at most every ASK_EVERY");
        assert!(h.ready(now).is_empty());
        h.neighbour(&n("198.18.0.2", None, NeighbourUse::Resolving));
        assert!(h.ready(now).is_empty());
        h.neighbour(&n("198.18.0.2", Some(7), NeighbourUse::Valid));
        let r = h.ready(now);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].1, r[0].3.len()), (MacAddr::local(7), 2));
        assert!(matches!(h.lookup(dst, now), Lookup::Send(m, None) if m == MacAddr::local(7)));
        // A changed MAC is used at once; a stale one still, and confirmed.
        h.neighbour(&n("198.18.0.2", Some(8), NeighbourUse::Stale));
        assert!(matches!(h.lookup(dst, now), Lookup::Send(m, None) if m == MacAddr::local(8)));
        let later = now + ASK_EVERY * 2;
        assert_eq!(h.due_asks(later), vec![dst]);
        h.neighbour_gone(dst);
        assert!(matches!(h.lookup(dst, later), Lookup::Hold));
    }

    #[test]
    fn gateways_and_other_interfaces() {
        let mut h = NextHops::default();
        let now = Instant::now();
        let dst: IpAddr = "198.19.5.5".parse().unwrap();
        let gw: IpAddr = "198.18.0.254".parse().unwrap();
        let src: IpAddr = "198.18.0.1".parse().unwrap();
        h.set_route(
            dst,
            Route::Via {
                via: gw,
                src: Some(src),
            },
        );
        h.neighbour(&n("198.18.0.254", Some(3), NeighbourUse::Valid));
        assert!(
            matches!(h.lookup(dst, now), Lookup::Send(m, Some(s)) if m == MacAddr::local(3) && s == src)
        );
        let other: IpAddr = "198.18.9.9".parse().unwrap();
        h.set_route(other, Route::Elsewhere);
        assert!(matches!(h.lookup(other, now), Lookup::Unreachable));
        h.forget_routes();
        assert!(matches!(h.lookup(dst, now), Lookup::Hold));
    }

    #[test]
    fn held_datagrams_expire() {
        let mut h = NextHops::default();
        let now = Instant::now();
        let dst: IpAddr = "2001:db8::2".parse().unwrap();
        h.hold(dst, held(), 8, now);
        h.hold(dst, held(), 8, now);
        assert_eq!(h.expire(now, Duration::from_secs(1)), 0);
        assert_eq!(
            h.expire(now + Duration::from_secs(2), Duration::from_secs(1)),
            2
        );
        assert!(h.unrouted().is_empty());
    }
}
