//! Names a declaration or a pod request may carry, checked one way.

/// An interface name the kernel would take: 1 to 15 bytes, no `/`, `:`,
/// white space or control character, not `.` or `..`.
pub fn valid_iface(n: &str) -> bool {
    !n.is_empty()
        && n.len() < 16
        && n != "."
        && n != ".."
        && !n
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

/// A service's or a node's name: letters, digits and `-_.` (it labels
/// metrics and names files).
pub fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_the_kernel_refuses_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\nb",
            "sixteen-chars-xx",
        ] {
            assert!(!valid_iface(bad), "{bad:?}");
        }
        for good in ["eth0", "veth-pod.1", "fifteen-chars-x"] {
            assert!(valid_iface(good), "{good:?}");
        }
    }

    #[test]
    fn service_names_are_letters_digits_and_three_marks() {
        assert!(valid_name("echo-1_a.b"));
        for bad in ["", "a b", "a\nb", "a/b", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
