//! The scaled workload and its autoscaler, reached through the `scale` subresource (Deployment,
//! StatefulSet, Argo Rollout) and annotations (KEDA `ScaledObject`).
//!
//! Rollouts and ScaledObjects are found through discovery at the time of use, so wasmop runs
//! where Argo Rollouts or KEDA are not installed; using them there is a clear error in the
//! ElasticService's status instead of a failed watch.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::api::Patch;
use kube::core::GroupVersionKind;
use kube::{Api, Client, CustomResource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::error::Error;
use wasmop_api::elasticservice::{AutoscalerRef, ScaleTargetRef};
use wasmop_kernel::gate::Writer;

/// The handle wasmop uses for Argo Rollouts (`argoproj.io/v1alpha1`): only `/scale` and merge
/// patches go through it, so no field of a Rollout is ever lost.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize)]
#[kube(
    group = "argoproj.io",
    version = "v1alpha1",
    kind = "Rollout",
    namespaced,
    schema = "disabled"
)]
pub(crate) struct RolloutSpec {
    /// Desired replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

/// The handle wasmop uses for KEDA `ScaledObject`s (`keda.sh/v1alpha1`): only their
/// annotations are patched.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize)]
#[kube(
    group = "keda.sh",
    version = "v1alpha1",
    kind = "ScaledObject",
    namespaced,
    schema = "disabled"
)]
pub(crate) struct ScaledObjectSpec {}

/// KEDA's annotation that pauses a ScaledObject.
pub(crate) const KEDA_PAUSED: &str = "autoscaling.keda.sh/paused";
/// KEDA's annotation with the replica count a paused ScaledObject holds.
pub(crate) const KEDA_PAUSED_REPLICAS: &str = "autoscaling.keda.sh/paused-replicas";

/// The kinds of workload an ElasticService scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `argoproj.io/v1alpha1` Rollout.
    Rollout,
}

impl Kind {
    /// Reads `scaleTargetRef`, accepting upstream's lowercase plural kinds.
    ///
    /// # Errors
    /// Any other API version or kind (the CRD's CEL rule normally refuses them first).
    pub fn of(r: &ScaleTargetRef) -> Result<Self, String> {
        match (r.api_version.as_str(), r.kind.as_str()) {
            ("apps/v1", "Deployment" | "deployments" | "deployment") => Ok(Kind::Deployment),
            ("apps/v1", "StatefulSet" | "statefulsets" | "statefulset") => Ok(Kind::StatefulSet),
            ("argoproj.io/v1alpha1", "Rollout" | "rollouts" | "rollout") => Ok(Kind::Rollout),
            (v, k) => Err(format!(
                "scaleTargetRef {v} {k} is not supported: use apps/v1 Deployment or StatefulSet, or argoproj.io/v1alpha1 Rollout"
            )),
        }
    }

    /// The kind's name, e.g. `Deployment`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::Rollout => "Rollout",
        }
    }
}

/// A workload of one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Its kind.
    pub kind: Kind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// Whether the API of `gvk` is served (discovery): `false` when the API server does not know
/// the group, version or kind.
///
/// # Errors
/// [`Error::Read`] when discovery itself fails (so an unreachable API server is not reported
/// as a missing API).
async fn served(client: &Client, gvk: &GroupVersionKind) -> Result<bool, Error> {
    use kube::error::DiscoveryError as D;
    match kube::discovery::pinned_kind(client, gvk).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(kube::Error::Discovery(
            D::MissingKind(_) | D::MissingApiGroup(_) | D::MissingResource(_),
        )) => Ok(false),
        Err(e) => Err(Error::Read(
            format!(
                "the API discovery of {}/{} {}",
                gvk.group, gvk.version, gvk.kind
            ),
            e,
        )),
    }
}

impl Target {
    /// The target of `r` in `namespace`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unsupported kind.
    pub fn new(r: &ScaleTargetRef, namespace: &str) -> Result<Self, Error> {
        Ok(Self {
            kind: Kind::of(r).map_err(Error::Invalid)?,
            namespace: namespace.to_owned(),
            name: r.name.clone(),
        })
    }

    /// The desired replicas (`spec.replicas` of its `scale`), or `None` when the workload does
    /// not exist.
    ///
    /// # Errors
    /// [`Error::Invalid`] when the Rollout API is not installed; [`Error::Read`] otherwise.
    pub async fn replicas(&self, client: &Client) -> Result<Option<i32>, Error> {
        let scale = match self.kind {
            Kind::Deployment => self.api::<Deployment>(client).get_scale(&self.name).await,
            Kind::StatefulSet => self.api::<StatefulSet>(client).get_scale(&self.name).await,
            Kind::Rollout => {
                let gvk = GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout");
                if !served(client, &gvk).await? {
                    return Err(Error::Invalid(
                        "scaleTargetRef is an Argo Rollout, but the API argoproj.io/v1alpha1 Rollout is not installed in the cluster; install Argo Rollouts or point scaleTargetRef at a Deployment or StatefulSet".into(),
                    ));
                }
                self.api::<Rollout>(client).get_scale(&self.name).await
            }
        };
        match scale {
            Ok(s) => Ok(Some(s.spec.and_then(|s| s.replicas).unwrap_or(0))),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(Error::Read(format!("the scale of {self}"), e)),
        }
    }

