//! Where the lease record lives. A backend reads the record and writes it with
//! compare-and-swap on what was read; it never decides anything.

use k8s_openapi::api::coordination::v1::Lease;

use wasmop_plugin_host::LeaseAction;

/// The lease record as Admiral's table holds it (docs/dr.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The holder's identity; empty when nobody holds it, `SKIP-LEASE-POD` to keep every
    /// instance passive.
    pub owner: String,
    /// When the holder last wrote it, Unix milliseconds (whole seconds for DynamoDB).
    pub updated_ms: i64,
    /// Free text kept across writes (`Created at <unix seconds>`).
    pub notes: String,
}

/// What the compare-and-swap of the next write compares against.
#[derive(Clone, Debug, PartialEq)]
pub enum Version {
    /// The Lease as read (its `resourceVersion` makes the replace conditional).
    Lease(Box<Lease>),
    /// The item's `leaseOwner` and `updatedTime` attribute values as read (absent: `None`).
    Item {
        /// `leaseOwner` (S).
        owner: Option<String>,
        /// `updatedTime` (N), as its decimal string.
        updated: Option<String>,
    },
    /// No version (the `none` backend, fakes).
    Opaque(u64),
}

/// A record as read, with what its next write must compare against.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The record.
    pub record: Record,
    /// The compare-and-swap token.
    pub version: Version,
}

/// Why a backend call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The record changed since it was read (or exists, for a create): someone else wrote.
    #[error("the lease changed since it was read (compare-and-swap failed)")]
    Conflict,
    /// The backend could not be reached or refused the request.
    #[error("{0}")]
    Unavailable(String),
}

impl BackendError {
    /// A stable label for metrics: `conflict` or `error`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::Unavailable(_) => "error",
        }
    }
}

/// A store of one lease record.
#[async_trait::async_trait]
pub trait LeaseBackend: Send + Sync {
    /// `k8s-lease`, `dynamodb` or `none`.
    fn kind(&self) -> &'static str;

    /// Where the record is, for logs and status (e.g. `Lease wasmop-system/wasmop`).
    fn describe(&self) -> String;

    /// Whether the record is shared with other instances. A backend that is not (`none`)
    /// needs no lease to write, so an active decision opens the gate without a deadline.
    fn shared(&self) -> bool {
        true
    }

    /// The timestamp stored for a write at `wall_ms`, as it will read back. Backends that keep
    /// whole seconds round **up**, so a peer never sees the write as older than it is.
    fn stamp(&self, wall_ms: i64) -> i64 {
        wall_ms
    }

    /// Reads the record (a strongly consistent read); `None` when it does not exist.
    ///
    /// # Errors
    /// [`BackendError::Unavailable`].
    async fn read(&self) -> Result<Option<Observed>, BackendError>;

    /// Writes `record` for `action` (`create`, `renew` or `takeover`), on the condition that
    /// the stored record is still `read` (absent for `create`).
    ///
    /// # Errors
    /// [`BackendError::Conflict`] when the condition fails, else [`BackendError::Unavailable`].
    async fn write(
        &self,
        action: LeaseAction,
        read: Option<&Observed>,
        record: &Record,
        expiry_seconds: u32,
    ) -> Result<(), BackendError>;
}

/// The `none` backend: no record, nothing to write (a single instance).
#[derive(Debug, Default)]
pub(crate) struct NoBackend;

#[async_trait::async_trait]
impl LeaseBackend for NoBackend {
    fn kind(&self) -> &'static str {
        "none"
    }

    fn describe(&self) -> String {
        "no lease (backend none)".into()
    }

    fn shared(&self) -> bool {
        false
    }

    async fn read(&self) -> Result<Option<Observed>, BackendError> {
        Ok(None)
    }

    async fn write(
        &self,
        _action: LeaseAction,
        _read: Option<&Observed>,
        _record: &Record,
        _expiry_seconds: u32,
    ) -> Result<(), BackendError> {
        Ok(())
    }
}
