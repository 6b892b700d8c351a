//! PACKET_MMAP behind `DatagramIo`: datagrams to and from one local address
//! and port, each in a whole frame built (TX ring) or parsed (RX ring) with
//! `peregrine_wire`, behind one next hop whose MAC is given (no ARP or ND).
//! Either ring may be left out: a sender has no RX ring taking every frame
//! of the interface, a receiver no TX ring.
use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::time::Duration;

use peregrine_wire::UdpFrameSpec;

use super::{RxRing, RxRingConfig, TxRing, TxRingConfig};
use crate::frames::{write_frame, Delivery};
use crate::{DatagramIo, RecvMeta, Transmit};

pub struct MmapDatagrams {
    tx: Option<TxRing>,
    rx: Option<RxRing>,
    /// Our side of every frame: MACs (the next hop's as destination),
    /// address, port, TTL.
    local: UdpFrameSpec,
    /// How long `recv` waits for a block.
    wait: Duration,
    /// Frames for our port that failed the checks.
    damaged: u64,
}

impl MmapDatagrams {
    /// A TX ring on `iface` (in the calling thread's namespace) sending
    /// from `local`.
    pub fn sender(iface: &str, local: UdpFrameSpec) -> std::io::Result<MmapDatagrams> {
        let tx = TxRing::open(iface, TxRingConfig::default())?;
        Ok(MmapDatagrams::new(Some(tx), None, local))
    }

    /// An RX ring on `iface` taking datagrams to `local` (its address and
    /// port; the address may be unspecified); `recv` waits up to `wait`.
    pub fn receiver(
        iface: &str,
        local: UdpFrameSpec,
        wait: Duration,
    ) -> std::io::Result<MmapDatagrams> {
        let rx = RxRing::open(iface, RxRingConfig::default())?;
        Ok(MmapDatagrams {
            wait,
            ..MmapDatagrams::new(None, Some(rx), local)
        })
    }

    fn new(tx: Option<TxRing>, rx: Option<RxRing>, local: UdpFrameSpec) -> MmapDatagrams {
        MmapDatagrams {
            tx,
            rx,
            local,
            wait: Duration::ZERO,
            damaged: 0,
        }
    }

    pub fn tx_ring(&self) -> Option<&TxRing> {
        self.tx.as_ref()
    }

    pub fn rx_ring(&mut self) -> Option<&mut RxRing> {
        self.rx.as_mut()
    }

    /// Frames naming our port that failed the checks (lengths, checksums).
    pub fn damaged(&self) -> u64 {
        self.damaged
    }
}

fn missing(ring: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("this PACKET_MMAP transport has no {ring} ring"),
    )
}

impl DatagramIo for MmapDatagrams {
    /// A quarter of the TX ring (slots stay free while the kernel finishes
    /// the previous batch), or 64 on a receiver.
    fn max_batch(&self) -> usize {
        self.tx.as_ref().map_or(64, |t| (t.capacity() / 4).max(1))
    }

    /// Builds each datagram's frame in a free slot and flushes them with one
    /// send(); a transmit without a destination, of the other IP family or
    /// too long for a slot ends the batch (an error if it is the first).
    fn send(&mut self, transmits: &[Transmit<'_>]) -> std::io::Result<usize> {
        let n = transmits.len().min(self.max_batch());
        let local = &self.local;
        let tx = self.tx.as_mut().ok_or_else(|| missing("TX"))?;
        let mut next = transmits.iter().take(n);
        let mut refused = None;
        let sent = tx.send(n, |buf| {
            let Some(t) = next.next() else { return 0 };
            write_frame(local, t, buf).unwrap_or_else(|need| {
                refused = Some(need);
                0
            })
        })?;
        match refused {
            Some(need) if sent == 0 => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("PACKET_MMAP datagrams need {need}"),
            )),
            _ => Ok(sent),
        }
    }

    /// Takes datagrams to the local address and port from the next block
    /// (waiting for one as set up); other frames are skipped, damaged ones
    /// for our port counted (`damaged`).
    fn recv(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> std::io::Result<usize> {
        let max = bufs.len().min(meta.len());
        let local = SocketAddr::new(self.local.src_ip, self.local.src_port);
        let rx = self.rx.as_mut().ok_or_else(|| missing("RX"))?;
        let mut delivery = Delivery::new(local, bufs, meta);
        // Frames of other traffic count against `max` too: a block is
        // handed over at most `max` frames at a time, so nothing is lost.
        rx.receive_up_to(self.wait, max, |frame, _status| delivery.frame(frame))?;
        self.damaged += delivery.damaged;
        Ok(delivery.got)
    }
}
