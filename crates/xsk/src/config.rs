//! What a socket is asked for: UMEM and ring sizes, zero-copy, wake-up and
//! busy-poll settings; and how it ended up bound.

/// Zero-copy wish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroCopy {
    /// Zero-copy if the driver has it, copy otherwise.
    #[default]
    Auto,
    Off,
    Required,
}

/// How the socket ended up bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    ZeroCopy,
    Copy,
}

impl BindMode {
    pub fn as_str(self) -> &'static str {
        match self {
            BindMode::ZeroCopy => "zero-copy",
            BindMode::Copy => "copy",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct XskConfig {
    /// Bytes per UMEM frame (2048 holds a 1518-byte frame plus headroom).
    pub frame_size: u32,
    /// Frames in the UMEM: half for receiving, half for sending.
    pub frames: u32,
    /// Entries in the RX and TX rings (fill and completion get twice that).
    pub ring: u32,
    pub zero_copy: ZeroCopy,
    /// Let the kernel sleep and be woken (XDP_USE_NEED_WAKEUP): the right
    /// choice when application and driver share a core.
    pub need_wakeup: bool,
    /// Busy polling of the device queue from the socket's calls.
    pub busy_poll: Option<BusyPoll>,
}

impl Default for XskConfig {
    /// 4096 frames of 2 KiB: 8 MiB of UMEM per socket (the source spent
    /// 256 MiB per socket).
    fn default() -> Self {
        XskConfig {
            frame_size: 2048,
            frames: 4096,
            ring: 1024,
            zero_copy: ZeroCopy::Auto,
            need_wakeup: true,
            busy_poll: None,
        }
    }
}

impl XskConfig {
    /// Checks what the kernel and our frame pool need of the sizes.
    pub fn validate(&self) -> crate::Result<()> {
        use crate::XskError;
        if !self.frame_size.is_power_of_two() || !(2048..=4096).contains(&self.frame_size) {
            return Err(XskError::Config(format!(
                "frame size {}: 2048 or 4096",
                self.frame_size
            )));
        }
        if !self.ring.is_power_of_two() || self.frames < 2 * self.ring {
            return Err(XskError::Config(format!(
                "ring {} must be a power of two and frames ({}) at least twice the ring",
                self.ring, self.frames
            )));
        }
        Ok(())
    }
}

/// Socket busy-poll settings (SO_BUSY_POLL, SO_PREFER_BUSY_POLL,
/// SO_BUSY_POLL_BUDGET): the application drives the queue's NAPI from its own
/// calls instead of waiting for interrupts. Only worth it when the queue's
/// NAPI can run on the application's core (not on veth, whose receive runs
/// on the sender's CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// How long one call may poll, microseconds.
    pub usecs: u32,
    /// Packets per poll.
    pub budget: u32,
    /// Keep the device's interrupts off while the application polls.
    pub prefer: bool,
}

impl Default for BusyPoll {
    fn default() -> Self {
        BusyPoll {
            usecs: 20,
            budget: 64,
            prefer: true,
        }
    }
}
