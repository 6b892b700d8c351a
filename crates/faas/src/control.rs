//! The control socket of a running `faas serve`: deploy, undeploy and list
//! functions while it serves. One Unix stream socket per server at
//! `/run/peregrine/faas/<netns cookie>.sock` (one server per network
//! namespace: a client finds it from the namespace it runs in, as
//! `ip netns exec` or `--lab/--host` put it). A request is one JSON line,
//! for a deploy followed by the module's bytes; the answer is one JSON line,
//! `{"error": "..."}` when refused.
//!
//! The socket's thread only moves bytes: each request goes to the thread
//! that owns the server (`Incoming`), which applies it (`apply`) between
//! its other duties.
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use peregrine_host::netns;
use peregrine_units::{ns, Table};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::live::{Live, Routes};
use crate::wasm::{WasmFunction, WasmLimits};

/// Where control sockets live.
pub const RUN_DIR: &str = "/run/peregrine/faas";

/// Largest module a deploy carries.
pub const MAX_MODULE: usize = 64 << 20;

/// How long a client waits for the server's answer (a deploy compiles the
/// module and waits for every worker).
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// The control socket of the server in the network namespace with `cookie`.
pub fn path_for(cookie: u64) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{cookie}.sock"))
}

/// The control socket of the server in network namespace `ns` (None: the
/// caller's).
pub fn path_in(ns: Option<&str>) -> Result<PathBuf, peregrine_host::HostError> {
    Ok(path_for(netns::run_in_opt(ns, netns::cookie)??))
}

/// A request to a running server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// Put a WebAssembly module (`module_len` bytes after the line) on
    /// `port`, replacing what is there.
    Deploy {
        port: u16,
        name: String,
        memory: u64,
        timeout_ns: u64,
        module_len: usize,
    },
    Undeploy {
        port: u16,
    },
    List,
}

/// A request for the serving thread, with where its answer goes.
pub struct Incoming {
    pub request: Request,
    pub module: Vec<u8>,
    pub answer: mpsc::Sender<Value>,
}

/// A function name as `--name` may give it: printable, no blanks or commas.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_graphic() && c != ',' && c != '=')
    {
        return Err(format!(
            "name {name:?}: expected 1 to 64 printable ASCII characters without blanks, ',' or '='"
        ));
    }
    Ok(())
}

/// A deploy of the module in `wasm` on `port`, as `faas deploy` asks it:
/// named `name` or after the file, its limits checked first. The request
/// and the module's bytes, or what is wrong with them (naming the flag).
pub fn deploy_request(
    port: u16,
    wasm: &Path,
    name: Option<&str>,
    memory: u64,
    timeout: Duration,
) -> Result<(Request, Vec<u8>), String> {
    let module = std::fs::read(wasm).map_err(|e| format!("--wasm {}: {e}", wasm.display()))?;
    let stem = || wasm.file_stem().and_then(|s| s.to_str()).unwrap_or("wasm");
    let name = name.unwrap_or_else(stem).to_string();
    check_name(&name).map_err(|e| format!("--name: {e}"))?;
    WasmLimits::new(memory, timeout).map_err(|e| format!("--memory/--timeout: {e}"))?;
    let req = Request::Deploy {
        port,
        name,
        memory,
        timeout_ns: timeout.as_nanos() as u64,
        module_len: module.len(),
    };
    Ok((req, module))
}

/// A server's answer to `req` for people: what a deploy or an undeploy
/// did, or a list's functions as a table.
pub fn describe(req: &Request, answer: &Value) -> String {
    match req {
        Request::Deploy { port, name, .. } => match answer["replaced"].as_str() {
            Some(old) => format!("port {port}: {name} replaces {old}, every worker runs it\n"),
            None => format!("port {port}: {name} deployed, every worker runs it\n"),
        },
        Request::Undeploy { port } => {
            let name = answer["name"].as_str().unwrap_or("?");
            format!("port {port}: {name} undeployed\n")
        }
        Request::List => functions_table(answer),
    }
}

/// A table of [`list`]'s functions: port, name, kind, calls, errors,
/// p50/p99 call time.
pub fn functions_table(v: &Value) -> String {
    let mut t = Table::new(&["port", "name", "kind", "calls", "errors", "p50", "p99"]);
    for f in v["functions"].as_array().into_iter().flatten() {
        let u = |k: &str| f[k].as_u64().map_or("-".to_string(), |n| n.to_string());
        let lat = |k: &str| f[k].as_u64().map_or("-".to_string(), ns);
        let s = |k: &str| f[k].as_str().unwrap_or("?").to_string();
        let row = [u("port"), s("name"), s("kind"), u("calls"), u("errors")];
        t.row(
            row.into_iter()
                .chain([lat("p50_ns"), lat("p99_ns")])
                .collect(),
        );
    }
    t.render()
}

/// Applies `req` to a server (its registry and routes); the answer as
/// JSON. A deploy compiles and checks the module before anything changes.
pub fn apply(req: &Request, module: &[u8], live: &Live, routes: &dyn Routes) -> Value {
    let r = match req {
        Request::Deploy {
            port,
            name,
            memory,
            timeout_ns,
            ..
        } => deploy(*port, name, *memory, *timeout_ns, module, live, routes),
        Request::Undeploy { port } => live
            .undeploy(routes, *port)
            .map(|gone| json!({"port": port, "name": gone.function.name(), "undeployed": true})),
        Request::List => Ok(list(live)),
    };
    r.unwrap_or_else(|e| json!({ "error": e }))
}

