//! Helpers for the end-to-end tests, which run against the local control plane of
//! `deploy/dev/cluster.sh` (the test command starts it and exports `KUBECONFIG`).
//!
//! Every test works in its own throwaway namespace ([`with_temp_ns`]); when a test fails, the
//! namespace's objects are dumped to stderr and to `target/e2e-dumps/<namespace>.yaml`.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Api, Client, Resource};

/// Kinds dumped when a test fails.
pub const DUMP_KINDS: &str = "all,configmaps,endpointslices,events,leases,virtualservices.networking.istio.io,destinationrules.networking.istio.io";

/// A client for the local control plane.
///
/// # Panics
/// When `KUBECONFIG` is unset or unusable: these tests must run through `make test`.
pub async fn client() -> Client {
    assert!(
        std::env::var_os("KUBECONFIG").is_some(),
        "KUBECONFIG is not set: run the tests with `make test`, which starts the local control plane"
    );
    Client::try_default()
        .await
        .expect("cannot build a client from KUBECONFIG")
}

/// A `kubectl` command (the one built by deploy/dev comes first on PATH in the test command).
pub fn kubectl() -> Command {
    Command::new("kubectl")
}

/// Where failed tests' namespace dumps are written.
pub fn dump_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("e2e-dumps")
}

fn unique_name(hint: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let hint: String = hint
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(30)
        .collect();
    format!(
        "e2e-{}-{:x}{:x}",
        hint.to_ascii_lowercase(),
        nanos & 0xfffff,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Dumps the objects of `ns` to stderr and to `target/e2e-dumps/<ns>.yaml`; returns the file.
pub fn dump_namespace(ns: &str) -> PathBuf {
    let out = kubectl()
        .args(["get", DUMP_KINDS, "-n", ns, "-o", "yaml"])
        .output();
    let text = match out {
        Ok(o) => format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("cannot run kubectl: {e}"),
    };
    let dir = dump_dir();
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join(format!("{ns}.yaml"));
    let _ = std::fs::write(&file, &text);
    eprintln!(
        "==== objects in namespace {ns} (also in {}) ====\n{text}",
        file.display()
    );
    file
}

/// Runs `test` with a fresh namespace; dumps the namespace if `test` panics, deletes it either
/// way, and re-raises the panic.
pub async fn with_temp_ns<F, Fut>(hint: &str, test: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let client = client().await;
    let name = unique_name(hint);
    let api: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.meta_mut().name = Some(name.clone());
    ns.meta_mut().labels = Some([("wasmop.dev/e2e".to_owned(), "true".to_owned())].into());
    api.create(&PostParams::default(), &ns)
        .await
        .expect("create the test namespace");
    let result = AssertUnwindSafe(test(client.clone(), name.clone()))
        .catch_unwind()
        .await;
    if result.is_err() {
        dump_namespace(&name);
    }
    let _ = api.delete(&name, &DeleteParams::background()).await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Waits until `cond` holds for object `name`, or panics after `timeout` naming what it waited for.
pub async fn wait_until<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    cond: impl Condition<K>,
) -> K
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, cond)).await {
        Ok(Ok(Some(obj))) => obj,
        Ok(Ok(None)) => panic!("{name} was deleted while waiting for: {what}"),
        Ok(Err(e)) => panic!("watch failed while waiting for {what}: {e}"),
        Err(_) => panic!("timed out after {timeout:?} waiting for {name}: {what}"),
    }
}

/// Applies `crds/` (server-side, idempotent) and waits until every CRD is Established.
///
/// # Panics
/// When kubectl fails or a CRD does not become Established within a minute.
pub fn install_crds() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../crds");
    let out = kubectl()
        .args([
            "apply",
            "--server-side",
            "--field-manager=wasmop-e2e",
            "-f",
            dir,
        ])
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl apply -f crds/ failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl()
        .args([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            dir,
        ])
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "CRDs not Established: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
