//! The one AF_XDP worker loop: a pinned thread per socket takes received
//! frames in batches, hands each to a handler that answers it in place or
//! gives it back, and polls busily (never sleeps) between batches.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::{Result, XskError};
use crate::rx::Verdict;
use crate::socket::Xsk;
use peregrine_host::limits::thread_refused;

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
    /// given), up to `batch` frames per ring access. Panics if the thread
    /// cannot be started ([`Workers::try_spawn`] says why instead).
    pub fn spawn(&mut self, xsk: Xsk, cpu: Option<usize>, batch: u32, handler: impl FrameHandler) {
        if let Err(e) = self.try_spawn(xsk, cpu, batch, handler) {
            panic!("{e}");
        }
    }

    /// [`Workers::spawn`], or an error naming the limit that kept the
    /// thread from starting (the socket is closed).
    pub fn try_spawn(
        &mut self,
        mut xsk: Xsk,
        cpu: Option<usize>,
        batch: u32,
        mut handler: impl FrameHandler,
    ) -> Result<()> {
        let stop = self.stop.clone();
        let (iface, queue) = (xsk.iface.clone(), xsk.queue);
        let thread = std::thread::Builder::new().spawn(move || {
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
        });
        let thread = thread.map_err(|e| XskError::Limit {
            iface,
            queue,
            what: thread_refused("starting its worker thread", &e),
        })?;
        self.threads.push(thread);
        Ok(())
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
