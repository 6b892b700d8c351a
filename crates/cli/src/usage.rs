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
    use peregrine_faas::ServeError;
    use peregrine_host::ControlError;
    use peregrine_lab::LabError;
    use peregrine_quic::app::AppError;
    use peregrine_quic::tls::TlsError;
    use peregrine_xsk::XskError;
    // Transparent wrappers pass their inner error's source on, so each
    // kind is looked for both alone and inside its wrapper.
    let xsk = |e: &XskError| matches!(e, XskError::Config(_));
    let invoker = |e: &InvokerError| match e {
        InvokerError::Config(_) => true,
        InvokerError::Xsk(x) => xsk(x),
        _ => false,
    };
    let tls = |e: &TlsError| matches!(e, TlsError::Config(_));
    c.is::<UsageError>()
        || matches!(
            c.downcast_ref::<LabError>(),
            Some(LabError::NoSuchLab(_) | LabError::Config(_) | LabError::Invalid(_))
        )
        || matches!(
            c.downcast_ref::<ControlError>(),
            Some(ControlError::Request(_) | ControlError::Config(_))
        )
        || match c.downcast_ref::<ServeError>() {
            Some(ServeError::Invalid(_)) => true,
            Some(ServeError::Invoker(i)) => invoker(i),
            _ => false,
        }
        || c.downcast_ref::<InvokerError>().is_some_and(invoker)
        || c.downcast_ref::<XskError>().is_some_and(xsk)
        || match c.downcast_ref::<AppError>() {
            Some(AppError::Invalid(_)) => true,
            Some(AppError::Tls(t)) => tls(t),
            _ => false,
        }
        || c.downcast_ref::<TlsError>().is_some_and(tls)
}
