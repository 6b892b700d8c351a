//! `--lab`/`--host`: where a command runs (a lab host's namespace, or this
//! one), declared once for every command that takes the pair.
use anyhow::Result;
use clap::Args;
use peregrine_dataplane::{PinScope, Site};
use peregrine_lab::lab;

use crate::usage;

#[derive(Args, Clone)]
pub struct Scope {
    /// Lab to run in (with --host); default: this namespace.
    #[arg(long, requires = "host")]
    pub lab: Option<String>,
    /// Host (namespace) of the lab to run in (with --lab).
    #[arg(long, requires = "lab")]
    pub host: Option<String>,
}

impl Scope {
    /// The lab host's namespace, checked to exist in the lab; None for this
    /// namespace.
    pub fn ns(&self) -> Result<Option<String>> {
        match (&self.lab, &self.host) {
            (Some(l), Some(h)) => {
                let st = lab::state(l)?;
                if st.topology.host(h).is_none() {
                    let hosts: Vec<&str> =
                        st.topology.hosts.iter().map(|h| h.name.as_str()).collect();
                    usage!(
                        "lab {l} has no host {h:?} (its hosts: {})",
                        hosts.join(", ")
                    );
                }
                Ok(Some(lab::ns_name(l, h)))
            }
            _ => Ok(None),
        }
    }

    /// Whose pins: the lab host's, or this namespace's.
    pub fn pins(&self) -> PinScope {
        match (&self.lab, &self.host) {
            (Some(lab), Some(host)) => PinScope::LabHost {
                lab: lab.clone(),
                host: host.clone(),
            },
            _ => PinScope::Here,
        }
    }

    /// Where the router is, for `peregrine_dataplane::router` (the lab
    /// checked to have the host; peers found from the kernel).
    pub fn site<'a>(&self) -> Result<Site<'a>> {
        Ok(Site {
            ns: self.ns()?,
            pins: self.pins(),
            hosts: None,
        })
    }
}
