//! The `k8s-lease` backend: a `coordination.k8s.io/v1` Lease in the operator namespace, written
//! by `create` (absent lease) and by `update` carrying the `resourceVersion` that was read, so a
//! concurrent write fails with 409 Conflict (client-go's leader election does the same,
//! docs/dr.md).
//!
//! The record maps onto the Lease so that `kubectl get lease` stays meaningful:
//!
//! | record | Lease |
//! |---|---|
//! | owner | `spec.holderIdentity` (unset or empty: nobody) |
//! | updatedTime | `spec.renewTime` (else `spec.acquireTime`), millisecond precision |
//! | notes | annotation `wasmop.dev/dr-notes` |
//!
//! A write also sets `leaseDurationSeconds` to `y × x`, `acquireTime` and `leaseTransitions + 1`
//! when the holder changes. The manual all-passive switch is
//! `kubectl patch lease NAME --type merge -p '{"spec":{"holderIdentity":"SKIP-LEASE-POD"}}'`.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

use super::backend::{BackendError, LeaseBackend, Observed, Record, Version};
use wasmop_kernel::FIELD_MANAGER;
use wasmop_plugin_host::LeaseAction;

/// The annotation that keeps the record's `notes`.
pub(crate) const NOTES_ANNOTATION: &str = "wasmop.dev/dr-notes";

/// A Lease named `name` in the namespace of `api`.
pub struct KubernetesLease {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl KubernetesLease {
    /// The Lease `namespace/name`, read and written with `client` (the operator's own
    /// credentials; these writes bypass the write gate).
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

fn micro(ms: i64) -> Option<MicroTime> {
    Timestamp::from_millisecond(ms).ok().map(MicroTime)
}

/// The record a Lease holds.
pub(crate) fn record_of(lease: &Lease) -> Record {
    let spec = lease.spec.as_ref();
    let time = spec
        .and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref()))
        .map_or(0, |t| t.0.as_millisecond());
    Record {
        owner: spec
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default(),
        updated_ms: time,
        notes: lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NOTES_ANNOTATION).cloned())
            .unwrap_or_default(),
    }
}

/// `lease` rewritten to hold `record` (the holder changes: acquire time and transitions too).
pub(crate) fn with_record(mut lease: Lease, record: &Record, expiry_seconds: u32) -> Lease {
    let creating = lease.spec.is_none();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if creating {
        spec.acquire_time = micro(record.updated_ms);
        spec.lease_transitions = Some(0);
    } else if spec.holder_identity.as_deref().unwrap_or_default() != record.owner {
        spec.acquire_time = micro(record.updated_ms);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.holder_identity = Some(record.owner.clone());
    spec.renew_time = micro(record.updated_ms);
    spec.lease_duration_seconds = Some(i32::try_from(expiry_seconds).unwrap_or(i32::MAX));
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(NOTES_ANNOTATION.into(), record.notes.clone());
    lease
}

fn unavailable(what: &str, e: &kube::Error) -> BackendError {
    BackendError::Unavailable(format!("{what}: {e}"))
}

#[async_trait::async_trait]
impl LeaseBackend for KubernetesLease {
    fn kind(&self) -> &'static str {
        "k8s-lease"
    }

    fn describe(&self) -> String {
        format!("Lease {}/{}", self.namespace, self.name)
    }

    async fn read(&self) -> Result<Option<Observed>, BackendError> {
        let lease = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| unavailable(&format!("cannot read {}", self.describe()), &e))?;
        Ok(lease.map(|lease| Observed {
            record: record_of(&lease),
            version: Version::Lease(Box::new(lease)),
        }))
    }

    async fn write(
        &self,
        action: LeaseAction,
        read: Option<&Observed>,
        record: &Record,
        expiry_seconds: u32,
    ) -> Result<(), BackendError> {
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let result = match (action, read.map(|o| &o.version)) {
            (LeaseAction::Create, None) => {
                let mut lease = Lease::default();
                lease.metadata.name = Some(self.name.clone());
                let lease = with_record(lease, record, expiry_seconds);
                self.api.create(&pp, &lease).await
            }
            (LeaseAction::Renew | LeaseAction::Takeover, Some(Version::Lease(lease))) => {
                let mut lease = with_record(Lease::clone(lease), record, expiry_seconds);
                // Omitted, the server keeps them; the resourceVersion makes this conditional.
                lease.metadata.managed_fields = None;
                self.api.replace(&self.name, &pp, &lease).await
            }
            // A create over a record that exists, or a renewal of one that does not.
            _ => return Err(BackendError::Conflict),
        };
        match result {
            Ok(_) => Ok(()),
            // 409: changed since read (or created meanwhile); 404: deleted since read.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                Err(BackendError::Conflict)
            }
            Err(e) => Err(unavailable(
                &format!("cannot write {}", self.describe()),
                &e,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_maps_onto_the_lease_fields() {
        let r = Record {
            owner: "pod-a".into(),
            updated_ms: 1_700_000_000_123,
            notes: "Created at 1700000000".into(),
        };
        let created = with_record(Lease::default(), &r, 15);
        let spec = created.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("pod-a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(
            spec.lease_transitions,
            Some(0),
            "a new lease has had no transition"
        );
        assert_eq!(spec.acquire_time, spec.renew_time);
        assert_eq!(record_of(&created), r, "the record reads back exactly");

        let renewed = with_record(
            created.clone(),
            &Record {
                updated_ms: r.updated_ms + 5_000,
                ..r.clone()
            },
            15,
        );
        let s = renewed.spec.clone().unwrap();
        assert_eq!(
            s.acquire_time, spec.acquire_time,
            "a renewal keeps the acquire time"
        );
        assert_eq!(s.lease_transitions, Some(0));

        let taken = with_record(
            renewed,
            &Record {
                owner: "pod-b".into(),
                updated_ms: r.updated_ms + 20_000,
                notes: r.notes.clone(),
            },
            15,
        );
        let s = taken.spec.clone().unwrap();
        assert_eq!(s.lease_transitions, Some(1));
        assert_eq!(s.acquire_time, s.renew_time);
        assert_eq!(record_of(&taken).notes, "Created at 1700000000");

        let empty = Lease {
            spec: Some(LeaseSpec::default()),
            ..Lease::default()
        };
        assert_eq!(
            record_of(&empty),
            Record {
                owner: String::new(),
                updated_ms: 0,
                notes: String::new()
            }
        );
    }
}
