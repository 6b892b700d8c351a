//! Functions and their registry. A function maps a request payload to a
//! reply payload; adding one is implementing `Function` and registering it
//! under a UDP port (see `Registry::add`).
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use sha2::Digest;

use crate::wasm::{WasmFunction, WasmLimits};

/// A function the invoker runs on each request.
pub trait Function: Send + Sync {
    fn name(&self) -> &str;
    /// Writes the reply payload for `request` into `reply` (empty on entry).
    /// An error is counted and the request is not answered.
    fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String>;
}

/// The source paper's function: the payload reversed.
pub struct Reverse;
/// The payload unchanged.
pub struct Echo;
/// ASCII upper case.
pub struct Upper;
/// SHA-256 of the payload, as 64 lower-case hex digits.
pub struct Sha256;

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

/// Functions by UDP port; each gets a small id (its dispatch table index).
#[derive(Clone, Default)]
pub struct Registry {
    by_port: BTreeMap<u16, (u32, Arc<dyn Function>)>,
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

    /// Registers `f` under `port` (user functions come in here too).
    pub fn add(&mut self, port: u16, f: Arc<dyn Function>) -> Result<u32, String> {
        if port == 0 {
            return Err("port 0 cannot carry a function".into());
        }
        if self.by_port.contains_key(&port) {
            return Err(format!("port {port} has a function already"));
        }
        let id = self.by_port.len() as u32;
        if id >= peregrine_bpf::dispatch::MAX_FUNCS {
            return Err(format!(
                "at most {} functions",
                peregrine_bpf::dispatch::MAX_FUNCS
            ));
        }
        self.by_port.insert(port, (id, f));
        Ok(id)
    }

    pub fn get(&self, port: u16) -> Option<&(u32, Arc<dyn Function>)> {
        self.by_port.get(&port)
    }

    pub fn iter(&self) -> impl Iterator<Item = (u16, u32, &Arc<dyn Function>)> {
        self.by_port.iter().map(|(p, (id, f))| (*p, *id, f))
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
        assert_eq!(r.get(1233).unwrap().1.name(), "sha256");
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

    #[test]
    fn registry_loads_wasm_functions_beside_builtins() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/functions");
        let r = Registry::parse(&format!("1232=reverse,1233=wasm:{dir}/reverse.wat")).unwrap();
        let (id, f) = r.get(1233).unwrap();
        assert_eq!((*id, f.name()), (1, "reverse"));
        assert_eq!(run(f.as_ref(), b"abc"), b"cba");
    }
}
