//! A UDP socket of the stack: bound to an address and port of the
//! stack's interface; datagrams one at a time or in batches, blocking,
//! non-blocking or through wakers (for async runtimes).
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use peregrine_io::{DatagramIo, RecvMeta, Transmit};
use peregrine_wire::MacAddr;

use crate::counters::Counters;
use crate::error::{Result, StackError};
use crate::neigh::{Held, Lookup};
use crate::stack::{lock, source_for, Direct, Inner, SockQueue, SocketShared, Stack};

pub struct UdpSocket {
    inner: Arc<Inner>,
    shared: Arc<SocketShared>,
    /// A kernel UDP socket on the same address and port: keeps the port
    /// from other programs on the host (it receives nothing: the XDP
    /// program takes the port's datagrams first).
    _reservation: std::net::UdpSocket,
    read_timeout: Option<Duration>,
}

impl Stack {
    /// A UDP socket on `addr` (port 0: one the kernel picks). The address
    /// must be one of the interface's, or unspecified (every address of the
    /// interface, of that family). The port is reserved in the kernel too
    /// (a kernel UDP socket bound to it, which receives nothing), so no
    /// program on the host takes it meanwhile.
    pub fn bind(&self, addr: SocketAddr) -> Result<UdpSocket> {
        UdpSocket::bind(&self.inner, addr)
    }
}

