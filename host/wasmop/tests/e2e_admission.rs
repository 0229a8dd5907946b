//! E2E: who may create a DynamicEnv. The chart's ValidatingAdmissionPolicies
//! (deploy/helm/wasmop/templates/admission-policy.yaml) admit a DynamicEnv, or a change of its
//! spec, only from a user who may create and update Deployments, create DestinationRules and
//! patch VirtualServices in every namespace its subsets and consumers name. Users are
//! impersonated (`kubectl --as`) and hold the built-in `edit` role, into which the chart
//! aggregates its `wasmop-edit` role (DynamicEnvs), plus a Role on Istio's DestinationRules and
//! VirtualServices (Istio's CRDs bring no aggregated roles). Each test on the local control
//! plane works in a throwaway namespace `a` and a second one, `b`, it creates and deletes; one
//! more test, without a cluster, checks that the committed policies cover every subset and
//! consumer the CRD allows within the CEL cost budget.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::process::Output;
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, Client};
use serde_json::{Value, json};
use wasmop_controllers::routing::names;
use wasmop_tests::dr::{audit_writes, operator_user};
use wasmop_tests::routing::{bookinfo, dynamic_env, get, vs_http, wait_state};
use wasmop_tests::{
    Operator, dump_namespace, eventually, install_crds, install_operator_rbac, kubectl, kubectl_ok,
    with_temp_ns,
};

const TIMEOUT: Duration = Duration::from_secs(90);
const REVIEWS_V3: &str = "docker.io/istio/examples-bookinfo-reviews-v3:1.20.3";
const REVIEWS_V4: &str = "docker.io/istio/examples-bookinfo-reviews-v4:1.20.3";
const DE: &str = "wasmop.dev/v1alpha1";
const USER: &str = "dev-a";

/// Runs `test` with throwaway namespaces `a` (from [`with_temp_ns`]) and `b`; `b` is dumped if
/// `test` panics and deleted either way.
async fn with_two_namespaces<F, Fut>(hint: &str, test: F)
where
    F: FnOnce(Client, String, String) -> Fut,
    Fut: Future<Output = ()>,
{
    with_temp_ns(hint, |client: Client, a: String| async move {
        let b = format!("{a}-b");
        kubectl_ok(&["create", "namespace", &b]);
        let result = AssertUnwindSafe(test(client, a, b.clone()))
            .catch_unwind()
            .await;
        if result.is_err() {
            dump_namespace(&b);
        }
        let _ = kubectl()
            .args(["delete", "namespace", &b, "--wait=false"])
            .output();
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    })
    .await;
}

/// Installs the CRDs and deploy/manifests (idempotent): the policies, their bindings and the
/// aggregated user roles are cluster-scoped.
fn install_policy() {
    install_crds();
    install_operator_rbac();
}

/// Gives `user` the built-in `edit` role in `ns`, and rights on Istio's DestinationRules and
/// VirtualServices there; waits until the API server grants them, DynamicEnvs included
/// (through the aggregation of `wasmop-edit` into `edit`).
async fn grant_edit(ns: &str, user: &str) {
    let yaml = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {user}-edit, namespace: {ns}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}\n\
         subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: istio-edit, namespace: {ns}}}\n\
         rules: [{{apiGroups: [networking.istio.io], resources: [destinationrules, virtualservices],\n\
         verbs: [get, list, watch, create, update, patch, delete]}}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {user}-istio-edit, namespace: {ns}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: istio-edit}}\n\
         subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n"
    );
    let file = wasmop_tests::dump_dir().join(format!("{ns}-{user}-rbac.yaml"));
    std::fs::write(&file, yaml).expect("write the user's RBAC");
    kubectl_ok(&["apply", "-f", file.to_str().expect("a UTF-8 path")]);
    eventually(
        &format!("{user} to be allowed to create dynamicenvs and virtualservices in {ns}"),
        TIMEOUT,
        async || {
            let can = |resource: &str| {
                kubectl()
                    .args(["auth", "can-i", "create", resource, "-n", ns, "--as", user])
                    .output()
                    .is_ok_and(|o| o.status.success())
            };
            (can("dynamicenvs.wasmop.dev") && can("virtualservices.networking.istio.io"))
                .then_some(())
        },
    )
    .await;
}

/// `kubectl --as user ARGS` with `stdin` as its input.
fn kubectl_as(user: &str, args: &[&str], stdin: &Value) -> Output {
    use std::io::Write;
    let mut child = kubectl()
        .args(["--as", user])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.to_string().as_bytes())
        .expect("write kubectl's input");
    child.wait_with_output().expect("kubectl's output")
}

