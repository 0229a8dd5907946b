//! The clone of a subset's (or consumer's) base Deployment and the status values of
//! Deployments (docs/routing.md).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, EnvVar};
use kube::{Resource, ResourceExt};
use serde_json::Value;

use wasmop_api::dynamicenv::{ContainerOverrides, Subset};

/// Annotation on every object wasmop creates for a DynamicEnv: `<namespace>/<name>` of it.
pub const OWNER_ANNOTATION: &str = "wasmop.dev/dynamicenv";
/// Annotation naming the subset or consumer (`<namespace>/<deployment>`) an object is for.
pub const SUBSET_ANNOTATION: &str = "wasmop.dev/subset";
/// Annotation holding the digest of the object as last applied; an object whose annotation
/// matches what the plan wants is not written again.
pub const APPLIED_HASH_ANNOTATION: &str = "wasmop.dev/applied-hash";
/// Annotation upstream's users look for (upstream's `riskified.com/dynamic-environment`,
/// renamed with the API group): `<namespace>/<name>` of the DynamicEnv on every clone and
/// DestinationRule it made; on a VirtualService, the DynamicEnvs with routes in it, comma-joined
/// in the order they first routed it, `""` once the last has gone ([`with_dynamic_env`]).
pub const DYNAMIC_ENVIRONMENT_ANNOTATION: &str = "wasmop.dev/dynamic-environment";
/// Label on every clone and its pods (as upstream).
pub(crate) const DYNAMIC_ENV_LABEL: &str = "dynamic-env";

/// Status values of a resource (docs/routing.md).
pub mod status {
    /// Not known yet (no Progressing condition).
    pub(crate) const UNKNOWN: &str = "unknown";
    /// Being created.
    pub(crate) const INITIALIZING: &str = "initializing";
    /// In place and, for a Deployment, rolled out.
    pub(crate) const RUNNING: &str = "running";
    /// The rollout failed, or the object could not be made.
    pub(crate) const FAILED: &str = "failed";
    /// The object is not there.
    pub(crate) const MISSING: &str = "missing";
    /// Being changed.
    pub(crate) const UPDATING: &str = "updating";
    /// Being removed (its subset left the spec).
    pub(crate) const REMOVING: &str = "removing";
    /// The service host has no base DestinationRule with the default version: ignored.
    pub(crate) const IGNORED_MISSING_DR: &str = "ignored-missing-destination-rule";
    /// The VirtualService got no route for the subset: ignored.
    pub(crate) const IGNORED_MISSING_VS: &str = "ignored-missing-virtual-service";
}

/// Short lowercase hex sha256 of the JSON of `value` (`len` characters).
pub(crate) fn json_hash(value: &impl serde::Serialize, len: usize) -> String {
    let text = serde_json::to_string(value).unwrap_or_default();
    super::names::digest(&[&text])[..len].to_owned()
}

/// What the clone is made from.
pub struct CloneSpec<'a> {
    /// `<namespace>/<name>` of the DynamicEnv.
    pub owner: &'a str,
    /// `<namespace>/<deployment>` of the subset or consumer.
    pub subset_key: &'a str,
    /// The clone's name.
    pub name: &'a str,
    /// The DynamicEnv's version (the version label value).
    pub version: &'a str,
    /// The version label key (`--version-label`).
    pub version_label: &'a str,
    /// Labels removed from the clone's metadata (`--remove-labels`).
    pub remove_labels: &'a BTreeSet<String>,
}