    /// Sets the desired replicas through the `scale` subresource.
    ///
    /// # Errors
    /// [`Error::Write`].
    pub(crate) async fn set_replicas(
        &self,
        client: &Client,
        writer: &Writer,
        replicas: i32,
    ) -> Result<(), Error> {
        let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
        match self.kind {
            Kind::Deployment => {
                writer
                    .patch_scale(&self.api::<Deployment>(client), &self.name, &patch)
                    .await?;
            }
            Kind::StatefulSet => {
                writer
                    .patch_scale(&self.api::<StatefulSet>(client), &self.name, &patch)
                    .await?;
            }
            Kind::Rollout => {
                writer
                    .patch_scale(&self.api::<Rollout>(client), &self.name, &patch)
                    .await?;
            }
        }
        Ok(())
    }

    fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(client.clone(), &self.namespace)
    }
}

/// Whether scaling from `current` desired replicas to `desired` changes anything: not when they
/// are equal, nor when scaling up and the workload already has more (e.g. its HPA scaled it
/// out), as upstream's `Scale()`.
pub(crate) fn needs_scale(current: i32, desired: i32) -> bool {
    current != desired && !(desired > 0 && current > desired)
}

/// wasmop's mark on a KEDA ScaledObject it paused, so that it resumes only what it paused
/// and leaves a pause set by someone else alone.
pub(crate) const PAUSED_BY_WASMOP: &str = "wasmop.dev/paused-keda";

/// The merge patch that pauses KEDA at zero replicas (`paused: "true"`,
/// `paused-replicas: "0"`), as upstream before a scale-down, with wasmop's mark.
pub(crate) fn keda_pause_patch() -> serde_json::Value {
    json!({"metadata": {"annotations": {
        KEDA_PAUSED: "true", KEDA_PAUSED_REPLICAS: "0", PAUSED_BY_WASMOP: "true"}}})
}

/// The merge patch that resumes KEDA (`paused: "false"`, `paused-replicas` and wasmop's mark
/// removed), as upstream before a scale-up and on deletion.
pub(crate) fn keda_resume_patch() -> serde_json::Value {
    json!({"metadata": {"annotations": {
        KEDA_PAUSED: "false", KEDA_PAUSED_REPLICAS: null, PAUSED_BY_WASMOP: null}}})
}

/// What [`set_keda_paused`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keda {
    /// No KEDA autoscaler named (none, or an HPA).
    None,
    /// The ScaledObject was already as wanted: nothing written.
    Unchanged,
    /// Paused or resumed.
    Patched,
    /// Paused by someone else (no wasmop mark): left paused.
    PausedElsewhere,
}

/// What to do with a ScaledObject whose annotations are `annotations` when wasmop wants it
/// paused (`pause`) or running: a patch only when its pause differs from what wasmop wants,
/// and a resume only of a pause wasmop made.
pub(crate) fn keda_action(annotations: &BTreeMap<String, String>, pause: bool) -> Keda {
    let paused = annotations.get(KEDA_PAUSED).is_some_and(|v| v == "true");
    let ours = annotations.contains_key(PAUSED_BY_WASMOP);
    match (pause, paused, ours) {
        (true, false, _) | (false, true, true) => Keda::Patched,
        (true, true, false) | (false, true, false) => Keda::PausedElsewhere,
        (true, true, true) | (false, false, _) => Keda::Unchanged,
    }
}

