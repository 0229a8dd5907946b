//! Owner resolution and restart actions (docs/restart.md,
//! "Rollout"): a pod of a Deployment (through its ReplicaSet), DaemonSet or StatefulSet is
//! restarted by rolling out its workload with a pod-template annotation; a pod of a ReplicaSet
//! without an owner, or of a ReplicationController, is deleted and re-created by it.
//!
//! The rollout patch sets, on the pod template,
//! - `wasmop.dev/restartedAt`: now (RFC 3339), which changes the template and rolls the pods;
//! - `wasmop.dev/restart-config`: the hash of the desired state it restarts for, so the new
//!   pods (and the workload) are known to be restarted for it and never restarted again for
//!   the same change, even after the operator restarts mid-way;
//! - `wasmop.dev/restarted-by`: the policy.
//!
//! It is a strategic-merge patch carrying the `resourceVersion` read just before, so a
//! concurrent change fails with 409 Conflict; the workload is then read again and the patch
//! retried (upstream retries on conflict, 429, 503 and timeouts). A ReplicaSet or
//! ReplicationController gets the same annotations before its pod is deleted (its template
//! change restarts nothing), so the pods it re-creates carry the hash too.
//!
//! Every write goes through [`Writer`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::{NamespaceResourceScope, Resource as _};
use kube::api::Patch;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::annotations::{
    GATEWAY_CONFIG_ANNOTATION, RESTART_CONFIG_ANNOTATION, RESTARTED_AT_ANNOTATION,
    RESTARTED_BY_ANNOTATION,
};
use super::plan::{self, PodSetKind, WorkloadKind};
use wasmop_kernel::gate::{WriteError, Writer};

/// Attempts of one rollout patch (conflicts and transient errors are retried).
pub(crate) const PATCH_ATTEMPTS: u32 = 5;

/// A workload or pod set, by kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// Its kind.
    pub kind: OwnerKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// The kinds wasmop restarts through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OwnerKind {
    /// Rolled out.
    Workload(WorkloadKind),
    /// Its pods are deleted.
    PodSet(PodSetKind),
}

impl OwnerKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            OwnerKind::Workload(k) => k.as_str(),
            OwnerKind::PodSet(k) => k.as_str(),
        }
    }

    /// Its `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            OwnerKind::PodSet(PodSetKind::ReplicationController) => "v1",
            _ => "apps/v1",
        }
    }
}

impl Owner {
    /// A target key for `plan::Chunk`: `Kind/namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.kind.as_str(), self.namespace, self.name)
    }

    /// A reference for Events.
    pub fn object_ref(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(self.kind.api_version().into()),
            kind: Some(self.kind.as_str().into()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            ..Default::default()
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// What a ReplicaSet's own owner says about restarting its pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReplicaSetOwner {
    /// The ReplicaSet does not exist (upstream: the "OwnerReferences was not found" warning).
    Missing,
    /// Controlled by this Deployment: roll it out.
    Deployment(String),
    /// No owner: delete the pod (the ReplicaSet re-creates it).
    Unowned,
    /// Owned by another kind (e.g. an Argo Rollout): a manual restart.
    Other(String),
}

/// What a restart-relevant owner says before it is restarted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Inspection {
    /// It carries `wasmop.dev/restart-exclude: "true"` on its metadata.
    pub excluded: bool,
    /// Its pod template already carries the marker value: restarted for this change.
    pub restarted_for: bool,
    /// Its resourceVersion, for the patch's precondition.
    pub resource_version: Option<String>,
}

/// How a rollout ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rollout {
    /// Patched.
    Restarted,
    /// Someone restarted it for the same change meanwhile.
    AlreadyRestarted,
    /// It became excluded meanwhile.
    Excluded,
    /// It is gone.
    NotFound,
}

/// The annotations a rollout puts on a pod template.
#[derive(Clone, Debug)]
pub(crate) struct Marker {
    /// The annotation holding the hash (`wasmop.dev/restart-config`, or
    /// `wasmop.dev/gateway-config` for the gateway).
    pub key: &'static str,
    /// The hash of the desired state.
    pub hash: String,
    /// The policy's name.
    pub policy: String,
}

impl Marker {
    /// The marker of a sidecar restart for desired-state hash `hash`.
    pub fn sidecars(hash: &str, policy: &str) -> Self {
        Self {
            key: RESTART_CONFIG_ANNOTATION,
            hash: hash.to_owned(),
            policy: policy.to_owned(),
        }
    }

    /// The marker of a gateway restart for settings hash `hash`.
    pub fn gateway(hash: &str, policy: &str) -> Self {
        Self {
            key: GATEWAY_CONFIG_ANNOTATION,
            hash: hash.to_owned(),
            policy: policy.to_owned(),
        }
    }

