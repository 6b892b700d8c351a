//! Generates wire's header field tables and protocol numbers from the
//! kernel's UAPI headers, so the byte layout of Ethernet, IPv4, IPv6 and UDP
//! lives once, in the C structs every BPF program also uses (the project's
//! rule for kernel definitions). A small C probe, compiled with the same
//! clang that builds the BPF programs, prints each field's offset and size;
//! its output is `$OUT_DIR/kernel_headers.rs`, included by `lib.rs`.
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

/// One header: the Rust module, its C struct, and its fields as
/// (Rust name, C member). A member written `<m` is the bytes before member
/// `m` that the previous field did not cover: C bitfields (IPv4 version and
/// IHL, IPv6 version, traffic class and flow label) have no offset of their
/// own. `end` names the offset where the fixed header ends.
struct Header {
    module: &'static str,
    include: &'static str,
    strukt: &'static str,
    fields: &'static [(&'static str, &'static str)],
    end: &'static str,
}

const HEADERS: &[Header] = &[
    Header {
        module: "ethernet",
        include: "linux/if_ether.h",
        strukt: "ethhdr",
        fields: &[
            ("DESTINATION", "h_dest"),
            ("SOURCE", "h_source"),
            ("ETHERTYPE", "h_proto"),
        ],
        end: "PAYLOAD",
    },
    Header {
        module: "ipv4",
        include: "linux/ip.h",
        strukt: "iphdr",
        fields: &[
            ("VER_IHL", "<tos"),
            ("DSCP_ECN", "tos"),
            ("LENGTH", "tot_len"),
            ("IDENT", "id"),
            ("FLG_OFF", "frag_off"),
            ("TTL", "ttl"),
            ("PROTOCOL", "protocol"),
            ("CHECKSUM", "check"),
            ("SRC_ADDR", "saddr"),
            ("DST_ADDR", "daddr"),
        ],
        end: "OPTIONS",
    },
    Header {
        module: "ipv6",
        include: "linux/ipv6.h",
        strukt: "ipv6hdr",
        fields: &[
            ("VER_TC_FLOW", "<payload_len"),
            ("LENGTH", "payload_len"),
            ("NXT_HDR", "nexthdr"),
            ("HOP_LIMIT", "hop_limit"),
            ("SRC_ADDR", "saddr"),
            ("DST_ADDR", "daddr"),
        ],
        end: "PAYLOAD",
    },
    Header {
        module: "udp",
        include: "linux/udp.h",
        strukt: "udphdr",
        fields: &[
            ("SRC_PORT", "source"),
            ("DST_PORT", "dest"),
            ("LENGTH", "len"),
            ("CHECKSUM", "check"),
        ],
        end: "PAYLOAD",
    },
];

/// Protocol numbers: (Rust module, Rust type, header, [(Rust name, C macro)]).
type Numbers = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);
const NUMBERS: &[Numbers] = &[
    (
        "ethertype",
        "u16",
        "linux/if_ether.h",
        &[
            ("IPV4", "ETH_P_IP"),
            ("ARP", "ETH_P_ARP"),
            ("VLAN", "ETH_P_8021Q"),
            ("QINQ", "ETH_P_8021AD"),
            ("IPV6", "ETH_P_IPV6"),
        ],
    ),
    (
        "ipproto",
        "u8",
        "linux/in6.h",
        &[
            ("ICMP", "IPPROTO_ICMP"),
            ("TCP", "IPPROTO_TCP"),
            ("UDP", "IPPROTO_UDP"),
            ("ICMPV6", "IPPROTO_ICMPV6"),
        ],
    ),
];

/// The probe's C source: one `field(...)` or `number(...)` call per entry.
fn probe_source() -> String {
    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n#include <linux/in.h>\n");
    for h in HEADERS {
        writeln!(c, "#include <{}>", h.include).unwrap();
    }
    for (_, _, include, _) in NUMBERS {
        writeln!(c, "#include <{include}>").unwrap();
    }
    c.push_str(
        r#"
/* A one-byte field is an index, a longer one a byte range. */
static void field(const char *name, size_t start, size_t end)
{
	if (end - start == 1)
		printf("    pub const %s: usize = %zu;\n", name, start);
	else
		printf("    pub const %s: Field = %zu..%zu;\n", name, start, end);
}

int main(void)
{
"#,
    );
    for h in HEADERS {
        let s = format!("struct {}", h.strukt);
        writeln!(
            c,
            "\tprintf(\"/// `{s}` of <{}>.\\npub mod {} {{\\n    use crate::bytes::Field;\\n\");",
            h.include, h.module
        )
        .unwrap();
        let mut prev_end = "0".to_string();
        for (name, member) in h.fields {
            let (start, end) = match member.strip_prefix('<') {
                Some(next) => (prev_end.clone(), format!("offsetof({s}, {next})")),
                None => (
                    format!("offsetof({s}, {member})"),
                    format!("offsetof({s}, {member}) + sizeof(((({s} *)0)->{member}))"),
                ),
            };
            writeln!(c, "\tfield(\"{name}\", {start}, {end});").unwrap();
            prev_end = end;
        }
        writeln!(
            c,
            "\tprintf(\"    pub const {}: usize = %zu;\\n}}\\n\", sizeof({s}));",
            h.end
        )
        .unwrap();
    }
    for (module, ty, _, consts) in NUMBERS {
        writeln!(c, "\tprintf(\"pub mod {module} {{\\n\");").unwrap();
        for (name, mac) in *consts {
            writeln!(
                c,
                "\tprintf(\"    pub const {name}: {ty} = %#x;\\n\", (unsigned)({mac}));"
            )
            .unwrap();
        }
        c.push_str("\tprintf(\"}\\n\");\n");
    }
    c.push_str("\treturn 0;\n}\n");
    c
}

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let src = out.join("kernel_headers_probe.c");
    let exe = out.join("kernel_headers_probe");
    std::fs::write(&src, probe_source()).expect("write the probe");
    let cc = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let status = Command::new(&cc)
        .args(["-O0", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| {
            panic!("{cc}: {e} (scripts/setup.sh installs clang and linux-libc-dev)")
        });
    assert!(
        status.success(),
        "{cc} could not build the kernel header probe {}",
        src.display()
    );
    let printed = Command::new(&exe)
        .output()
        .expect("run the kernel header probe");
    assert!(printed.status.success(), "the kernel header probe failed");
    std::fs::write(out.join("kernel_headers.rs"), printed.stdout).expect("write kernel_headers.rs");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
}
