//! The node's declaration (`node.toml`, or every `*.toml` of a directory),
//! parsed and checked whole: one line per mistake, nothing applied when
//! there is one. Each section is an existing format:
//!
//! - `[router]`: what `router attach` takes (`ports`, `hook`, `mode`, `fib`).
//! - `[[qos]]`: `iface`, then exactly a `qos apply|serve` file (`hook`,
//!   `[[qos.rule]]`, `[[qos.filter]]`, `[qos.scheduler]`, `[[qos.class]]`);
//!   one with a scheduler runs as a supervised `qos serve`.
//! - `[cluster]`: the other nodes' pod CIDRs and addresses (`cluster`).
//! - `[[function]]` and `[[quic]]`: the long options of `faas serve` and
//!   `quic serve` (`iface = "b1"` is `--iface b1`; `true` is a bare flag;
//!   an array repeats the option), plus `name` and `netns`; each runs as a
//!   supervised child.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use peregrine_bpf::router::FibMode;
use peregrine_bpf::XdpMode;
use peregrine_dataplane::{HookChoice, TcAttach};
use peregrine_qos::config::PolicerConfig;
use serde::Serialize;

/// The router of the node's namespace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouterDecl {
    pub ports: Vec<String>,
    #[serde(serialize_with = "display")]
    pub hook: HookChoice,
    #[serde(serialize_with = "display_opt")]
    pub mode: Option<XdpMode>,
    /// How the ports at tc are attached: tcx links or cls_bpf filters.
    #[serde(serialize_with = "display")]
    pub tc_attach: TcAttach,
    #[serde(serialize_with = "debug")]
    pub fib: FibMode,
}

/// QoS on one interface: a policer's rules, or a scheduler (`qos serve`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QosDecl {
    pub iface: String,
    /// The section as a `qos` file (what a `qos serve` child reads).
    pub file: String,
    #[serde(skip)]
    pub cfg: PolicerConfig,
}

impl QosDecl {
    pub fn scheduler(&self) -> bool {
        self.cfg.scheduler.is_some()
    }

    /// The hook its policer runs at: the file's, else qos's default (tc;
    /// a scheduler's rules run at XDP).
    pub fn hook(&self) -> peregrine_bpf::Hook {
        match (self.cfg.hook, self.scheduler()) {
            (Some(h), _) => h,
            (None, true) => peregrine_bpf::Hook::Xdp(XdpMode::Native),
            (None, false) => peregrine_qos::attach::DEFAULT_HOOK,
        }
    }
}

/// What kind of supervised child a service is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceKind {
    /// `faas serve`
    Function,
    /// `quic serve`
    Quic,
    /// `qos serve` (a `[[qos]]` with a scheduler)
    Scheduler,
}

impl ServiceKind {
    /// The command words after `peregrine`.
    pub fn command(self) -> [&'static str; 2] {
        match self {
            ServiceKind::Function => ["faas", "serve"],
            ServiceKind::Quic => ["quic", "serve"],
            ServiceKind::Scheduler => ["qos", "serve"],
        }
    }
}

/// A supervised child: its command's arguments, in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServiceDecl {
    pub name: String,
    pub kind: ServiceKind,
    /// A named network namespace (/run/netns) to run in; None: the agent's.
    pub netns: Option<String>,
    /// The interface it attaches XDP to, if it names one.
    pub iface: Option<String>,
    /// Arguments after `peregrine <kind command>`.
    pub args: Vec<String>,
}

/// The whole node.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeDecl {
    pub router: Option<RouterDecl>,
    pub qos: Vec<QosDecl>,
    pub services: Vec<ServiceDecl>,
    /// Routes to the other nodes' pods.
    pub cluster: Option<crate::cluster::ClusterDecl>,
}

/// Checks a service's arguments as its command would (the CLI's parser,
/// handed in by the binary that runs the agent); Err: one line.
pub type ArgCheck = dyn Fn(ServiceKind, &[String]) -> Result<(), String> + Send + Sync;

fn display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}
fn display_opt<T: std::fmt::Display, S: serde::Serializer>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}
fn debug<T: std::fmt::Debug, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{v:?}").to_string().to_lowercase())
}

/// The files a `--config` names: the file, or a directory's `*.toml` in
/// name order.
pub fn files_of(path: &Path) -> Result<Vec<PathBuf>, Vec<String>> {
    if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| vec![format!("{}: {e}", path.display())])?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
            .collect();
        v.sort();
        Ok(v)
    } else if path.exists() {
        Ok(vec![path.to_path_buf()])
    } else {
        Err(vec![format!(
            "{}: no such file or directory",
            path.display()
        )])
    }
}

