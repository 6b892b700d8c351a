//! A TPACKET_V3 RX ring: the kernel fills blocks of frames and hands a block
//! over when it is full or its timer retires it; the reader walks the
//! block's frames and gives the whole block back. Frames that find no free
//! block are dropped and counted by the kernel (`PACKET_STATISTICS`).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{bind_to, ifindex, packet_socket, set_packet_opt, Mapped};

/// Ring geometry.
#[derive(Debug, Clone, Copy)]
pub struct RxRingConfig {
    /// Bytes per block (a multiple of the page size).
    pub block_size: u32,
    pub blocks: u32,
    /// Largest frame kept whole (longer ones are cut to fit).
    pub frame_size: u32,
    /// A block that is not full is handed over after this long.
    pub retire: Duration,
}

impl Default for RxRingConfig {
    fn default() -> Self {
        RxRingConfig {
            block_size: 1 << 20,
            blocks: 32,
            frame_size: 2048,
            retire: Duration::from_millis(2),
        }
    }
}

/// The kernel's counts for a ring since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Frames that reached the socket, dropped ones included.
    pub packets: u64,
    /// Frames dropped because no block was free (ring full).
    pub drops: u64,
    /// Times the queue froze because the ring was full.
    pub freezes: u64,
}

pub struct RxRing {
    fd: OwnedFd,
    map: Mapped,
    block_size: usize,
    blocks: usize,
    next: usize,
    /// Where the reader stopped in block `next` when a call took only part
    /// of it: the next frame's offset and the frames left.
    partial: Option<(usize, u32)>,
    /// PACKET_STATISTICS resets on every read: the sum of the reads.
    stats: RingStats,
}

/// Offset of `block_status` in a block: after `version` and
/// `offset_to_priv` of tpacket_block_desc, first in tpacket_hdr_v1.
const BLOCK_STATUS: usize = std::mem::offset_of!(libc::tpacket_block_desc, hdr);

impl RxRing {
    /// An RX ring on `iface` (in the calling thread's namespace) taking
    /// every protocol.
    pub fn open(iface: &str, cfg: RxRingConfig) -> std::io::Result<RxRing> {
        let index = ifindex(iface)?;
        let fd = packet_socket(libc::ETH_P_ALL as u16)?;
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        set_packet_opt(&fd, libc::PACKET_VERSION, &version)?;
        let block_size = cfg.block_size.max(4096).next_multiple_of(4096);
        let frame_size = cfg.frame_size.clamp(256, block_size);
        let req = libc::tpacket_req3 {
            tp_block_size: block_size,
            tp_block_nr: cfg.blocks.max(2),
            tp_frame_size: frame_size,
            tp_frame_nr: block_size / frame_size * cfg.blocks.max(2),
            tp_retire_blk_tov: cfg.retire.as_millis().clamp(1, 1000) as u32,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        set_packet_opt(&fd, libc::PACKET_RX_RING, &req)?;
        let map = Mapped::new(&fd, (req.tp_block_size * req.tp_block_nr) as usize)?;
        bind_to(&fd, index, libc::ETH_P_ALL as u16)?;
        Ok(RxRing {
            fd,
            map,
            block_size: block_size as usize,
            blocks: req.tp_block_nr as usize,
            next: 0,
            partial: None,
            stats: RingStats::default(),
        })
    }

    /// Bytes of the ring.
    pub fn memory_bytes(&self) -> usize {
        self.map.len
    }

    /// Waits up to `timeout` for the next block, hands each of its frames
    /// to `each(frame, tp_status)` and returns the block to the kernel;
    /// returns the frames handled (0: nothing came in time).
    pub fn receive(
        &mut self,
        timeout: Duration,
        each: impl FnMut(&[u8], u32),
    ) -> std::io::Result<usize> {
        self.receive_up_to(timeout, usize::MAX, each)
    }

    /// As `receive`, but hands over at most `max` frames: the rest of the
    /// block waits for the next call, and the block goes back to the kernel
    /// once all of its frames were handed over.
    pub fn receive_up_to(
        &mut self,
        timeout: Duration,
        max: usize,
        mut each: impl FnMut(&[u8], u32),
    ) -> std::io::Result<usize> {
        let block = self.next * self.block_size;
        let status = self.map.status(block + BLOCK_STATUS);
        if self.partial.is_none() && status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN | libc::POLLERR,
                revents: 0,
            };
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            // Safety: one valid pollfd for the call.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EINTR) => Ok(0),
                    _ => Err(e),
                };
            }
            if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                return Ok(0);
            }
        }
        // Safety: the block is ours (TP_STATUS_USER, read with acquire
        // ordering after the kernel's release) and lies inside the mapping.
        let desc = unsafe { &*self.map.base.add(block).cast::<libc::tpacket_block_desc>() };
        // Safety: a V3 ring's blocks carry tpacket_hdr_v1.
        let bh = unsafe { desc.hdr.bh1 };
        let end = block + self.block_size;
        let (mut at, mut left) = self
            .partial
            .take()
            .unwrap_or((block + bh.offset_to_first_pkt as usize, bh.num_pkts));
        let mut handled = 0;
        while left > 0 {
            if handled == max {
                self.partial = Some((at, left));
                return Ok(handled);
            }
            left -= 1;
            if at + std::mem::size_of::<libc::tpacket3_hdr>() > end {
                break;
            }
            // Safety: inside this block (checked above), which is ours; the
            // kernel aligns frame headers to TPACKET_ALIGNMENT.
            let h = unsafe { &*self.map.base.add(at).cast::<libc::tpacket3_hdr>() };
            let data = at + usize::from(h.tp_mac);
            if data + h.tp_snaplen as usize > end {
                break;
            }
            // Safety: the frame's bytes lie inside this block (checked).
            let frame = unsafe {
                std::slice::from_raw_parts(self.map.base.add(data), h.tp_snaplen as usize)
            };
            each(frame, h.tp_status);
            handled += 1;
            if h.tp_next_offset == 0 {
                break;
            }
            at += h.tp_next_offset as usize;
        }
        status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.blocks;
        Ok(handled)
    }

    /// The kernel's counters since the ring was opened.
    pub fn stats(&mut self) -> std::io::Result<RingStats> {
        let st: libc::tpacket_stats_v3 =
            crate::sockopt::get(&self.fd, libc::SOL_PACKET, libc::PACKET_STATISTICS)?;
        self.stats.packets += u64::from(st.tp_packets);
        self.stats.drops += u64::from(st.tp_drops);
        self.stats.freezes += u64::from(st.tp_freeze_q_cnt);
        Ok(self.stats)
    }
}
