//! The CNI plugin binary: runtimes run it by its name from their CNI
//! plugin directory (`"type": "peregrine-cni"`).
fn main() {
    std::process::exit(peregrine_cni::main())
}
