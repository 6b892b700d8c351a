//! Compiles every `bpf/*.bpf.c` with clang and generates its libbpf-rs
//! skeleton, so kernel/user shared structs reach Rust as generated types.
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[&str] = &["gen", "sink", "router", "nf", "dispatch", "replycheck"];

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bpf");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let include = root.join("include");
    let arch_include = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    println!("cargo:rerun-if-changed={}", include.display());
    for name in PROGRAMS {
        let src = root.join(format!("{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                "-O2".to_string(),
                "-Wall".to_string(),
                format!("-I{}", include.display()),
                format!("-I{arch_include}"),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building bpf/{name}.bpf.c: {e:#}"));
    }
    // Test-only objects: compiled, no skeleton.
    let reject = root.join("tests/verifier_reject.bpf.c");
    println!("cargo:rerun-if-changed={}", reject.display());
    SkeletonBuilder::new()
        .source(&reject)
        .obj(out.join("verifier_reject.bpf.o"))
        .clang_args([
            format!("-I{}", include.display()),
            format!("-I{arch_include}"),
        ])
        .build()
        .unwrap_or_else(|e| panic!("building bpf/tests/verifier_reject.bpf.c: {e:#}"));
}
