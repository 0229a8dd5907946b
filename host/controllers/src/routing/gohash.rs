//! The status `hash` of a subset or consumer, exactly as upstream computes it:
//! `hashstructure.Hash(subset, hashstructure.FormatV2, nil)` (github.com/mitchellh/hashstructure
//! v2.0.2) over upstream's Go type `Subset` and `k8s.io/api` v0.35.0's `EnvVar`, stored as an
//! int64. Tools (and upstream's e2e suite) that compare hashes across the two operators see the
//! same number for the same spec.
//!
//! hashstructure walks the Go value with 64-bit FNV-1: a string is the FNV of its bytes, an
//! integer of its little-endian bytes (a `bool` as one byte), a nil pointer of an int64 zero;
//! a slice folds its elements in order (`ordered(h, e)`, the FNV of both as little-endian
//! u64s); a map XORs `ordered(key, value)` of its entries and finishes (the FNV of the result);
//! a struct starts from the FNV of its type name and, for each exported field in declaration
//! order, XORs `ordered(name, value)` and finishes.

use serde_json::Value;
use wasmop_api::dynamicenv::Subset;

/// A Go type as hashstructure sees it; fields are (Go name, JSON name, type), a JSON name of
/// `""` meaning an embedded struct inlined in JSON.
enum Go {
    String,
    Int32,
    Bool,
    Pointer(&'static Go),
    Slice(&'static Go),
    StringMap,
    Struct(&'static str, &'static [(&'static str, &'static str, Go)]),
    /// `resource.Quantity`: of its fields only `Format` is exported.
    Quantity,
}

const LOCAL_OBJECT_REFERENCE: Go =
    Go::Struct("LocalObjectReference", &[("Name", "name", Go::String)]);
const KEY_SELECTOR: [(&str, &str, Go); 3] = [
    ("LocalObjectReference", "", LOCAL_OBJECT_REFERENCE),
    ("Key", "key", Go::String),
    ("Optional", "optional", Go::Pointer(&Go::Bool)),
];
const ENV_VAR_SOURCE: Go = Go::Struct(
    "EnvVarSource",
    &[
        (
            "FieldRef",
            "fieldRef",
            Go::Pointer(&Go::Struct(
                "ObjectFieldSelector",
                &[
                    ("APIVersion", "apiVersion", Go::String),
                    ("FieldPath", "fieldPath", Go::String),
                ],
            )),
        ),
        (
            "ResourceFieldRef",
            "resourceFieldRef",
            Go::Pointer(&Go::Struct(
                "ResourceFieldSelector",
                &[
                    ("ContainerName", "containerName", Go::String),
                    ("Resource", "resource", Go::String),
                    ("Divisor", "divisor", Go::Quantity),
                ],
            )),
        ),
        (
            "ConfigMapKeyRef",
            "configMapKeyRef",
            Go::Pointer(&Go::Struct("ConfigMapKeySelector", &KEY_SELECTOR)),
        ),
        (
            "SecretKeyRef",
            "secretKeyRef",
            Go::Pointer(&Go::Struct("SecretKeySelector", &KEY_SELECTOR)),
        ),
        (
            "FileKeyRef",
            "fileKeyRef",
            Go::Pointer(&Go::Struct(
                "FileKeySelector",
                &[
                    ("VolumeName", "volumeName", Go::String),
                    ("Path", "path", Go::String),
                    ("Key", "key", Go::String),
                    ("Optional", "optional", Go::Pointer(&Go::Bool)),
                ],
            )),
        ),
    ],
);
const ENV_VAR: Go = Go::Struct(
    "EnvVar",
    &[
        ("Name", "name", Go::String),
        ("Value", "value", Go::String),
        ("ValueFrom", "valueFrom", Go::Pointer(&ENV_VAR_SOURCE)),
    ],
);
const CONTAINER_OVERRIDES: Go = Go::Struct(
    "ContainerOverrides",
    &[
        ("ContainerName", "containerName", Go::String),
        ("Image", "image", Go::String),
        ("Command", "command", Go::Slice(&Go::String)),
        ("Env", "env", Go::Slice(&ENV_VAR)),
    ],
);
const SUBSET: Go = Go::Struct(
    "Subset",
    &[
        ("Name", "name", Go::String),
        ("Namespace", "namespace", Go::String),
        ("PodLabels", "podLabels", Go::StringMap),
        ("Replicas", "replicas", Go::Pointer(&Go::Int32)),
        ("Containers", "containers", Go::Slice(&CONTAINER_OVERRIDES)),
        (
            "InitContainers",
            "initContainers",
            Go::Slice(&CONTAINER_OVERRIDES),
        ),
        ("DefaultVersion", "defaultVersion", Go::String),
    ],
);

/// 64-bit FNV-1 (Go's `hash/fnv.New64`).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        h.wrapping_mul(0x0000_0100_0000_01b3) ^ u64::from(*b)
    })
}

fn ordered(a: u64, b: u64) -> u64 {
    let mut bytes = a.to_le_bytes().to_vec();
    bytes.extend_from_slice(&b.to_le_bytes());
    fnv(&bytes)
}

fn finish(a: u64) -> u64 {
    fnv(&a.to_le_bytes())
}

/// `Format` of a `resource.Quantity` written as `s` (apimachinery's `ParseQuantity`): binary
/// suffixes `BinarySI`, an exponent `DecimalExponent`, anything else `DecimalSI`; `""` for none.
fn quantity_format(s: &str) -> &'static str {
    let suffix = s.trim_start_matches(|c: char| c.is_ascii_digit() || matches!(c, '+' | '-' | '.'));
    if s.is_empty() {
        ""
    } else if suffix.ends_with('i') {
        "BinarySI"
    } else if suffix.starts_with(['e', 'E']) && suffix.len() > 1 {
        "DecimalExponent"
    } else {
        "DecimalSI"
    }
}

