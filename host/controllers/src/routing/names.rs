//! The names wasmop generates for a DynamicEnv: the version label value, the clone Deployments,
//! the DestinationRules and the HTTP route names.
//!
//! **Upstream's names where they work.** As upstream (`pkg/helpers/helpers.go`), the version is
//! `<ns[:20]>-<name[:40]>`, a clone is `<deployment>-<version>` and its DestinationRule
//! `<clone>-<service>`. wasmop uses exactly these whenever they are valid and unambiguous:
//! the version and the clone RFC 1123 DNS labels of at most 63 characters (lowercase letters,
//! digits and `-`, starting and ending with a letter or digit), the DestinationRule a DNS
//! subdomain (a custom resource's name, at most 253 characters). Where they are not, the name is the digest form: a readable part
//! cut so the whole fits, then `-` and 8 hex characters of the sha256 of the identity it
//! stands for (the namespace and name of every object involved, NUL-separated). The digest
//! form is used:
//!
//! - when upstream's name is not valid so (a dotted DynamicEnv name, a cut that ends in `-`,
//!   a long Deployment name);
//! - when two DynamicEnvs with entries in one namespace would share a version (`a-b`/`c` and
//!   `a`/`b-c`, or names sharing their first 40 characters), or two clones in one namespace a
//!   name: the oldest DynamicEnv
//!   (creation time, then namespace and name) keeps upstream's, the others take the digest
//!   form ([`Claims`]);
//! - when an object of that name exists that this DynamicEnv did not make (it is never taken
//!   over);
//! - and for as long as this DynamicEnv's objects already carry the digest form (made by an
//!   earlier release, or while an elder held the name): a DynamicEnv keeps the names its
//!   objects have, so nothing is renamed under running workloads.
//!
//! Route names are not Kubernetes names and need no cap; they must instead be recognisable by
//! their owner. Every route a DynamicEnv owns starts with
//! `dynamic-environment-<de><subset><host>-` where `<de>` is 8, `<subset>` 6 and `<host>` 4 hex
//! characters of sha256 digests; the readable clone name follows. Because the digests have
//! fixed lengths, the prefix of one DynamicEnv (or one subset, or one host of a subset) never
//! prefixes the routes of another, whatever their names.

use std::collections::HashMap;

use kube::ResourceExt as _;
use sha2::{Digest, Sha256};
use wasmop_api::dynamicenv::DynamicEnv;

/// Longest Kubernetes name wasmop generates (an RFC 1123 label).
pub(crate) const MAX_NAME: usize = 63;
/// Hex characters of the identity digest appended to every generated name.
pub(crate) const NAME_HASH_LEN: usize = 8;
/// The start of every route name a DynamicEnv owns.
pub(crate) const ROUTE_PREFIX_START: &str = "dynamic-environment-";
const DE_TOKEN_LEN: usize = 8;
const SUBSET_TOKEN_LEN: usize = 6;
const HOST_TOKEN_LEN: usize = 4;

/// Lowercase hex sha256 of `parts` joined by NUL.
pub fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h.update([0u8]);
        }
        h.update(p.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Whether `s` is an RFC 1123 DNS label of at most 63 characters.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a DNS subdomain as Kubernetes checks object names (`IsDNS1123Subdomain`):
/// at most 253 characters, dot-separated parts of lowercase letters, digits and `-`, each
/// starting and ending with a letter or digit (no limit per part).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !p.starts_with('-')
                && !p.ends_with('-')
        })
}

