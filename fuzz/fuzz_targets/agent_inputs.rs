//! What the node agent reads from others: the control socket's request
//! line (any root process, the CNI plugin among them, writes it) and its
//! declaration files (node.toml, also the text `peregrine apply` sends).
//! Neither parser panics; a request it reads, written back, reads the
//! same; a declaration accepted once is accepted again as the same; a
//! refused one gets one line per mistake.
#![no_main]

use libfuzzer_sys::fuzz_target;
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
