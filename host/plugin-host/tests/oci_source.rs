//! `oci://` plugin sources against a real OCI registry on loopback (the CNCF distribution
//! registry, built by scripts/setup.d/78-oci-registry.sh): a component pushed as a WebAssembly
//! OCI artifact is pulled back byte for byte and loads by tag pinned with its sha256 and by
//! manifest digest; a wrong pin or an unknown digest is refused; a private repository needs
//! the credentials of a Docker config; a registry that is down fails the entry at its source
//! (retried) while the last good version keeps serving, and the retry loads it once the
//! registry is back. A registry over HTTPS is trusted through the extra CA only.

use wasmop_plugin_host::oci::{self, Credentials, OciOptions, OciReference};
use wasmop_plugin_host::registry::{LocalFetch, Registry, RegistryConfig};
use wasmop_plugin_host::{Hook, PluginRuntime, RuntimeOptions, builtin, sha256_hex};
use wasmop_tests::oci::{OciRegistry, PASSWORD, USER};

/// A `dr` component: `dr-lease` (a builtin) or `dr-none` (built beside them).
fn wasm(name: &str) -> Vec<u8> {
    match builtin::find(name) {
        Some(b) => b.wasm.to_vec(),
        None => std::fs::read(
            wasmop_tests::components_dir().join(format!("{}.wasm", name.replace('-', "_"))),
        )
        .unwrap(),
    }
}

fn registry() -> std::sync::Arc<Registry> {
    Registry::new(
        PluginRuntime::new(RuntimeOptions {
            cache_dir: None,
            max_concurrent_calls: 1,
            pooling: false,
            extra_ca_pem: None,
        })
        .unwrap(),
    )
}

fn reference(s: &str) -> OciReference {
    OciReference::parse(s).unwrap()
}

fn insecure(credentials: Credentials) -> OciOptions<'static> {
    OciOptions {
        insecure: true,
        extra_ca_pem: None,
        credentials,
    }
}

/// One `dr` entry named `remote` with `source`, and `extra` YAML fields (`{…}` flow style).
fn doc(source: &str, extra: &str) -> RegistryConfig {
    RegistryConfig::parse(&format!(
        "plugins:\n  - {{name: remote, hook: dr, source: '{source}', insecure: true{extra}}}\n"
    ))
    .unwrap()
}

