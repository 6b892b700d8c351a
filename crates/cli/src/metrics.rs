//! How commands show counters (`router stats`, `chain stats`, `qos
//! stats`): once, watched, served to Prometheus, as JSON. The reports and
//! their counters are the libraries' (`peregrine_metrics::Counted`).
use anyhow::Result;
use clap::Args;
use peregrine_host::signals;
use peregrine_metrics::{Counted, Watch};

use crate::watch::WatchArgs;

/// How counters are shown: once, watched, served to Prometheus, as JSON.
#[derive(Args, Clone)]
pub(crate) struct StatsOutput {
    #[command(flatten)]
    pub(crate) watch: WatchArgs,
    /// Serve the counters to Prometheus here while watching (implies
    /// --watch), e.g. 127.0.0.1:9466.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// JSON: one object, or with --watch one object per sample (JSON lines).
    #[arg(long)]
    pub(crate) json: bool,
}

impl StatsOutput {
    /// Prints `now` once (JSON or its table) without --watch and
    /// --metrics; else watches what `read` reads, serving it at --metrics.
    pub(crate) fn show<R: Counted>(
        &self,
        now: R,
        mut read: impl FnMut() -> Result<R> + Clone + Send + 'static,
    ) -> Result<()> {
        if self.watch.on() || self.metrics.is_some() {
            let w = Watch {
                interval: self.watch.interval(),
                count: self.watch.count,
                json: self.json,
                metrics: self.metrics,
            };
            let wait = |d| {
                signals::sleep(d);
                !signals::stop_requested()
            };
            return w.run(R::PREFIX, R::WHAT, wait, move || Ok(read()?.counters()));
        }
        if self.json {
            println!("{}", now.to_json());
        } else {
            print!("{now}");
        }
        Ok(())
    }
}
