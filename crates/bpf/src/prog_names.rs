//! The names the kernel gives peregrine's programs (the C function names,
//! at most 15 characters), for code that finds a running program by its
//! hook and must tell whose it is: the link guard, the peer refresh.

/// The router at XDP and at tc (bpf/dataplane/router.bpf.c).
pub const ROUTER_XDP: &str = "router";
pub const ROUTER_TC: &str = "router_tc";
/// The policer at tc (bpf/dataplane/policer.bpf.c).
pub const POLICER_TC: &str = "policer_tc";
/// The AF_XDP function dispatcher (bpf/xsk/dispatch.bpf.c).
pub const DISPATCH: &str = "dispatch";
/// The stack's steering (bpf/stack/steer.bpf.c).
pub const STACK_STEER: &str = "stack_steer";
/// A service chain's network function at XDP (bpf/dataplane/nf.bpf.c).
pub const NF: &str = "nf";
