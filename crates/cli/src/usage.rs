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

/// Exit status for a failed command, one rule for every command: usage
/// and input errors exit 2 (a bad flag value, a file that cannot be read
/// or cannot work, a name or interface that is not there, a setting a
/// library refused before starting anything), failures exit 1 (it ran
/// and the host or the network said no).
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.chain().any(input_error) {
        2
    } else {
        1
    }
}

fn input_error(c: &(dyn std::error::Error + 'static)) -> bool {
    use peregrine_faas::invoker::InvokerError;
    use peregrine_host::ControlError;
    use peregrine_lab::LabError;
    use peregrine_quic::app::AppError;
    use peregrine_quic::tls::TlsError;
    use peregrine_xsk::XskError;
    c.is::<UsageError>()
        || matches!(
            c.downcast_ref::<LabError>(),
            Some(LabError::NoSuchLab(_) | LabError::Config(_) | LabError::Invalid(_))
        )
        || matches!(
            c.downcast_ref::<ControlError>(),
            Some(ControlError::Request(_) | ControlError::Config(_))
        )
        || matches!(
            c.downcast_ref::<peregrine_faas::ServeError>(),
            Some(
                peregrine_faas::ServeError::Invalid(_)
                    | peregrine_faas::ServeError::Invoker(
                        InvokerError::Config(_) | InvokerError::Xsk(XskError::Config(_))
                    )
            )
        )
        || matches!(
            c.downcast_ref::<InvokerError>(),
            Some(InvokerError::Config(_) | InvokerError::Xsk(XskError::Config(_)))
        )
        || matches!(c.downcast_ref::<XskError>(), Some(XskError::Config(_)))
        || matches!(
            c.downcast_ref::<AppError>(),
            Some(AppError::Invalid(_) | AppError::Tls(TlsError::Config(_)))
        )
        || matches!(c.downcast_ref::<TlsError>(), Some(TlsError::Config(_)))
}
