//! The inputs of a plan: the DynamicEnvs to plan and every object they may touch, as the
//! controller's caches hold them or as `wasmop plan -f DIR` reads them from YAML files.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use serde::Deserialize;
use serde_json::Value;

use super::istio::{DestinationRule, VirtualService};
use super::names::Claims;
use wasmop_api::dynamicenv::DynamicEnv;

/// What a plan reads. Objects without a namespace are read as in `default`, as kubectl would
/// create them.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The DynamicEnvs to plan, in this order (the controller plans one at a time).
    pub dynamic_envs: Vec<Arc<DynamicEnv>>,
    /// Base Deployments and the clones made earlier.
    pub deployments: Vec<Arc<Deployment>>,
    /// Services (their selectors find the service hosts of a Deployment).
    pub services: Vec<Arc<Service>>,
    /// Base DestinationRules and the ones made earlier.
    pub destination_rules: Vec<Arc<DestinationRule>>,
    /// VirtualServices, cluster-wide (delegates included).
    pub virtual_services: Vec<Arc<VirtualService>>,
    /// Which DynamicEnv holds a name several would share, from every DynamicEnv there is
    /// (the controller's cache; for `read_dir`, those read).
    pub claims: Claims,
}

/// A document of the input that is not one of the kinds a plan reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// `file:document-index`.
    pub location: String,
    /// `apiVersion/kind` of the document.
    pub kind: String,
}

impl Snapshot {
    /// Adds one object given as JSON in its API shape; returns `Ok(false)` for kinds a plan
    /// does not read.
    ///
    /// # Errors
    /// The object is of a known kind but does not parse as one.
    pub fn add(&mut self, mut doc: Value) -> anyhow::Result<bool> {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.entry("namespace")
                .or_insert_with(|| Value::String("default".into()));
        }
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        let parse_err = || format!("not a valid {kind} ({api_version})");
        match (group, kind.as_str()) {
            ("wasmop.dev", "DynamicEnv") => self.dynamic_envs.push(Arc::new(
                serde_json::from_value(doc).with_context(parse_err)?,
            )),
            ("apps", "Deployment") => self.deployments.push(Arc::new(
                serde_json::from_value(doc).with_context(parse_err)?,
            )),
            ("", "Service") => self.services.push(Arc::new(
                serde_json::from_value(doc).with_context(parse_err)?,
            )),
            ("networking.istio.io", "DestinationRule") => self.destination_rules.push(Arc::new(
                serde_json::from_value(doc).with_context(parse_err)?,
            )),
            ("networking.istio.io", "VirtualService") => self.virtual_services.push(Arc::new(
                serde_json::from_value(doc).with_context(parse_err)?,
            )),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Reads every `*.yaml`, `*.yml` and `*.json` file of `dir` (not recursive, in name
    /// order), each holding one or more documents; a `List` is read item by item. Returns the
    /// snapshot and the documents it skipped.
    ///
    /// # Errors
    /// An unreadable file or document, naming the file and the document's index.
    pub fn read_dir(dir: &Path) -> anyhow::Result<(Self, Vec<Skipped>)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read directory {}", dir.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && p.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
            })
            .collect();
        files.sort();
        let mut snapshot = Self::default();
        let mut skipped = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
                let at = format!("{name}:{i}");
                let value = Value::deserialize(doc).with_context(|| format!("{at}: not YAML"))?;
                if value.is_null() {
                    continue;
                }
                let items = if value["kind"] == "List" {
                    value["items"].as_array().cloned().unwrap_or_default()
                } else {
                    vec![value]
                };
                for item in items {
                    let kind = format!(
                        "{}/{}",
                        item["apiVersion"].as_str().unwrap_or("?"),
                        item["kind"].as_str().unwrap_or("?")
                    );
                    if !snapshot.add(item).with_context(|| at.clone())? {
                        skipped.push(Skipped {
                            location: at.clone(),
                            kind,
                        });
                    }
                }
            }
        }
        snapshot.claims = Claims::new(snapshot.dynamic_envs.iter().map(AsRef::as_ref));
        Ok((snapshot, skipped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_documents_lists_and_defaults_the_namespace() {
        let dir = std::env::temp_dir().join(format!("wasmop-snapshot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("a.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selector: {app: s}}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("b.json"),
            r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"v","namespace":"x"},"spec":{"hosts":["s"]}}]}"#,
        )
        .unwrap();
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
        let (s, skipped) = Snapshot::read_dir(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(s.services.len(), 1);
        assert_eq!(s.services[0].metadata.namespace.as_deref(), Some("default"));
        assert_eq!(s.virtual_services[0].spec.hosts, ["s"]);
        assert_eq!(
            skipped,
            [Skipped {
                location: "a.yaml:1".into(),
                kind: "v1/ConfigMap".into()
            }]
        );
    }

    #[test]
    fn a_malformed_object_is_an_error_naming_it() {
        let mut s = Snapshot::default();
        let e = s
            .add(serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": 3}}))
            .unwrap_err();
        assert!(format!("{e:#}").contains("not a valid Deployment"), "{e:#}");
    }
}
