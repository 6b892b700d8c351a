//! Buffers for receiving batches: fixed-size slots in one allocation, each
//! with its datagram's metadata, reused from batch to batch.
use std::io::IoSliceMut;

use crate::{DatagramIo, RecvMeta};

pub struct RecvBatch {
    data: Vec<u8>,
    slot: usize,
    meta: Vec<RecvMeta>,
    /// Datagrams the last `recv` brought.
    received: usize,
}

impl RecvBatch {
    /// `batch` slots of `slot` bytes each.
    pub fn new(batch: usize, slot: usize) -> RecvBatch {
        RecvBatch {
            data: vec![0; batch * slot],
            slot,
            meta: vec![RecvMeta::default(); batch],
            received: 0,
        }
    }

    /// Bytes these buffers hold.
    pub fn memory_bytes(&self) -> usize {
        self.data.len()
    }

    /// Receives one batch from `io` into the slots; returns how many came.
    pub fn recv(&mut self, io: &mut impl DatagramIo) -> std::io::Result<usize> {
        self.received = 0;
        let mut bufs: Vec<IoSliceMut> = self
            .data
            .chunks_mut(self.slot)
            .map(IoSliceMut::new)
            .collect();
        self.received = io.recv(&mut bufs, &mut self.meta)?;
        Ok(self.received)
    }

    /// The datagrams of the last batch, with their metadata.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], RecvMeta)> {
        self.data
            .chunks(self.slot)
            .zip(&self.meta)
            .take(self.received)
            .map(|(buf, m)| (&buf[..m.len.min(buf.len())], *m))
    }
}
