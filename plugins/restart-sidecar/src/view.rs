//! Pods as the predicates read them, in one pass over the page's JSON text and borrowed from it
//! where a string has no escapes.
//!
//! Only what the predicates read is kept: the pod's `namespace` and `creationTimestamp`, the
//! annotations of [`ANNOTATIONS`], and the `name`, `image` and cpu/memory requests/limits of its
//! containers and init containers. Everything else (status, volumes, env, probes, other
//! annotations, `managedFields`...) is skipped while parsing, without being built or unescaped.
//!
//! A value of another JSON type than expected reads as absent, as it does through
//! `serde_json::Value`'s accessors (`get`, `as_str`): a non-string image is no image, a
//! non-object container is no container, a non-object `spec` has no containers. A repeated key
//! counts with its last value, as in a parsed tree. The same reading applies to a
//! `serde_json::Value` (`PodView::deserialize(&value)`), so both give the same decisions.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::{
    ANNOTATION_CPU, ANNOTATION_CPU_LIMIT, ANNOTATION_MEMORY, ANNOTATION_MEMORY_LIMIT,
    CUSTOM_IMAGE_ANNOTATION,
};

/// The annotations the predicates read, in the order of [`PodView`]'s annotation slots.
pub const ANNOTATIONS: [&str; 7] = [
    CUSTOM_IMAGE_ANNOTATION,
    "prometheus.io/path",
    "prometheus.io/port",
    ANNOTATION_CPU,
    ANNOTATION_MEMORY,
    ANNOTATION_CPU_LIMIT,
    ANNOTATION_MEMORY_LIMIT,
];

/// What kind of JSON value a page entry is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Shape {
    /// An object with a `metadata` object: judged as a pod.
    #[default]
    Pod,
    /// An object without a `metadata` object.
    NoMetadata,
    /// Not an object: `null`, `a boolean`, `a number`, `a string` or `an array`.
    NotAnObject(&'static str),
}

/// One page entry as the predicates read it (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView<'a> {
    /// Whether it is a pod at all.
    pub shape: Shape,
    /// `metadata.namespace`.
    pub namespace: Option<Cow<'a, str>>,
    /// `metadata.creationTimestamp`, as written.
    pub creation_timestamp: Option<Cow<'a, str>>,
    /// The string values of the annotations in [`ANNOTATIONS`], slot by slot.
    pub annotations: [Option<Cow<'a, str>>; 7],
    /// `spec.containers` that are objects, in order.
    pub containers: Vec<ContainerView<'a>>,
    /// `spec.initContainers` that are objects, in order.
    pub init_containers: Vec<ContainerView<'a>>,
}

/// A container as the predicates read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerView<'a> {
    /// `name`.
    pub name: Option<Cow<'a, str>>,
    /// `image`.
    pub image: Option<Cow<'a, str>>,
    /// `resources.requests.cpu`, `.requests.memory`, `.limits.cpu`, `.limits.memory`: a
    /// quantity string as written, or a number as serde_json prints it.
    pub resources: [Option<Cow<'a, str>>; 4],
}

impl PodView<'_> {
    /// The string value of annotation `key`, which must be one of [`ANNOTATIONS`].
    pub fn annotation(&self, key: &str) -> Option<&str> {
        let slot = ANNOTATIONS.iter().position(|k| *k == key);
        debug_assert!(slot.is_some(), "annotation {key} is not read by the parser");
        slot.and_then(|i| self.annotations[i].as_deref())
    }
}

/// Defaults for the JSON types a lenient visitor does not expect (listed by name).
macro_rules! other_types_read_as_default {
    ($($kind:ident)*) => { $(other_types_read_as_default!(@ $kind);)* };
    (@ scalars) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
    (@ str) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
    (@ seq) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
    (@ map) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

/// An object key, borrowed unless it has escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A string, or absent for any other JSON type.
struct Text<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Option<Cow<'de, str>>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Some(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Some(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Some(Cow::Owned(v)))
            }
            other_types_read_as_default!(scalars seq map);
        }
        d.deserialize_any(V).map(Text)
    }
}

/// A quantity: a string as written, a number as serde_json prints it, absent otherwise.
struct QuantityText<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for QuantityText<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Option<Cow<'de, str>>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Some(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Some(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Some(Cow::Owned(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Some(Cow::Owned(serde_json::Number::from(v).to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Some(Cow::Owned(serde_json::Number::from(v).to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(serde_json::Number::from_f64(v).map(|n| Cow::Owned(n.to_string())))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            other_types_read_as_default!(seq map);
        }
        d.deserialize_any(V).map(QuantityText)
    }
}

/// What reads an object's entries into itself, one key at a time (see [`Object`]).
trait Fields<'de>: Default {
    /// What the object is, for serde's messages.
    const WHAT: &'static str;
    /// Reads the value of `key` (every entry, including ones it skips).
    fn read<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// `Some` for a JSON object, read by `T`; `None` for any other JSON type.
struct Object<T>(Option<T>);

impl<T> Default for Object<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Fields<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Fields<'de>> Visitor<'de> for V<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::WHAT)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = T::default();
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    out.read(&key, &mut map)?;
                }
                Ok(Object(Some(out)))
            }
            other_types_read_as_default!(scalars str seq);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Skips the value of the entry being read.
fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(drop)
}

/// `metadata`.
#[derive(Default)]
struct Metadata<'a> {
    namespace: Option<Cow<'a, str>>,
    creation_timestamp: Option<Cow<'a, str>>,
    annotations: [Option<Cow<'a, str>>; 7],
}

impl<'de> Fields<'de> for Metadata<'de> {
    const WHAT: &'static str = "pod metadata";
    fn read<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "namespace" => self.namespace = map.next_value::<Text<'de>>()?.0,
            "creationTimestamp" => self.creation_timestamp = map.next_value::<Text<'de>>()?.0,
            "annotations" => {
                let annotations = map.next_value::<Object<Annotations<'de>>>()?.0;
                self.annotations = annotations.unwrap_or_default().0;
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `metadata.annotations`: the string values of [`ANNOTATIONS`].
#[derive(Default)]
struct Annotations<'a>([Option<Cow<'a, str>>; 7]);

impl<'de> Fields<'de> for Annotations<'de> {
    const WHAT: &'static str = "pod annotations";
    fn read<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match ANNOTATIONS.iter().position(|k| *k == key) {
            Some(slot) => self.0[slot] = map.next_value::<Text<'de>>()?.0,
            None => skip(map)?,
        }
        Ok(())
    }
}

/// `spec`: its containers and init containers.
#[derive(Default)]
struct Spec<'a> {
    containers: Vec<ContainerView<'a>>,
    init_containers: Vec<ContainerView<'a>>,
}

impl<'de> Fields<'de> for Spec<'de> {
    const WHAT: &'static str = "pod spec";
    fn read<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "containers" => self.containers = map.next_value::<Containers<'de>>()?.0,
            "initContainers" => self.init_containers = map.next_value::<Containers<'de>>()?.0,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// A list of containers: the entries that are objects.
#[derive(Default)]
struct Containers<'a>(Vec<ContainerView<'a>>);

impl<'de> Deserialize<'de> for Containers<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Containers<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of containers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(2));
                while let Some(c) = seq.next_element::<Object<ContainerView<'de>>>()? {
                    out.extend(c.0);
                }
                Ok(Containers(out))
            }
            other_types_read_as_default!(scalars str map);
        }
        d.deserialize_any(V)
    }
}

impl<'de> Fields<'de> for ContainerView<'de> {
    const WHAT: &'static str = "a container";
    fn read<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = map.next_value::<Text<'de>>()?.0,
            "image" => self.image = map.next_value::<Text<'de>>()?.0,
            "resources" => {
                let resources = map.next_value::<Object<Resources<'de>>>()?.0;
                self.resources = resources.unwrap_or_default().0;
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `resources`: requests and limits of cpu and memory.
#[derive(Default)]
struct Resources<'a>([Option<Cow<'a, str>>; 4]);

impl<'de> Fields<'de> for Resources<'de> {
    const WHAT: &'static str = "container resources";
    fn read<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        let at = match key {
            "requests" => 0,
            "limits" => 2,
            _ => return skip(map),
        };
        let values = map.next_value::<Object<CpuMemory<'de>>>()?.0;
        let [cpu, memory] = values.unwrap_or_default().0;
        self.0[at] = cpu;
        self.0[at + 1] = memory;
        Ok(())
    }
}

/// `requests` or `limits`: cpu and memory.
#[derive(Default)]
struct CpuMemory<'a>([Option<Cow<'a, str>>; 2]);

impl<'de> Fields<'de> for CpuMemory<'de> {
    const WHAT: &'static str = "resource values";
    fn read<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "cpu" => self.0[0] = map.next_value::<QuantityText<'de>>()?.0,
            "memory" => self.0[1] = map.next_value::<QuantityText<'de>>()?.0,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for PodView<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PodView<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut metadata = None;
                let mut spec = None;
                while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                    match key.as_ref() {
                        "metadata" => metadata = map.next_value::<Object<Metadata<'de>>>()?.0,
                        "spec" => spec = map.next_value::<Object<Spec<'de>>>()?.0,
                        _ => skip(&mut map)?,
                    }
                }
                let spec = spec.unwrap_or_default();
                let Some(m) = metadata else {
                    return Ok(PodView {
                        shape: Shape::NoMetadata,
                        ..PodView::default()
                    });
                };
                Ok(PodView {
                    shape: Shape::Pod,
                    namespace: m.namespace,
                    creation_timestamp: m.creation_timestamp,
                    annotations: m.annotations,
                    containers: spec.containers,
                    init_containers: spec.init_containers,
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(not_an_object("an array"))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
                Ok(not_an_object("a string"))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(not_an_object("a boolean"))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(not_an_object("a number"))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(not_an_object("a number"))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(not_an_object("a number"))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(not_an_object("null"))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(not_an_object("null"))
            }
        }
        d.deserialize_any(V)
    }
}

fn not_an_object(kind: &'static str) -> PodView<'static> {
    PodView {
        shape: Shape::NotAnObject(kind),
        ..PodView::default()
    }
}
