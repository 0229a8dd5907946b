//! Why a reconcile of an ElasticService failed, with the labels of its metrics.

use wasmop_kernel::gate::WriteError;

/// Why a reconcile of an ElasticService failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write was refused (passive instance) or failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Reading an object failed.
    #[error("cannot read {0}: {1}")]
    Read(String, #[source] kube::Error),
    /// The ElasticService or an object it names is unusable; the message says what to change.
    #[error("{0}")]
    Invalid(String),
    /// The finalizer step failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// A stable label for `wasmop_reconcile_total{outcome}`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::Write(WriteError::Passive) => "passive",
            Error::Write(_) => "write",
            Error::Read(..) => "read",
            Error::Invalid(_) => "invalid",
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer",
            },
        }
    }

    /// Whether the finalizer step raced a newer version of the object (its JSON patch test
    /// failed with 422, or 409): the cache was stale and a retry soon converges.
    pub(crate) fn is_stale(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Finalizer(e) => matches!(
                e.as_ref(),
                F::AddFinalizer(kube::Error::Api(s)) | F::RemoveFinalizer(kube::Error::Api(s))
                    if s.code == 422 || s.code == 409
            ),
            Error::Write(e) => e.is_conflict(),
            _ => false,
        }
    }

    /// Whether this is (or wraps) the passive gate's refusal.
    pub(crate) fn is_passive(&self) -> bool {
        self.metric_label() == "passive"
    }
}
