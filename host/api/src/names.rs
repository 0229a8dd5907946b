//! Names of the objects the scaling controller creates for an ElasticService, shared with the
//! resolver. Each is a valid DNS label of at most 63 characters, unique per public Service: the
//! public name is truncated and a hash of the full name keeps it unique (KubeElasti #294).

use sha2::{Digest, Sha256};

/// The first 10 hex digits of sha256(`name`).
fn hash10(name: &str) -> String {
    hex::encode(Sha256::digest(name.as_bytes()))[..10].to_owned()
}

/// `<public>-<infix>-<hash10>`, the public part cut so the whole fits in 63 characters.
fn capped(public: &str, infix: &str) -> String {
    let suffix = format!("-{infix}-{}", hash10(public));
    let keep = 63 - suffix.len();
    let head = public[..public.len().min(keep)].trim_end_matches('-');
    format!("{head}{suffix}")
}

/// The private Service that selects the workload's pods: `<public>-pvt-<hash10>`.
pub fn private_service_name(public: &str) -> String {
    capped(public, "pvt")
}

/// The EndpointSlice that sends the public Service's traffic to the resolver:
/// `<public>-to-resolver-<hash10>`.
pub fn resolver_slice_name(public: &str) -> String {
    capped(public, "to-resolver")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels_unique_per_service() {
        let short = private_service_name("web");
        assert!(short.starts_with("web-pvt-") && short.len() == "web-pvt-".len() + 10);
        let long_a = "a".repeat(63);
        let long_b = format!("{}b", "a".repeat(62));
        for n in [
            private_service_name(&long_a),
            private_service_name(&long_b),
            resolver_slice_name(&long_a),
        ] {
            assert!(n.len() <= 63, "{n}");
            assert!(!n.starts_with('-') && !n.ends_with('-'));
        }
        assert_ne!(private_service_name(&long_a), private_service_name(&long_b));
        assert_ne!(resolver_slice_name("web"), private_service_name("web"));
    }
}
