//! Receiving: frames taken from the RX ring are handed to a handler in place
//! and either answered from the same UMEM frame or given back for receiving.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use s2n_quic_xdp::if_xdp::{RxTxDescriptor, UmemDescriptor};

use crate::error::Result;
use crate::socket::Xsk;

/// What a handler does with a received frame.
pub enum Verdict {
    /// Give the frame back to the kernel for receiving.
    Drop,
    /// Send the frame, changed in place, with this length.
    Transmit(usize),
}

impl Xsk {
    /// Handles up to `max` received frames with `f(buffer, len)`: the frame
    /// is `buffer[..len]`, and the buffer runs to the end of its UMEM frame so
    /// a reply may be longer. Frames `f` answers are sent in place. Returns
    /// (received, transmitted).
    pub fn process(
        &mut self,
        max: u32,
        mut f: impl FnMut(&mut [u8], usize) -> Verdict,
    ) -> Result<(u32, u32)> {
        let n = self.rx.acquire(1).min(max);
        let mut sent = 0u32;
        self.back.clear();
        if n > 0 {
            let mut out = std::mem::take(&mut self.out);
            out.clear();
            {
                let (a, b) = self.rx.data();
                let frame_size = u64::from(self.cfg.frame_size);
                for d in a.iter().chain(b.iter()).take(n as usize) {
                    // The whole rest of the UMEM frame the packet starts in.
                    let room = RxTxDescriptor {
                        len: (frame_size - d.address % frame_size) as u32,
                        ..*d
                    };
                    // Safety: the kernel handed this descriptor to us; nothing
                    // else refers to its UMEM frame until we return it.
                    let buf = unsafe { self.umem.get_mut(room) };
                    match f(buf, d.len as usize) {
                        Verdict::Transmit(len) if len <= room.len as usize => {
                            let mut t = *d;
                            t.len = len as u32;
                            out.push(t);
                        }
                        _ => self.back.push(UmemDescriptor::from(*d)),
                    }
                }
            }
            self.rx.release(n);
            if !out.is_empty() {
                sent = self.push_tx(&out);
                // What the TX ring had no room for goes back to receiving.
                let rest = out.iter().skip(sent as usize);
                self.back.extend(rest.map(|d| UmemDescriptor::from(*d)));
            }
            self.out = out;
        }
        self.finish_batch();
        Ok((n, sent))
    }
}

impl Xsk {
    /// Takes up to `max` received frames, hands each to `f(meta, frame)`
    /// and gives every one back for receiving: for a consumer that copies
    /// what it keeps (a scheduler queueing frames for another interface).
    /// `meta` is the `meta_len` bytes the XDP program put in front of the
    /// frame (bpf_xdp_adjust_meta; AF_XDP copies them into the headroom),
    /// empty when the frame starts too close to its UMEM frame's start.
    /// Returns the frames received.
    pub fn receive(&mut self, max: u32, meta_len: usize, mut f: impl FnMut(&[u8], &[u8])) -> u32 {
        let n = self.rx.acquire(1).min(max);
        self.back.clear();
        if n > 0 {
            let frame_size = u64::from(self.cfg.frame_size);
            let (a, b) = self.rx.data();
            for d in a.iter().chain(b.iter()).take(n as usize) {
                let headroom = (d.address % frame_size) as usize;
                let before = if headroom >= meta_len { meta_len } else { 0 };
                let whole = RxTxDescriptor {
                    address: d.address - before as u64,
                    len: d.len + before as u32,
                    ..*d
                };
                // Safety: the kernel handed this descriptor to us; its UMEM
                // frame (metadata in its headroom included) is ours until it
                // goes back to the pool below.
                let buf = unsafe { self.umem.get_mut(whole) };
                let (meta, frame) = buf.split_at(before);
                f(meta, frame);
                self.back.push(UmemDescriptor::from(*d));
            }
            self.rx.release(n);
        }
        self.finish_batch();
        n
    }
}
