//! peregrine's BPF layer: the programs under `bpf/` compiled into skeletons,
//! and what every feature needs around them.
//!
//! What lives where:
//! - `skel`: the generated skeletons; their `types` are the Rust side of
//!   `bpf/include/peregrine/*_kern_user.h` (nothing is mirrored by hand).
//! - `loader`: open → configure (rodata, map sizes) → load, one helper for
//!   every program, with the verifier's log kept for the error (`error`).
//! - `maps`: map writes and per-CPU counter sums, live or pinned; `pod`: the
//!   byte views of the generated structs those maps hold.
//! - `link`: attaching a program to an interface's XDP or tcx hook through a
//!   bpf_link that can be pinned and taken back from its pin; `xdp` and
//!   `tcx`: the hooks' modes and what is attached there.
//! - `bpffs`: the bpffs mount and the pins under `/sys/fs/bpf/peregrine`.
//! - One thin wrapper per program (`sink`, `router`, `nf`, `policer`, `dispatch`,
//!   `stack`): typed config in, loaded program out, typed map accessors.
//!   The lab's generator and reply checker live in peregrine-testbed, which
//!   builds on this crate; the sink stays here as the data plane's counting
//!   pass-through (`dataplane::peer`).
//! - `latency`: the latency histogram's scale, in BPF and user space.
//! - `fixture`: BPF_PROG_RUN fixtures (the privileged-test helpers are
//!   peregrine-testbed's `testing`).

pub mod bpffs;
pub mod dispatch;
pub mod error;
pub mod fixture;
pub mod latency;
pub mod link;
pub mod loader;
pub mod maps;
pub mod nf;
pub mod pod;
pub mod policer;
pub mod router;
pub mod sink;
pub mod stack;
pub mod tcx;
pub mod xdp;

pub use error::{BpfError, Result};
pub use fixture::{Fixture, XdpAction};
pub use link::{Hook, Link, XdpProgram};
pub use tcx::TcxDirection;
pub use xdp::XdpMode;

/// Includes the skeleton build.rs generated for each named program (the
/// calling crate's `OUT_DIR`: exported for peregrine-testbed's programs).
#[macro_export]
macro_rules! skeletons {
    ($($name:ident),* $(,)?) => {
        $(pub mod $name {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($name), ".skel.rs"));
        })*
    };
}

/// Generated skeletons. Their `types` modules are the Rust side of the
/// `bpf/include/peregrine/*_kern_user.h` headers.
pub mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code, missing_docs)]
    // uapi: kernel uapi types and constants only (bpf/host/uapi.bpf.c), no program.
    skeletons!(sink, router, nf, policer, dispatch, steer, uapi);
}