#[tokio::test]
#[ignore = "needs the OCI registry (scripts/setup.d/78-oci-registry.sh): run with make test or make e2e"]
async fn a_pushed_component_loads_by_pinned_tag_and_by_digest() {
    let server = OciRegistry::start("pins", false).await;
    let addr = &server.addr;
    let bytes = wasm("dr-lease");
    let tag = reference(&format!("oci://{addr}/plugins/dr:v1"));
    let pushed = oci::push(&tag, bytes.clone(), &insecure(Credentials::Anonymous))
        .await
        .unwrap();
    assert_eq!(pushed.component_sha256, sha256_hex(&bytes));
    assert!(pushed.manifest_digest.starts_with("sha256:"));

    // Pulled back by tag and by digest: the same bytes, the manifest the push wrote.
    let by_digest = tag.at_digest(&pushed.manifest_digest);
    for r in [&tag, &by_digest] {
        let pulled = oci::pull(r, &insecure(Credentials::Anonymous))
            .await
            .unwrap();
        assert_eq!(pulled.bytes, bytes, "{r}");
        assert_eq!(pulled.manifest_digest, pushed.manifest_digest, "{r}");
    }

    let registry = registry();
    let fetch = LocalFetch::default();
    let sha = format!(", sha256: {}", pushed.component_sha256);
    let report = registry.apply(doc(&tag.to_string(), &sha), &fetch).await;
    assert_eq!(report.failed, vec![], "{report:?}");
    let status = registry.status(Hook::Dr, Some("remote"));
    assert!(status.ready, "{status:?}");
    assert_eq!(
        status.serving_digest.as_deref(),
        Some(pushed.component_sha256.as_str())
    );

    // A digest reference is its own pin: no sha256 needed.
    let report = registry
        .apply(doc(&by_digest.to_string(), ""), &fetch)
        .await;
    assert_eq!(report.loaded, ["remote"], "{report:?}");

    // A tag without a pin is refused as it stands, saying how to pin it.
    let report = registry.apply(doc(&tag.to_string(), ""), &fetch).await;
    let (_, e) = &report.failed[0];
    assert!(e.contains("sha256 is required for source oci://"), "{e}");
    assert!(e.contains("`wasmop plugin push` prints it"), "{e}");

    // A wrong pin is refused, the last good version serving.
    let wrong = format!(", sha256: {}", "1".repeat(64));
    let report = registry.apply(doc(&tag.to_string(), &wrong), &fetch).await;
    assert!(report.failed[0].1.contains("sha256 mismatch"), "{report:?}");
    let status = registry.status(Hook::Dr, Some("remote"));
    assert_eq!(
        (status.ready, status.reason.as_str()),
        (false, "LoadFailed")
    );
    assert_eq!(
        status.serving_digest.as_deref(),
        Some(pushed.component_sha256.as_str())
    );
    assert!(
        registry.retrying("remote"),
        "a mismatch at the source is retried"
    );

    // So is a digest the registry does not have.
    let unknown = tag.at_digest(&format!("sha256:{}", "2".repeat(64)));
    let report = registry.apply(doc(&unknown.to_string(), ""), &fetch).await;
    let (_, e) = &report.failed[0];
    assert!(e.starts_with(&unknown.to_string()), "{e}");
    assert!(e.to_lowercase().contains("manifest unknown"), "{e}");

    // Without `insecure`, the registry is spoken to over TLS, which a plain HTTP one fails.
    let https = RegistryConfig::parse(&format!(
        "plugins:\n  - {{name: remote, hook: dr, source: '{tag}'{sha}}}\n"
    ))
    .unwrap();
    let report = registry.apply(https, &fetch).await;
    assert_eq!(
        report.failed.len(),
        1,
        "no silent downgrade to HTTP: {report:?}"
    );

    // Plain HTTP is for loopback registries only.
    let remote = doc("oci://registry.example/plugins/dr:v1", &sha);
    let report = registry.apply(remote, &fetch).await;
    assert!(
        report.failed[0]
            .1
            .contains("insecure: true (plain HTTP) is allowed only for a registry on loopback"),
        "{report:?}"
    );

    // Not an artifact of the WebAssembly layout: refused with what was found.
    let e = oci::pull(
        &reference(&format!("oci://{addr}/plugins/dr:missing")),
        &insecure(Credentials::Anonymous),
    )
    .await
    .unwrap_err();
    assert!(e.to_lowercase().contains("manifest unknown"), "{e}");
}

#[tokio::test]
#[ignore = "needs the OCI registry (scripts/setup.d/78-oci-registry.sh): run with make test or make e2e"]
async fn a_private_repository_needs_the_credentials_of_the_pull_secret() {
    let server = OciRegistry::start("private", true).await;
    let tag = reference(&format!("oci://{}/private/dr:v1", server.addr));
    let bytes = wasm("dr-none");
    let e = oci::push(&tag, bytes.clone(), &insecure(Credentials::Anonymous))
        .await
        .unwrap_err();
    assert!(e.contains("no credentials were sent"), "{e}");
    let user = Credentials::Basic {
        username: USER.into(),
        password: PASSWORD.into(),
    };
    let pushed = oci::push(&tag, bytes, &insecure(user)).await.unwrap();

    let registry = registry();
    let sha = format!(", sha256: {}", pushed.component_sha256);
    let anonymous = registry
        .apply(doc(&tag.to_string(), &sha), &LocalFetch::default())
        .await;
    let (_, e) = &anonymous.failed[0];
    assert!(e.contains("Not authorized"), "{e}");
    assert!(
        e.contains("no credentials were sent: the repository is private"),
        "{e}"
    );

    // The pull Secret's credentials (here a Docker config standing in for it).
    let with_secret = format!("{sha}, pullSecret: registry-creds");
    let no_config = registry
        .apply(doc(&tag.to_string(), &with_secret), &LocalFetch::default())
        .await;
    assert!(
        no_config.failed[0]
            .1
            .contains("pullSecret registry-creds is read in the cluster"),
        "{no_config:?}"
    );
    let wrong = LocalFetch {
        docker_config: Some(server.docker_config(USER, "wrong").into_bytes()),
        ..LocalFetch::default()
    };
    let report = registry
        .apply(
            doc(&tag.to_string(), &format!("{with_secret}, settings: {{}}")),
            &wrong,
        )
        .await;
    assert_eq!(
        report.failed.len(),
        1,
        "wrong credentials are refused: {report:?}"
    );
    let fetch = LocalFetch {
        docker_config: Some(server.docker_config(USER, PASSWORD).into_bytes()),
        ..LocalFetch::default()
    };
    let report = registry
        .apply(doc(&tag.to_string(), &with_secret), &fetch)
        .await;
    assert_eq!(report.loaded, ["remote"], "{report:?}");
}