/// `readable` made a DNS label and cut so that `-<hash>` fits in 63 characters, then
/// `-<8 hex of the digest of identity>`.
pub(crate) fn dns_label(readable: &str, identity: &[&str]) -> String {
    let hash = &digest(identity)[..NAME_HASH_LEN];
    let clean: String = readable
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    let cut: String = clean.chars().take(MAX_NAME - 1 - NAME_HASH_LEN).collect();
    let cut = cut.trim_matches('-');
    if cut.is_empty() {
        hash.to_owned()
    } else {
        format!("{cut}-{hash}")
    }
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Upstream's version `<ns[:20]>-<name[:40]>`, whatever it is.
fn upstream_version(de_ns: &str, de_name: &str) -> String {
    format!("{}-{}", cut(de_ns, 20), cut(de_name, 40))
}

/// The digest form of the version: upstream's cut to fit, then `-` and 8 hex characters.
pub fn digest_version(de_ns: &str, de_name: &str) -> String {
    dns_label(
        &upstream_version(de_ns, de_name),
        &["version", de_ns, de_name],
    )
}

/// The version of a DynamicEnv no other one competes with: the value of the version label on
/// its clones' pods and the name of its DestinationRule subsets. Upstream's
/// `<ns[:20]>-<name[:40]>` when that is a DNS label, else [`digest_version`].
pub fn version(de_ns: &str, de_name: &str) -> String {
    let plain = upstream_version(de_ns, de_name);
    if is_dns_label(&plain) {
        plain
    } else {
        digest_version(de_ns, de_name)
    }
}

/// The digest form of the clone of `ns/deployment`.
pub fn digest_clone_name(de_ns: &str, de_name: &str, ns: &str, deployment: &str) -> String {
    dns_label(
        &format!("{deployment}-{}-{de_name}", cut(de_ns, 20)),
        &["clone", de_ns, de_name, ns, deployment],
    )
}

/// The clone of Deployment `ns/deployment` for a DynamicEnv whose version is `version`:
/// upstream's `<deployment>-<version>` when that is a DNS label, else [`digest_clone_name`].
/// Also the value of the `x-dynamic-env` response header.
pub fn clone_name_for(
    version: &str,
    de_ns: &str,
    de_name: &str,
    ns: &str,
    deployment: &str,
) -> String {
    let plain = format!("{deployment}-{version}");
    if is_dns_label(&plain) {
        plain
    } else {
        digest_clone_name(de_ns, de_name, ns, deployment)
    }
}

/// The clone of Deployment `ns/deployment` for DynamicEnv `de_ns/de_name` when no other
/// DynamicEnv competes for its names (see [`clone_name_for`]).
pub fn clone_name(de_ns: &str, de_name: &str, ns: &str, deployment: &str) -> String {
    clone_name_for(&version(de_ns, de_name), de_ns, de_name, ns, deployment)
}

/// The digest form of the DestinationRule of the clone of `ns/deployment` for host `service`.
pub fn digest_destination_rule_name(
    de_ns: &str,
    de_name: &str,
    ns: &str,
    deployment: &str,
    service: &str,
) -> String {
    dns_label(
        &format!("{deployment}-{}-{de_name}-{service}", cut(de_ns, 20)),
        &["destinationrule", de_ns, de_name, ns, deployment, service],
    )
}

/// The DestinationRule of clone `clone` (of `ns/deployment`) for service host `service`:
/// upstream's `<clone>-<service>` when that is a DNS subdomain (a custom resource's name may
/// be one, up to 253 characters, and upstream's often pass 63), else
/// [`digest_destination_rule_name`].
pub fn destination_rule_name_for(
    clone: &str,
    de_ns: &str,
    de_name: &str,
    ns: &str,
    deployment: &str,
    service: &str,
) -> String {
    let plain = format!("{clone}-{service}");
    if is_dns_subdomain(&plain) {
        plain
    } else {
        digest_destination_rule_name(de_ns, de_name, ns, deployment, service)
    }
}

/// The DestinationRule for host `service` of the clone of `ns/deployment` when no other
/// DynamicEnv competes for its names.
pub fn destination_rule_name(
    de_ns: &str,
    de_name: &str,
    ns: &str,
    deployment: &str,
    service: &str,
) -> String {
    let clone = clone_name(de_ns, de_name, ns, deployment);
    destination_rule_name_for(&clone, de_ns, de_name, ns, deployment, service)
}

/// Which DynamicEnv holds upstream's version and clone names where several would share one:
/// the oldest (creation time, then `namespace/name`). A version is contested only among
/// DynamicEnvs with an entry in the same namespace, since a version label selects pods behind
/// a Service of one namespace; a clone name within its namespace. Built from every DynamicEnv
/// of the cluster (the controller's cache) or of the input (`wasmop plan`); the default holds
/// no claim, so every name is the one a DynamicEnv alone would get.
#[derive(Clone, Debug, Default)]
pub struct Claims {
    /// `(namespace, plain version)` → `namespace/name` of the DynamicEnv holding it.
    versions: HashMap<(String, String), String>,
    /// `(namespace, plain clone name)` → the DynamicEnv holding it.
    clones: HashMap<(String, String), String>,
}

/// The namespaces of a DynamicEnv's subsets and consumers.
pub fn entry_namespaces(de: &DynamicEnv) -> Vec<&str> {
    let mut namespaces: Vec<&str> = de
        .spec
        .subsets
        .iter()
        .chain(de.spec.consumers.iter().flatten())
        .map(|s| s.namespace.as_str())
        .collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    namespaces
}

impl Claims {
    /// The claims of `dynamic_envs`, in any order.
    pub fn new<'a>(dynamic_envs: impl IntoIterator<Item = &'a DynamicEnv>) -> Self {
        let mut des: Vec<&DynamicEnv> = dynamic_envs.into_iter().collect();
        des.sort_by_key(|de| {
            (
                de.metadata.creation_timestamp.as_ref().map(|t| t.0),
                de.namespace().unwrap_or_default(),
                de.name_any(),
            )
        });
        let mut claims = Self::default();
        for de in des {
            let (de_ns, de_name) = (de.namespace().unwrap_or_default(), de.name_any());
            let key = format!("{de_ns}/{de_name}");
            let namespaces = entry_namespaces(de);
            let version = claims.version(&de_ns, &de_name, &namespaces);
            if version == upstream_version(&de_ns, &de_name) {
                for ns in &namespaces {
                    claims
                        .versions
                        .entry(((*ns).to_owned(), version.clone()))
                        .or_insert_with(|| key.clone());
                }
            }
            for s in de
                .spec
                .subsets
                .iter()
                .chain(de.spec.consumers.iter().flatten())
            {
                let clone = claims.clone_name(&version, &de_ns, &de_name, &s.namespace, &s.name);
                if clone == format!("{}-{version}", s.name) {
                    claims
                        .clones
                        .entry((s.namespace.clone(), clone))
                        .or_insert_with(|| key.clone());
                }
            }
        }
        claims
    }

    fn held_by_other(holder: Option<&String>, de_ns: &str, de_name: &str) -> bool {
        holder.is_some_and(|h| h.split_once('/') != Some((de_ns, de_name)))
    }

    /// The version of `de_ns/de_name`, whose entries are in `namespaces`: [`version`], unless
    /// an older DynamicEnv with an entry in one of them holds the same upstream version; then
    /// [`digest_version`].
    pub fn version(&self, de_ns: &str, de_name: &str, namespaces: &[&str]) -> String {
        let v = version(de_ns, de_name);
        let contested = namespaces.iter().any(|ns| {
            Self::held_by_other(
                self.versions.get(&((*ns).to_owned(), v.clone())),
                de_ns,
                de_name,
            )
        });
        if contested {
            digest_version(de_ns, de_name)
        } else {
            v
        }
    }

    /// The clone of `ns/deployment`: [`clone_name_for`], unless an older DynamicEnv holds the
    /// same name in `ns`; then [`digest_clone_name`].
    pub fn clone_name(
        &self,
        version: &str,
        de_ns: &str,
        de_name: &str,
        ns: &str,
        deployment: &str,
    ) -> String {
        let c = clone_name_for(version, de_ns, de_name, ns, deployment);
        let holder = self.clones.get(&(ns.to_owned(), c.clone()));
        if Self::held_by_other(holder, de_ns, de_name) {
            digest_clone_name(de_ns, de_name, ns, deployment)
        } else {
            c
        }
    }
}

