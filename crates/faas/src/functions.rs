//! Functions and their registry. A function maps a request payload to a
//! reply payload; adding one is implementing `Function` and registering it
//! under a UDP port (see `Registry::add`).
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use peregrine_bpf::latency::{bucket_of, bucket_range, BUCKETS};

use sha2::Digest;

use crate::wasm::{WasmFunction, WasmLimits};

/// A function the invoker runs on each request.
pub trait Function: Send + Sync {
    fn name(&self) -> &str;
    /// Writes the reply payload for `request` into `reply` (empty on entry).
    /// An error is counted and the request is not answered.
    fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String>;
    /// The WebAssembly function this is, if it is one (limits, failures).
    fn as_wasm(&self) -> Option<&WasmFunction> {
        None
    }
}

/// The source paper's function: the payload reversed.
pub struct Reverse;
/// The payload unchanged.
pub struct Echo;
/// ASCII upper case.
pub struct Upper;
/// SHA-256 of the payload, as 64 lower-case hex digits.
pub struct Sha256;

impl Function for WasmFunction {
    fn name(&self) -> &str {
        WasmFunction::name(self)
    }

    fn as_wasm(&self) -> Option<&WasmFunction> {
        Some(self)
    }

    fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
        WasmFunction::call(self, request, reply)
    }
}

impl Function for Reverse {
    fn name(&self) -> &str {
        "reverse"
    }
    fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
        reply.extend(request.iter().rev());
        Ok(())
    }
}

impl Function for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
        reply.extend_from_slice(request);
        Ok(())
    }
}

impl Function for Upper {
    fn name(&self) -> &str {
        "upper"
    }
    fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
        reply.extend(request.iter().map(u8::to_ascii_uppercase));
        Ok(())
    }
}

impl Function for Sha256 {
    fn name(&self) -> &str {
        "sha256"
    }
    fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
        let d = sha2::Sha256::digest(request);
        let mut s = String::with_capacity(64);
        for b in d {
            let _ = write!(s, "{b:02x}");
        }
        reply.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// The built-in function called `name`.
pub fn builtin(name: &str) -> Option<Arc<dyn Function>> {
    Some(match name {
        "reverse" => Arc::new(Reverse),
        "echo" => Arc::new(Echo),
        "upper" => Arc::new(Upper),
        "sha256" => Arc::new(Sha256),
        _ => return None,
    })
}

/// The WebAssembly function in the .wasm or .wat file at `path`, with the
/// default limits.
fn wasm_function(path: &str) -> Result<Arc<dyn Function>, String> {
    let f = WasmFunction::load(std::path::Path::new(path), WasmLimits::default())?;
    Ok(Arc::new(f))
}

pub const BUILTINS: &[&str] = &["reverse", "echo", "upper", "sha256"];

/// Calls of one deployed function, over all workers: how many, how many
/// failed, and how long they took (a log-linear histogram on replycheck's
/// scale, about 3% wide buckets).
pub struct CallStats {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    buckets: Box<[AtomicU64]>,
}

impl Default for CallStats {
    fn default() -> Self {
        CallStats {
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl CallStats {
    fn record(&self, took: Duration, ok: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns) as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The call time (ns) below which a share `q` of the calls took, the
    /// middle of its bucket; None before the first call.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let want = ((q * total as f64).ceil() as u64).clamp(1, total.max(1));
        let mut seen = 0;
        for (b, n) in counts.iter().enumerate() {
            seen += n;
            if *n > 0 && seen >= want {
                let (low, width) = bucket_range(b as u32);
                return Some(low + width / 2);
            }
        }
        None
    }
}

/// A function as deployed on a port: its dispatch id, the function, its
/// call statistics, which deployment of the port it is, and (socket
/// backends) the socket the port is served on.
pub struct Deployed {
    pub id: u32,
    pub function: Arc<dyn Function>,
    pub stats: CallStats,
    /// Counts deployments on this server: a replacement has a higher one.
    pub generation: u64,
    pub socket: Option<Arc<UdpSocket>>,
}

impl Deployed {
    /// Calls that returned a reply (whether it was then sent is the
    /// server's counters' business).
    pub fn answered(&self) -> u64 {
        let s = &self.stats;
        // Errors are read second: a call failing between the reads must
        // not take the difference below zero.
        s.calls
            .load(Ordering::Relaxed)
            .saturating_sub(s.errors.load(Ordering::Relaxed))
    }

    /// Calls the function, timed and counted.
    pub fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
        let started = Instant::now();
        let r = self.function.call(request, reply);
        self.stats.record(started.elapsed(), r.is_ok());
        r
    }
}

/// Functions by UDP port; each gets a small id (its dispatch table index,
/// the lowest free one, kept by a replacement).
#[derive(Clone, Default)]
pub struct Registry {
    by_port: BTreeMap<u16, Arc<Deployed>>,
    /// Deployments so far (generations handed out).
    deployments: u64,
}

impl Registry {
    /// Parses "1232=reverse,1233=sha256,1234=wasm:examples/functions/echo.wat"
    /// (a WebAssembly function from a .wasm or .wat file, default limits).
    pub fn parse(spec: &str) -> Result<Registry, String> {
        let mut r = Registry::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (port, name) = item
                .split_once('=')
                .ok_or_else(|| format!("function {item:?}: expected PORT=NAME"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| format!("function {item:?}: {port:?} is not a UDP port"))?;
            let f = match name.strip_prefix("wasm:") {
                Some(path) => wasm_function(path).map_err(|e| format!("function {item:?}: {e}"))?,
                None => builtin(name).ok_or_else(|| {
                    format!(
                        "function {item:?}: unknown function {name:?} (built-ins: {}; or wasm:PATH)",
                        BUILTINS.join(", ")
                    )
                })?,
            };
            r.add(port, f)?;
        }
        if r.by_port.is_empty() {
            return Err("no functions given".into());
        }
        Ok(r)
    }