/// DynamicEnv `name` (to be created in `a`) routing `end-user: jason` to a clone of `reviews`
/// of namespace `target`, labelled for the operator of `a` ([`Operator::start_all_namespaces`]).
fn dynamic_env_to(name: &str, a: &str, target: &str) -> Value {
    let mut de = dynamic_env(name, target, "jason", REVIEWS_V3, false);
    de["metadata"]["labels"] = json!({ Operator::SELECTOR_LABEL: a });
    de
}

/// `user` creates `de` in `ns` (`dry_run`: only asks); the API server's answer: Ok, or Err with
/// kubectl's stderr.
fn create_as(user: &str, ns: &str, de: &Value, dry_run: bool) -> Result<(), String> {
    let mut args = vec!["create", "-n", ns, "-o", "name", "-f", "-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    let out = kubectl_as(user, &args, de);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// What the admission policy says when `user` may not `verb resource` in `ns`.
fn refusal(user: &str, verb: &str, resource: &str, ns: &str) -> String {
    format!(
        "user {user} may not {verb} {resource} in namespace {ns}, which spec.subsets or spec.consumers names"
    )
}

/// Waits until the API server refuses `user`'s `de` in `ns` with `message` (a policy takes
/// effect a moment after it is created), asking with dry runs.
async fn wait_refused(user: &str, ns: &str, de: &Value, message: &str) -> String {
    eventually(
        &format!("the admission policy to refuse: {message}"),
        TIMEOUT,
        async || {
            create_as(user, ns, de, true)
                .err()
                .filter(|e| e.contains(message))
        },
    )
    .await
}

/// Applies `patch` (a JSON patch) to DynamicEnv `ns/name` as `user` (`dry_run`: only asks):
/// Ok, or Err with kubectl's stderr.
fn patch_as(user: &str, ns: &str, name: &str, patch: &Value, dry_run: bool) -> Result<(), String> {
    let out = kubectl()
        .args(["--as", user, "patch", "dynamicenv", name, "-n", ns])
        .args(["--type=json", "-p", &patch.to_string()])
        .args(dry_run.then_some("--dry-run=server"))
        .output()
        .expect("run kubectl");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The operator's write requests in namespace `ns`, from the API server's audit log.
fn operator_writes_in(ns: &str) -> Vec<String> {
    audit_writes(&[&operator_user()])
        .into_iter()
        .filter(|w| w.object.contains(&format!(" {ns}/")))
        .map(|w| format!("{} {} {}", w.verb, w.object, w.code))
        .collect()
}

/// `dev-a` may edit in `a` only: a DynamicEnv of `a` cloning a Deployment of `b` is refused,
/// with a message naming the missing permission, and the operator (watching every namespace)
/// never hears of it, so it writes nothing in `b`; one cloning a Deployment of `a` is
/// admitted and made ready by that operator.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_user_may_not_clone_a_deployment_of_a_namespace_they_may_not_write() {
    with_two_namespaces(
        "admission",
        |client: Client, a: String, b: String| async move {
            install_policy();
            bookinfo(&client, &a, true).await;
            bookinfo(&client, &b, true).await;
            let routes_in_b = vs_http(&client, &b, "reviews").await;
            grant_edit(&a, USER).await;
            let _operator = Operator::start_all_namespaces(
                env!("CARGO_BIN_EXE_wasmop"),
                &a,
                &["--controllers", "routing"],
            )
            .await;

            let cross = dynamic_env_to("cross", &a, &b);
            let said = refusal(USER, "create", "deployments.apps", &b);
            wait_refused(USER, &a, &cross, &said).await;
            let error = create_as(USER, &a, &cross, false).expect_err("the DynamicEnv is refused");
            assert!(
                error.contains("(Forbidden)") && error.contains(&said),
                "{error}"
            );
            assert!(
                get(&client, &a, DE, "DynamicEnv", "cross").await.is_none(),
                "nothing was stored"
            );

            // The same user's DynamicEnv within `a` is admitted, and the operator makes it ready:
            // it would have acted on `cross` by now had `cross` been admitted.
            create_as(USER, &a, &dynamic_env_to("local", &a, &a), false)
                .expect("a DynamicEnv within the user's namespace is admitted");
            wait_state(&client, &a, "local", "ready", TIMEOUT).await;
            let clone = names::clone_name(&a, "local", &a, "reviews");
            assert!(
                operator_writes_in(&a)
                    .iter()
                    .any(|w| w.contains(&format!("deployments {a}/{clone}"))),
                "the audit log shows the operator's writes: {:?}",
                operator_writes_in(&a)
            );
            let in_b = operator_writes_in(&b);
            assert!(in_b.is_empty(), "the operator wrote in {b}: {in_b:?}");
            assert_eq!(vs_http(&client, &b, "reviews").await, routes_in_b);
            let refused = audit_writes(&[USER])
                .into_iter()
                .any(|w| w.object == format!("dynamicenvs {a}/cross") && w.code == 403);
            assert!(refused, "the audit log shows {USER}'s refused create");
        },
    )
    .await;
}

/// With `edit` in both namespaces, the same DynamicEnv is admitted: the operator clones the
/// Deployment of `b` and routes to it there. Its own updates of the DynamicEnv (finalizer,
/// status), made without the right to update Deployments, pass the policy, which checks spec
/// changes only; deleting it restores `b`.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_user_with_rights_in_both_namespaces_may_clone_across_them() {
    with_two_namespaces(
        "admission-ok",
        |client: Client, a: String, b: String| async move {
            install_policy();
            bookinfo(&client, &a, true).await;
            bookinfo(&client, &b, true).await;
            let routes_in_b = vs_http(&client, &b, "reviews").await;
            grant_edit(&a, USER).await;
            grant_edit(&b, USER).await;
            let _operator = Operator::start_all_namespaces(
                env!("CARGO_BIN_EXE_wasmop"),
                &a,
                &["--controllers", "routing"],
            )
            .await;

            create_as(USER, &a, &dynamic_env_to("cross", &a, &b), false)
                .expect("admitted with rights in both namespaces");
            wait_state(&client, &a, "cross", "ready", TIMEOUT).await;
            let clone = names::clone_name(&a, "cross", &b, "reviews");
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), &b);
            assert!(deployments.get_opt(&clone).await.unwrap().is_some());
            assert_ne!(vs_http(&client, &b, "reviews").await, routes_in_b);
            assert!(
                operator_writes_in(&b)
                    .iter()
                    .any(|w| w.contains(&format!("deployments {b}/{clone}"))),
                "{:?}",
                operator_writes_in(&b)
            );

            kubectl_ok(&["--as", USER, "delete", "dynamicenv", "cross", "-n", &a]);
            eventually("the clone in b to be deleted", TIMEOUT, async || {
                deployments
                    .get_opt(&clone)
                    .await
                    .ok()
                    .filter(Option::is_none)
                    .map(|_| ())
            })
            .await;
            assert_eq!(vs_http(&client, &b, "reviews").await, routes_in_b);
        },
    )
    .await;
}

