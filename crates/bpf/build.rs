//! Compiles every program under `bpf/<role>/` with clang and generates its
//! libbpf-rs skeleton, so kernel/user shared structs reach Rust as generated
//! types; and the router's action names from its enum (`router_actions.rs`).
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// (directory under `bpf/`, program): `bpf/<dir>/<program>.bpf.c` becomes the
/// skeleton module `skel::<program>`.
const PROGRAMS: &[(&str, &str)] = &[
    ("lab", "gen"),
    ("lab", "sink"),
    ("lab", "replycheck"),
    ("dataplane", "router"),
    ("dataplane", "nf"),
    ("dataplane", "policer"),
    ("xsk", "dispatch"),
    ("stack", "steer"),
    ("host", "uapi"),
];

/// Test-only objects under `bpf/tests/`: compiled, no skeleton.
const TEST_OBJECTS: &[&str] = &["verifier_reject"];

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bpf");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let include = root.join("include");
    let arch_include = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    let includes = [
        format!("-I{}", include.display()),
        format!("-I{arch_include}"),
    ];
    println!("cargo:rerun-if-changed={}", include.display());
    for (dir, name) in PROGRAMS {
        let src = root.join(dir).join(format!("{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        SkeletonBuilder::new()
            .source(&src)
            .clang_args(
                ["-O2".to_string(), "-Wall".to_string()]
                    .iter()
                    .chain(&includes),
            )
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building bpf/{dir}/{name}.bpf.c: {e:#}"));
    }
    router_action_names(&include.join("peregrine/router_kern_user.h"), &out);
    for name in TEST_OBJECTS {
        let src = root.join("tests").join(format!("{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args(&includes)
            .build()
            .unwrap_or_else(|e| panic!("building bpf/tests/{name}.bpf.c: {e:#}"));
    }
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
