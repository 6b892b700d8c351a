//! peregrine's BPF layer: the programs under `bpf/` compiled into skeletons,
//! and what every feature needs around them: loading with the verifier log
//! kept, XDP attachment through bpf_link (detached on drop), pins under
//! `/sys/fs/bpf/peregrine`, per-CPU map sums, and BPF_PROG_RUN (fixtures and
//! live frames).

pub mod bpffs;
pub mod dispatch;
pub mod error;
pub mod fixture;
pub mod gen;
pub mod loader;
pub mod nf;
pub mod pod;
pub mod replycheck;
pub mod router;
pub mod sink;
pub mod tcx;
pub mod testing;
pub mod xdp;

pub use error::{BpfError, Result};
pub use fixture::{Fixture, XdpAction};
pub use xdp::{XdpLink, XdpMode};

/// Generated skeletons. Their `types` modules are the Rust side of the
/// `bpf/include/peregrine/*_kern_user.h` headers.
pub mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code, missing_docs)]
    pub mod gen {
        include!(concat!(env!("OUT_DIR"), "/gen.skel.rs"));
    }
    pub mod sink {
        include!(concat!(env!("OUT_DIR"), "/sink.skel.rs"));
    }
    pub mod router {
        include!(concat!(env!("OUT_DIR"), "/router.skel.rs"));
    }
    pub mod nf {
        include!(concat!(env!("OUT_DIR"), "/nf.skel.rs"));
    }
    pub mod dispatch {
        include!(concat!(env!("OUT_DIR"), "/dispatch.skel.rs"));
    }
    pub mod replycheck {
        include!(concat!(env!("OUT_DIR"), "/replycheck.skel.rs"));
    }
    /// Kernel uapi types and constants only (bpf/host/uapi.bpf.c): no program.
    pub mod uapi {
        include!(concat!(env!("OUT_DIR"), "/uapi.skel.rs"));
    }
}