    /// Registers `f` under a free `port` (user functions come in here too).
    pub fn add(&mut self, port: u16, f: Arc<dyn Function>) -> Result<u32, String> {
        if port == 0 {
            return Err("port 0 cannot carry a function".into());
        }
        if self.by_port.contains_key(&port) {
            return Err(format!("port {port} has a function already"));
        }
        let id = (0..peregrine_bpf::dispatch::MAX_FUNCS)
            .find(|id| self.by_port.values().all(|d| d.id != *id))
            .ok_or_else(|| format!("at most {} functions", peregrine_bpf::dispatch::MAX_FUNCS))?;
        self.put(port, id, f, None);
        Ok(id)
    }

    /// Puts `f` on `port` under `id` as a new deployment, with fresh
    /// statistics.
    fn put(
        &mut self,
        port: u16,
        id: u32,
        function: Arc<dyn Function>,
        socket: Option<Arc<UdpSocket>>,
    ) {
        self.deployments += 1;
        let d = Deployed {
            id,
            function,
            stats: CallStats::default(),
            generation: self.deployments,
            socket,
        };
        self.by_port.insert(port, Arc::new(d));
    }

    /// Replaces the function on `port` (same id and socket, fresh
    /// statistics); None when the port has none.
    pub fn replace(&mut self, port: u16, f: Arc<dyn Function>) -> Option<u32> {
        let old = self.by_port.get(&port)?.clone();
        self.put(port, old.id, f, old.socket.clone());
        Some(old.id)
    }

    /// Takes the function off `port`.
    pub fn remove(&mut self, port: u16) -> Option<Arc<Deployed>> {
        self.by_port.remove(&port)
    }

