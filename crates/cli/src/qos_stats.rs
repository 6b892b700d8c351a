//! `peregrine qos stats` and `qos list`: what `peregrine_qos::report`
//! shows, once or watched.
use anyhow::Result;
use peregrine_host::caps::require_bpf;
use peregrine_qos::attach;
use peregrine_qos::report::{self, Policers};

use crate::metrics::StatsOutput;

pub(crate) fn stats(iface: Option<String>, out: &StatsOutput) -> Result<()> {
    require_bpf("qos stats")?;
    let ifaces = attach::policed(iface)?;
    out.show(Policers::read(&ifaces)?, move || {
        Ok(Policers::read(&ifaces)?)
    })
}

pub(crate) fn list(json: bool) -> Result<()> {
    require_bpf("qos list")?;
    let gone = attach::detach_gone_namespaces()?;
    if gone > 0 {
        eprintln!("removed {gone} policer(s) of network namespaces that no longer exist");
    }
    print!("{}", report::list_text(json));
    Ok(())
}
