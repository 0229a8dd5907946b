//! Why a reconcile of a DynamicEnv failed, with the labels of its metrics.

use wasmop_kernel::gate::WriteError;

/// A write the API server refused ([`Error::Refused`]); it displays as the line the status
/// and the `WriteRefused` Event carry.
#[derive(Debug, thiserror::Error)]
#[error("the API server refused {what}: {message}")]
pub struct Refusal {
    /// The object, e.g. `Deployment ns/name` or `VirtualService ns/name`.
    pub what: String,
    /// The API server's message.
    pub message: String,
    /// Which status list it belongs to: `deployment`, `destinationRule`, `virtualServices`.
    pub field: &'static str,
    /// The subset or consumer (`<namespace>/<deployment>`) it was for, if one.
    pub entry: Option<String>,
}

/// Why a reconcile of a DynamicEnv failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write was refused (passive instance) or failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A VirtualService changed between the plan and the write (409 Conflict on the patch
    /// conditional on the version read): the next reconcile plans again.
    #[error("VirtualService {0} changed while its routes were written; planning again")]
    Stale(String),
    /// The API server (or an admission webhook, Istio's validation say) refused a write as
    /// invalid or forbidden (400, 403, 422): retrying the same write cannot succeed, so the
    /// DynamicEnv's status and a Warning Event say so instead.
    #[error("{0}")]
    Refused(Refusal),
    /// The finalizer step failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// `e` as [`Error::Refused`] when the API server refused the write as invalid or
    /// forbidden, else as it is.
    pub(crate) fn refused_or(
        e: WriteError,
        what: impl FnOnce() -> String,
        field: &'static str,
        entry: Option<String>,
    ) -> Self {
        match (&e, e.status_code()) {
            (WriteError::Kube(kube::Error::Api(s)), Some(400 | 403 | 422)) => {
                Error::Refused(Refusal {
                    what: what(),
                    message: s.message.clone(),
                    field,
                    entry,
                })
            }
            _ => Error::Write(e),
        }
    }

    /// A stable label for `wasmop_reconcile_total{outcome}`.
    pub(crate) fn metric_label(&self) -> &'static str {
        match self {
            Error::Write(WriteError::Passive) => "passive",
            Error::Write(e) if e.is_conflict() => "conflict",
            Error::Write(_) => "write",
            Error::Stale(_) => "stale",
            Error::Refused(_) => "refused",
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer",
            },
        }
    }

    /// Whether a retry soon is likely to succeed: a newer version of an object exists (409,
    /// 422 from the finalizer's JSON patch test).
    pub(crate) fn is_stale(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Stale(_) => true,
            Error::Refused(_) => false,
            Error::Write(e) => e.is_conflict(),
            Error::Finalizer(e) => match e.as_ref() {
                F::AddFinalizer(kube::Error::Api(s)) | F::RemoveFinalizer(kube::Error::Api(s)) => {
                    s.code == 422 || s.code == 409
                }
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.is_stale(),
                _ => false,
            },
        }
    }

    /// Whether this is (or wraps) the passive gate's refusal.
    pub(crate) fn is_passive(&self) -> bool {
        self.metric_label() == "passive"
    }
}
