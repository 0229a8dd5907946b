//! `oci://` plugin sources end to end, against the CNCF distribution registry on loopback
//! (scripts/setup.d/78-oci-registry.sh) with htpasswd auth:
//!
//! - `wasmop plugin push` and `plugin pull` move a component with the credentials of a Docker
//!   config and print the `source:` and `sha256:` to paste into `plugins.yaml`;
//! - the operator, under the chart's RBAC plus a Role for its pull Secret (as the chart
//!   renders for a `pullSecret`), pulls the entry with the Secret's credentials, refuses it
//!   without them, hot-reloads when the tag is pushed again with a new pin, and when the
//!   registry is down keeps the last good version serving (Warning Event, `PluginReady=False`
//!   on the DynamicEnv) until a retry loads the entry once the registry is back.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use wasmop_api::dynamicenv::DynamicEnv;
use wasmop_plugin_host::sha256_hex;
use wasmop_tests::oci::{OciRegistry, PASSWORD, USER};
use wasmop_tests::{Operator, dump_dir, eventually, http_get, kubectl_ok, with_temp_ns};

const TIMEOUT: Duration = Duration::from_secs(60);

fn component(file: &str) -> std::path::PathBuf {
    wasmop_tests::components_dir().join(file)
}

fn wasmop(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasmop"))
        .args(args)
        .env_remove("DOCKER_CONFIG")
        .env("HOME", dump_dir())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What a successful `plugin push` printed: (the component's sha256, the `source:` by
/// manifest digest).
fn pushed(o: &Output) -> (String, String) {
    let out = text(o);
    assert!(o.status.success(), "{out}");
    wasmop_tests::oci::pushed(&out)
}

/// `plugin push FILE REFERENCE --insecure --docker-config CONFIG`.
fn push(file: &Path, reference: &str, config: &Path) -> Output {
    wasmop(&[
        "plugin",
        "push",
        file.to_str().unwrap(),
        reference,
        "--insecure",
        "--docker-config",
        config.to_str().unwrap(),
    ])
}

#[tokio::test]
#[ignore = "needs the OCI registry (scripts/setup.d/78-oci-registry.sh): run with make test or make e2e"]
async fn plugin_push_and_pull_move_a_component_with_the_docker_config_credentials() {
    let server = OciRegistry::start("cli", true).await;
    let dir = dump_dir().join(format!("oci-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.json");
    std::fs::write(&config, server.docker_config(USER, PASSWORD)).unwrap();
    let file = component("routing_istio.wasm");
    let reference = format!("oci://{}/plugins/router:v1", server.addr);

    let out = push(&file, &reference, &config);
    let (sha, by_digest) = pushed(&out);
    assert_eq!(sha, sha256_hex(&std::fs::read(&file).unwrap()));
    assert!(
        text(&out).contains(&format!(
            "source: {reference}\n    sha256: \"{sha}\"\n    insecure: true"
        )),
        "{}",
        text(&out)
    );

    // Pulled back by tag and by digest: the same bytes.
    for (r, name) in [
        (reference.as_str(), "by-tag.wasm"),
        (by_digest.as_str(), "by-digest.wasm"),
    ] {
        let output = dir.join(name);
        let pulled = wasmop(&[
            "plugin",
            "pull",
            r,
            "-o",
            output.to_str().unwrap(),
            "--insecure",
            "--docker-config",
            config.to_str().unwrap(),
        ]);
        assert!(pulled.status.success(), "{}", text(&pulled));
        assert!(
            text(&pulled).contains(&format!("sha256 {sha}")),
            "{}",
            text(&pulled)
        );
        assert_eq!(
            std::fs::read(&output).unwrap(),
            std::fs::read(&file).unwrap()
        );
    }

    // Without credentials (no Docker config anywhere), the private repository refuses.
    let anonymous = wasmop(&[
        "plugin",
        "pull",
        &reference,
        "-o",
        "/dev/null",
        "--insecure",
    ]);
    assert!(!anonymous.status.success());
    assert!(
        text(&anonymous).contains("no credentials were sent"),
        "{}",
        text(&anonymous)
    );
    // Plain HTTP only when asked, and only on loopback.
    let tls = wasmop(&[
        "plugin",
        "pull",
        &reference,
        "-o",
        "/dev/null",
        "--docker-config",
        config.to_str().unwrap(),
    ]);
    assert!(!tls.status.success(), "{}", text(&tls));
    let remote = wasmop(&[
        "plugin",
        "pull",
        "oci://registry.example/plugins/router:v1",
        "-o",
        "/dev/null",
        "--insecure",
    ]);
    assert!(
        text(&remote)
            .contains("insecure: true (plain HTTP) is allowed only for a registry on loopback"),
        "{}",
        text(&remote)
    );
    // Not a component: refused before anything is sent.
    let not_wasm = dir.join("not.wasm");
    std::fs::write(&not_wasm, "hello").unwrap();
    let refused = push(&not_wasm, &reference, &config);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("not a WebAssembly component"),
        "{}",
        text(&refused)
    );
}

async fn set_registry(client: &Client, ns: &str, doc: &str) {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("wasmop-plugins".into());
    cm.metadata.namespace = Some(ns.into());
    cm.data = Some([("plugins.yaml".to_owned(), doc.to_owned())].into());
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "wasmop-plugins",
            &PatchParams::apply("wasmop-e2e").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
}

/// The `/plugins` entry of `name`.
fn plugin_entry(addr: &str, name: &str) -> Option<Value> {
    let (status, body) = http_get(addr, "/plugins")?;
    let v: Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    v["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
}

fn plugin_ready(de: &DynamicEnv) -> Option<Condition> {
    de.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "PluginReady")
        .cloned()
}

/// Waits for an Event with `reason` on ConfigMap `wasmop-plugins` in `ns` whose note contains
/// `note`.
async fn registry_event(client: &Client, ns: &str, reason: &str, note: &str) -> Event {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    eventually(
        &format!("a {reason} Event saying {note:?}"),
        TIMEOUT,
        async || {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=wasmop-plugins"))
                .await
                .ok()?;
            list.items.into_iter().find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.message.as_deref().is_some_and(|m| m.contains(note))
            })
        },
    )
    .await
}

