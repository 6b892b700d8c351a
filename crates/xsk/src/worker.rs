//! The one AF_XDP worker loop: a pinned thread per socket takes received
//! frames in batches, hands each to a handler that answers it in place or
//! gives it back, and polls busily (never sleeps) between batches.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::Result;
use crate::rx::Verdict;
use crate::socket::Xsk;

/// What a worker does with its socket's frames.
pub trait FrameHandler: Send + 'static {
    /// One received frame, `buf[..len]`; `buf` runs to the end of its UMEM
    /// frame, so a reply written in place may be longer than the request.
    fn frame(&mut self, buf: &mut [u8], len: usize) -> Verdict;

    /// After each batch (also an empty one): what it received and sent, for
    /// counters kept per batch rather than per frame.
    fn end_batch(&mut self, xsk: &Xsk, batch: Result<(u32, u32)>);
}

/// Worker threads, one socket each; stopped and joined on drop.
#[derive(Default)]
pub struct Workers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    pub fn new() -> Workers {
        Workers::default()
    }

    /// Serves `xsk` with `handler` from a new thread (pinned to `cpu` if
    /// given), up to `batch` frames per ring access.
    pub fn spawn(
        &mut self,
        mut xsk: Xsk,
        cpu: Option<usize>,
        batch: u32,
        mut handler: impl FrameHandler,
    ) {
        let stop = self.stop.clone();
        self.threads.push(std::thread::spawn(move || {
            if let Some(cpu) = cpu {
                let _ = peregrine_host::cpu::pin_to_cpu(cpu);
            }
            while !stop.load(Ordering::Relaxed) {
                let got = xsk.process(batch, |buf, len| handler.frame(buf, len));
                let idle = matches!(got, Ok((0, _)));
                handler.end_batch(&xsk, got);
                // Busy polling, as AF_XDP receivers do: a sleeping thread
                // on a VM can take a millisecond to wake, by which time the
                // ring has overflowed.
                if idle {
                    std::hint::spin_loop();
                }
            }
        }));
    }

    /// Worker threads running.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
