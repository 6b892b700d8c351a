//! AF_XDP as a datagram transport (`peregrine_io::DatagramIo`): UDP over
//! IPv4 or IPv6 over Ethernet, frames built and parsed by `peregrine_wire`,
//! for one local address and port behind one next hop (no ARP or ND: the
//! next hop's MAC is given; each datagram may name its own source, as a
//! generator's flows do). Received datagrams are copied out of the UMEM
//! into the caller's buffers, as the trait asks; a caller that can answer in
//! place uses `Xsk::process` directly.
use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::time::Duration;

use peregrine_io::frames::{write_frame, Delivery};
use peregrine_io::{DatagramIo, RecvMeta, Transmit};
use peregrine_wire::UdpFrameSpec;

use crate::rx::Verdict;
use crate::socket::Xsk;

pub struct XskDatagrams {
    xsk: Xsk,
    /// Our side of every frame: source MAC, address and port, the next
    /// hop's MAC, TTL (destination address, port and length vary).
    local: UdpFrameSpec,
    batch: usize,
    /// How long `recv` waits for a frame when the RX ring is empty.
    wait: Duration,
    /// Frames for our port that failed the checks.
    damaged: u64,
}

impl XskDatagrams {
    /// Datagrams to and from `local.src_ip:local.src_port` on `xsk` (an
    /// unspecified address takes every address of the family), up to
    /// `batch` per call. The XDP program in front must send that port here.
    pub fn new(xsk: Xsk, local: UdpFrameSpec, batch: usize) -> XskDatagrams {
        XskDatagrams {
            xsk,
            local,
            batch: batch.max(1),
            wait: Duration::ZERO,
            damaged: 0,
        }
    }

    /// Lets `recv` wait up to `wait` for a frame when the ring is empty.
    pub fn with_wait(self, wait: Duration) -> XskDatagrams {
        XskDatagrams { wait, ..self }
    }

    pub fn xsk(&self) -> &Xsk {
        &self.xsk
    }

    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.local.src_ip, self.local.src_port)
    }

    /// Frames for our port that failed the checks (lengths, checksums).
    pub fn damaged(&self) -> u64 {
        self.damaged
    }

    /// Copies the datagrams for us among the next `max` received frames
    /// into `bufs`; returns how many.
    fn take(
        &mut self,
        max: usize,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> std::io::Result<usize> {
        let mut delivery = Delivery::new(self.local_addr(), bufs, meta);
        self.xsk
            .process(max as u32, |frame, len| {
                delivery.frame(&frame[..len]);
                Verdict::Drop
            })
            .map_err(std::io::Error::other)?;
        self.damaged += delivery.damaged;
        Ok(delivery.got)
    }
}

impl DatagramIo for XskDatagrams {
    fn max_batch(&self) -> usize {
        self.batch
    }

    /// Builds each datagram's frame in a free UMEM frame and queues it; a
    /// transmit without a destination, or of the other IP family, ends the
    /// batch (an error if it is the first).
    fn send(&mut self, transmits: &[Transmit<'_>]) -> std::io::Result<usize> {
        let n = transmits.len().min(self.batch);
        let local = &self.local;
        let mut next = transmits.iter().take(n);
        let mut refused = None;
        let sent = self
            .xsk
            .transmit(n as u32, |frame| {
                let Some(t) = next.next() else { return 0 };
                write_frame(local, t, frame).unwrap_or_else(|need| {
                    refused = Some(need);
                    0
                })
            })
            .map_err(std::io::Error::other)?;
        match refused {
            Some(need) if sent == 0 => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("AF_XDP datagrams need {need}"),
            )),
            _ => Ok(sent as usize),
        }
    }

    /// Takes what the RX ring holds, waiting for it as set up (`with_wait`;
    /// by default not at all); frames that are not UDP to the local address
    /// and port, or fail their checks, are dropped.
    fn recv(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> std::io::Result<usize> {
        let max = bufs.len().min(meta.len()).min(self.batch);
        let got = self.take(max, bufs, meta)?;
        if got > 0 || self.wait.is_zero() || !self.xsk.wait(self.wait.as_millis() as i32) {
            return Ok(got);
        }
        self.take(max, bufs, meta)
    }
}