/// Parses every file (name, text) into one declaration, each section
/// checked alone (`check::parse_many` adds the composition rules); every
/// mistake in every file, one line each.
pub fn sections(files: &[(String, String)], check: &ArgCheck) -> Result<NodeDecl, Vec<String>> {
    let mut errs = Vec::new();
    let mut decl = NodeDecl::default();
    let mut router_from: Option<String> = None;
    for (name, text) in files {
        let table: toml::Table = match toml::from_str(text) {
            Ok(t) => t,
            Err(e) => {
                let at = e
                    .span()
                    .map(|s| format!(" (line {})", text[..s.start].matches('\n').count() + 1))
                    .unwrap_or_default();
                let msg = e.message().lines().next().unwrap_or("").to_string();
                errs.push(format!("{name}: {msg}{at}"));
                continue;
            }
        };
        for (key, value) in table {
            let mut err = |m: String| errs.push(format!("{name}: {m}"));
            match key.as_str() {
                "router" => {
                    if let Some(first) = &router_from {
                        err(format!("[router] again (first in {first}); a node has one router"));
                        continue;
                    }
                    router_from = Some(name.clone());
                    match router(&value) {
                        Ok(r) => decl.router = Some(r),
                        Err(ms) => ms.into_iter().for_each(|m| err(format!("[router]: {m}"))),
                    }
                }
                "cluster" => match crate::cluster::parse(&value) {
                    Ok(c) => decl.cluster = Some(c),
                    Err(ms) => ms.into_iter().for_each(|m| err(format!("[cluster]: {m}"))),
                },
                "qos" | "function" | "quic" => {
                    let Some(items) = value.as_array() else {
                        err(format!("{key} is a list of tables: write [[{key}]]"));
                        continue;
                    };
                    for (i, item) in items.iter().enumerate() {
                        let Some(t) = item.as_table() else {
                            err(format!("[[{key}]] #{}: not a table", i + 1));
                            continue;
                        };
                        let r = match key.as_str() {
                            "qos" => qos(t).map(|q| decl.qos.push(q)),
                            "function" => {
                                service(t, ServiceKind::Function, check).map(|s| decl.services.push(s))
                            }
                            _ => service(t, ServiceKind::Quic, check).map(|s| decl.services.push(s)),
                        };
                        if let Err(m) = r {
                            let who = t
                                .get("name")
                                .or_else(|| t.get("iface"))
                                .and_then(|v| v.as_str())
                                .map(|n| format!(" {n:?}"))
                                .unwrap_or_default();
                            err(format!("[[{key}]] #{}{who}: {m}", i + 1));
                        }
                    }
                }
                other => err(format!(
                    "unknown section {other:?}: a node declares [router], [[qos]], [[function]], [[quic]] and [cluster]"
                )),
            }
        }
    }
    // Schedulers run as supervised `qos serve` children.
    for q in decl.qos.iter().filter(|q| q.scheduler()) {
        decl.services.push(ServiceDecl {
            name: format!("qos-{}", q.iface),
            kind: ServiceKind::Scheduler,
            netns: None,
            iface: Some(q.iface.clone()),
            args: Vec::new(),
        });
    }
    if errs.is_empty() {
        Ok(decl)
    } else {
        Err(errs)
    }
}