/// The Role the chart renders for an entry's `pullSecret` (templates/rbac.yaml), in `ns`.
fn grant_pull_secret(ns: &str, secret: &str) {
    let yaml = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: wasmop-pull-secrets, namespace: {ns}}}\n\
         rules: [{{apiGroups: [''], resources: [secrets], resourceNames: [{secret}], verbs: [get]}}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: wasmop-pull-secrets, namespace: {ns}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: wasmop-pull-secrets}}\n\
         subjects: [{{kind: ServiceAccount, name: wasmop, namespace: wasmop-system}}]\n"
    );
    let file = dump_dir().join(format!("{ns}-pull-secret-rbac.yaml"));
    std::fs::write(&file, yaml).unwrap();
    kubectl_ok(&["apply", "-f", file.to_str().unwrap()]);
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh) and the OCI registry: run with make test or make e2e"]
async fn an_oci_source_loads_with_its_pull_secret_hot_reloads_and_outlives_its_registry() {
    with_temp_ns("oci", |client: Client, ns: String| async move {
        let mut server = OciRegistry::start(&format!("e2e-{ns}"), true).await;
        let config = dump_dir().join(format!("{ns}-docker-config.json"));
        std::fs::write(&config, server.docker_config(USER, PASSWORD)).unwrap();
        let tag = format!("oci://{}/plugins/router:stable", server.addr);
        let (v1, v1_by_digest) = pushed(&push(&component("routing_istio.wasm"), &tag, &config));

        let entry = |source: &str, pin: &str, secret: bool| {
            let pin = if pin.is_empty() { String::new() } else { format!("\n    sha256: \"{pin}\"") };
            let secret = if secret { "\n    pullSecret: registry-creds" } else { "" };
            format!(
                "plugins:\n  - name: custom-routing\n    hook: routing\n    source: {source}{pin}\n    insecure: true{secret}\ndefaults: {{routing: custom-routing}}\n"
            )
        };
        // Without the pull Secret the private repository refuses the anonymous pull.
        set_registry(&client, &ns, &entry(&tag, &v1, false)).await;
        let mut operator = Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &[]).await;
        let addr = operator.addr.clone();
        let refused = eventually("custom-routing refused without credentials", TIMEOUT, async || {
            assert!(operator.process.alive(), "the operator exited:\n{}", operator.process.log());
            plugin_entry(&addr, "custom-routing").filter(|p| p["reason"] == "NotLoaded")
        })
        .await;
        let message = refused["message"].as_str().unwrap();
        assert!(message.contains("no credentials were sent"), "{refused}");
        assert!(message.contains("(retried with backoff)"), "{refused}");

        // With it (the Secret, and the Role the chart grants for it), the entry loads.
        grant_pull_secret(&ns, "registry-creds");
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "registry-creds", "namespace": ns},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64(&std::fs::read(&config).unwrap())},
        });
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
        secrets.create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();
        set_registry(&client, &ns, &entry(&tag, &v1, true)).await;
        let loaded = eventually("custom-routing v1 loaded from the registry", TIMEOUT, async || {
            plugin_entry(&addr, "custom-routing").filter(|p| p["ready"] == true)
        })
        .await;
        assert_eq!(loaded["servingDigest"], v1.as_str());

        let des: Api<DynamicEnv> = Api::namespaced(client.clone(), &ns);
        let de: DynamicEnv = serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv", "metadata": {"name": "de"},
            "spec": {"istioMatches": [{"headers": {"end-user": {"exact": "jason"}}}],
                     "subsets": [{"name": "reviews", "namespace": ns, "containers": [{"containerName": "app"}]}],
                     "plugin": "custom-routing"}
        }))
        .unwrap();
        des.create(&PostParams::default(), &de).await.unwrap();
        eventually("PluginReady=True on the DynamicEnv", TIMEOUT, async || {
            plugin_ready(&des.get("de").await.ok()?).filter(|c| c.status == "True")
        })
        .await;

        // The tag pushed again and the pin moved: hot reload, no restart.
        let pid = operator.process.id();
        let (v2, _) = pushed(&push(&component("wasmop_hostile_fixture.wasm"), &tag, &config));
        set_registry(&client, &ns, &entry(&tag, &v2, true)).await;
        eventually("custom-routing v2 serving", TIMEOUT, async || {
            plugin_entry(&addr, "custom-routing")
                .filter(|p| p["ready"] == true && p["servingDigest"] == v2.as_str())
        })
        .await;
        assert!(operator.process.alive() && operator.process.id() == pid, "no restart");

        // The registry goes down and the registry moves back to v1 by digest: v2 keeps
        // serving, with a Warning Event and PluginReady=False, until a retry finds the
        // registry back.
        server.stop();
        set_registry(&client, &ns, &entry(&v1_by_digest, "", true)).await;
        let failed = eventually("custom-routing fails at its source", TIMEOUT, async || {
            plugin_entry(&addr, "custom-routing").filter(|p| p["reason"] == "LoadFailed")
        })
        .await;
        assert_eq!(failed["servingDigest"], v2.as_str(), "the last good version serves");
        assert!(failed["message"].as_str().unwrap().contains("Connection refused"), "{failed}");
        let event = registry_event(&client, &ns, "PluginLoadFailed", "Connection refused").await;
        assert!(event.message.as_deref().unwrap().contains("(retried with backoff)"), "{event:?}");
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        let cond = eventually("PluginReady=False on the DynamicEnv", TIMEOUT, async || {
            plugin_ready(&des.get("de").await.ok()?).filter(|c| c.status == "False")
        })
        .await;
        assert_eq!(cond.reason, "LoadFailed");

        server.restart().await;
        let back = eventually("custom-routing v1 loaded by a retry", TIMEOUT, async || {
            plugin_entry(&addr, "custom-routing").filter(|p| p["ready"] == true)
        })
        .await;
        assert_eq!(back["servingDigest"], v1.as_str());
        registry_event(&client, &ns, "PluginsLoaded", "custom-routing").await;
        eventually("PluginReady=True again", TIMEOUT, async || {
            plugin_ready(&des.get("de").await.ok()?).filter(|c| c.status == "True")
        })
        .await;
    })
    .await;
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