/// The clone of `base` for `subset`, as the JSON object to apply (apiVersion, kind, metadata,
/// spec), with [`APPLIED_HASH_ANNOTATION`] set to the digest of the rest:
///
/// - labels: the base's metadata labels, plus `<version label>: <version>` and
///   `dynamic-env: "true"`, minus `remove_labels`;
/// - annotations: only [`OWNER_ANNOTATION`], [`SUBSET_ANNOTATION`] and the applied hash;
/// - spec: the base's, with `selector.matchLabels[<version label>] = <version>`, `replicas`
///   from the subset (1 when unset), the pod template's labels plus the version, `dynamic-env`
///   and the subset's `podLabels`, and each container override applied to the container of
///   that name: `image` and `command` replaced when set, `env` merged (existing names keep
///   their place and take the new value, new names are appended).
///
/// # Errors
/// A message for the status's deployment errors: a container override naming no container of
/// the base, or replicas below 1.
pub fn clone_deployment(
    base: &Deployment,
    subset: &Subset,
    c: &CloneSpec<'_>,
) -> Result<Value, String> {
    let replicas = subset.replicas.unwrap_or(1);
    if replicas < 1 {
        return Err(format!(
            "replicas must be at least 1 for subset {}, got {replicas}",
            c.subset_key
        ));
    }
    let mut spec = base.spec.clone().unwrap_or_default();
    spec.replicas = Some(replicas);
    spec.selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(c.version_label.to_owned(), c.version.to_owned());
    let template_meta = spec.template.metadata.get_or_insert_with(Default::default);
    let labels = template_meta.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(c.version_label.to_owned(), c.version.to_owned());
    labels.insert(DYNAMIC_ENV_LABEL.to_owned(), "true".to_owned());
    for (k, v) in subset.pod_labels.iter().flatten() {
        labels.insert(k.clone(), v.clone());
    }
    let pod = spec.template.spec.get_or_insert_with(Default::default);
    let base_name = base.name_any();
    apply_overrides(
        &mut pod.containers,
        subset.containers.as_deref(),
        "container",
        &base_name,
        c.subset_key,
    )?;
    let mut init = pod.init_containers.take().unwrap_or_default();
    apply_overrides(
        &mut init,
        subset.init_containers.as_deref(),
        "initContainer",
        &base_name,
        c.subset_key,
    )?;
    pod.init_containers = (!init.is_empty()).then_some(init);

    let mut labels = base.labels().clone();
    for l in c.remove_labels {
        labels.remove(l);
    }
    labels.insert(c.version_label.to_owned(), c.version.to_owned());
    labels.insert(DYNAMIC_ENV_LABEL.to_owned(), "true".to_owned());
    let mut annotations = BTreeMap::from([
        (OWNER_ANNOTATION.to_owned(), c.owner.to_owned()),
        (
            DYNAMIC_ENVIRONMENT_ANNOTATION.to_owned(),
            c.owner.to_owned(),
        ),
        (SUBSET_ANNOTATION.to_owned(), c.subset_key.to_owned()),
    ]);
    let mut object = serde_json::json!({
        "apiVersion": Deployment::api_version(&()),
        "kind": Deployment::kind(&()),
        "metadata": {
            "name": c.name,
            "namespace": base.namespace().unwrap_or_default(),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    });
    annotations.insert(APPLIED_HASH_ANNOTATION.to_owned(), json_hash(&object, 16));
    object["metadata"]["annotations"] = serde_json::to_value(annotations).unwrap_or_default();
    Ok(object)
}

/// The value of [`DYNAMIC_ENVIRONMENT_ANNOTATION`] on a VirtualService that had `current`, once
/// DynamicEnv `owner` (`<namespace>/<name>`) has routes in it (`routed`) or not: `owner`
/// appended when it routes and is not listed, removed when it does not; the others stay in
/// their order. An empty list is `""`, as upstream's `pkg/watches/enqueue_annotations.go`
/// leaves it.
pub fn with_dynamic_env(current: Option<&str>, owner: &str, routed: bool) -> String {
    let mut list: Vec<&str> = current
        .unwrap_or_default()
        .split(',')
        .filter(|e| !e.is_empty())
        .collect();
    if !routed {
        list.retain(|e| *e != owner);
    } else if !list.contains(&owner) {
        list.push(owner);
    }
    list.join(",")
}

fn apply_overrides(
    containers: &mut [Container],
    overrides: Option<&[ContainerOverrides]>,
    what: &str,
    base: &str,
    subset_key: &str,
) -> Result<(), String> {
    for o in overrides.into_iter().flatten() {
        let Some(c) = containers.iter_mut().find(|c| c.name == o.container_name) else {
            return Err(format!(
                "{what} {:?} of subset {subset_key} does not exist in Deployment {base}",
                o.container_name
            ));
        };
        if let Some(image) = &o.image {
            c.image = Some(image.clone());
        }
        if let Some(command) = &o.command {
            c.command = Some(command.clone());
        }
        if let Some(env) = &o.env {
            merge_env(c.env.get_or_insert_with(Vec::new), env);
        }
    }
    Ok(())
}

/// Merges `extra` into `env`: a variable of the same name takes the new value in its place,
/// new names are appended in order.
pub(crate) fn merge_env(env: &mut Vec<EnvVar>, extra: &[EnvVar]) {
    for e in extra {
        match env.iter_mut().find(|x| x.name == e.name) {
            Some(x) => *x = e.clone(),
            None => env.push(e.clone()),
        }
    }
}

/// The digest `deployment` was applied with, if wasmop made it.
pub(crate) fn applied_hash(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(APPLIED_HASH_ANNOTATION)
        .map(String::as_str)
}

/// The DynamicEnv (`<namespace>/<name>`) that made an object, if any.
pub fn owner(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(OWNER_ANNOTATION)
        .map(String::as_str)
}

/// The subset or consumer key (`<namespace>/<deployment>`) a planned object (JSON) is for.
pub(crate) fn subset_of_value(object: &Value) -> &str {
    object["metadata"]["annotations"][SUBSET_ANNOTATION]
        .as_str()
        .unwrap_or_default()
}

/// The subset or consumer key an object was made for, if any.
pub(crate) fn subset_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(SUBSET_ANNOTATION)
        .map(String::as_str)
}

