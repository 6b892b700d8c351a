//! Compiles every program under `bpf/<role>/` with clang and generates its
//! libbpf-rs skeleton, so kernel/user shared structs reach Rust as generated
//! types.
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
    ("xsk", "dispatch"),
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
