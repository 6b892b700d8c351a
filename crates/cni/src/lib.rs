//! `peregrine-cni`: the CNI plugin (spec 1.1.0; cniVersion 0.4.0 to 1.1.0).
//! The runtime (containerd, as kubelet drives it; cnitool; crictl) runs it
//! with CNI_* variables and a network configuration on stdin; it answers on
//! stdout. Pods' host-side interfaces go to the node agent
//! (`peregrine agent`), which owns everything attached for them.
//!
//! - `spec`: configuration, results and errors as the spec writes them.
//! - `env`: the CNI_* variables, checked.
//! - `ipam`: delegation to an IPAM plugin (standalone mode).
//! - `plugin`: ADD, DEL, CHECK, GC, STATUS, VERSION, chained or standalone.
pub mod env;
pub mod ipam;
pub mod plugin;
pub mod spec;

use std::io::{Read, Write};

/// The plugin's whole run: environment and stdin in, stdout and the exit
/// code out. An error is the spec's error JSON on stdout (in the
/// configuration's version when it has one) and one line on stderr.
pub fn main() -> i32 {
    let mut stdin = Vec::new();
    // A configuration is small; 16 MiB bounds a runaway writer.
    if let Err(e) = std::io::stdin().take(16 << 20).read_to_end(&mut stdin) {
        return fail(
            &spec::CniError::new(spec::code::IO_FAILURE, format!("reading stdin: {e}")),
            &stdin,
        );
    }
    let out = env::Env::from_process().and_then(|e| plugin::run(&e, &stdin));
    match out {
        Ok(Some(v)) => {
            let mut o = std::io::stdout().lock();
            let _ = serde_json::to_writer(&mut o, &v);
            let _ = o.write_all(b"\n");
            0
        }
        Ok(None) => 0,
        Err(e) => fail(&e, &stdin),
    }
}

fn fail(e: &spec::CniError, stdin: &[u8]) -> i32 {
    let version = serde_json::from_slice::<serde_json::Value>(stdin)
        .ok()
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(|s| s.as_str())
                .map(str::to_string)
        })
        .filter(|v| spec::Version::parse(v).is_ok())
        .unwrap_or_else(|| spec::Version::V1_1_0.as_str().into());
    let mut o = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut o, &e.json(&version));
    let _ = o.write_all(b"\n");
    eprintln!("peregrine-cni: {}", e.msg);
    1
}