/// Pauses (`pause`) or resumes the KEDA ScaledObject named by `autoscaler` in `namespace`,
/// when its pause differs from that and (to resume) wasmop paused it ([`keda_action`]);
/// nothing for an `hpa` autoscaler (an HPA ignores a workload at zero). Called only when the
/// workload is scaled, so it reads the ScaledObject then and never at steady state.
///
/// # Errors
/// [`Error::Invalid`] when the KEDA API is not installed or the ScaledObject does not exist;
/// [`Error::Read`] or [`Error::Write`] when reading or patching it fails.
pub(crate) async fn set_keda_paused(
    client: &Client,
    writer: &Writer,
    namespace: &str,
    autoscaler: Option<&AutoscalerRef>,
    pause: bool,
) -> Result<Keda, Error> {
    let Some(a) = autoscaler.filter(|a| a.type_ == "keda") else {
        return Ok(Keda::None);
    };
    let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject");
    if !served(client, &gvk).await? {
        return Err(Error::Invalid(
            "autoscaler is keda, but the API keda.sh/v1alpha1 ScaledObject is not installed in the cluster; install KEDA or remove spec.autoscaler".into(),
        ));
    }
    let api: Api<ScaledObject> = Api::namespaced(client.clone(), namespace);
    let missing = || {
        Error::Invalid(format!(
            "autoscaler: KEDA ScaledObject {namespace}/{} does not exist",
            a.name
        ))
    };
    let current = api
        .get_opt(&a.name)
        .await
        .map_err(|e| Error::Read(format!("KEDA ScaledObject {namespace}/{}", a.name), e))?
        .ok_or_else(missing)?;
    let action = keda_action(current.annotations(), pause);
    if action != Keda::Patched {
        return Ok(action);
    }
    let patch = if pause {
        keda_pause_patch()
    } else {
        keda_resume_patch()
    };
    match writer.patch(&api, &a.name, &Patch::Merge(&patch)).await {
        Ok(_) => Ok(Keda::Patched),
        Err(e) if e.is_not_found() => Err(missing()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::client_answering;

    fn r(api_version: &str, kind: &str) -> ScaleTargetRef {
        ScaleTargetRef {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "w".into(),
        }
    }

    #[test]
    fn kinds_and_upstream_spellings() {
        assert_eq!(Kind::of(&r("apps/v1", "Deployment")), Ok(Kind::Deployment));
        assert_eq!(Kind::of(&r("apps/v1", "deployments")), Ok(Kind::Deployment));
        assert_eq!(
            Kind::of(&r("apps/v1", "StatefulSet")),
            Ok(Kind::StatefulSet)
        );
        assert_eq!(
            Kind::of(&r("argoproj.io/v1alpha1", "rollouts")),
            Ok(Kind::Rollout)
        );
        assert!(
            Kind::of(&r("apps/v1", "Rollout"))
                .unwrap_err()
                .contains("apps/v1 Rollout is not supported")
        );
    }

    #[test]
    fn scaling_is_skipped_when_it_changes_nothing() {
        assert!(needs_scale(0, 1));
        assert!(needs_scale(3, 0));
        assert!(!needs_scale(1, 1));
        assert!(!needs_scale(0, 0));
        assert!(
            !needs_scale(5, 2),
            "an autoscaler's larger count is kept on scale-up"
        );
        assert!(needs_scale(1, 2));
    }

    #[tokio::test]
    async fn a_missing_rollout_or_keda_api_is_a_clear_error() {
        let rollout = Target {
            kind: Kind::Rollout,
            namespace: "shop".into(),
            name: "web".into(),
        };
        let e = rollout.replicas(&client_answering(404)).await.unwrap_err();
        assert!(
            matches!(&e, Error::Invalid(m) if m.starts_with("scaleTargetRef is an Argo Rollout, but the API argoproj.io/v1alpha1 Rollout is not installed")),
            "{e}"
        );
        // An API server that fails is not taken for a missing API.
        let e = rollout.replicas(&client_answering(500)).await.unwrap_err();
        assert!(
            matches!(&e, Error::Read(what, _) if what.contains("discovery")),
            "{e}"
        );

        let client = client_answering(404);
        let writer = Writer::new(
            wasmop_kernel::gate::WriteGate::new(true),
            client.clone(),
            kube::runtime::events::Reporter {
                controller: "test".into(),
                instance: None,
            },
        );
        let keda = AutoscalerRef {
            type_: "keda".into(),
            name: "web".into(),
        };
        let e = set_keda_paused(&client, &writer, "shop", Some(&keda), true)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, Error::Invalid(m) if m.contains("keda.sh/v1alpha1 ScaledObject is not installed")),
            "{e}"
        );
        let hpa = AutoscalerRef {
            type_: "hpa".into(),
            name: "web".into(),
        };
        assert_eq!(
            set_keda_paused(&client, &writer, "shop", Some(&hpa), true)
                .await
                .unwrap(),
            Keda::None,
            "nothing to do for an HPA"
        );
    }

    #[test]
    fn keda_annotations_as_upstream() {
        assert_eq!(
            keda_pause_patch(),
            json!({"metadata": {"annotations": {
                "autoscaling.keda.sh/paused": "true",
                "autoscaling.keda.sh/paused-replicas": "0",
                "wasmop.dev/paused-keda": "true"}}})
        );
        assert_eq!(
            keda_resume_patch(),
            json!({"metadata": {"annotations": {
                "autoscaling.keda.sh/paused": "false",
                "autoscaling.keda.sh/paused-replicas": null,
                "wasmop.dev/paused-keda": null}}})
        );
    }

    /// KEDA is patched only when its pause differs from what wasmop wants, and resumed only
    /// from a pause wasmop made.
    #[test]
    fn keda_is_patched_only_to_change_it_and_resumed_only_from_wasmops_pause() {
        let a = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let running = a(&[]);
        let resumed = a(&[(KEDA_PAUSED, "false")]);
        let ours = a(&[(KEDA_PAUSED, "true"), (PAUSED_BY_WASMOP, "true")]);
        let theirs = a(&[(KEDA_PAUSED, "true")]);
        assert_eq!(keda_action(&running, true), Keda::Patched);
        assert_eq!(keda_action(&resumed, true), Keda::Patched);
        assert_eq!(keda_action(&ours, true), Keda::Unchanged);
        assert_eq!(keda_action(&theirs, true), Keda::PausedElsewhere);
        assert_eq!(keda_action(&running, false), Keda::Unchanged);
        assert_eq!(keda_action(&resumed, false), Keda::Unchanged);
        assert_eq!(keda_action(&ours, false), Keda::Patched);
        assert_eq!(keda_action(&theirs, false), Keda::PausedElsewhere);
    }
}