fn visit(ty: &Go, v: Option<&Value>) -> u64 {
    let v = v.filter(|v| !v.is_null());
    match ty {
        Go::String => fnv(v.and_then(Value::as_str).unwrap_or_default().as_bytes()),
        Go::Int32 => {
            let n = v.and_then(Value::as_i64).unwrap_or_default();
            fnv(&i32::try_from(n).unwrap_or_default().to_le_bytes())
        }
        Go::Bool => fnv(&[u8::from(v.and_then(Value::as_bool).unwrap_or_default())]),
        Go::Pointer(inner) => match v {
            None => fnv(&0i64.to_le_bytes()),
            Some(v) => visit(inner, Some(v)),
        },
        Go::Slice(inner) => v
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .fold(0, |h, e| ordered(h, visit(inner, Some(e)))),
        Go::StringMap => finish(
            v.and_then(Value::as_object)
                .into_iter()
                .flatten()
                .fold(0, |h, (k, val)| {
                    h ^ ordered(fnv(k.as_bytes()), visit(&Go::String, Some(val)))
                }),
        ),
        Go::Struct(name, fields) => {
            fields
                .iter()
                .fold(fnv(name.as_bytes()), |h, (go, json, ty)| {
                    let field = if json.is_empty() {
                        v
                    } else {
                        v.and_then(|v| v.get(*json))
                    };
                    finish(h ^ ordered(fnv(go.as_bytes()), visit(ty, field)))
                })
        }
        Go::Quantity => {
            let format = quantity_format(v.and_then(Value::as_str).unwrap_or_default());
            finish(fnv(b"Quantity") ^ ordered(fnv(b"Format"), fnv(format.as_bytes())))
        }
    }
}

/// The status `hash` of a subset or consumer entry: upstream's hashstructure v2 of it, as the
/// int64 upstream stores (module documentation).
pub fn subset_hash(subset: &Subset) -> i64 {
    let json = serde_json::to_value(subset).unwrap_or_default();
    i64::from_ne_bytes(visit(&SUBSET, Some(&json)).to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subset(v: Value) -> Subset {
        serde_json::from_value(v).unwrap()
    }

    /// The hashes upstream's operator wrote for these specs, as its e2e suite asserts them
    /// (`e2e-testing/kuttl/update-subset-resources/0{0,1}-assert.yaml` and
    /// `consumers-with-and-without-errors/00-assert.yaml`).
    #[test]
    fn hashes_are_upstreams() {
        let details = |name: &str, ns: &str, image: &str, topic: &str| {
            subset(serde_json::json!({
                "name": name,
                "namespace": ns,
                "containers": [{
                    "containerName": "details",
                    "image": format!("docker.io/istio/examples-bookinfo-details-v2:{image}"),
                    "env": [{"name": "TOPIC_NAME", "value": topic}],
                }],
            }))
        };
        let ns = "update-subset-resources";
        assert_eq!(
            subset_hash(&details("details", ns, "1.16.2", "test")),
            -5_576_677_875_946_656_812
        );
        assert_eq!(
            subset_hash(&details("details", ns, "1.16.3", "test2")),
            3_856_039_101_763_933_687
        );
        let ns = "consumers-with-and-without-errors";
        assert_eq!(
            subset_hash(&details("details-worker", ns, "1.16.2", "test-worker")),
            -7_893_432_429_265_961_114
        );
    }

    /// Every field and every `valueFrom` kind: the hashes hashstructure v2.0.2 gives these
    /// specs unmarshalled into upstream's `Subset` with `k8s.io/api` v0.35.0.
    #[test]
    fn hashes_are_upstreams_for_every_field() {
        let full = serde_json::json!({
            "name": "reviews", "namespace": "team-a", "podLabels": {"a": "1", "b": "2"},
            "replicas": 3, "defaultVersion": "stable",
            "containers": [{"containerName": "reviews", "command": ["run", "--fast"], "env": [
                {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"containerName": "reviews", "resource": "limits.cpu"}}},
                {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k", "optional": true}}},
                {"name": "S", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "p", "optional": false}}},
                {"name": "F", "valueFrom": {"fileKeyRef": {"volumeName": "v", "path": "p.env", "key": "K"}}},
            ]}],
            "initContainers": [{"containerName": "init", "image": "busybox", "env": [
                {"name": "X", "value": "1"},
                {"name": "D", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                {"name": "E", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1e3"}}},
            ]}],
        });
        assert_eq!(subset_hash(&subset(full)), 2_653_092_008_501_000_335);
        let zeros =
            serde_json::json!({"name": "x", "namespace": "y", "replicas": 0, "podLabels": {}});
        assert_eq!(subset_hash(&subset(zeros)), -2_609_950_233_677_335_737);
    }

    #[test]
    fn nothing_but_the_spec_moves_the_hash() {
        let a = subset(serde_json::json!({"name": "d", "namespace": "n"}));
        let mut b = a.clone();
        assert_eq!(subset_hash(&a), subset_hash(&b));
        b.replicas = Some(2);
        assert_ne!(subset_hash(&a), subset_hash(&b));
    }

    #[test]
    fn quantity_formats_are_apimachinerys() {
        assert_eq!(quantity_format(""), "");
        assert_eq!(quantity_format("1"), "DecimalSI");
        assert_eq!(quantity_format("1m"), "DecimalSI");
        assert_eq!(quantity_format("1Mi"), "BinarySI");
        assert_eq!(quantity_format("1e3"), "DecimalExponent");
        assert_eq!(quantity_format("1E"), "DecimalSI");
    }
}