/// `dynamic-environment-<8 hex>`: the start of every route DynamicEnv `de_ns/de_name` owns.
pub fn route_token(de_ns: &str, de_name: &str) -> String {
    format!(
        "{ROUTE_PREFIX_START}{}",
        &digest(&["dynamicenv", de_ns, de_name])[..DE_TOKEN_LEN]
    )
}

/// The start of every route the subset `ns/deployment` of the DynamicEnv owns (all hosts).
pub(crate) fn subset_route_token(de_ns: &str, de_name: &str, ns: &str, deployment: &str) -> String {
    format!(
        "{}{}",
        route_token(de_ns, de_name),
        &digest(&["subset", ns, deployment])[..SUBSET_TOKEN_LEN]
    )
}

/// The route prefix handed to the router plugin for one subset and one service host: the
/// subset's token, 4 hex characters of the host, `-`, the clone name `clone` and `-`. The plugin names
/// its copies `<prefix><index>`.
pub fn route_prefix(
    de_ns: &str,
    de_name: &str,
    ns: &str,
    deployment: &str,
    service: &str,
    clone: &str,
) -> String {
    format!(
        "{}{}-{clone}-",
        subset_route_token(de_ns, de_name, ns, deployment),
        &digest(&["host", ns, service])[..HOST_TOKEN_LEN],
    )
}

