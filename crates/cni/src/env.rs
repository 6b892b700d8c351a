//! The runtime's parameters: the CNI_* environment variables, checked as
//! the spec defines them.
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::spec::{code, CniError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    fn parse(s: &str) -> Result<Command, CniError> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            _ => {
                return Err(CniError::new(
                    code::INVALID_ENV,
                    format!("CNI_COMMAND={s:?}: expected ADD, DEL, CHECK, GC, STATUS or VERSION"),
                ))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }
}

/// CNI_COMMAND and what it needs.
#[derive(Debug, Clone)]
pub struct Env {
    pub command: Command,
    pub container_id: String,
    /// The pod's namespace (a path); DEL may come without one.
    pub netns: Option<String>,
    pub ifname: String,
    /// CNI_ARGS: `K=V;K=V` (Kubernetes: K8S_POD_NAMESPACE, K8S_POD_NAME,
    /// K8S_POD_UID, K8S_POD_INFRA_CONTAINER_ID).
    pub args: BTreeMap<String, String>,
    /// CNI_PATH: where the IPAM plugin is looked up.
    pub path: Vec<PathBuf>,
}

impl Env {
    /// From the process environment.
    pub fn from_process() -> Result<Env, CniError> {
        Env::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Env, CniError> {
        let missing = |k: &str, c: Command| {
            CniError::new(
                code::INVALID_ENV,
                format!("{k} is required for {}", c.name()),
            )
        };
        let command = Command::parse(&get("CNI_COMMAND").ok_or_else(|| {
            CniError::new(
                code::INVALID_ENV,
                "CNI_COMMAND is not set (a CNI runtime runs this plugin)",
            )
        })?)?;
        let needs_attachment = matches!(command, Command::Add | Command::Del | Command::Check);
        let non_empty = |k: &str| get(k).filter(|v| !v.is_empty());
        let container_id = match non_empty("CNI_CONTAINERID") {
            Some(id) => {
                valid_container_id(&id)?;
                id
            }
            None if needs_attachment => return Err(missing("CNI_CONTAINERID", command)),
            None => String::new(),
        };
        let ifname = match non_empty("CNI_IFNAME") {
            Some(i) => {
                valid_ifname(&i)?;
                i
            }
            None if needs_attachment => return Err(missing("CNI_IFNAME", command)),
            None => String::new(),
        };
        let netns = non_empty("CNI_NETNS");
        if netns.is_none() && matches!(command, Command::Add | Command::Check) {
            return Err(missing("CNI_NETNS", command));
        }
        if let Some(n) = &netns {
            if !n.starts_with('/') {
                return Err(CniError::new(
                    code::INVALID_ENV,
                    format!("CNI_NETNS={n:?} must be an absolute path"),
                ));
            }
        }
        let mut args = BTreeMap::new();
        for kv in get("CNI_ARGS").unwrap_or_default().split(';') {
            if kv.is_empty() {
                continue;
            }
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                CniError::new(
                    code::INVALID_ENV,
                    format!("CNI_ARGS: {kv:?} is not KEY=VALUE"),
                )
            })?;
            args.insert(k.to_string(), v.to_string());
        }
        let path = get("CNI_PATH")
            .unwrap_or_default()
            .split(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
        Ok(Env {
            command,
            container_id,
            netns,
            ifname,
            args,
            path,
        })
    }
}

/// The spec: at least one character, alphanumerics then `_.-`.
fn valid_container_id(id: &str) -> Result<(), CniError> {
    let mut cs = id.chars();
    let ok = cs.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && cs.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(CniError::new(
            code::INVALID_ENV,
            format!("CNI_CONTAINERID={id:?}: letters, digits and _.- only, starting with a letter or digit"),
        ))
    }
}

/// A Linux interface name: at most 15 bytes, not `.` or `..`, no `/`,
/// `:` or white space.
fn valid_ifname(n: &str) -> Result<(), CniError> {
    let ok = n.len() <= 15
        && n != "."
        && n != ".."
        && !n.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
    if ok {
        Ok(())
    } else {
        Err(CniError::new(
            code::INVALID_ENV,
            format!("CNI_IFNAME={n:?} is not a valid interface name (at most 15 bytes, no / : or spaces)"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Env, CniError> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Env::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn each_command_gets_what_it_needs_or_one_line() {
        let add = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "abc-1.2_3"),
            ("CNI_NETNS", "/var/run/netns/cni-1"),
            ("CNI_IFNAME", "eth0"),
            (
                "CNI_ARGS",
                "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;IgnoreUnknown=1",
            ),
            ("CNI_PATH", "/opt/cni/bin::/usr/lib/cni"),
        ];
        let e = env(&add).unwrap();
        assert_eq!(e.command, Command::Add);
        assert_eq!(e.args["K8S_POD_NAME"], "web-0");
        assert_eq!(e.path.len(), 2);
        for (drop, name) in [(1, "CNI_CONTAINERID"), (2, "CNI_NETNS"), (3, "CNI_IFNAME")] {
            let mut v = add.to_vec();
            v.remove(drop);
            let err = env(&v).unwrap_err();
            assert_eq!(err.code, code::INVALID_ENV);
            assert_eq!(err.msg, format!("{name} is required for ADD"));
        }
        // DEL without a namespace (the pod's is gone), GC and STATUS with
        // nothing but the command.
        let mut del = add.to_vec();
        del[0].1 = "DEL";
        del.remove(2);
        assert!(env(&del).unwrap().netns.is_none());
        assert!(env(&[("CNI_COMMAND", "GC")]).is_ok());
        assert!(env(&[("CNI_COMMAND", "STATUS")]).is_ok());
        assert!(env(&[]).unwrap_err().msg.contains("CNI_COMMAND is not set"));
        assert!(env(&[("CNI_COMMAND", "add")])
            .unwrap_err()
            .msg
            .contains("expected ADD"));
    }

    #[test]
    fn bad_ids_names_and_args_are_refused() {
        let with = |k: &'static str, v: &'static str| {
            let mut a = vec![
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c1"),
                ("CNI_NETNS", "/run/netns/x"),
                ("CNI_IFNAME", "eth0"),
            ];
            a.retain(|p| p.0 != k);
            a.push((k, v));
            env(&a).unwrap_err()
        };
        assert!(with("CNI_CONTAINERID", "-x")
            .msg
            .contains("letters, digits"));
        assert!(with("CNI_CONTAINERID", "a/b")
            .msg
            .contains("letters, digits"));
        assert!(with("CNI_IFNAME", "a-very-long-name0")
            .msg
            .contains("15 bytes"));
        assert!(with("CNI_IFNAME", "..").msg.contains("not a valid"));
        assert!(with("CNI_IFNAME", "et h0").msg.contains("not a valid"));
        assert!(with("CNI_NETNS", "netns").msg.contains("absolute path"));
        assert!(with("CNI_ARGS", "A=1;B")
            .msg
            .contains("\"B\" is not KEY=VALUE"));
    }
}