/// A user with `edit` in `a` only may change a DynamicEnv of `a` that stays in `a`, but may
/// neither add a subset in `b` to it nor change one that someone with more rights made to
/// clone a Deployment of `b`; changing its labels only is not checked.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn editing_a_dynamicenv_needs_the_rights_in_every_namespace_it_names() {
    with_two_namespaces("admission-edit", |_client: Client, a: String, b: String| async move {
        install_policy();
        grant_edit(&a, USER).await;
        // Made by the administrator, who may do anything.
        for (name, target) in [("local", &a), ("cross", &b)] {
            kubectl_as_admin_create(&a, &dynamic_env_to(name, &a, target));
        }
        let image_of = |i: usize, image: &str| {
            json!([{"op": "replace", "path": format!("/spec/subsets/{i}/containers/0/image"), "value": image}])
        };
        let add_b = json!([{"op": "add", "path": "/spec/subsets/-", "value":
            {"name": "details", "namespace": b, "containers": [{"containerName": "details", "image": REVIEWS_V4}]}}]);
        let said = refusal(USER, "create", "deployments.apps", &b);

        // Wait for the policy to be in force, then: within `a`, allowed.
        eventually("the admission policy to refuse the new subset", TIMEOUT, async || {
            patch_as(USER, &a, "local", &add_b, true)
                .err()
                .filter(|e| e.contains(&said))
        })
        .await;
        patch_as(USER, &a, "local", &image_of(0, REVIEWS_V4), false).expect("a change within a");
        // Another namespace added: refused.
        let error = patch_as(USER, &a, "local", &add_b, false).expect_err("a subset in b is refused");
        assert!(error.contains(&said), "{error}");
        // A DynamicEnv that names b: its spec is out of reach, its labels are not.
        let error = patch_as(USER, &a, "cross", &image_of(0, REVIEWS_V4), false)
            .expect_err("a change of a DynamicEnv naming b is refused");
        assert!(error.contains(&said), "{error}");
        kubectl_ok(&["--as", USER, "label", "dynamicenv", "cross", "-n", &a, "team=x"]);
    })
    .await;
}

/// Creates `de` in `ns` as the administrator of the local control plane.
fn kubectl_as_admin_create(ns: &str, de: &Value) {
    let file = wasmop_tests::dump_dir().join(format!(
        "{ns}-{}.json",
        de["metadata"]["name"].as_str().unwrap_or("de")
    ));
    std::fs::write(&file, de.to_string()).expect("write the DynamicEnv");
    kubectl_ok(&[
        "create",
        "-n",
        ns,
        "-f",
        file.to_str().expect("a UTF-8 path"),
    ]);
}