fn deploy(
    port: u16,
    name: &str,
    memory: u64,
    timeout_ns: u64,
    module: &[u8],
    live: &Live,
    routes: &dyn Routes,
) -> Result<Value, String> {
    if port == 0 {
        return Err("port 0 cannot carry a function".into());
    }
    check_name(name)?;
    routes.changeable()?;
    let limits = WasmLimits::new(memory, Duration::from_nanos(timeout_ns))?;
    let f = WasmFunction::new(name, module, limits)?;
    let d = live.deploy(routes, port, Arc::new(f))?;
    Ok(json!({
        "port": port,
        "name": name,
        "id": d.id,
        "generation": d.generation,
        "replaced": d.replaced,
        "version": d.version,
    }))
}

/// Every function served: port, name, kind, calls, errors, p50/p99 call
/// time (ns), and a WebAssembly function's limits and failures by reason.
pub fn list(live: &Live) -> Value {
    let r = live.current();
    let functions: Vec<Value> = r
        .entries()
        .map(|(port, d)| {
            let s = &d.stats;
            let mut v = json!({
                "port": port,
                "name": d.function.name(),
                "kind": "builtin",
                "generation": d.generation,
                "calls": s.calls.load(Ordering::Relaxed),
                "errors": s.errors.load(Ordering::Relaxed),
                "p50_ns": s.quantile_ns(0.5),
                "p99_ns": s.quantile_ns(0.99),
            });
            if let Some(w) = d.function.as_wasm() {
                v["kind"] = "wasm".into();
                v["memory"] = w.limits().memory.into();
                v["timeout_ns"] = (w.limits().timeout.as_nanos() as u64).into();
                v["errors_by_reason"] = w.errors().by_reason();
            }
            v
        })
        .collect();
    json!({ "functions": functions })
}

/// A server's control socket, served by a thread until dropped; the file
/// is removed then.
pub struct ControlSocket {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlSocket {
    /// Binds `path` (refused while another server answers there; a stale
    /// file of a server that died is replaced) and passes each request to
    /// `to` with a channel for its answer.
    pub fn start(path: &Path, to: mpsc::Sender<Incoming>) -> Result<ControlSocket, String> {
        let shown = path.display();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(format!(
                    "a faas server already serves this network namespace (control socket {shown})"
                ));
            }
            std::fs::remove_file(path).map_err(|e| format!("stale {shown}: {e}"))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| format!("{shown}: {e}"))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("{shown}: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name("faas-control".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let _ = serve_one(conn, &to);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
            .map_err(|e| format!("control socket thread: {e}"))?;
        Ok(ControlSocket {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One connection: a request line (and a module), its answer line.
fn serve_one(conn: UnixStream, to: &mpsc::Sender<Incoming>) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.by_ref().take(64 << 10).read_line(&mut line)?;
    let answer = match serde_json::from_str::<Request>(&line) {
        Err(e) => json!({ "error": format!("bad request: {e}") }),
        Ok(request) => {
            let mut module = Vec::new();
            if let Request::Deploy { module_len, .. } = request {
                if module_len > MAX_MODULE {
                    return reply(
                        conn,
                        json!({"error": format!("module of {module_len} bytes: at most {MAX_MODULE}")}),
                    );
                }
                module.resize(module_len, 0);
                reader.read_exact(&mut module)?;
            }
            let (tx, rx) = mpsc::channel();
            let sent = to.send(Incoming {
                request,
                module,
                answer: tx,
            });
            match sent.ok().and_then(|()| rx.recv_timeout(ANSWER_WITHIN).ok()) {
                Some(v) => v,
                None => json!({"error": "the server is stopping"}),
            }
        }
    };
    reply(conn, answer)
}

fn reply(mut conn: UnixStream, v: Value) -> std::io::Result<()> {
    conn.write_all(format!("{v}\n").as_bytes())
}

/// Sends `req` (and `module`) to the server at `path`; its answer, or a
/// one-line reason (an answer with "error" becomes Err too).
pub fn request(path: &Path, req: &Request, module: &[u8]) -> Result<Value, String> {
    let shown = path.display();
    let mut conn = UnixStream::connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => format!(
            "no faas server runs in this network namespace (no control socket at {shown}); start one with `peregrine faas serve`"
        ),
        _ => format!("{shown}: {e}"),
    })?;
    conn.set_read_timeout(Some(ANSWER_WITHIN + Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let line = serde_json::to_string(req).map_err(|e| e.to_string())?;
    conn.write_all(format!("{line}\n").as_bytes())
        .and_then(|()| conn.write_all(module))
        .map_err(|e| format!("{shown}: {e}"))?;
    let mut answer = String::new();
    BufReader::new(conn)
        .read_line(&mut answer)
        .map_err(|e| format!("{shown}: {e}"))?;
    let v: Value = serde_json::from_str(&answer)
        .map_err(|e| format!("{shown}: unreadable answer {answer:?}: {e}"))?;
    match v.get("error").and_then(Value::as_str) {
        Some(e) => Err(e.to_string()),
        None => Ok(v),
    }
}
