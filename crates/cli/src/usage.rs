//! Usage errors: bad arguments found by our own validation (after clap's).
//! `main` maps them to exit status 2, as clap does for its own errors, so a
//! script can tell "you called it wrong" (2) from "it ran and failed" (1).

/// An argument error: the message names the flag and what it expects. The
/// same type as the benchmarks' bad settings, so both exit with status 2.
pub use peregrine_bench::BadSetting as UsageError;

/// Returns early with a [`UsageError`] (exit status 2), like `anyhow::bail!`.
#[macro_export]
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::usage::UsageError(format!($($t)*))))
    };
}

/// Exit status for a failed command: 2 for usage errors anywhere in the
/// chain (a lab the user named that does not exist is one, and so is a
/// setting a library's config refused), else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let named_no_lab = |c: &(dyn std::error::Error + 'static)| {
        matches!(
            c.downcast_ref::<peregrine_lab::LabError>(),
            Some(peregrine_lab::LabError::NoSuchLab(_))
        )
    };
    // A request the host refuses as asked (no such interface, ...) is one
    // too, and so are settings a library refused before starting anything.
    let refused = |c: &(dyn std::error::Error + 'static)| {
        matches!(
            c.downcast_ref::<peregrine_host::ControlError>(),
            Some(peregrine_host::ControlError::Request(_))
        ) || matches!(
            c.downcast_ref::<peregrine_faas::ServeError>(),
            Some(peregrine_faas::ServeError::Invalid(_))
        ) || matches!(
            c.downcast_ref::<peregrine_quic::app::AppError>(),
            Some(peregrine_quic::app::AppError::Invalid(_))
        )
    };
    if e.chain()
        .any(|c| c.is::<UsageError>() || named_no_lab(c) || refused(c))
    {
        2
    } else {
        1
    }
}