/// The largest DynamicEnv the CRD allows (16 subsets and 16 consumers), each in a namespace of
/// its own, stays within the API server's CEL cost budget: the administrator's is admitted
/// (every one of its 128 authorization checks made), and `dev-a`'s is refused for the right
/// reason, down to the last consumer's namespace.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn the_largest_dynamicenv_is_judged_within_the_cost_budget() {
    with_temp_ns("admission-max", |_client: Client, a: String| async move {
        install_policy();
        grant_edit(&a, USER).await;
        let entry = |i: usize, ns: &str| {
            json!({"name": format!("app-{i}"), "namespace": ns,
                   "containers": [{"containerName": "app", "image": REVIEWS_V3}]})
        };
        let largest = |namespace_of: &dyn Fn(usize) -> String| {
            json!({
                "apiVersion": DE, "kind": "DynamicEnv",
                "metadata": {"name": "largest"},
                "spec": {
                    "istioMatches": [{"headers": {"end-user": {"exact": "jason"}}}],
                    "subsets": (0..16).map(|i| entry(i, &namespace_of(i))).collect::<Vec<_>>(),
                    "consumers": (16..32).map(|i| entry(i, &namespace_of(i))).collect::<Vec<_>>()
                }
            })
        };
        // All in `a` but the last consumer: refused for that one namespace, which the last
        // of the policies checks.
        let last = format!("{a}-31");
        let one_outside = largest(&|i| if i == 31 { last.clone() } else { a.clone() });
        wait_refused(
            USER,
            &a,
            &one_outside,
            &refusal(USER, "create", "deployments.apps", &last),
        )
        .await;
        create_as(USER, &a, &largest(&|_| a.clone()), true)
            .expect("within the user's namespace, admitted");
        // 32 namespaces (they need not exist to be asked about): every check passes for the
        // administrator, and the user is refused for a permission, not for the budget.
        let distinct = largest(&|i| format!("{a}-{i}"));
        admin_dry_run(&a, &distinct).expect("every check of the largest DynamicEnv is made");
        let error = create_as(USER, &a, &distinct, true).expect_err("refused");
        assert!(
            error.contains(&format!(
                "user {USER} may not create deployments.apps in namespace {a}-"
            )) && !error.contains("budget"),
            "{error}"
        );
    })
    .await;
}

/// The administrator's server-side dry run of creating `de` in `ns`: Ok, or Err with stderr.
fn admin_dry_run(ns: &str, de: &Value) -> Result<(), String> {
    let file = wasmop_tests::dump_dir().join(format!("{ns}-dry-run.json"));
    std::fs::write(&file, de.to_string()).expect("write the DynamicEnv");
    let out = kubectl()
        .args(["create", "-n", ns, "--dry-run=server", "-o", "name", "-f"])
        .arg(&file)
        .output()
        .expect("run kubectl");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The YAML documents of `path` (relative to the repository root) as JSON.
fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(wasmop_tests::repo_root().join(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a YAML document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The committed manifests check the namespace of every subset and consumer entry the CRD
/// allows (its `maxItems`), one authorization check per expression, and no policy makes more
/// checks than fit its CEL cost budget (350 000 units each of 10 000 000).
#[test]
fn the_admission_policies_cover_every_entry_the_crd_allows() {
    let crd = documents("crds/dynamicenvs.yaml").remove(0);
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let entries: u64 = ["subsets", "consumers"]
        .iter()
        .map(|list| {
            spec["properties"][list]["maxItems"]
                .as_u64()
                .unwrap_or_else(|| panic!("spec.{list} has no maxItems"))
        })
        .sum();
    let policies: Vec<Value> = documents("deploy/manifests/wasmop.yaml")
        .into_iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .collect();
    let mut covered = std::collections::BTreeSet::new();
    for policy in &policies {
        let name = policy["metadata"]["name"].as_str().unwrap();
        // The namespace of entry N is checked through variable nsI: "size(...) > N && ...".
        for variable in policy["spec"]["variables"].as_array().unwrap() {
            let expression = variable["expression"].as_str().unwrap();
            if let Some(rest) = expression.strip_prefix("size(variables.namespaces) > ") {
                let n: u64 = rest.split_whitespace().next().unwrap().parse().unwrap();
                assert!(covered.insert(n), "entry {n} is checked twice ({name})");
            }
        }
        let checks: Vec<usize> = policy["spec"]["validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["expression"].as_str().unwrap().matches(".check(").count())
            .collect();
        assert!(checks.iter().all(|&c| c == 1), "{name}: {checks:?}");
        assert!(
            checks.len() as u64 * 350_000 < 10_000_000,
            "{name}: {} checks exceed the budget",
            checks.len()
        );
    }
    assert_eq!(
        covered,
        (0..entries).collect(),
        "the policies check entries {covered:?} of the {entries} the CRD allows"
    );
}
