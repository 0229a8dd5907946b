//! `wasmop migrate -f FILE`: rewrites upstream manifests for wasmop (docs/migrating.md).
//!
//! - Riskified Dynamic Environment's `DynamicEnv` (`riskified.com/v1alpha1`): the API group
//!   becomes `wasmop.dev`, in the apiVersion and in label and annotation keys; the spec is
//!   the same.
//! - KubeElasti's `ElastiService` (`elasti.truefoundry.com/v1alpha1`): an `ElasticService` of
//!   `wasmop.dev/v1alpha1` with the same spec; upstream's lowercase plural target kinds
//!   (`deployments`, `rollouts`) are written as kinds.
//!
//! Both lose what the API server or the old operator wrote (status, `resourceVersion`, `uid`,
//! `managedFields`, finalizers, `last-applied-configuration`, ...), so the output applies to a
//! cluster as new objects. Other documents are copied as they are. Each result is checked
//! against wasmop's own types before it is printed.

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use serde::Deserialize as _;
use serde_json::{Map, Value};
use wasmop_api::dynamicenv::DynamicEnv;
use wasmop_api::elasticservice::ElasticService;

/// Options of `wasmop migrate`.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct MigrateOptions {
    /// YAML (or JSON) file of manifests, several documents and `List`s allowed; `-` for
    /// standard input. The result goes to standard output, what changed to standard error.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
}

const UPSTREAM_ROUTING: &str = "riskified.com";
const UPSTREAM_SCALING: &str = "elasti.truefoundry.com";
const GROUP: &str = "wasmop.dev";

/// What the API server or the old operator wrote into metadata.
const SERVER_FIELDS: [&str; 9] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "finalizers",
];

/// `riskified.com/x` keys of a label or annotation map renamed `wasmop.dev/x`.
fn rename_keys(map: &mut Value, changes: &mut Vec<String>, what: &str) {
    let Some(m) = map.as_object_mut() else {
        return;
    };
    let renamed: Map<String, Value> = std::mem::take(m)
        .into_iter()
        .map(
            |(k, v)| match k.strip_prefix(&format!("{UPSTREAM_ROUTING}/")) {
                Some(rest) => {
                    let new = format!("{GROUP}/{rest}");
                    changes.push(format!("{what} {k} → {new}"));
                    (new, v)
                }
                None => (k, v),
            },
        )
        .collect();
    *m = renamed;
}

fn strip_server_fields(doc: &mut Value) {
    if let Some(obj) = doc.as_object_mut() {
        obj.remove("status");
    }
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SERVER_FIELDS {
            meta.remove(f);
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
    }
}

/// One document migrated: `Ok(Some(changes))` when it was an upstream object, `Ok(None)` when
/// it is left as it is.
///
/// # Errors
/// An upstream object that is not a valid wasmop object once migrated.
fn migrate_doc(doc: &mut Value) -> anyhow::Result<Option<Vec<String>>> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let version = api_version.split_once('/').map_or("", |(_, v)| v);
    let mut changes = Vec::new();
    match (group, kind.as_str()) {
        (UPSTREAM_ROUTING, "DynamicEnv") => {
            doc["apiVersion"] = Value::String(format!("{GROUP}/{version}"));
            changes.push(format!("apiVersion {api_version} → {GROUP}/{version}"));
            for what in ["labels", "annotations"] {
                if let Some(map) = doc["metadata"].get_mut(what) {
                    rename_keys(map, &mut changes, &what[..what.len() - 1]);
                }
            }
            strip_server_fields(doc);
            serde_json::from_value::<DynamicEnv>(doc.clone())
                .context("not a valid wasmop DynamicEnv once migrated")?;
        }
        (UPSTREAM_SCALING, "ElastiService") => {
            doc["apiVersion"] = Value::String(format!("{GROUP}/{version}"));
            doc["kind"] = Value::String("ElasticService".into());
            changes.push(format!(
                "{api_version} ElastiService → {GROUP}/{version} ElasticService"
            ));
            let target = &mut doc["spec"]["scaleTargetRef"]["kind"];
            let canonical = match target.as_str() {
                Some("deployments") => Some("Deployment"),
                Some("rollouts") => Some("Rollout"),
                _ => None,
            };
            if let Some(k) = canonical {
                changes.push(format!("scaleTargetRef.kind {target} → {k}"));
                *target = Value::String(k.into());
            }
            if doc["spec"].get("minTargetReplicas").is_none() {
                changes.push(
                    "minTargetReplicas is not set: wasmop scales up to 1 (KubeElasti's \
                     omitted value was 0); set it to keep another count"
                        .into(),
                );
            }
            strip_server_fields(doc);
            serde_json::from_value::<ElasticService>(doc.clone())
                .context("not a valid wasmop ElasticService once migrated")?;
        }
        _ => return Ok(None),
    }
    Ok(Some(changes))
}

/// `text` (YAML or JSON documents) migrated: the YAML to print and, per migrated object, a
/// line of what changed.
///
/// # Errors
/// A document that is not YAML, or an upstream object that is not valid once migrated, named
/// by its index (from 0) and `kind namespace/name`.
pub(crate) fn migrate_text(text: &str) -> anyhow::Result<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let mut doc = Value::deserialize(de).with_context(|| format!("document {i}: not YAML"))?;
        if doc.is_null() {
            continue;
        }
        let mut items: Vec<&mut Value> = if doc["kind"] == "List" {
            doc["items"]
                .as_array_mut()
                .map(|a| a.iter_mut().collect())
                .unwrap_or_default()
        } else {
            vec![&mut doc]
        };
        for item in &mut items {
            let id = format!(
                "{} {}/{}",
                item["kind"].as_str().unwrap_or("?"),
                item["metadata"]["namespace"].as_str().unwrap_or("default"),
                item["metadata"]["name"].as_str().unwrap_or("?")
            );
            if let Some(changes) =
                migrate_doc(item).with_context(|| format!("document {i} ({id})"))?
            {
                notes.push(format!("document {i}, {id}: {}", changes.join("; ")));
            }
        }
        out.push(wasmop_kernel::yaml::to_string(&doc));
    }
    if out.is_empty() {
        bail!("no document in the input");
    }
    Ok((format!("---\n{}", out.join("---\n")), notes))
}

