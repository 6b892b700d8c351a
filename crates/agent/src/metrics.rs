//! The node's one Prometheus endpoint: the agent's own counters and every
//! component's, labelled `component` (router: per port and action;
//! policer: per interface and rule), plus `/healthz` (the agent's loop
//! runs) and `/readyz` (the declared state is applied: no errors, nothing
//! waiting, every service up).
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use peregrine_dataplane::router::{self, Site};
use peregrine_metrics::prometheus_client::metrics::gauge::Gauge;
use peregrine_metrics::prometheus_client::registry::Registry;
use peregrine_metrics::{set, CounterFamily, Labels};

use crate::status::Status;

fn l(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Serves the endpoint at `addr` until `stop`.
pub fn serve(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    status: Arc<Mutex<Status>>,
) -> Result<(), String> {
    let mut reg = Registry::default();
    let agent = reg.sub_registry_with_prefix("peregrine_agent");
    let reconciles = CounterFamily::default();
    let repairs = CounterFamily::default();
    let restarts = CounterFamily::default();
    let ready = Gauge::<i64>::default();
    let errors = Gauge::<i64>::default();
    agent.register("reconciles", "Reconcile passes", reconciles.clone());
    agent.register(
        "repairs",
        "Drift repaired (a program detached by hand, a port re-created)",
        repairs.clone(),
    );
    agent.register(
        "service_restarts",
        "Supervised services restarted after they exited",
        restarts.clone(),
    );
    agent.register(
        "ready",
        "1 when the declared state is applied",
        ready.clone(),
    );
    agent.register(
        "errors",
        "What the last reconcile could not apply",
        errors.clone(),
    );
    let node = reg.sub_registry_with_prefix("peregrine_node");
    let packets = CounterFamily::default();
    let bytes = CounterFamily::default();
    node.register(
        "packets",
        "Packets each component counted, by component and its labels",
        packets.clone(),
    );
    node.register(
        "bytes",
        "Bytes each component counted, by component and its labels",
        bytes.clone(),
    );
    let st = status.clone();
    // The router series of the last scrape: those of ports gone since (a
    // pod deleted, a port taken out) are removed, not left frozen.
    let mut router_series: Vec<Labels> = Vec::new();
    let refresh = move || {
        let s = st.lock().unwrap_or_else(|e| e.into_inner()).clone();
        set(&reconciles, &Vec::new(), s.reconciles);
        set(&repairs, &Vec::new(), s.repairs);
        for sv in &s.services {
            set(&restarts, &l(&[("service", &sv.name)]), sv.restarts);
        }
        ready.set(s.ready as i64);
        errors.set(s.errors.len() as i64);
        let mut now: Vec<Labels> = Vec::new();
        if let Ok(dir) = Site::here().dir() {
            if let Ok(ports) = router::stats(&dir) {
                for (port, _, ps) in ports {
                    // A pod's port: its Kubernetes names too.
                    let pod = s.pods.iter().find(|p| p.host_iface == port);
                    for (i, (&p, &b)) in ps.packets.iter().zip(ps.bytes.iter()).enumerate() {
                        let mut labels = l(&[
                            ("component", "router"),
                            ("port", &port),
                            ("action", peregrine_bpf::router::action_name(i)),
                        ]);
                        if let Some(pod) = pod {
                            labels.extend(l(&[
                                ("pod", &pod.label),
                                ("namespace", pod.pod_namespace.as_deref().unwrap_or("")),
                            ]));
                        }
                        set(&packets, &labels, p);
                        set(&bytes, &labels, b);
                        now.push(labels);
                    }
                }
            }
        }
        let kept: std::collections::HashSet<&Labels> = now.iter().collect();
        for gone in router_series.iter().filter(|l| !kept.contains(l)) {
            packets.remove(gone);
            bytes.remove(gone);
        }
        router_series = now;
        for q in s.qos.iter().filter(|q| q.live) {
            let Ok(ps) = peregrine_qos::attach::stats(&q.iface) else {
                continue;
            };
            for (r, c) in &ps.rules {
                let id = r.id.to_string();
                for (verdict, p, b) in [
                    ("conform", c.conform_packets, c.conform_bytes),
                    ("exceed", c.exceed_packets, c.exceed_bytes),
                ] {
                    let labels = l(&[
                        ("component", "policer"),
                        ("iface", &q.iface),
                        ("rule", &id),
                        ("verdict", verdict),
                    ]);
                    set(&packets, &labels, p);
                    set(&bytes, &labels, b);
                }
            }
        }
    };
    let routes: peregrine_metrics::Routes = Box::new(move |path| match path {
        "/healthz" => Some((200, "ok\n".into())),
        "/readyz" => {
            let s = status.lock().unwrap_or_else(|e| e.into_inner());
            if s.ready {
                Some((200, "ready\n".into()))
            } else {
                let mut why: Vec<String> = s.errors.clone();
                why.extend(s.waiting.iter().cloned());
                why.extend(
                    s.services
                        .iter()
                        .filter(|v| v.state != "running")
                        .map(|v| format!("service {} is down", v.name)),
                );
                if s.reconciles == 0 {
                    why.push("the declaration is not applied yet".into());
                }
                Some((503, format!("not ready: {}\n", why.join("; "))))
            }
        }
        _ => None,
    });
    peregrine_metrics::serve_http(addr, stop, reg, refresh, routes)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
