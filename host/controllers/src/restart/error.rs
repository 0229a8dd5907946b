//! Why a reconcile of a ProxyRestartPolicy failed, with the labels of its metrics.

use wasmop_kernel::gate::WriteError;

/// Why a reconcile of a ProxyRestartPolicy failed. The status says the same to users.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write was refused (passive instance) or failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The reconcile ended in the `Error` state; the message is `status.description`.
    #[error("{0}")]
    Failed(String),
}

impl Error {
    /// A stable label for `wasmop_reconcile_total{outcome}`: `passive`, `write` or `failed`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::Write(WriteError::Passive) => "passive",
            Error::Write(_) => "write",
            Error::Failed(_) => "failed",
        }
    }

    /// Whether this is the passive gate's refusal.
    pub(crate) fn is_passive(&self) -> bool {
        matches!(self, Error::Write(WriteError::Passive))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_labels() {
        assert_eq!(Error::Write(WriteError::Passive).metric_label(), "passive");
        assert!(Error::Write(WriteError::Passive).is_passive());
        assert_eq!(Error::Failed("x".into()).metric_label(), "failed");
        assert!(!Error::Failed("x".into()).is_passive());
    }
}
