//! The intermediate representation of a routing plan, in the shape of Emissary's IR
//! (docs/routing.md): every resource the plan read, generated or looked for has a
//! unique key, a location a human can find it by, its status value and the errors posted to
//! it, and the keys it references (and is referenced by), so an output can be traced back to
//! its inputs. The whole IR serializes (`wasmop plan` prints it).
//!
//! Keys are `<Kind>/<namespace>/<name>` for Kubernetes objects, and
//! `DynamicEnv/<ns>/<name>/subsets/<ns>/<deployment>` (or `/consumers/`) for the entries of a
//! DynamicEnv.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// One resource of the IR.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// Unique key.
    pub key: String,
    /// `DynamicEnv`, `Subset`, `Consumer`, `Deployment`, `Service`, `DestinationRule` or
    /// `VirtualService`.
    pub kind: String,
    /// Where a human finds its source, e.g. `clone of Deployment default/reviews for
    /// DynamicEnv default/sample (spec.subsets[0])`.
    pub location: String,
    /// Its status value (`running`, `missing`, `ignored-missing-destination-rule`, ...), when
    /// it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Errors posted to it, de-duplicated, in the order they were posted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Keys of the resources it was derived from or uses.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub references: BTreeSet<String>,
    /// Keys of the resources that reference it.
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub referenced_by: BTreeSet<String>,
    /// VirtualServices only: the router calls made on it, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteCallRecord>,
}

/// One router call on a VirtualService, as the IR records it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteCallRecord {
    /// The subset's IR key.
    pub subset: String,
    /// The service host (short name).
    pub host: String,
    /// The route prefix the plugin was given.
    pub route_prefix: String,
    /// `routed: N routes` (then `; ` and the routes that got no copy, and the refining
    /// routers that failed under `failurePolicy: Ignore`), `no route to copy`, or `failed:
    /// <message>`.
    pub outcome: String,
    /// The routers whose answers made the routes, in call order: those the DynamicEnv's router
    /// builds on (`after:`), then that router. Empty (and left out) for a failed call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decided_by: Vec<String>,
}

/// The IR: resources by key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ir {
    resources: BTreeMap<String, Resource>,
}

impl Serialize for Ir {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.resources.values())
    }
}

impl Ir {
    /// The resource `key`, created with `kind` and `location` if absent.
    pub fn add(&mut self, key: &str, kind: &str, location: impl Into<String>) -> &mut Resource {
        self.resources
            .entry(key.to_owned())
            .or_insert_with(|| Resource {
                key: key.to_owned(),
                kind: kind.to_owned(),
                location: location.into(),
                ..Resource::default()
            })
    }

    /// The resource `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Resource> {
        self.resources.get(key)
    }

    /// Every resource, by key.
    pub fn resources(&self) -> impl Iterator<Item = &Resource> {
        self.resources.values()
    }

    /// Posts `error` to resource `key` (which must exist); an error already posted is not
    /// repeated.
    pub(crate) fn post_error(&mut self, key: &str, error: impl Into<String>) {
        let error = error.into();
        if let Some(r) = self.resources.get_mut(key)
            && !r.errors.contains(&error)
        {
            r.errors.push(error);
        }
    }

    /// Sets the status value of resource `key`.
    pub(crate) fn set_status(&mut self, key: &str, status: &str) {
        if let Some(r) = self.resources.get_mut(key) {
            r.status = Some(status.to_owned());
        }
    }

    /// Records that `from` references `to`.
    pub fn reference(&mut self, from: &str, to: &str) {
        if let Some(r) = self.resources.get_mut(from) {
            r.references.insert(to.to_owned());
        }
    }

    /// Fills `referenced_by` from every `references` (call once, at the end).
    pub fn finalize(&mut self) {
        let edges: Vec<(String, String)> = self
            .resources
            .values()
            .flat_map(|r| r.references.iter().map(|to| (to.clone(), r.key.clone())))
            .collect();
        for (to, from) in edges {
            if let Some(r) = self.resources.get_mut(&to) {
                r.referenced_by.insert(from);
            }
        }
    }

    /// Every error of the IR as `(key, error)`.
    pub fn errors(&self) -> impl Iterator<Item = (&str, &str)> {
        self.resources
            .values()
            .flat_map(|r| r.errors.iter().map(|e| (r.key.as_str(), e.as_str())))
    }
}

/// The IR key of a namespaced Kubernetes object.
pub fn key(kind: &str, ns: &str, name: &str) -> String {
    format!("{kind}/{ns}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_deduplicated_and_references_are_traced_both_ways() {
        let mut ir = Ir::default();
        ir.add("a", "Subset", "here");
        ir.add("b", "Deployment", "there");
        ir.post_error("a", "boom");
        ir.post_error("a", "boom");
        ir.post_error("missing", "ignored");
        ir.reference("a", "b");
        ir.finalize();
        assert_eq!(ir.get("a").unwrap().errors, ["boom"]);
        assert!(ir.get("b").unwrap().referenced_by.contains("a"));
        assert_eq!(ir.errors().count(), 1);
        let v = serde_json::to_value(&ir).unwrap();
        assert_eq!(v[0]["key"], "a");
        assert_eq!(v[1]["referencedBy"][0], "a");
    }
}