/// The `[router]` section, every mistake in it (one line each).
fn router(v: &toml::Value) -> Result<RouterDecl, Vec<String>> {
    let t = v
        .as_table()
        .ok_or_else(|| vec!["not a table".to_string()])?;
    let mut errs = Vec::new();
    for k in t.keys() {
        if !["ports", "hook", "mode", "tc_attach", "fib"].contains(&k.as_str()) {
            errs.push(format!(
                "unknown key {k:?} (ports, hook, mode, tc_attach, fib)"
            ));
        }
    }
    let mut ports: Vec<String> = Vec::new();
    match t.get("ports") {
        Some(toml::Value::Array(a)) => {
            for p in a {
                match p.as_str() {
                    Some(p) if !crate::names::valid_iface(p) => {
                        errs.push(format!("{p:?} is not an interface name"))
                    }
                    Some(p) if ports.iter().any(|q| q == p) => errs.push(format!("port {p} twice")),
                    Some(p) => ports.push(p.to_string()),
                    None => errs.push("ports are interface names".into()),
                }
            }
        }
        Some(_) => errs.push("ports is a list of interface names".into()),
        // A router of pods only (the CNI plugin hands it their ports).
        None => {}
    }
    let mut s = |k: &str| -> Option<String> {
        match t.get(k) {
            None => None,
            Some(v) => match v.as_str() {
                Some(x) => Some(x.to_string()),
                None => {
                    errs.push(format!("{k} is a string"));
                    None
                }
            },
        }
    };
    let (hook, mode, tc_attach, fib) = (s("hook"), s("mode"), s("tc_attach"), s("fib"));
    let hook = hook
        .as_deref()
        .unwrap_or("auto")
        .parse::<HookChoice>()
        .map_err(|e| errs.push(e.to_string()))
        .ok();
    let mode = mode
        .map(|m| m.parse::<XdpMode>())
        .transpose()
        .map_err(|e| errs.push(e.to_string()))
        .ok()
        .flatten();
    if hook.is_some_and(|h| h.is_tc()) && mode.is_some() {
        errs.push("mode is an XDP mode; hook \"tc\" takes none".into());
    }
    let tc_attach = tc_attach
        .as_deref()
        .unwrap_or("tcx")
        .parse::<TcAttach>()
        .map_err(|e| errs.push(e.to_string()))
        .ok();
    if matches!(hook, Some(HookChoice::Given(h)) if h.is_xdp()) && tc_attach == Some(TcAttach::Cls)
    {
        errs.push("tc_attach is how ports attach at tc; hook \"xdp\" takes none".into());
    }
    let fib = fib
        .as_deref()
        .unwrap_or("full")
        .parse::<FibMode>()
        .map_err(|e| errs.push(e.to_string()))
        .ok();
    match (hook, tc_attach, fib) {
        (Some(hook), Some(tc_attach), Some(fib)) if errs.is_empty() => Ok(RouterDecl {
            ports,
            hook,
            mode,
            tc_attach,
            fib,
        }),
        _ => Err(errs),
    }
}

fn qos(t: &toml::Table) -> Result<QosDecl, String> {
    let iface = t
        .get("iface")
        .and_then(|v| v.as_str())
        .ok_or("iface missing (the interface its rules police)")?
        .to_string();
    if !crate::names::valid_iface(&iface) {
        return Err(format!("{iface:?} is not an interface name"));
    }
    let mut rest = t.clone();
    rest.remove("iface");
    let file = toml::to_string(&rest).map_err(|e| e.to_string())?;
    let cfg = PolicerConfig::parse(&file).map_err(|e| {
        // Its line numbers would count in the section rewritten, not in
        // the user's file.
        let m = e.to_string();
        let m = m.strip_prefix("rules file: ").unwrap_or(&m).to_string();
        match m.rfind(" (line ") {
            Some(i) if m.ends_with(')') => m[..i].to_string(),
            _ => m,
        }
    })?;
    Ok(QosDecl { iface, file, cfg })
}

fn service(t: &toml::Table, kind: ServiceKind, check: &ArgCheck) -> Result<ServiceDecl, String> {
    let mut args = Vec::new();
    let mut name = None;
    let mut netns = None;
    let mut iface = None;
    let mut keys: BTreeMap<&String, &toml::Value> = BTreeMap::new();
    for (k, v) in t {
        keys.insert(k, v);
    }
    for (k, v) in keys {
        let as_str = |v: &toml::Value| -> Result<String, String> {
            match v {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(i) => Ok(i.to_string()),
                toml::Value::Float(f) => Ok(f.to_string()),
                _ => Err(format!("{k}: a string or a number")),
            }
        };
        match k.as_str() {
            "name" => {
                let n = as_str(v)?;
                if !crate::names::valid_name(&n) {
                    return Err(format!("name {n:?}: letters, digits and -_. only"));
                }
                name = Some(n)
            }
            "netns" => netns = Some(as_str(v)?),
            _ => {
                let flag = format!("--{}", k.replace('_', "-"));
                match v {
                    toml::Value::Boolean(true) => args.push(flag),
                    toml::Value::Boolean(false) => {}
                    toml::Value::Array(a) => {
                        for x in a {
                            args.push(flag.clone());
                            args.push(as_str(x)?);
                        }
                    }
                    v => {
                        let s = as_str(v)?;
                        if k == "iface" {
                            iface = Some(s.clone());
                        }
                        args.push(flag);
                        args.push(s);
                    }
                }
            }
        }
    }
    if let Some(n) = &netns {
        if n.is_empty()
            || n == "."
            || n == ".."
            || n.chars()
                .any(|c| c == '/' || c.is_whitespace() || c.is_control())
        {
            return Err(format!("netns {n:?} is not a namespace name"));
        }
    }
    check(kind, &args)?;
    let name = name.unwrap_or_else(|| {
        format!(
            "{}-{}",
            kind.command()[0],
            iface.clone().unwrap_or_else(|| "any".into())
        )
    });
    Ok(ServiceDecl {
        name,
        kind,
        netns,
        iface,
        args,
    })
}
