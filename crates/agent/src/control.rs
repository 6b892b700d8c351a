//! The agent's control socket: a Unix stream socket only root can open
//! (mode 0600 in a 0700 directory), one JSON request line and one JSON
//! reply line per connection. `peregrine apply|diff|status` are its
//! clients, as `kubectl apply|diff|get` are the API server's.
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Check `text` whole; if good, make it the declaration (written over
    /// the agent's file, or as `name` in its directory) and reconcile.
    Apply { name: String, text: String },
    /// What `apply` would change, changing nothing.
    Diff { name: String, text: String },
    /// The node as the agent sees it.
    Status,
    /// The CNI plugin's ADD: the pod's host interface joins the router,
    /// its bandwidth policed; recorded until `pod_del`.
    PodAdd { pod: Box<crate::pods::PodPort> },
    /// The CNI plugin's DEL: whatever the agent holds for the pod goes; a
    /// pod it does not know is not an error.
    PodDel { key: crate::pods::PodKey },
    /// The CNI plugin's CHECK: the pod is recorded and its port runs.
    PodCheck { key: crate::pods::PodKey },
    /// The CNI plugin's GC: every pod not in `keep` goes.
    PodGc { keep: Vec<crate::pods::PodKey> },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    /// For people: one line each (mistakes, changes, differences).
    pub lines: Vec<String>,
    /// `status`: the whole state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// A request and where its reply goes.
pub type Incoming = (Request, Sender<Reply>);

/// Listens on `path` (a stale socket of a dead agent is replaced; a live
/// agent's is an error) and hands each request to `to` from a thread.
pub fn listen(path: &Path, to: Sender<Incoming>) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(format!(
                "another agent answers on {}: one agent per node",
                path.display()
            ));
        }
        let _ = std::fs::remove_file(path);
    }
    let l =
        UnixListener::bind(path).map_err(|e| format!("listening on {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::thread::Builder::new()
        .name("agent-control".into())
        .spawn(move || {
            for s in l.incoming().flatten() {
                let to = to.clone();
                let _ = std::thread::Builder::new()
                    .name("agent-request".into())
                    .spawn(move || serve_one(s, &to));
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn serve_one(s: UnixStream, to: &Sender<Incoming>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = String::new();
    let mut r = BufReader::new(&s);
    // Requests carry a declaration: at most 16 MiB.
    if r.by_ref().take(16 << 20).read_line(&mut line).is_err() {
        return;
    }
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(req) => {
            let (tx, rx) = mpsc::channel();
            if to.send((req, tx)).is_err() {
                return;
            }
            rx.recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| Reply {
                    ok: false,
                    lines: vec!["the agent did not answer within 120 s".into()],
                    status: None,
                })
        }
        Err(e) => Reply {
            ok: false,
            lines: vec![format!("not a request: {e}")],
            status: None,
        },
    };
    if let Ok(line) = line_of(&reply) {
        let _ = (&s).write_all(&line);
    }
}

/// `v` as one JSON line, to be written in one call (serde_json writing
/// straight into the socket sends every token as its own segment).
fn line_of(v: &impl serde::Serialize) -> serde_json::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(v)?;
    line.push(b'\n');
    Ok(line)
}

/// Sends `req` to the agent listening on `path`; its reply.
pub fn request(path: &Path, req: &Request) -> Result<Reply, String> {
    let s = UnixStream::connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => format!(
            "no peregrine agent answers on {} (start one: peregrine agent --config FILE)",
            path.display()
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("{}: only root can talk to the agent", path.display())
        }
        _ => format!("{}: {e}", path.display()),
    })?;
    s.set_read_timeout(Some(Duration::from_secs(130)))
        .map_err(|e| e.to_string())?;
    let line = line_of(req).map_err(|e| e.to_string())?;
    (&s).write_all(&line).map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| format!("reading the agent's reply: {e}"))?;
    serde_json::from_str(&line).map_err(|e| format!("the agent's reply: {e}"))
}

/// Why a one-shot command that attaches in namespace `ns` (None: the
/// caller's) must not run: an agent runs there and owns the node (its own
/// children excepted). None when no agent answers for that namespace.
pub fn refusal(what: &str, ns: Option<&str>) -> Option<String> {
    if std::env::var_os("PEREGRINE_AGENT_CHILD").is_some() {
        return None;
    }
    let path = crate::state::socket_path();
    if !path.exists() {
        return None;
    }
    let s = request(&path, &Request::Status).ok()?.status?;
    let ours = peregrine_host::netns::run_in_opt(ns, peregrine_host::netns::cookie)
        .ok()
        .and_then(|c| c.ok());
    if s.get("netns_cookie").and_then(|c| c.as_u64()) != ours {
        return None;
    }
    Some(format!(
        "a peregrine agent (pid {}) owns this node's data plane: declare the {what} in its declaration ({}) and run `peregrine apply FILE`, or stop the agent",
        s["pid"],
        s["config"].as_str().unwrap_or("?")
    ))
}
