//! A TPACKET_V2 TX ring: the caller builds whole frames (link header
//! included) in the ring's slots; one blocking `send()` hands every slot
//! marked for sending to the device and returns once the kernel has sent
//! them, so each batch costs one system call however large it is.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use super::{bind_to, ifindex, packet_socket, set_packet_opt, Mapped};

/// Ring geometry and behaviour.
#[derive(Debug, Clone, Copy)]
pub struct TxRingConfig {
    /// Slots in the ring (the largest batch one flush sends).
    pub frames: u32,
    /// Bytes per slot, header included (power of two, at most a page).
    pub frame_size: u32,
    /// Skip the qdisc layer (PACKET_QDISC_BYPASS): frames go straight to the
    /// driver, as the seed's sender did not do; off by default so a loaded
    /// device's queue counts its drops.
    pub qdisc_bypass: bool,
}

impl Default for TxRingConfig {
    fn default() -> Self {
        TxRingConfig {
            frames: 2048,
            frame_size: 2048,
            qdisc_bypass: false,
        }
    }
}

pub struct TxRing {
    fd: OwnedFd,
    map: Mapped,
    frame_size: usize,
    frames: usize,
    /// Offset of a frame's data in its slot (after the tpacket2_hdr).
    data_offset: usize,
    /// Next slot to fill.
    next: usize,
    /// Frames the kernel refused as malformed (TP_STATUS_WRONG_FORMAT).
    wrong_format: u64,
    /// Flushes that came back with ENOBUFS: a frame the device (or the
    /// peer it hands frames to) dropped; the kernel stops the flush there.
    device_drops: u64,
}

impl TxRing {
    /// A TX ring on `iface` (in the calling thread's namespace).
    pub fn open(iface: &str, cfg: TxRingConfig) -> std::io::Result<TxRing> {
        let index = ifindex(iface)?;
        // Protocol 0: this socket receives nothing.
        let fd = packet_socket(0)?;
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        set_packet_opt(&fd, libc::PACKET_VERSION, &version)?;
        if cfg.qdisc_bypass {
            set_packet_opt(&fd, libc::PACKET_QDISC_BYPASS, &1 as &libc::c_int)?;
        }
        let page = 4096u32;
        let frame_size = cfg.frame_size.clamp(256, page).next_power_of_two();
        let per_block = page / frame_size;
        let blocks = cfg.frames.max(1).div_ceil(per_block);
        let req = libc::tpacket_req {
            tp_block_size: page,
            tp_block_nr: blocks,
            tp_frame_size: frame_size,
            tp_frame_nr: blocks * per_block,
        };
        set_packet_opt(&fd, libc::PACKET_TX_RING, &req)?;
        let map = Mapped::new(&fd, (page * blocks) as usize)?;
        bind_to(&fd, index, 0)?;
        Ok(TxRing {
            fd,
            map,
            frame_size: frame_size as usize,
            frames: req.tp_frame_nr as usize,
            data_offset: libc::TPACKET2_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>(),
            next: 0,
            wrong_format: 0,
            device_drops: 0,
        })
    }

    /// The largest frame a slot holds.
    pub fn max_frame_len(&self) -> usize {
        self.frame_size - self.data_offset
    }

    /// Most frames one call sends.
    pub fn capacity(&self) -> usize {
        self.frames
    }

    /// Fills up to `max` free slots with `build(buf) -> len` (0: no more)
    /// and sends them with one flush; returns the frames handed to the
    /// kernel. A flush that the device interrupts (ENOBUFS) is resumed.
    pub fn send(
        &mut self,
        max: usize,
        mut build: impl FnMut(&mut [u8]) -> usize,
    ) -> std::io::Result<usize> {
        let mut queued = 0;
        while queued < max {
            let slot = self.next * self.frame_size;
            let status = self.map.status(slot);
            match status.load(Ordering::Acquire) {
                libc::TP_STATUS_AVAILABLE => {}
                libc::TP_STATUS_WRONG_FORMAT => self.wrong_format += 1,
                // Still with the kernel: the ring is full.
                _ => break,
            }
            let cap = self.max_frame_len();
            // Safety: the slot's data area lies inside the mapping (slots
            // tile it) and the kernel does not touch a slot while its
            // status is AVAILABLE, so we have it to ourselves.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(self.map.base.add(slot + self.data_offset), cap)
            };
            let len = build(buf).min(cap);
            if len == 0 {
                break;
            }
            // Safety: the slot starts with a tpacket2_hdr (inside the
            // mapping, aligned to the frame size), ours while AVAILABLE.
            unsafe { (*self.map.base.add(slot).cast::<libc::tpacket2_hdr>()).tp_len = len as u32 };
            status.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.next = (self.next + 1) % self.frames;
            queued += 1;
        }
        if queued > 0 {
            self.flush(queued)?;
        }
        Ok(queued)
    }

    /// One blocking send() of every slot marked for sending: the kernel
    /// walks them and returns when all are out. On ENOBUFS (a frame the
    /// device dropped) it stops early, so flush again; at most once per
    /// frame.
    fn flush(&mut self, frames: usize) -> std::io::Result<()> {
        for _ in 0..=frames {
            // Safety: send(2) with no buffer: PACKET_MMAP takes the frames
            // from the ring.
            let rc = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, 0) };
            if rc >= 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ENOBUFS) => self.device_drops += 1,
                Some(libc::EINTR) => {}
                _ => return Err(e),
            }
        }
        Ok(())
    }

    /// Frames the kernel refused as malformed.
    pub fn wrong_format(&self) -> u64 {
        self.wrong_format
    }

    /// Frames the device dropped as they were sent (ENOBUFS).
    pub fn device_drops(&self) -> u64 {
        self.device_drops
    }
}
