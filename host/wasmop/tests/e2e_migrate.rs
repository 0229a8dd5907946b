//! `wasmop migrate` on the manifests upstream ships (Riskified Dynamic Environment's e2e suite,
//! KubeElasti's samples and e2e manifests, read from `../shared/peers` or `$WASMOP_PEERS_DIR`):
//! every object it writes is accepted by the API server with wasmop's CRDs and admission
//! policies (a server-side dry run).

use std::io::Write as _;
use std::process::{Command, Stdio};

use serde::Deserialize as _;
use serde_json::Value;
use wasmop_tests::{install_crds, kubectl};

#[test]
#[ignore = "needs the local control plane; run by `make test`"]
fn migrated_upstream_manifests_are_accepted_by_the_api_server() {
    install_crds();
    let peers = wasmop_tests::peers_dir();
    for (file, kind, count) in [
        (
            "riskified-dynamic-environment/e2e-testing/kuttl/simple-test/00-bookinfo-details.yaml",
            "DynamicEnv",
            1,
        ),
        (
            "riskified-dynamic-environment/e2e-testing/kuttl/consumers-with-and-without-errors/00-bookinfo-details.yaml",
            "DynamicEnv",
            1,
        ),
        (
            "kubeelasti/operator/config/samples/elasti_v1alpha1_elastiservice.yaml",
            "ElasticService",
            2,
        ),
        (
            "kubeelasti/tests/e2e/manifest/test-statefulset/target-elastiservice.yaml",
            "ElasticService",
            1,
        ),
    ] {
        let path = peers.join(file);
        assert!(path.is_file(), "{} (set WASMOP_PEERS_DIR)", path.display());
        let out = Command::new(env!("CARGO_BIN_EXE_wasmop"))
            .args(["migrate", "-f"])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{file}: {stderr}");
        assert_eq!(
            stderr.matches("migrated document").count(),
            count,
            "{file}: {stderr}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let ours: Vec<Value> = serde_yaml::Deserializer::from_str(&stdout)
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|d| d["apiVersion"] == "wasmop.dev/v1alpha1")
            .collect();
        assert_eq!(ours.len(), count, "{file}: {stdout}");
        for doc in ours {
            assert_eq!(doc["kind"], kind);
            let mut child = kubectl()
                .args(["apply", "--dry-run=server", "-n", "default", "-f", "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run kubectl");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(serde_json::to_string(&doc).unwrap().as_bytes())
                .unwrap();
            let applied = child.wait_with_output().unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&applied.stdout),
                String::from_utf8_lossy(&applied.stderr)
            );
            assert!(
                applied.status.success() && said.contains("(server dry run)"),
                "{file}: the API server refused {doc}: {said}"
            );
        }
    }
}
