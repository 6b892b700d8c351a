//! Delegation to an IPAM plugin (standalone mode), as the reference `ptp`
//! does: the plugin found on CNI_PATH, run with the runtime's environment
//! and configuration, its error passed on with its own code.
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command as Process, Stdio};

use crate::env::{Command, Env};
use crate::spec::{code, CniError, CniResult};

/// The IPAM plugin `kind` on CNI_PATH.
fn find(kind: &str, env: &Env) -> Result<PathBuf, CniError> {
    env.path
        .iter()
        .map(|d| d.join(kind))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            CniError::new(
                code::INVALID_CONFIG,
                format!(
                    "ipam: no plugin {kind:?} on CNI_PATH ({})",
                    env.path
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(":")
                ),
            )
        })
}

/// Runs IPAM plugin `kind` for `command` with `stdin`; ADD's result.
pub fn delegate(
    kind: &str,
    command: Command,
    env: &Env,
    stdin: &[u8],
) -> Result<Option<CniResult>, CniError> {
    let exe = find(kind, env)?;
    let mut child = Process::new(&exe)
        .env("CNI_COMMAND", command.name())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("ipam: running {}: {e}", exe.display()),
            )
        })?;
    if let Some(mut i) = child.stdin.take() {
        // A plugin that exits without reading gives EPIPE: its answer says why.
        let _ = i.write_all(stdin);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| CniError::new(code::IO_FAILURE, format!("ipam: waiting for {kind}: {e}")))?;
    if !out.status.success() {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        return Err(CniError::new(
            v.get("code")
                .and_then(|c| c.as_u64())
                .map_or(code::IO_FAILURE, |c| c as u32),
            format!(
                "ipam {kind} {}: {}",
                command.name(),
                v.get("msg")
                    .and_then(|m| m.as_str())
                    .map_or_else(|| out.status.to_string(), str::to_string)
            ),
        ));
    }
    if command != Command::Add {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        CniError::new(
            code::DECODE_FAILURE,
            format!("ipam {kind}: its result is not JSON: {e}"),
        )
    })?;
    CniResult::from_value(&v, &format!("ipam {kind}'s result")).map(Some)
}
