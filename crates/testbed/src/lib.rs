//! The test bench's BPF side and test harness, kept out of the product's
//! crates: only the lab, the benches and tests (as a dev-dependency) use it.
//!
//! What lives where:
//! - `skel`: the skeletons of the lab's programs, `bpf/lab/gen.bpf.c` and
//!   `bpf/lab/replycheck.bpf.c` (built by this crate's build script with
//!   peregrine-bpf-build); their `types` are the Rust side of
//!   `gen_kern_user.h` and `replycheck_kern_user.h`.
//! - `gen`: the live-frame generator; `replycheck`: the open-loop load's
//!   reply checker. Both load, attach and read maps through peregrine-bpf's
//!   loader, `Link` and map readers; the receiver-side sink is
//!   `peregrine_bpf::sink` (it is also the data plane's pass-through).
//! - `fixture`: peregrine-bpf's BPF_PROG_RUN harness plus the generator's
//!   fixture setup; the gen, sink and replycheck fixture tables run here.
//! - `testing`: privileged-test helpers (`privileged`, `wait_until`) and
//!   the namespace pair `NsPair`.

pub mod fixture;
pub mod gen;
pub mod replycheck;
pub mod testing;

#[cfg(test)]
mod link_tests;
#[cfg(test)]
mod sink_fixtures;

/// Generated skeletons of the lab's programs.
pub mod skel {
    #![allow(clippy::all, non_camel_case_types, dead_code, missing_docs)]
    peregrine_bpf::skeletons!(gen, replycheck);
}

peregrine_bpf::plain_data! {
    pod: skel::gen::types::gen_pace, skel::gen::types::gen_meta, skel::gen::types::xdp_md;
    counters: skel::gen::types::gen_state, skel::replycheck::types::replycheck_stats,
}
