//! The frames of one UMEM and the two rings that move them between user
//! space and the kernel: fill (frames given for receiving) and completion
//! (frames given back after sending).
use s2n_quic_xdp::if_xdp::UmemDescriptor;
use s2n_quic_xdp::ring::{Completion, Fill};

/// Sockets bound to one queue with a shared UMEM share a pool, so it sits
/// behind a lock taken once per batch.
pub(crate) struct FramePool {
    pub(crate) fill: Fill,
    pub(crate) comp: Completion,
    /// Frames owned by user space, ready for the fill ring or for sending.
    pub(crate) free: Vec<UmemDescriptor>,
    /// Frames kept out of the fill ring for `transmit` (half the UMEM).
    pub(crate) keep: usize,
}

impl FramePool {
    /// Takes back frames the kernel finished sending.
    pub(crate) fn reclaim(&mut self) {
        let n = self.comp.acquire(1);
        if n == 0 {
            return;
        }
        let (a, b) = self.comp.data();
        self.free
            .extend(a.iter().chain(b.iter()).take(n as usize).copied());
        self.comp.release(n);
    }

    /// Moves free frames to the fill ring, keeping `keep` for sending.
    pub(crate) fn refill(&mut self) {
        if self.free.len() <= self.keep {
            return;
        }
        let want = (self.free.len() - self.keep) as u32;
        let n = self.fill.acquire(want).min(want);
        if n == 0 {
            return;
        }
        let (a, b) = self.fill.data();
        let mut done = 0u32;
        for slot in a.iter_mut().chain(b.iter_mut()).take(n as usize) {
            match self.free.pop() {
                Some(d) => {
                    *slot = d;
                    done += 1;
                }
                None => break,
            }
        }
        self.fill.release(done);
    }
}