/// `wasmop migrate`: prints `opts.file` migrated, and what changed on stderr.
///
/// # Errors
/// An unreadable file, or what [`migrate_text`] refuses.
pub(crate) fn migrate(opts: &MigrateOptions) -> anyhow::Result<()> {
    let text = if opts.file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read standard input")?;
        s
    } else {
        std::fs::read_to_string(&opts.file)
            .with_context(|| format!("cannot read {}", opts.file.display()))?
    };
    let (yaml, notes) = migrate_text(&text)?;
    for n in &notes {
        eprintln!("migrated {n}");
    }
    if notes.is_empty() {
        eprintln!("nothing to migrate: no riskified.com DynamicEnv or KubeElasti ElastiService");
    }
    print!("{yaml}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_objects_become_wasmops_and_others_stay() {
        let input = r#"
apiVersion: riskified.com/v1alpha1
kind: DynamicEnv
metadata:
  name: jason
  namespace: default
  resourceVersion: "42"
  uid: 0a
  finalizers: [riskified.com/dynamic-environment-cleanup]
  annotations:
    riskified.com/owner: team-a
    note: "yes"
spec:
  istioMatches:
  - headers:
      end-user: {prefix: jason}
  subsets:
  - name: details
    namespace: bookinfo
    containers:
    - containerName: details
      image: details:v2
      env: [{name: ENABLED, value: "on"}]
status:
  state: ready
---
apiVersion: elasti.truefoundry.com/v1alpha1
kind: ElastiService
metadata: {name: api, namespace: shop}
spec:
  service: api
  cooldownPeriod: 300
  scaleTargetRef: {apiVersion: apps/v1, kind: deployments, name: api}
  triggers:
  - type: prometheus
    metadata: {query: "sum(rate(x[1m]))", serverAddress: "http://prometheus:9090", threshold: "0.5"}
  autoscaler: {type: keda, name: api}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec:
  selector: {app: api}
"#;
        let (yaml, notes) = migrate_text(input).unwrap();
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&yaml)
            .map(|d| Value::deserialize(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 3, "{yaml}");

        let de = &docs[0];
        assert_eq!(de["apiVersion"], "wasmop.dev/v1alpha1");
        assert_eq!(de["metadata"]["annotations"]["wasmop.dev/owner"], "team-a");
        assert_eq!(de["metadata"]["annotations"]["note"], "yes");
        assert!(de.get("status").is_none());
        for gone in ["resourceVersion", "uid", "finalizers"] {
            assert!(de["metadata"].get(gone).is_none(), "{gone}");
        }
        assert_eq!(
            de["spec"]["subsets"][0]["containers"][0]["env"][0]["value"], "on",
            "a string kubectl reads as a string"
        );
        let typed: DynamicEnv = serde_json::from_value(de.clone()).unwrap();
        assert_eq!(typed.spec.subsets[0].name, "details");

        let es = &docs[1];
        assert_eq!(es["apiVersion"], "wasmop.dev/v1alpha1");
        assert_eq!(es["kind"], "ElasticService");
        assert_eq!(es["spec"]["scaleTargetRef"]["kind"], "Deployment");
        assert_eq!(es["spec"]["triggers"][0]["metadata"]["threshold"], "0.5");
        let typed: ElasticService = serde_json::from_value(es.clone()).unwrap();
        assert_eq!(typed.spec.cooldown_period, 300);

        let input_docs: Vec<Value> = serde_yaml::Deserializer::from_str(input)
            .map(|d| Value::deserialize(d).unwrap())
            .collect();
        assert_eq!(docs[2], input_docs[2], "a Service is copied as it is");

        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("DynamicEnv default/jason"), "{notes:?}");
        assert!(
            notes[1].contains("minTargetReplicas is not set"),
            "{notes:?}"
        );
    }

    #[test]
    fn an_upstream_object_that_is_not_valid_once_migrated_is_refused_by_name() {
        let input = "apiVersion: riskified.com/v1alpha1\nkind: DynamicEnv\nmetadata: {name: x}\nspec: {subsets: 3}\n";
        let e = migrate_text(input).unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.contains("document 0 (DynamicEnv default/x)") && text.contains("DynamicEnv"),
            "{text}"
        );
    }

    #[test]
    fn a_list_is_migrated_item_by_item() {
        let input = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: riskified.com/v1alpha1\n  kind: DynamicEnv\n  metadata: {name: a, namespace: n}\n  spec: {istioMatches: [{headers: {u: {exact: a}}}], subsets: [{name: d, namespace: n}]}\n";
        let (yaml, notes) = migrate_text(input).unwrap();
        let doc: Value = serde_yaml::from_str(yaml.trim_start_matches("---\n")).unwrap();
        assert_eq!(doc["items"][0]["apiVersion"], "wasmop.dev/v1alpha1");
        assert_eq!(notes.len(), 1);
    }
}
