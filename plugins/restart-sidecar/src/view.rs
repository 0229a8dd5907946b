//! A page entry as the predicates read it: the pod's namespace, creation time and annotations,
//! and the `name`, `image` and cpu/memory requests/limits of its containers and init containers.
//!
//! A value of another JSON type than expected reads as absent: a non-string image is no image,
//! a non-object container is skipped, a non-object `spec` has no containers. A resource quantity
//! given as a JSON number reads as serde_json prints it (`0.5`, `2`).

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::{RESOURCE_SLOTS, kind_of};

/// A pod, as the predicates read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView<'a> {
    /// `metadata.namespace`.
    pub namespace: Option<&'a str>,
    /// `metadata.creationTimestamp`, as written.
    pub creation_timestamp: Option<&'a str>,
    /// `metadata.annotations`, read through [`PodView::annotation`].
    annotations: Option<&'a Map<String, Value>>,
    /// `spec.containers`.
    pub containers: Vec<ContainerView<'a>>,
    /// `spec.initContainers`.
    pub init_containers: Vec<ContainerView<'a>>,
}

/// A container, as the predicates read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerView<'a> {
    /// `name`.
    pub name: Option<&'a str>,
    /// `image`.
    pub image: Option<&'a str>,
    /// `resources.requests.cpu`, `.requests.memory`, `.limits.cpu`, `.limits.memory`.
    pub resources: [Option<Cow<'a, str>>; 4],
}

impl<'a> PodView<'a> {
    /// Reads one entry of the page.
    ///
    /// # Errors
    /// Why the entry is not a pod: it is not a JSON object, or has no `metadata` object.
    pub fn of(pod: &'a Value) -> Result<Self, String> {
        if !pod.is_object() {
            return Err(format!(
                "not a pod: expected a JSON object, got {}",
                kind_of(pod)
            ));
        }
        let Some(metadata) = pod.get("metadata").filter(|m| m.is_object()) else {
            return Err("not a pod: it has no metadata object".to_owned());
        };
        let containers = |list: &str| -> Vec<ContainerView<'a>> {
            let list = pod.get("spec").and_then(|spec| spec.get(list));
            list.and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|c| c.is_object())
                .map(ContainerView::of)
                .collect()
        };
        Ok(Self {
            namespace: metadata.get("namespace").and_then(Value::as_str),
            creation_timestamp: metadata.get("creationTimestamp").and_then(Value::as_str),
            annotations: metadata.get("annotations").and_then(Value::as_object),
            containers: containers("containers"),
            init_containers: containers("initContainers"),
        })
    }

    /// The value of annotation `key`, if it is a string.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations?.get(key)?.as_str()
    }
}

impl<'a> ContainerView<'a> {
    fn of(container: &'a Value) -> Self {
        let quantity = |kind: &str, name: &str| {
            let value = container.get("resources")?.get(kind)?.get(name)?;
            match value {
                Value::String(text) => Some(Cow::Borrowed(text.as_str())),
                Value::Number(n) => Some(Cow::Owned(n.to_string())),
                _ => None,
            }
        };
        Self {
            name: container.get("name").and_then(Value::as_str),
            image: container.get("image").and_then(Value::as_str),
            resources: RESOURCE_SLOTS.map(|(kind, name, _)| quantity(kind, name)),
        }
    }
}
