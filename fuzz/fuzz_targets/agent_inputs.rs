//! What the node agent reads from others: the control socket's request
//! line (any root process, the CNI plugin among them, writes it) and its
//! declaration files (node.toml, also the text `peregrine apply` sends).
//! Neither parser panics; a request it reads, written back, reads the
//! same; a declaration accepted once is accepted again as the same; a
//! refused one gets one line per mistake. The input as a pod's deny list
//! (`peregrine.io/ingress-deny`, a pod annotation): refused in one line,
//! or every entry a rule the qos rules file takes as written.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use peregrine_agent::annotations::{self, Direction};
use peregrine_agent::check;
use peregrine_agent::control::Request;
use peregrine_agent::decl::ArgCheck;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(r) = serde_json::from_str::<Request>(text) {
        let line = serde_json::to_string(&r).expect("a request serializes");
        let back: Request = serde_json::from_str(&line).expect("what it writes it reads");
        assert_eq!(serde_json::to_string(&back).unwrap(), line);
    }
    let pod = BTreeMap::from([(annotations::INGRESS_DENY.to_string(), text.to_string())]);
    match annotations::check(&pod) {
        Ok(()) => {
            for dir in [Direction::Ingress, Direction::Egress] {
                let mut pod = BTreeMap::new();
                pod.insert(dir.annotation().to_string(), text.to_string());
                for d in annotations::denies(&pod, dir).expect("checked") {
                    let rule = d.rule(dir);
                    let cfg = peregrine_qos::config::PolicerConfig::parse(&rule)
                        .unwrap_or_else(|e| panic!("{rule:?} refused: {e}"));
                    assert_eq!(cfg.rules.len(), 1, "{rule:?}");
                }
            }
        }
        Err(e) => assert!(!e.is_empty() && !e.contains('\n'), "one line: {e:?}"),
    }
    // The services' options are the CLI's to check (not linked here).
    let any: &ArgCheck = &|_, _| Ok(());
    let files = vec![("node.toml".to_string(), text.to_string())];
    match check::parse_many(&files, any) {
        Ok(d) => assert_eq!(check::parse_many(&files, any).expect("accepted again"), d),
        Err(lines) => {
            assert!(!lines.is_empty(), "refused without a reason");
            for l in lines {
                assert!(!l.is_empty() && !l.contains('\n'), "one line each: {l:?}");
            }
        }
    }
});