/// The status value of an existing Deployment (docs/routing.md), from its newest
/// `Progressing` condition: True with reason `NewReplicaSetAvailable` is `running`, True
/// otherwise `updating` (or `initializing` while no pod is ready), False `failed`, none
/// `unknown`. Better than upstream: a spec change the Deployment controller has not observed
/// yet (`observedGeneration` below `generation`) is `updating`, not the previous `running`.
pub(crate) fn deployment_status(d: &Deployment) -> &'static str {
    let observed = d.status.as_ref().and_then(|s| s.observed_generation);
    if let (Some(generation), Some(observed)) = (d.metadata.generation, observed)
        && observed < generation
    {
        return status::UPDATING;
    }
    let Some(st) = d.status.as_ref() else {
        return status::UNKNOWN;
    };
    let newest = st
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.type_ == "Progressing")
        .max_by_key(|c| c.last_update_time.as_ref().map(|t| t.0));
    match newest {
        None => status::UNKNOWN,
        Some(c) if c.status == "True" && c.reason.as_deref() == Some("NewReplicaSetAvailable") => {
            status::RUNNING
        }
        Some(c) if c.status == "True" => {
            if st.ready_replicas.unwrap_or(0) > 0 {
                status::UPDATING
            } else {
                status::INITIALIZING
            }
        }
        Some(_) => status::FAILED,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_virtual_service_annotation_lists_the_dynamic_envs_routing_it_as_upstream() {
        use super::with_dynamic_env as w;
        assert_eq!(w(None, "default/a", true), "default/a");
        assert_eq!(w(Some(""), "default/a", true), "default/a");
        assert_eq!(
            w(Some("default/a"), "default/b", true),
            "default/a,default/b"
        );
        assert_eq!(
            w(Some("default/a,default/b"), "default/a", true),
            "default/a,default/b"
        );
        assert_eq!(
            w(Some("default/a,default/b"), "default/a", false),
            "default/b"
        );
        assert_eq!(w(Some("default/a"), "default/a", false), "");
        assert_eq!(w(None, "default/a", false), "");
    }

    use super::*;
    use serde_json::json;

    fn base() -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "reviews", "namespace": "default",
                         "labels": {"app": "reviews", "argocd": "x"},
                         "annotations": {"deployment.kubernetes.io/revision": "3"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "reviews"}},
                "template": {
                    "metadata": {"labels": {"app": "reviews", "version": "shared"}},
                    "spec": {
                        "initContainers": [{"name": "init", "image": "init:1"}],
                        "containers": [
                            {"name": "app", "image": "reviews:1", "command": ["run"],
                             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                            {"name": "sidecar", "image": "side:1"}
                        ]
                    }
                }
            },
            "status": {"replicas": 3}
        }))
        .unwrap()
    }

    fn spec<'a>(remove: &'a BTreeSet<String>) -> CloneSpec<'a> {
        CloneSpec {
            owner: "default/sample",
            subset_key: "default/reviews",
            name: "reviews-default-sample-12345678",
            version: "default-sample-abcdef01",
            version_label: "version",
            remove_labels: remove,
        }
    }

    #[test]
    fn the_clone_is_the_base_with_the_overrides() {
        let subset: Subset = serde_json::from_value(json!({
            "name": "reviews", "namespace": "default", "podLabels": {"team": "a"},
            "containers": [{"containerName": "app", "image": "reviews:2",
                            "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}]}],
            "initContainers": [{"containerName": "init", "command": ["setup"]}]
        }))
        .unwrap();
        let remove = BTreeSet::from(["argocd".to_owned()]);
        let clone = clone_deployment(&base(), &subset, &spec(&remove)).unwrap();
        let meta = &clone["metadata"];
        assert_eq!(meta["name"], "reviews-default-sample-12345678");
        assert_eq!(
            meta["labels"],
            json!({"app": "reviews", "version": "default-sample-abcdef01", "dynamic-env": "true"})
        );
        let annotations = meta["annotations"].as_object().unwrap();
        assert_eq!(annotations[OWNER_ANNOTATION], "default/sample");
        assert_eq!(
            annotations[DYNAMIC_ENVIRONMENT_ANNOTATION],
            "default/sample"
        );
        assert_eq!(annotations[SUBSET_ANNOTATION], "default/reviews");
        assert_eq!(
            annotations[APPLIED_HASH_ANNOTATION].as_str().unwrap().len(),
            16
        );
        assert_eq!(
            annotations.len(),
            4,
            "the base's annotations are not copied"
        );
        let s = &clone["spec"];
        assert_eq!(s["replicas"], 1);
        assert_eq!(
            s["selector"]["matchLabels"],
            json!({"app": "reviews", "version": "default-sample-abcdef01"})
        );
        assert_eq!(
            s["template"]["metadata"]["labels"],
            json!({"app": "reviews", "version": "default-sample-abcdef01", "dynamic-env": "true", "team": "a"})
        );
        let app = &s["template"]["spec"]["containers"][0];
        assert_eq!(app["image"], "reviews:2");
        assert_eq!(app["command"], json!(["run"]));
        assert_eq!(
            app["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}])
        );
        assert_eq!(s["template"]["spec"]["containers"][1]["image"], "side:1");
        assert_eq!(
            s["template"]["spec"]["initContainers"][0]["command"],
            json!(["setup"])
        );
        assert!(clone.get("status").is_none());
    }

    #[test]
    fn the_applied_hash_follows_the_subset_and_the_base() {
        let remove = BTreeSet::new();
        let mut subset: Subset = serde_json::from_value(json!({
            "name": "reviews", "namespace": "default", "containers": [{"containerName": "app", "image": "reviews:2"}]
        }))
        .unwrap();
        let hash = |b: &Deployment, s: &Subset| {
            clone_deployment(b, s, &spec(&remove)).unwrap()["metadata"]["annotations"]
                [APPLIED_HASH_ANNOTATION]
                .clone()
        };
        let first = hash(&base(), &subset);
        assert_eq!(hash(&base(), &subset), first, "stable");
        let mut changed_base = base();
        changed_base
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[1]
            .image = Some("side:2".into());
        assert_ne!(
            hash(&changed_base, &subset),
            first,
            "a base change changes the clone"
        );
        subset.containers.as_mut().unwrap()[0].image = Some("reviews:3".into());
        assert_ne!(hash(&base(), &subset), first);
    }

    #[test]
    fn unknown_containers_and_bad_replicas_are_errors() {
        let remove = BTreeSet::new();
        let subset: Subset = serde_json::from_value(json!({
            "name": "reviews", "namespace": "default", "containers": [{"containerName": "nope"}]
        }))
        .unwrap();
        let e = clone_deployment(&base(), &subset, &spec(&remove)).unwrap_err();
        assert_eq!(
            e,
            "container \"nope\" of subset default/reviews does not exist in Deployment reviews"
        );
        let subset: Subset = serde_json::from_value(json!({
            "name": "reviews", "namespace": "default", "replicas": -1, "containers": [{"containerName": "app"}]
        }))
        .unwrap();
        assert!(
            clone_deployment(&base(), &subset, &spec(&remove))
                .unwrap_err()
                .contains("replicas must be at least 1")
        );
    }

    #[test]
    fn deployment_status_values() {
        let with = |status: Value, generation: i64| -> Deployment {
            serde_json::from_value(
                json!({"metadata": {"name": "d", "generation": generation}, "status": status}),
            )
            .unwrap()
        };
        let cond = |status: &str, reason: &str, t: &str| json!({"type": "Progressing", "status": status, "reason": reason, "lastUpdateTime": t});
        assert_eq!(deployment_status(&with(json!({}), 1)), status::UNKNOWN);
        assert_eq!(
            deployment_status(&with(
                json!({"observedGeneration": 1, "conditions": [cond("True", "NewReplicaSetAvailable", "2026-01-01T00:00:00Z")]}),
                1
            )),
            status::RUNNING
        );
        assert_eq!(
            deployment_status(&with(
                json!({"observedGeneration": 1, "conditions": [cond("True", "NewReplicaSetAvailable", "2026-01-01T00:00:00Z")]}),
                2
            )),
            status::UPDATING,
            "a change not observed yet"
        );
        assert_eq!(
            deployment_status(&with(
                json!({"observedGeneration": 2, "conditions": [
                    cond("True", "NewReplicaSetAvailable", "2026-01-01T00:00:00Z"),
                    cond("True", "ReplicaSetUpdated", "2026-01-01T00:01:00Z")]}),
                2
            )),
            status::INITIALIZING,
            "the newest condition counts; no pod ready yet"
        );
        assert_eq!(
            deployment_status(&with(
                json!({"observedGeneration": 2, "readyReplicas": 1, "conditions": [cond("True", "ReplicaSetUpdated", "2026-01-01T00:01:00Z")]}),
                2
            )),
            status::UPDATING
        );
        assert_eq!(
            deployment_status(&with(
                json!({"conditions": [cond("False", "ProgressDeadlineExceeded", "2026-01-01T00:01:00Z")]}),
                2
            )),
            status::FAILED
        );
    }
}
