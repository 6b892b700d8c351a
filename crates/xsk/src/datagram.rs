//! AF_XDP as a datagram transport (`peregrine_io::DatagramIo`): UDP over
//! IPv4 or IPv6 over Ethernet, frames built and parsed by `peregrine_wire`,
//! for one local address and port behind one next hop (no ARP or ND: the
//! next hop's MAC is given). Received datagrams are copied out of the UMEM
//! into the caller's buffers, as the trait asks; a caller that can answer in
//! place uses `Xsk::process` directly.
use std::io::IoSliceMut;
use std::net::SocketAddr;

use peregrine_io::{DatagramIo, RecvMeta, Transmit};
use peregrine_wire::{parse_udp_frame, UdpFrameSpec};

use crate::rx::Verdict;
use crate::socket::Xsk;

pub struct XskDatagrams {
    xsk: Xsk,
    /// Our side of every frame: source MAC, address and port, the next
    /// hop's MAC, TTL (destination address, port and length vary).
    local: UdpFrameSpec,
    batch: usize,
}

impl XskDatagrams {
    /// Datagrams to and from `local.src_ip:local.src_port` on `xsk`, up to
    /// `batch` per call. The XDP program in front must send that port here.
    pub fn new(xsk: Xsk, local: UdpFrameSpec, batch: usize) -> XskDatagrams {
        XskDatagrams {
            xsk,
            local,
            batch: batch.max(1),
        }
    }

    pub fn xsk(&self) -> &Xsk {
        &self.xsk
    }

    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.local.src_ip, self.local.src_port)
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
                let to = match t.destination {
                    Some(to) if to.is_ipv4() == local.src_ip.is_ipv4() => to,
                    _ => {
                        refused = Some("a destination of the local address's IP family");
                        return 0;
                    }
                };
                let spec = UdpFrameSpec {
                    dst_ip: to.ip(),
                    dst_port: to.port(),
                    frame_len: local.header_len() + t.contents.len(),
                    ..local.clone()
                };
                match spec.write_into(frame, t.contents) {
                    Ok(()) => spec.frame_len,
                    Err(_) => {
                        refused = Some("a datagram that fits one UMEM frame");
                        0
                    }
                }
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

    /// Takes what the RX ring holds (never waits); frames that are not UDP
    /// to the local address and port, or fail their checksums, are dropped.
    fn recv(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> std::io::Result<usize> {
        let max = bufs.len().min(meta.len()).min(self.batch);
        let (ip, port) = (self.local.src_ip, self.local.src_port);
        let mut got = 0;
        self.xsk
            .process(max as u32, |frame, len| {
                if let Ok(u) = parse_udp_frame(&frame[..len]) {
                    if u.dst_port == port && u.dst_ip == ip {
                        let buf = &mut bufs[got];
                        let n = u.payload.len().min(buf.len());
                        buf[..n].copy_from_slice(&u.payload[..n]);
                        meta[got] = RecvMeta {
                            len: n,
                            source: Some(SocketAddr::new(u.src_ip, u.src_port)),
                            stride: 0,
                        };
                        got += 1;
                    }
                }
                Verdict::Drop
            })
            .map_err(std::io::Error::other)?;
        Ok(got)
    }
}