/// Whether `route_name` belongs to some DynamicEnv: `dynamic-environment-` then 18 hex
/// characters and `-`.
pub fn is_dynamic_env_route(route_name: &str) -> bool {
    let len = DE_TOKEN_LEN + SUBSET_TOKEN_LEN + HOST_TOKEN_LEN;
    route_name
        .strip_prefix(ROUTE_PREFIX_START)
        .is_some_and(|rest| {
            rest.len() > len
                && rest.as_bytes()[..len]
                    .iter()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
                && rest.as_bytes()[len] == b'-'
        })
}

/// The DynamicEnv token (`dynamic-environment-<8 hex>`) a route name starts with, if it is
/// a DynamicEnv's route.
pub(crate) fn token_of_route(route_name: &str) -> Option<&str> {
    is_dynamic_env_route(route_name).then(|| &route_name[..ROUTE_PREFIX_START.len() + DE_TOKEN_LEN])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn de(ns: &str, name: &str, age: i64, deployments: &[(&str, &str)]) -> DynamicEnv {
        let subsets: Vec<serde_json::Value> = deployments
            .iter()
            .map(|(ns, name)| serde_json::json!({"namespace": ns, "name": name}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "wasmop.dev/v1alpha1",
            "kind": "DynamicEnv",
            "metadata": {
                "namespace": ns,
                "name": name,
                "creationTimestamp": format!("2026-01-01T00:00:{age:02}Z"),
            },
            "spec": {"istioMatches": [{"headers": {"end-user": {"exact": "x"}}}], "subsets": subsets},
        }))
        .unwrap()
    }

    #[test]
    fn every_name_is_a_dns_label_of_at_most_63_characters() {
        let long = "x".repeat(253);
        let dotted = "my.app.v2";
        let forty = format!("{}-tail", "y".repeat(39));
        for (de_ns, de_name, ns, dep, svc) in [
            ("default", "de", "default", "reviews", "reviews"),
            (
                long.as_str(),
                long.as_str(),
                long.as_str(),
                long.as_str(),
                long.as_str(),
            ),
            ("a", dotted, "b", dotted, "svc"),
            ("ns", "UPPER", "ns", "Dep_1", "svc"),
            ("ns", "----", "ns", "-", "-"),
            ("ns", forty.as_str(), "ns", "reviews", "reviews"),
        ] {
            for name in [
                version(de_ns, de_name),
                digest_version(de_ns, de_name),
                clone_name(de_ns, de_name, ns, dep),
                digest_clone_name(de_ns, de_name, ns, dep),
                digest_destination_rule_name(de_ns, de_name, ns, dep, svc),
            ] {
                assert!(is_dns_label(&name), "{name:?}");
            }
            let dr = destination_rule_name(de_ns, de_name, ns, dep, svc);
            assert!(is_dns_subdomain(&dr), "{dr:?}");
        }
    }

    #[test]
    fn names_are_upstreams_where_they_are_dns_labels() {
        assert_eq!(version("default", "sample"), "default-sample");
        assert_eq!(
            clone_name("default", "sample", "default", "reviews"),
            "reviews-default-sample"
        );
        assert_eq!(
            destination_rule_name("default", "sample", "default", "reviews", "reviews-alt"),
            "reviews-default-sample-reviews-alt"
        );
        // Upstream's cut, as its e2e suite asserts it (multiple-services-scenarios).
        let de = "dynamicenv-multiple-services-per-deployment";
        assert_eq!(
            clone_name("default", de, "default", "details"),
            "details-default-dynamicenv-multiple-services-per-deploym"
        );
        // A DestinationRule is a custom resource: over 63 characters is fine.
        assert_eq!(
            destination_rule_name("default", de, "default", "details", "details"),
            "details-default-dynamicenv-multiple-services-per-deploym-details"
        );
        assert_eq!(
            version("a-very-long-namespace-name", "n"),
            "a-very-long-namespac-n"
        );
        // Over 63 characters, or not a label: the digest form.
        let dep = "d".repeat(50);
        let c = clone_name("default", "sample", "default", &dep);
        assert_eq!(c, digest_clone_name("default", "sample", "default", &dep));
        assert_eq!(c.len(), MAX_NAME);
        assert_eq!(version("ns", "my.app"), digest_version("ns", "my.app"));
        let cut_at_dash = format!("{}-x", "y".repeat(39));
        assert_eq!(
            version("ns", &cut_at_dash),
            digest_version("ns", &cut_at_dash)
        );
        assert_ne!(digest_version("ns", "my.app"), "ns-my.app");
    }

    #[test]
    fn the_oldest_dynamic_env_keeps_upstreams_name_where_two_would_share_it() {
        // Upstream: `<ns>-<name>` is the same for a-b/c and a/b-c.
        let older = de("a-b", "c", 1, &[("team", "reviews")]);
        let newer = de("a", "b-c", 2, &[("team", "reviews")]);
        let claims = Claims::new([&newer, &older]);
        let team = ["team"];
        assert_eq!(claims.version("a-b", "c", &team), "a-b-c");
        assert_eq!(
            claims.version("a", "b-c", &team),
            digest_version("a", "b-c")
        );
        // Names sharing their first 40 characters, with entries in one namespace.
        let base = "x".repeat(40);
        let (one, two) = (format!("{base}-one"), format!("{base}-two"));
        let claims = Claims::new([
            &de("ns", &two, 1, &[("team", "d")]),
            &de("ns", &one, 2, &[("other", "e"), ("team", "d")]),
        ]);
        assert_eq!(claims.version("ns", &two, &team), format!("ns-{base}"));
        assert_eq!(
            claims.version("ns", &one, &["other", "team"]),
            digest_version("ns", &one)
        );
        // In namespaces of their own they share upstream's version, as upstream's suite has
        // them do (its pods and Services never meet).
        let claims = Claims::new([
            &de("ns", &two, 1, &[("team", "d")]),
            &de("ns", &one, 2, &[("other", "d")]),
        ]);
        assert_eq!(claims.version("ns", &one, &["other"]), format!("ns-{base}"));
        // Distinct versions, one clone name: `a-b` + `c-d` and `a` + `b-c-d`.
        let older = de("c", "d", 1, &[("team", "a-b")]);
        let newer = de("b", "c-d", 2, &[("team", "a")]);
        let claims = Claims::new([&older, &newer]);
        let v_old = claims.version("c", "d", &team);
        let v_new = claims.version("b", "c-d", &team);
        assert_eq!((v_old.as_str(), v_new.as_str()), ("c-d", "b-c-d"));
        assert_eq!(
            claims.clone_name(&v_old, "c", "d", "team", "a-b"),
            "a-b-c-d"
        );
        assert_eq!(
            claims.clone_name(&v_new, "b", "c-d", "team", "a"),
            digest_clone_name("b", "c-d", "team", "a")
        );
        // In another namespace the name is free.
        assert_eq!(
            claims.clone_name(&v_new, "b", "c-d", "other", "a"),
            "a-b-c-d"
        );
        // No claims: what a DynamicEnv alone gets.
        assert_eq!(Claims::default().version("a", "b-c", &team), "a-b-c");
    }

    #[test]
    fn digest_forms_stay_unique_where_upstream_collided() {
        assert_ne!(digest_version("a-b", "c"), digest_version("a", "b-c"));
        assert_ne!(
            digest_clone_name("a-b", "c", "ns", "d"),
            digest_clone_name("a", "b-c", "ns", "d")
        );
        let long_dep = "d".repeat(70);
        assert_ne!(
            clone_name("ns", "de", "ns", &format!("{long_dep}1")),
            clone_name("ns", "de", "ns", &format!("{long_dep}2"))
        );
        assert_ne!(
            digest_clone_name("ns", "de", "a", "reviews"),
            digest_clone_name("ns", "de", "b", "reviews")
        );
        assert_ne!(
            digest_destination_rule_name("ns", "de", "a", "reviews", "reviews"),
            digest_destination_rule_name("ns", "de", "a", "reviews", "reviews-alt")
        );
    }

    #[test]
    fn route_prefixes_of_dynamic_envs_whose_names_prefix_each_other_never_prefix_each_other() {
        let names = ["de", "de-2", "de-2-x", "d", "de-"];
        let mut all = Vec::new();
        for de in names {
            for dep in ["reviews", "reviews-v2"] {
                for svc in ["reviews", "reviews-alt"] {
                    all.push((
                        de,
                        route_prefix("default", de, "default", dep, svc, "clone"),
                    ));
                }
            }
        }
        for (de_a, a) in &all {
            assert!(a.starts_with(&route_token("default", de_a)));
            assert!(is_dynamic_env_route(&format!("{a}0")), "{a}");
            for (de_b, b) in &all {
                if a != b {
                    assert!(!b.starts_with(a.as_str()), "{a} prefixes {b}");
                }
                if de_a != de_b {
                    assert!(
                        !b.starts_with(&route_token("default", de_a)),
                        "the token of {de_a} prefixes a route of {de_b}"
                    );
                }
            }
        }
    }

    #[test]
    fn dynamic_env_routes_are_recognised() {
        let p = route_prefix("default", "de", "default", "reviews", "reviews", "c");
        assert!(is_dynamic_env_route(&format!("{p}3")));
        assert!(p.starts_with(&subset_route_token("default", "de", "default", "reviews")));
        assert_eq!(
            token_of_route(&format!("{p}3")),
            Some(route_token("default", "de").as_str())
        );
        assert_eq!(token_of_route("default"), None);
        for other in [
            "dynamic-environment-default-de-reviews-0",
            "reviews",
            "dynamic-environment-",
            "dynamic-environment-0123456789abcdef01",
            "dynamic-environment-0123456789abcdefXY-x",
        ] {
            assert!(!is_dynamic_env_route(other), "{other}");
        }
    }
}
