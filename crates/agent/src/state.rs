//! What the agent owns, recorded beside the data plane's pins so that a
//! restarted (or upgraded) agent adopts it instead of rebuilding it, and
//! never takes what someone else made: `/run/peregrine/agent/state.json`,
//! written atomically after every change.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The agent's run directory (state, control socket, children's files).
pub const RUN_DIR: &str = "/run/peregrine/agent";

/// The control socket, only root can open it.
pub fn socket_path() -> PathBuf {
    run_dir().join("agent.sock")
}

/// `RUN_DIR`, or `$PEREGRINE_AGENT_DIR` (tests run agents side by side).
pub fn run_dir() -> PathBuf {
    std::env::var_os("PEREGRINE_AGENT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(RUN_DIR))
}

/// A child the agent started: its pid and command line, to adopt it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnedService {
    pub pid: u32,
    pub argv: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owned {
    /// The agent's network namespace (its cookie): state recorded for
    /// another namespace is not this agent's.
    pub netns_cookie: u64,
    /// The agent's pid when it last wrote this.
    pub pid: u32,
    /// The router of the agent's namespace is the agent's.
    pub router: bool,
    /// Its ports the agent attached (one missing later is drift).
    #[serde(default)]
    pub router_ports: Vec<String>,
    /// Policers the agent put on (interface -> hash of the rules file).
    pub policers: BTreeMap<String, u64>,
    pub services: BTreeMap<String, OwnedService>,
}

impl Owned {
    fn path(dir: &Path) -> PathBuf {
        dir.join("state.json")
    }

    /// What an earlier agent of this namespace recorded (empty when none,
    /// or when it was another namespace's).
    pub fn load(dir: &Path, cookie: u64) -> Owned {
        let o: Owned = std::fs::read(Self::path(dir))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        if o.netns_cookie == cookie {
            o
        } else {
            Owned {
                netns_cookie: cookie,
                ..Owned::default()
            }
        }
    }

    /// Writes it (a temporary file renamed over the old one).
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join("state.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self).unwrap_or_default())?;
        std::fs::rename(tmp, Self::path(dir))
    }
}

/// A stable hash of a text (FNV-1a 64): which rules file a policer runs.
pub fn text_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