#[tokio::test]
#[ignore = "needs the OCI registry (scripts/setup.d/78-oci-registry.sh): run with make test or make e2e"]
async fn a_registry_that_is_down_is_retried_while_the_last_good_version_serves() {
    let mut server = OciRegistry::start("down", false).await;
    let tag = reference(&format!("oci://{}/plugins/dr:stable", server.addr));
    let options = insecure(Credentials::Anonymous);
    let v1 = oci::push(&tag, wasm("dr-lease"), &options).await.unwrap();
    let registry = registry();
    let fetch = LocalFetch::default();
    let pinned = |sha: &str| doc(&tag.to_string(), &format!(", sha256: {sha}"));
    let report = registry.apply(pinned(&v1.component_sha256), &fetch).await;
    assert!(report.loaded.contains(&"remote".to_owned()), "{report:?}");

    // The tag moves to v2, the registry goes down, and the registry document pins v2.
    let v2 = oci::push(&tag, wasm("dr-none"), &options).await.unwrap();
    server.stop();
    let report = registry.apply(pinned(&v2.component_sha256), &fetch).await;
    let (_, e) = &report.failed[0];
    assert!(e.starts_with(&tag.to_string()), "{e}");
    assert!(e.contains("Connection refused"), "{e}");
    assert!(registry.retrying("remote"));
    let status = registry.status(Hook::Dr, Some("remote"));
    assert_eq!(status.reason, "LoadFailed");
    assert_eq!(
        status.serving_digest.as_deref(),
        Some(v1.component_sha256.as_str()),
        "the last good version keeps serving"
    );
    // A retry while it is still down fails as before and says nothing new.
    let report = registry.retry(&fetch).await;
    assert_eq!(
        (report.loaded.len(), report.failed.len()),
        (0, 0),
        "{report:?}"
    );

    server.restart().await;
    let report = registry.retry(&fetch).await;
    assert_eq!(report.loaded, ["remote"], "{report:?}");
    let status = registry.status(Hook::Dr, Some("remote"));
    assert!(status.ready, "{status:?}");
    assert_eq!(
        status.serving_digest.as_deref(),
        Some(v2.component_sha256.as_str())
    );
    assert!(!registry.retrying("remote"));
}

#[tokio::test]
#[ignore = "needs the OCI registry (scripts/setup.d/78-oci-registry.sh): run with make test or make e2e"]
async fn a_registry_over_tls_is_trusted_through_the_extra_ca_only() {
    let ca = wasmop_tests::tls::TestCa::new("wasmop OCI test CA");
    let server = OciRegistry::start_tls("tls", &ca).await;
    let tag = reference(&format!("oci://{}/plugins/dr:v1", server.addr));
    let bytes = wasm("dr-lease");
    let untrusted = OciOptions::default();
    let e = oci::push(&tag, bytes.clone(), &untrusted)
        .await
        .unwrap_err();
    assert!(e.starts_with(&tag.to_string()), "{e}");
    assert!(
        e.contains("UnknownIssuer"),
        "an unknown CA is refused, in words: {e}"
    );
    let trusting = OciOptions {
        extra_ca_pem: Some(ca.pem().as_bytes()),
        ..OciOptions::default()
    };
    let pushed = oci::push(&tag, bytes.clone(), &trusting).await.unwrap();
    assert_eq!(oci::pull(&tag, &trusting).await.unwrap().bytes, bytes);

    let entry = RegistryConfig::parse(&format!(
        "plugins:\n  - {{name: remote, hook: dr, source: '{tag}', sha256: {}}}\n",
        pushed.component_sha256
    ))
    .unwrap();
    let registry = registry();
    let report = registry.apply(entry.clone(), &LocalFetch::default()).await;
    assert!(report.failed[0].1.contains("UnknownIssuer"), "{report:?}");
    let fetch = LocalFetch {
        extra_ca_pem: Some(ca.pem().as_bytes().to_vec()),
        ..LocalFetch::default()
    };
    let report = registry.retry(&fetch).await;
    assert_eq!(report.loaded, ["remote"], "{report:?}");
}
