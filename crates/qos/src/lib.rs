//! QoS. The policer: token buckets per rule in BPF (`bpf/dataplane/
//! policer.bpf.c`), at the XDP hook or the tc hook, matched by tuple-space
//! search (cost by distinct match shapes, not by rule count), exact across
//! CPUs (one meter per rule, checked and debited under one lock).
//!
//! - `config`: the rules file (TOML) and one rule's fields, parsed once
//!   into `peregrine_bpf::policer::Rule`s, every error one line;
//! - `attach`: attachments per interface and network namespace, pinned so
//!   they outlive the command (`ip netns exec` included), applied
//!   atomically, changed rule by rule, read, listed and removed;
//! - `sched`: the egress scheduler's core, sans I/O (HTB-like rate/ceil
//!   borrowing, strict priority, DRR by weight, link shaping, queue
//!   limits), tested with simulated time;
//! - `classes`: the scheduler's classes and counters in the maps;
//! - `report`: a policer's counters as one typed, serialisable report
//!   (rules described as a file writes them, meters, classes);
//! - `serve`: the scheduler's AF_XDP loop (`qos serve`), fed by the XDP
//!   policer's class rules, sending out of the egress interface;
//! - `htb`: the htb engine's kernel side: the HTB tree built on the egress
//!   through netlink (fixed handles), its record, its counters;
//! - `shaper`: one rate shaped on an interface's egress (an HTB root with
//!   one class), what a pod's `egress_rate` gets inside its namespace;
//! - `engine`: the engine a file names, run (`serve`, `HtbEngine`: config
//!   -> running engine -> stats -> stop) and changed (`change_class`).
pub mod attach;
pub mod classes;
pub mod config;
pub mod engine;
pub mod error;
pub mod htb;
pub mod report;
pub mod sched;
pub mod serve;
pub mod shaper;

pub use attach::PolicerStats;
pub use config::{ClassFields, Engine, PolicerConfig, RuleFields, SchedulerConfig};
pub use error::{QosError, Result};
pub use peregrine_bpf::Hook;
