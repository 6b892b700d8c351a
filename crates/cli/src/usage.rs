//! Usage errors: bad arguments found by our own validation (after clap's).
//! `main` maps them to exit status 2, as clap does for its own errors, so a
//! script can tell "you called it wrong" (2) from "it ran and failed" (1).
use std::fmt;

/// An argument error: the message names the flag and what it expects.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns early with a [`UsageError`] (exit status 2), like `anyhow::bail!`.
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::usage::UsageError(format!($($t)*))))
    };
}

/// Exit status for a failed command: 2 for usage errors anywhere in the
/// chain (a benchmark's bad setting and a lab the user named that does not
/// exist are ones), else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let named_no_lab = |c: &(dyn std::error::Error + 'static)| {
        matches!(
            c.downcast_ref::<peregrine_lab::LabError>(),
            Some(peregrine_lab::LabError::NoSuchLab(_))
        )
    };
    if e.chain()
        .any(|c| c.is::<UsageError>() || c.is::<peregrine_bench::BadSetting>() || named_no_lab(c))
    {
        2
    } else {
        1
    }
}