impl UdpSocket {
    pub(crate) fn bind(inner: &Arc<Inner>, addr: SocketAddr) -> Result<UdpSocket> {
        let refuse = |reason: String| StackError::Bind { addr, reason };
        if !addr.ip().is_unspecified() {
            let ifindex = inner.ifindex;
            // Off any async runtime the caller may be in (netlink calls
            // block on one of their own).
            let nl = &inner.nl;
            let addrs = std::thread::scope(|s| {
                std::thread::Builder::new()
                    .spawn_scoped(s, || lock(nl).addresses(ifindex))
                    .map(|h| h.join().unwrap_or_else(|_| Ok(Vec::new())))
            })
            .map_err(|e| {
                refuse(peregrine_host::limits::thread_refused(
                    "starting a thread to read the interface's addresses",
                    &e,
                ))
            })??;
            if !addrs.contains(&addr.ip()) {
                return Err(refuse(format!(
                    "{} is not an address of {}",
                    addr.ip(),
                    inner.iface
                )));
            }
        }
        let reservation = std::net::UdpSocket::bind(addr)
            .map_err(|e| refuse(format!("reserving the port: {e}")))?;
        let local = reservation
            .local_addr()
            .map_err(|e| refuse(format!("reading the reserved port: {e}")))?;
        let shared = Arc::new(SocketShared {
            local,
            queue: Mutex::new(SockQueue {
                datagrams: Default::default(),
                spare: Vec::new(),
                waker: None,
            }),
            arrived: Condvar::new(),
        });
        {
            let mut b = inner.bindings.write().unwrap_or_else(|p| p.into_inner());
            if b.contains_key(&local) {
                return Err(refuse("already bound on this stack".into()));
            }
            b.insert(local, shared.clone());
        }
        if let Err(e) = inner.prog.bind(local.ip(), local.port()) {
            inner
                .bindings
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&local);
            return Err(e.into());
        }
        Ok(UdpSocket {
            inner: inner.clone(),
            shared,
            _reservation: reservation,
            read_timeout: None,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// How long blocking receives wait (None: until a datagram comes).
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.read_timeout = t;
    }

    /// The largest payload one datagram to `dst` may carry (the MTU's).
    pub fn max_payload(&self, dst: IpAddr) -> usize {
        self.inner.max_payload(dst)
    }

    /// Sends one datagram; see `send_batch`.
    pub fn send_to(&self, buf: &[u8], dst: SocketAddr) -> io::Result<usize> {
        self.send_batch(&[Transmit {
            destination: Some(dst),
            source: None,
            contents: buf,
        }])?;
        Ok(buf.len())
    }

    /// Sends the first datagrams of `transmits` (up to the stack's batch)
    /// in one TX batch; returns how many it took. A datagram whose next
    /// hop is not resolved yet is held (and sent once it is, or dropped
    /// and counted after the resolve timeout), and counts as taken. Errors
    /// (on the first datagram only; a later one ends the batch): no
    /// destination or one of the other family, larger than the MTU allows
    /// (InvalidInput, the message says which), no route through this interface
    /// (NetworkUnreachable), no room in the TX ring (WouldBlock).
    pub fn send_batch(&self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        let inner = &*self.inner;
        let local = self.shared.local;
        let q = inner.tx_queue_for(local);
        let mut xsk = lock(&inner.queues[q]);
        let room = xsk.tx_free() as usize;
        let n = transmits.len().min(inner.cfg.batch as usize);
        if n > 0 && room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = n.min(room);
        let now = Instant::now();
        let mut ready: Vec<(MacAddr, SocketAddr, SocketAddr, &[u8])> = Vec::with_capacity(n);
        let mut taken = 0;
        let mut error = None;
        {
            let mut hops = lock(&inner.next_hops);
            for t in &transmits[..n] {
                let to = match t.destination {
                    Some(to) if to.is_ipv4() == local.is_ipv4() => to,
                    Some(to) => {
                        error = Some(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("{to}: a socket bound to {local} sends to its own family"),
                        ));
                        break;
                    }
                    None => {
                        error = Some(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "a stack socket needs a destination for every datagram",
                        ));
                        break;
                    }
                };
                let max = inner.max_payload(to.ip());
                if t.contents.len() > max {
                    error = Some(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "a {}-byte datagram to {to}: at most {max} bytes fit the MTU of {} (EMSGSIZE)",
                            t.contents.len(),
                            inner.iface
                        ),
                    ));
                    break;
                }
                match hops.lookup(to.ip(), now) {
                    Lookup::Send(mac, src) => {
                        ready.push((mac, source_for(local, src), to, t.contents))
                    }
                    Lookup::Hold => {
                        let held = Held {
                            from: local,
                            to_port: to.port(),
                            payload: t.contents.to_vec(),
                        };
                        if hops.hold(to.ip(), held, inner.cfg.hold, now) {
                            Counters::add(&inner.counters.tx_held, 1);
                        } else {
                            Counters::add(&inner.counters.tx_no_neighbour, 1);
                        }
                    }
                    Lookup::Unreachable => {
                        error = Some(io::Error::new(
                            io::ErrorKind::NetworkUnreachable,
                            format!("no route to {} through {}", to.ip(), inner.iface),
                        ));
                        break;
                    }
                }
                taken += 1;
            }
        }
        if !ready.is_empty() {
            inner.transmit(&mut xsk, &ready);
        }
        match error {
            Some(e) if taken == 0 => Err(e),
            _ => Ok(taken),
        }
    }

    /// Moves queued datagrams into `bufs`/`meta` from `at` on; returns the
    /// new count. A datagram longer than its buffer is cut, as UDP does.
    fn take_queued(
        q: &mut SockQueue,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
        mut at: usize,
    ) -> usize {
        let max = bufs.len().min(meta.len());
        while at < max {
            let Some(d) = q.datagrams.pop_front() else {
                break;
            };
            let n = d.data.len().min(bufs[at].len());
            bufs[at][..n].copy_from_slice(&d.data[..n]);
            meta[at] = RecvMeta {
                len: n,
                source: Some(d.from),
                stride: 0,
            };
            q.spare.push(d.data);
            at += 1;
        }
        at
    }

    /// Receives what is there now, up to `min(bufs.len(), meta.len())`
    /// datagrams, without waiting: first what the socket's queue holds,
    /// then straight from the RX rings no one else is draining.
    /// WouldBlock when there is nothing.
    pub fn try_recv_batch(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let max = bufs.len().min(meta.len());
        if max == 0 {
            return Ok(0);
        }
        let got = Self::take_queued(&mut self.shared.lock(), bufs, meta, 0);
        if got > 0 {
            return Ok(got);
        }
        let mut d = Direct {
            me: &self.shared,
            bufs,
            meta,
            got: 0,
        };
        for q in &self.inner.queues {
            if let Ok(mut x) = q.try_lock() {
                self.inner.drain(&mut x, Some(&mut d));
            }
            if d.got > 0 {
                break;
            }
        }
        // What a drain queued for us meanwhile (it keeps the order).
        let got = Self::take_queued(&mut self.shared.lock(), d.bufs, d.meta, d.got);
        match got {
            0 => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    /// `try_recv_batch`, waiting for the first datagram up to the read
    /// timeout (TimedOut after it).
    pub fn recv_batch(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let deadline = self.read_timeout.map(|t| Instant::now() + t);
        loop {
            match self.try_recv_batch(bufs, meta) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
            let wait = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::ErrorKind::TimedOut.into());
                    }
                    left.min(Duration::from_millis(50))
                }
                None => Duration::from_millis(50),
            };
            let q = self.shared.lock();
            if q.datagrams.is_empty() {
                let _ = self.shared.arrived.wait_timeout(q, wait);
            }
        }
    }

    /// One datagram into `buf`: its length and sender (waits as
    /// `recv_batch` does).
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let mut meta = [RecvMeta::default()];
        self.recv_batch(&mut [IoSliceMut::new(buf)], &mut meta)?;
        let from = meta[0]
            .source
            .ok_or_else(|| io::Error::other("a datagram without a sender"))?;
        Ok((meta[0].len, from))
    }

    /// Receives what is there, or registers `cx`'s waker to be woken when
    /// a datagram arrives for this socket.
    pub fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        match self.try_recv_batch(bufs, meta) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => return Poll::Ready(other),
        }
        let mut q = self.shared.lock();
        if !q.datagrams.is_empty() {
            let got = Self::take_queued(&mut q, bufs, meta, 0);
            return Poll::Ready(Ok(got));
        }
        q.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Ready when the socket's TX ring has room; otherwise `cx` is woken
    /// by the stack's thread (within a few milliseconds) to try again.
    pub fn poll_send_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let q = self.inner.tx_queue_for(self.shared.local);
        if lock(&self.inner.queues[q]).tx_free() > 0 {
            return Poll::Ready(());
        }
        lock(&self.inner.send_waiters).push(cx.waker().clone());
        Poll::Pending
    }

    /// Waits until a datagram is there (async).
    pub async fn readable(&self) {
        std::future::poll_fn(|cx| {
            let mut q = self.shared.lock();
            if !q.datagrams.is_empty() {
                return Poll::Ready(());
            }
            drop(q);
            // Frames for us may wait in a ring: drain it into the queue.
            for x in &self.inner.queues {
                if let Ok(mut x) = x.try_lock() {
                    self.inner.drain(&mut x, None);
                }
            }
            q = self.shared.lock();
            if !q.datagrams.is_empty() {
                return Poll::Ready(());
            }
            q.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

impl Drop for UdpSocket {
    fn drop(&mut self) {
        let local = self.shared.local;
        let _ = self.inner.prog.unbind(local.ip(), local.port());
        self.inner
            .bindings
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&local);
    }
}

impl DatagramIo for UdpSocket {
    fn max_batch(&self) -> usize {
        self.inner.cfg.batch as usize
    }

    fn send(&mut self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        self.send_batch(transmits)
    }

    fn recv(&mut self, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> io::Result<usize> {
        self.recv_batch(bufs, meta)
    }
}
