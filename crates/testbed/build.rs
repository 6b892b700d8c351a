//! Compiles the lab's programs under `bpf/lab/` into libbpf-rs skeletons,
//! with the one build step peregrine-bpf's build script uses too.

/// (directory under `bpf/`, program): `bpf/<dir>/<program>.bpf.c` becomes the
/// skeleton module `skel::<program>`.
const PROGRAMS: &[(&str, &str)] = &[("lab", "gen"), ("lab", "replycheck")];

fn main() {
    peregrine_bpf_build::skeletons(PROGRAMS);
}
