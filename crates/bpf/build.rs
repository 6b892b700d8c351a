//! Compiles the product's programs under `bpf/<role>/` and generates their
//! libbpf-rs skeletons (peregrine-bpf-build, the one build step shared with
//! peregrine-testbed), so kernel/user shared structs reach Rust as generated
//! types; and the router's action names from its enum (`router_actions.rs`).
//! The lab's programs (gen, replycheck) are built by peregrine-testbed.

/// (directory under `bpf/`, program): `bpf/<dir>/<program>.bpf.c` becomes the
/// skeleton module `skel::<program>`. The sink is the data plane's counting
/// pass-through (dataplane::peer) as well as the lab's, so it is built here.
const PROGRAMS: &[(&str, &str)] = &[
    ("lab", "sink"),
    ("dataplane", "router"),
    ("dataplane", "nf"),
    ("dataplane", "policer"),
    ("dataplane", "classify"),
    ("xsk", "dispatch"),
    ("stack", "steer"),
    ("host", "uapi"),
];

/// Test-only objects under `bpf/tests/`: compiled, no skeleton.
const TEST_OBJECTS: &[&str] = &["verifier_reject"];

fn main() {
    peregrine_bpf_build::skeletons(PROGRAMS);
    peregrine_bpf_build::objects("tests", TEST_OBJECTS);
    router_action_names(
        &peregrine_bpf_build::bpf_root().join("include/peregrine/router_kern_user.h"),
        &peregrine_bpf_build::out_dir(),
    );
}

/// Writes `router_actions.rs`: `ACTION_INFO`, the (name, meaning) of every
/// `enum router_action` enumerator in order, the name being the enumerator
/// without `ROUTER_`, lower case (`ROUTER_PASS_TTL`: "pass_ttl"), the meaning
/// its same-line comment. The header is the one list; nothing is retyped.
/// The values are checked against the skeleton's enum in router.rs's tests.
fn router_action_names(header: &std::path::Path, out: &std::path::Path) {
    let text = std::fs::read_to_string(header)
        .unwrap_or_else(|e| panic!("reading {}: {e}", header.display()));
    let body = text
        .split_once("enum router_action {")
        .and_then(|(_, rest)| rest.split_once("};"))
        .map(|(body, _)| body)
        .unwrap_or_else(|| panic!("{}: no enum router_action", header.display()));
    let mut rows = String::new();
    for line in body
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ROUTER_"))
    {
        let ident: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if ident == "ROUTER_ACTIONS" {
            break;
        }
        let meaning = line
            .split_once("/*")
            .and_then(|(_, c)| c.split_once("*/"))
            .map(|(c, _)| c.trim())
            .unwrap_or_else(|| panic!("{}: {ident} has no comment", header.display()));
        let name = ident.trim_start_matches("ROUTER_").to_ascii_lowercase();
        rows.push_str(&format!("    ({name:?}, {meaning:?}),\n"));
    }
    let src = format!(
        "/// (name, meaning) of each `enum router_action` value, in order.\n\
         pub const ACTION_INFO: &[(&str, &str)] = &[\n{rows}];\n"
    );
    std::fs::write(out.join("router_actions.rs"), src).expect("writing router_actions.rs");
}