    /// Gives `port`'s entry the socket it is served on (a server starting:
    /// the entry is made anew, so a copy of this registry kept elsewhere
    /// is left as it was).
    pub fn set_socket(&mut self, port: u16, socket: UdpSocket) -> Result<(), String> {
        let d = self
            .by_port
            .get_mut(&port)
            .ok_or_else(|| format!("port {port}: no function"))?;
        *d = Arc::new(Deployed {
            id: d.id,
            function: d.function.clone(),
            stats: CallStats::default(),
            generation: d.generation,
            socket: Some(Arc::new(socket)),
        });
        Ok(())
    }

    pub fn get(&self, port: u16) -> Option<&Arc<Deployed>> {
        self.by_port.get(&port)
    }

    pub fn iter(&self) -> impl Iterator<Item = (u16, u32, &Arc<dyn Function>)> {
        self.by_port.iter().map(|(p, d)| (*p, d.id, &d.function))
    }

    /// Every port with its deployment.
    pub fn entries(&self) -> impl Iterator<Item = (u16, &Arc<Deployed>)> {
        self.by_port.iter().map(|(p, d)| (*p, d))
    }

    pub fn len(&self) -> usize {
        self.by_port.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_port.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(f: &dyn Function, req: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        f.call(req, &mut out).unwrap();
        out
    }

    #[test]
    fn builtins_do_what_they_say() {
        assert_eq!(run(&Reverse, b"abc"), b"cba");
        assert_eq!(run(&Echo, b"abc"), b"abc");
        assert_eq!(run(&Upper, b"aBc1"), b"ABC1");
        assert_eq!(
            run(&Sha256, b"abc"),
            b"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn registry_parses_and_refuses_with_reasons() {
        let r = Registry::parse("1232=reverse, 1233=sha256").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r.get(1233).unwrap().function.name(), "sha256");
        for (bad, why) in [
            ("1232", "expected PORT=NAME"),
            ("x=reverse", "not a UDP port"),
            ("1232=nope", "unknown function"),
            ("1232=echo,1232=upper", "already"),
            ("", "no functions"),
            ("1232=wasm:/nonexistent/f.wat", "/nonexistent/f.wat: "),
        ] {
            let e = Registry::parse(bad).err().unwrap();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    /// Ids are the lowest free ones; a replacement keeps its port's id and
    /// is a later generation with fresh statistics.
    #[test]
    fn ids_are_reused_and_replacements_keep_them() {
        let mut r = Registry::parse("1232=reverse,1233=echo,1234=upper").unwrap();
        r.get(1233).unwrap().call(b"ab", &mut Vec::new()).unwrap();
        assert_eq!(r.get(1233).unwrap().stats.calls.load(Ordering::Relaxed), 1);
        assert_eq!(r.remove(1233).unwrap().id, 1);
        assert_eq!(r.add(1300, Arc::new(Sha256)).unwrap(), 1);
        let before = r.get(1232).unwrap().generation;
        assert_eq!(r.replace(1232, Arc::new(Echo)), Some(0));
        let d = r.get(1232).unwrap();
        assert!(d.generation > before);
        assert_eq!(d.stats.calls.load(Ordering::Relaxed), 0);
        assert_eq!(r.replace(9, Arc::new(Echo)), None);
    }

    #[test]
    fn call_times_give_quantiles() {
        let s = CallStats::default();
        assert_eq!(s.quantile_ns(0.5), None);
        for us in 1..=100u64 {
            s.record(Duration::from_micros(us), us != 7);
        }
        let p50 = s.quantile_ns(0.5).unwrap();
        let p99 = s.quantile_ns(0.99).unwrap();
        assert!((48_000..=52_000).contains(&p50), "{p50}");
        assert!((96_000..=102_000).contains(&p99), "{p99}");
        assert_eq!(s.errors.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn registry_loads_wasm_functions_beside_builtins() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/functions");
        let r = Registry::parse(&format!("1232=reverse,1233=wasm:{dir}/reverse.wat")).unwrap();
        let d = r.get(1233).unwrap();
        assert_eq!((d.id, d.function.name()), (1, "reverse"));
        assert_eq!(run(d.function.as_ref(), b"abc"), b"cba");
    }
}
