//! Sending: new frames built in free UMEM frames, the TX ring, and the
//! kicks that make the kernel send what waits in it.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use s2n_quic_xdp::if_xdp::{RxTxDescriptor, UmemDescriptor};
use s2n_quic_xdp::syscall;

use crate::error::Result;
use crate::socket::Xsk;

impl Xsk {
    /// Sends new frames: up to `max` free frames are handed to `build(buf)`,
    /// which writes a frame at the start of `buf` and returns its length (0:
    /// no more). Returns the frames queued for sending.
    pub fn transmit(&mut self, max: u32, mut build: impl FnMut(&mut [u8]) -> usize) -> Result<u32> {
        let mut frames = {
            let mut pool = self.lock_pool();
            pool.reclaim();
            let take = (max as usize).min(pool.free.len());
            let at = pool.free.len() - take;
            pool.free.split_off(at)
        };
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        self.back.clear();
        let frame_size = self.cfg.frame_size;
        while let Some(d) = frames.pop() {
            let room = RxTxDescriptor {
                address: d.address,
                len: frame_size,
                options: Default::default(),
            };
            // Safety: the frame came from the free list; nobody else uses it
            // until it is queued or returned.
            let buf = unsafe { self.umem.get_mut(room) };
            match build(buf) {
                0 => {
                    self.back.push(d);
                    break;
                }
                len => out.push(RxTxDescriptor {
                    len: len.min(frame_size as usize) as u32,
                    ..room
                }),
            }
        }
        self.back.extend(frames);
        let sent = self.push_tx(&out);
        let rest = out.iter().skip(sent as usize);
        self.back.extend(rest.map(|d| UmemDescriptor::from(*d)));
        self.out = out;
        self.finish_batch();
        Ok(sent)
    }

    /// Descriptors the TX ring has room for now: what `transmit` can
    /// queue without leaving a built frame behind.
    pub fn tx_free(&mut self) -> u32 {
        let cap = self.tx.capacity() as u32;
        self.tx.acquire(cap).min(cap)
    }

    /// Descriptors still waiting in this socket's TX ring.
    pub(crate) fn tx_pending(&mut self) -> u32 {
        let cap = self.tx.capacity() as u32;
        cap - self.tx.acquire(cap).min(cap)
    }

    /// Queues `out` on the TX ring, making room first if it is short.
    pub(crate) fn push_tx(&mut self, out: &[RxTxDescriptor]) -> u32 {
        let mut room = self.tx.acquire(out.len() as u32) as usize;
        if room < out.len() {
            // Let the kernel send what waits, take back what it finished.
            self.kick_tx();
            self.lock_pool().reclaim();
            room = self.tx.acquire(out.len() as u32) as usize;
        }
        let mut sent = 0;
        let (a, b) = self.tx.data();
        for (slot, d) in a.iter_mut().chain(b.iter_mut()).zip(out.iter()).take(room) {
            *slot = *d;
            sent += 1;
        }
        self.tx.release(sent);
        sent
    }

    /// Asks the kernel to send what waits in the TX ring. In copy mode one
    /// sendto() sends at most `tx_budget` frames (32 unless the kernel took
    /// XDP_MAX_TX_SKB_BUDGET) and answers EAGAIN while more wait, so it is
    /// repeated (a bounded number of times): one kick per batch would leave
    /// the ring filling up and replies dropped for want of room.
    pub(crate) fn kick_tx(&self) {
        for _ in 0..=self.cfg.ring / self.tx_budget.max(1) {
            match syscall::wake_tx(&self.fd) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY)) => {
                    continue
                }
                _ => break,
            }
        }
    }
}
