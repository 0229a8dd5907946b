//! The names wasmop generates for a DynamicEnv: the version label value, the clone Deployments,
//! the DestinationRules and the HTTP route names.
//!
//! Upstream (docs/routing.md) truncates `<ns[:20]>-<name[:40]>` and appends it to
//! the deployment name, so names can exceed 63 characters, and two DynamicEnvs can get the same
//! name (`a-b`/`c` and `a`/`b-c`, or names sharing their first 40 characters). Here every
//! generated name is a readable part, cut so the whole fits, then `-` and 8 hex characters of
//! the sha256 of the identity it stands for (the namespace and name of every object involved,
//! NUL-separated). The result is an RFC 1123 DNS label of at most 63 characters: lowercase
//! letters, digits and `-`, starting and ending with a letter or digit.
//!
//! Route names are not Kubernetes names and need no cap; they must instead be recognisable by
//! their owner. Every route a DynamicEnv owns starts with
//! `dynamic-environment-<de><subset><host>-` where `<de>` is 8, `<subset>` 6 and `<host>` 4 hex
//! characters of sha256 digests; the readable clone name follows. Because the digests have
//! fixed lengths, the prefix of one DynamicEnv (or one subset, or one host of a subset) never
//! prefixes the routes of another, whatever their names.

use sha2::{Digest, Sha256};

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

/// The version of a DynamicEnv: the value of the version label on its clones' pods and the
/// name of its DestinationRule subsets. Readable part `<ns[:20]>-<name[:40]>` as upstream.
pub fn version(de_ns: &str, de_name: &str) -> String {
    let ns: String = de_ns.chars().take(20).collect();
    let name: String = de_name.chars().take(40).collect();
    dns_label(&format!("{ns}-{name}"), &["version", de_ns, de_name])
}

/// The clone of Deployment `ns/deployment` for DynamicEnv `de_ns/de_name` (upstream's
/// `U = <deployment>-V`); also the value of the `x-dynamic-env` response header.
pub fn clone_name(de_ns: &str, de_name: &str, ns: &str, deployment: &str) -> String {
    let ns20: String = de_ns.chars().take(20).collect();
    dns_label(
        &format!("{deployment}-{ns20}-{de_name}"),
        &["clone", de_ns, de_name, ns, deployment],
    )
}

/// The DestinationRule of the clone of `ns/deployment` for service host `service` (upstream's
/// `U-<service>`).
pub fn destination_rule_name(
    de_ns: &str,
    de_name: &str,
    ns: &str,
    deployment: &str,
    service: &str,
) -> String {
    let ns20: String = de_ns.chars().take(20).collect();
    dns_label(
        &format!("{deployment}-{ns20}-{de_name}-{service}"),
        &["destinationrule", de_ns, de_name, ns, deployment, service],
    )
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
/// subset's token, 4 hex characters of the host, `-`, the clone name and `-`. The plugin names
/// its copies `<prefix><index>`.
pub fn route_prefix(
    de_ns: &str,
    de_name: &str,
    ns: &str,
    deployment: &str,
    service: &str,
) -> String {
    format!(
        "{}{}-{}-",
        subset_route_token(de_ns, de_name, ns, deployment),
        &digest(&["host", ns, service])[..HOST_TOKEN_LEN],
        clone_name(de_ns, de_name, ns, deployment)
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

    fn is_dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= MAX_NAME
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn every_name_is_a_dns_label_of_at_most_63_characters() {
        let long = "x".repeat(253);
        let dotted = "my.app.v2";
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
        ] {
            for name in [
                version(de_ns, de_name),
                clone_name(de_ns, de_name, ns, dep),
                destination_rule_name(de_ns, de_name, ns, dep, svc),
            ] {
                assert!(is_dns_label(&name), "{name:?}");
            }
        }
    }

    #[test]
    fn names_keep_a_readable_part() {
        let u = clone_name("default", "sample", "default", "reviews");
        assert!(u.starts_with("reviews-default-sample-"), "{u}");
        assert_eq!(u.len(), "reviews-default-sample-".len() + NAME_HASH_LEN);
        assert!(version("default", "sample").starts_with("default-sample-"));
        assert!(
            destination_rule_name("default", "sample", "default", "reviews", "reviews-alt")
                .starts_with("reviews-default-sample-reviews-alt-")
        );
    }

    #[test]
    fn names_stay_unique_where_upstream_collided() {
        // Upstream: `<ns>-<name>` is the same for a-b/c and a/b-c.
        assert_ne!(version("a-b", "c"), version("a", "b-c"));
        assert_ne!(
            clone_name("a-b", "c", "ns", "d"),
            clone_name("a", "b-c", "ns", "d")
        );
        // Upstream: names sharing their first 40 characters.
        let base = "x".repeat(40);
        assert_ne!(
            version("ns", &format!("{base}-one")),
            version("ns", &format!("{base}-two"))
        );
        let long_dep = "d".repeat(70);
        assert_ne!(
            clone_name("ns", "de", "ns", &format!("{long_dep}1")),
            clone_name("ns", "de", "ns", &format!("{long_dep}2"))
        );
        // The same deployment name in two namespaces.
        assert_ne!(
            clone_name("ns", "de", "a", "reviews"),
            clone_name("ns", "de", "b", "reviews")
        );
        assert_ne!(
            destination_rule_name("ns", "de", "a", "reviews", "reviews"),
            destination_rule_name("ns", "de", "a", "reviews", "reviews-alt")
        );
    }

    #[test]
    fn route_prefixes_of_dynamic_envs_whose_names_prefix_each_other_never_prefix_each_other() {
        let names = ["de", "de-2", "de-2-x", "d", "de-"];
        let mut all = Vec::new();
        for de in names {
            for dep in ["reviews", "reviews-v2"] {
                for svc in ["reviews", "reviews-alt"] {
                    all.push((de, route_prefix("default", de, "default", dep, svc)));
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
        let p = route_prefix("default", "de", "default", "reviews", "reviews");
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
