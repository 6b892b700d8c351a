//! Generates `$OUT_DIR/uapi.rs`, the kernel UAPI definitions the host's
//! code passes to the kernel (ethtool's ioctl command numbers and
//! `struct ethtool_value`, SIOCETHTOOL, SO_NETNS_COOKIE; HTB's qdisc and
//! class options and the FIFO limit from <linux/pkt_sched.h>: `tc_htb_opt`,
//! `tc_htb_glob`, `tc_ratespec`, `tc_htb_xstats`, `tc_fifo_qopt`, the
//! `TCA_HTB_*` attribute numbers), with bindgen from
//! the kernel's own headers: never retyped by hand, and no BPF object.
use std::path::PathBuf;

/// The headers read, and what is taken from them.
const HEADER: &str = "#include <linux/ethtool.h>\n\
                      #include <linux/sockios.h>\n\
                      #include <asm/socket.h>\n\
                      #include <linux/pkt_sched.h>\n";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let arch_include = format!("-I/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    bindgen::Builder::default()
        .header_contents("peregrine_host_uapi.h", HEADER)
        .clang_arg(arch_include)
        .allowlist_type("ethtool_value")
        .allowlist_var("ETHTOOL_[GS](TXCSUM|GSO|GRO|TSO)")
        .allowlist_var("SIOCETHTOOL")
        .allowlist_var("SO_NETNS_COOKIE")
        .allowlist_type("tc_htb_opt|tc_htb_glob|tc_ratespec|tc_htb_xstats|tc_fifo_qopt|tc_link_layer")
        .allowlist_var("TCA_HTB_.*|TC_LINKLAYER_.*|TC_HTB_.*")
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .generate()
        .expect("bindgen over <linux/ethtool.h>, <linux/sockios.h>, <asm/socket.h>, <linux/pkt_sched.h>")
        .write_to_file(out.join("uapi.rs"))
        .expect("writing uapi.rs");
}
