//! The DynamicEnv CRD's CEL rules reject what upstream's webhook rejected, naming the field.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use wasmop_tests::{install_crds, with_temp_ns};

fn api(client: Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("wasmop.dev", "v1alpha1", "DynamicEnv");
    Api::namespaced_with(client, ns, &ApiResource::from_gvk(&gvk))
}

fn de(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "wasmop.dev/v1alpha1", "kind": "DynamicEnv", "metadata": {"name": name}, "spec": spec}))
        .unwrap()
}

fn valid_spec() -> Value {
    json!({
        "istioMatches": [{"headers": {"end-user": {"exact": "jason"}}}],
        "subsets": [{"name": "reviews", "namespace": "default", "defaultVersion": "shared",
                     "containers": [{"containerName": "app", "image": "reviews:2"}]}]
    })
}

async fn rejected(api: &Api<DynamicObject>, name: &str, spec: Value, needle: &str) {
    match api.create(&PostParams::default(), &de(name, spec)).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            assert!(
                e.message.contains(needle),
                "expected {needle:?} in: {}",
                e.message
            );
        }
        other => panic!("{name} must be rejected with {needle:?}, got {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn invalid_dynamic_envs_are_rejected_with_the_field_named() {
    install_crds();
    with_temp_ns("de-api", |client: Client, ns: String| async move {
        let api = api(client, &ns);
        api.create(&PostParams::default(), &de("ok", valid_spec()))
            .await
            .expect("a valid DynamicEnv is accepted");

        let mut s = valid_spec();
        s["istioMatches"] = json!([]);
        rejected(&api, "no-match", s, "at least one istioMatch is required").await;
        let mut s = valid_spec();
        s["istioMatches"] = json!([{}]);
        rejected(&api, "empty-match", s, "empty IstioMatch is invalid").await;
        let mut s = valid_spec();
        s["istioMatches"] = json!([{"headers": {"h": {"exact": "a", "prefix": "b"}}}]);
        rejected(&api, "two-ways", s, "exactly one of exact, prefix or regex").await;
        // What Istio's validation refuses.
        let mut s = valid_spec();
        s["istioMatches"] = json!([{"headers": {"end-user": {"regex": "^(dev|qa"}}}]);
        rejected(
            &api,
            "bad-regex",
            s,
            "error parsing regexp: missing closing )",
        )
        .await;
        let mut s = valid_spec();
        s["istioMatches"] = json!([{"headers": {"end-user": {"prefix": ""}}}]);
        rejected(
            &api,
            "empty-prefix",
            s,
            "prefix string match should not be empty",
        )
        .await;
        let mut s = valid_spec();
        s["istioMatches"] = json!([{"headers": {"end-user": {"regex": "a".repeat(1025)}}}]);
        rejected(&api, "long-regex", s, "Too long").await;
        let mut s = valid_spec();
        s["subsets"][0]["replicas"] = json!(0);
        rejected(&api, "zero", s, "spec.subsets[0].replicas: Invalid value").await;
        let mut s = valid_spec();
        s["subsets"][0]["containers"] = json!([]);
        rejected(
            &api,
            "no-containers",
            s,
            "at least one container or initContainer",
        )
        .await;
        let mut s = valid_spec();
        s["subsets"][0]["containers"] = json!([{"containerName": "app"}, {"containerName": "app"}]);
        rejected(
            &api,
            "dup-container",
            s,
            "spec.subsets[0].containers[1]: Duplicate value",
        )
        .await;
        let mut s = valid_spec();
        s["subsets"] = json!([s["subsets"][0].clone(), s["subsets"][0].clone()]);
        rejected(&api, "dup-subset", s, "spec.subsets[1]: Duplicate value").await;

        let pp = PatchParams::apply("wasmop-e2e").force();
        let update = |spec: Value| Patch::Apply(de("ok", spec));
        let mut s = valid_spec();
        s["istioMatches"][0]["headers"]["end-user"]["exact"] = json!("mike");
        let e = api
            .patch("ok", &pp, &update(s))
            .await
            .expect_err("istioMatches is immutable");
        assert!(e.to_string().contains("istioMatches is immutable"), "{e}");
        let mut s = valid_spec();
        s["subsets"][0]["defaultVersion"] = json!("v2");
        let e = api
            .patch("ok", &pp, &update(s))
            .await
            .expect_err("defaultVersion is immutable");
        assert!(e.to_string().contains("defaultVersion is immutable"), "{e}");
        let mut s = valid_spec();
        s["subsets"][0]["containers"][0]["image"] = json!("reviews:3");
        api.patch("ok", &pp, &update(s))
            .await
            .expect("changing an image is allowed");
    })
    .await;
}
