//! What the CNI plugin reads from the runtime: the network configuration
//! on stdin (with a prevResult from the plugins before it, and
//! runtimeConfig) and the CNI_* environment. Nothing panics; an error is
//! one line; a result it accepts converts to every supported version and
//! reads back as the same; VERSION answers whatever stdin holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_cni::env::Env;
use peregrine_cni::spec::{CniResult, NetConf, Version};

fn one_line(msg: &str) {
    assert!(!msg.contains('\n'), "one line: {msg:?}");
}

fuzz_target!(|data: &[u8]| {
    match NetConf::parse(data) {
        Ok(c) => {
            if let Err(e) = Version::parse(&c.cni_version) {
                one_line(&e.msg);
            }
            if let Err(e) = c.ipam_type() {
                one_line(&e.msg);
            }
            if let Some(b) = c.runtime_config.bandwidth {
                let n = b.normalized();
                assert_eq!(n.normalized(), n);
            }
            if let Some(p) = &c.prev_result {
                match CniResult::from_value(p, "prevResult") {
                    Ok(r) => {
                        for v in [Version::V0_4_0, Version::V1_0_0, Version::V1_1_0] {
                            let out = serde_json::to_value(r.to_version(v)).unwrap();
                            let back = CniResult::from_value(&out, "result")
                                .expect("a result it writes it reads");
                            assert_eq!(back.to_version(v), r.to_version(v));
                        }
                    }
                    Err(e) => one_line(&e.msg),
                }
            }
        }
        Err(e) => one_line(&e.msg),
    }
    // The environment: NUL-separated values of the CNI_* variables.
    let vals: Vec<String> = data
        .split(|b| *b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    let keys = [
        "CNI_COMMAND",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_ARGS",
        "CNI_PATH",
    ];
    let env = Env::from_lookup(|k| {
        keys.iter()
            .position(|x| *x == k)
            .and_then(|i| vals.get(i).cloned())
    });
    if let Err(e) = &env {
        one_line(&e.msg);
    }
    // VERSION has no side effect: whatever stdin holds, it answers.
    let version = Env::from_lookup(|k| (k == "CNI_COMMAND").then(|| "VERSION".to_string())).unwrap();
    assert!(peregrine_cni::plugin::run(&version, data).unwrap().is_some());
});
