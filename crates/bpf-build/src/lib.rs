//! The one build step of peregrine's BPF programs, shared by the build
//! scripts of the crates that own programs (`peregrine-bpf` for the
//! product's, `peregrine-testbed` for the lab's): each `bpf/<dir>/<name>.bpf.c`
//! compiled with clang against `bpf/include` and turned into the libbpf-rs
//! skeleton `$OUT_DIR/<name>.skel.rs`, so kernel/user shared structs reach
//! Rust as generated types.
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

/// The `bpf/` directory of the workspace.
pub fn bpf_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bpf")
}

/// The build script's `OUT_DIR`.
pub fn out_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"))
}

/// clang's include flags: `bpf/include` and the architecture's system headers.
fn includes(root: &Path) -> [String; 2] {
    let arch_include = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    [
        format!("-I{}", root.join("include").display()),
        format!("-I{arch_include}"),
    ]
}

/// Compiles `bpf/<dir>/<name>.bpf.c` for each (dir, name) and writes its
/// skeleton to `$OUT_DIR/<name>.skel.rs` (included as `skel::<name>`).
/// Rebuilds when a program or anything under `bpf/include` changes.
pub fn skeletons(programs: &[(&str, &str)]) {
    let root = bpf_root();
    let out = out_dir();
    let includes = includes(&root);
    println!("cargo:rerun-if-changed={}", root.join("include").display());
    for (dir, name) in programs {
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
}

/// Compiles `bpf/<dir>/<name>.bpf.c` into `$OUT_DIR/<name>.bpf.o`, no
/// skeleton (objects tests load by hand, e.g. ones the verifier rejects).
pub fn objects(dir: &str, names: &[&str]) {
    let root = bpf_root();
    let out = out_dir();
    let includes = includes(&root);
    for name in names {
        let src = root.join(dir).join(format!("{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args(&includes)
            .build()
            .unwrap_or_else(|e| panic!("building bpf/{dir}/{name}.bpf.c: {e:#}"));
    }
}