    /// The strategic-merge patch body for a workload at `resource_version`.
    pub fn patch(&self, resource_version: Option<&str>, now: Timestamp) -> serde_json::Value {
        json!({
            "metadata": {"resourceVersion": resource_version},
            "spec": {"template": {"metadata": {"annotations": {
                RESTARTED_AT_ANNOTATION: format!("{now:.0}"),
                self.key: self.hash,
                RESTARTED_BY_ANNOTATION: self.policy,
            }}}}
        })
    }
}

/// Reads and restarts owners for one reconcile (ReplicaSet lookups are cached for its length).
pub(crate) struct Owners<'a> {
    client: Client,
    writer: &'a Writer,
    replica_sets: HashMap<(String, String), ReplicaSetOwner>,
}

/// Whether an API error is worth retrying (upstream: conflict, 429, 503, timeouts).
fn transient(e: &WriteError) -> bool {
    matches!(e.status_code(), Some(409 | 429 | 500 | 503 | 504))
        || matches!(e, WriteError::Kube(kube::Error::HyperError(_)))
}

fn template_annotations(object: &impl Serialize) -> BTreeMap<String, String> {
    serde_json::to_value(object)
        .ok()
        .and_then(|v| {
            serde_json::from_value(v.pointer("/spec/template/metadata/annotations")?.clone()).ok()
        })
        .unwrap_or_default()
}

impl<'a> Owners<'a> {
    /// Owners read with `client` and written through `writer`.
    pub fn new(client: Client, writer: &'a Writer) -> Self {
        Self {
            client,
            writer,
            replica_sets: HashMap::new(),
        }
    }

    fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The owner of ReplicaSet `namespace/name` (cached for this reconcile).
    ///
    /// # Errors
    /// The API server's error other than Not Found.
    pub(crate) async fn replica_set(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<ReplicaSetOwner, kube::Error> {
        let key = (namespace.to_owned(), name.to_owned());
        if let Some(o) = self.replica_sets.get(&key) {
            return Ok(o.clone());
        }
        let owner = match self.api::<ReplicaSet>(namespace).get_opt(name).await? {
            None => ReplicaSetOwner::Missing,
            Some(rs) => match plan::controller_ref(rs.owner_references()) {
                None => ReplicaSetOwner::Unowned,
                Some(r) if r.api_version == "apps/v1" && r.kind == "Deployment" => {
                    ReplicaSetOwner::Deployment(r.name.clone())
                }
                Some(r) => ReplicaSetOwner::Other(r.kind.clone()),
            },
        };
        self.replica_sets.insert(key, owner.clone());
        Ok(owner)
    }

    /// Reads `owner`: `None` when it does not exist.
    ///
    /// # Errors
    /// The API server's error other than Not Found.
    pub(crate) async fn inspect(
        &self,
        owner: &Owner,
        marker: &Marker,
    ) -> Result<Option<Inspection>, kube::Error> {
        match owner.kind {
            OwnerKind::Workload(WorkloadKind::Deployment) => {
                self.inspect_as::<Deployment>(owner, marker).await
            }
            OwnerKind::Workload(WorkloadKind::DaemonSet) => {
                self.inspect_as::<DaemonSet>(owner, marker).await
            }
            OwnerKind::Workload(WorkloadKind::StatefulSet) => {
                self.inspect_as::<StatefulSet>(owner, marker).await
            }
            OwnerKind::PodSet(PodSetKind::ReplicaSet) => {
                self.inspect_as::<ReplicaSet>(owner, marker).await
            }
            OwnerKind::PodSet(PodSetKind::ReplicationController) => {
                self.inspect_as::<ReplicationController>(owner, marker)
                    .await
            }
        }
    }

    async fn inspect_as<K>(
        &self,
        owner: &Owner,
        marker: &Marker,
    ) -> Result<Option<Inspection>, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Serialize
            + fmt::Debug,
    {
        let Some(object) = self.api::<K>(&owner.namespace).get_opt(&owner.name).await? else {
            return Ok(None);
        };
        let template = template_annotations(&object);
        Ok(Some(Inspection {
            excluded: plan::excluded(object.annotations()),
            restarted_for: template.get(marker.key) == Some(&marker.hash),
            resource_version: object.resource_version(),
        }))
    }

    /// Puts `marker` on `owner`'s pod template, starting from `inspection`: a rollout of a
    /// workload, a template change only for a ReplicaSet or ReplicationController. Conflicts
    /// and transient errors are retried ([`PATCH_ATTEMPTS`] in all), reading the owner again.
    ///
    /// # Errors
    /// The last error when every attempt failed, or the first one that is not transient.
    pub(crate) async fn mark(
        &self,
        owner: &Owner,
        marker: &Marker,
        mut inspection: Inspection,
    ) -> Result<Rollout, WriteError> {
        let mut attempt = 1;
        loop {
            let patch = marker.patch(inspection.resource_version.as_deref(), Timestamp::now());
            let result = match owner.kind {
                OwnerKind::Workload(WorkloadKind::Deployment) => {
                    self.patch_as::<Deployment>(owner, &patch).await
                }
                OwnerKind::Workload(WorkloadKind::DaemonSet) => {
                    self.patch_as::<DaemonSet>(owner, &patch).await
                }
                OwnerKind::Workload(WorkloadKind::StatefulSet) => {
                    self.patch_as::<StatefulSet>(owner, &patch).await
                }
                OwnerKind::PodSet(PodSetKind::ReplicaSet) => {
                    self.patch_as::<ReplicaSet>(owner, &patch).await
                }
                OwnerKind::PodSet(PodSetKind::ReplicationController) => {
                    self.patch_as::<ReplicationController>(owner, &patch).await
                }
            };
            match result {
                Ok(()) => return Ok(Rollout::Restarted),
                Err(e) if e.is_not_found() => return Ok(Rollout::NotFound),
                Err(e) if transient(&e) && attempt < PATCH_ATTEMPTS => {
                    tracing::debug!(%owner, attempt, "restart patch failed, retrying: {e}");
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                    attempt += 1;
                    if e.is_conflict() {
                        inspection = match self.inspect(owner, marker).await {
                            Ok(Some(i)) => i,
                            Ok(None) => return Ok(Rollout::NotFound),
                            Err(read) => return Err(WriteError::Kube(read)),
                        };
                        if inspection.restarted_for {
                            return Ok(Rollout::AlreadyRestarted);
                        }
                        if inspection.excluded {
                            return Ok(Rollout::Excluded);
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn patch_as<K>(&self, owner: &Owner, patch: &serde_json::Value) -> Result<(), WriteError>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + fmt::Debug,
    {
        self.writer
            .patch(
                &self.api::<K>(&owner.namespace),
                &owner.name,
                &Patch::Strategic(patch),
            )
            .await
            .map(drop)
    }

    /// Deletes pod `namespace/name` (its ReplicaSet or ReplicationController re-creates it);
    /// returns whether it existed.
    ///
    /// # Errors
    /// The API server's error other than Not Found.
    pub(crate) async fn delete_pod(&self, namespace: &str, name: &str) -> Result<bool, WriteError> {
        self.writer.delete(&self.api::<Pod>(namespace), name).await
    }
}

/// The kind of a `Pod`, for Events about pods.
pub(crate) fn pod_ref(pod: &Pod) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(Pod::API_VERSION.into()),
        kind: Some(Pod::KIND.into()),
        namespace: pod.namespace(),
        name: Some(pod.name_any()),
        uid: pod.uid(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_carries_the_marker_and_the_precondition() {
        let m = Marker::sidecars("0123456789abcdef", "mesh");
        let now: Timestamp = "2026-03-01T12:00:00.123Z".parse().unwrap();
        assert_eq!(
            m.patch(Some("42"), now),
            json!({
                "metadata": {"resourceVersion": "42"},
                "spec": {"template": {"metadata": {"annotations": {
                    "wasmop.dev/restartedAt": "2026-03-01T12:00:00Z",
                    "wasmop.dev/restart-config": "0123456789abcdef",
                    "wasmop.dev/restarted-by": "mesh",
                }}}}
            })
        );
        let g = Marker::gateway("fedcba9876543210", "mesh");
        assert_eq!(
            g.patch(None, now)["spec"]["template"]["metadata"]["annotations"]["wasmop.dev/gateway-config"],
            "fedcba9876543210"
        );
    }

    #[test]
    fn template_annotations_are_read_from_any_workload() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "d"},
            "spec": {"selector": {}, "template": {"metadata": {"annotations": {"a": "b"}}}}
        }))
        .unwrap();
        assert_eq!(
            template_annotations(&d).get("a").map(String::as_str),
            Some("b")
        );
        let rc = ReplicationController::default();
        assert!(template_annotations(&rc).is_empty());
    }

    #[test]
    fn owner_keys_and_references() {
        let o = Owner {
            kind: OwnerKind::PodSet(PodSetKind::ReplicationController),
            namespace: "ns".into(),
            name: "rc".into(),
        };
        assert_eq!(o.key(), "ReplicationController/ns/rc");
        assert_eq!(o.to_string(), "ReplicationController ns/rc");
        let r = o.object_ref();
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        let d = Owner {
            kind: OwnerKind::Workload(WorkloadKind::Deployment),
            namespace: "ns".into(),
            name: "d".into(),
        };
        assert_eq!(d.object_ref().api_version.as_deref(), Some("apps/v1"));
    }

    #[test]
    fn transient_errors_are_retried() {
        let api = |code: u16| {
            WriteError::Kube(kube::Error::Api(
                kube::core::Status::failure("x", "y")
                    .with_code(code)
                    .boxed(),
            ))
        };
        assert!(transient(&api(409)));
        assert!(transient(&api(429)));
        assert!(transient(&api(503)));
        assert!(!transient(&api(403)));
        assert!(!transient(&api(422)));
        assert!(!transient(&WriteError::Passive));
    }
}
