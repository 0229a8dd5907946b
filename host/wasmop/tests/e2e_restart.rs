//! E2E: the ProxyRestartPolicy controller on the local control plane, under the chart's RBAC,
//! with the default `restart-sidecar` plugin. Pods "with a sidecar" are kwok pods whose
//! template carries `sidecar.istio.io/status` and an `istio-proxy` container; nothing injects
//! a new proxy into re-created pods, so they keep the old image, which is how the tests see
//! that a workload restarts once per change and not on every reconcile.
//!
//! Each test runs its own operator (`--controllers restart`, `--selector wasmop.dev/e2e=<ns>`)
//! and its own cluster-scoped policies, labelled for that selector and selecting only the
//! test's namespace; they are deleted when the test ends.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use wasmop_api::proxyrestartpolicy::ProxyRestartPolicy;
use wasmop_tests::restart::{
    NEW_PROXY, OLD_PROXY, bare_sidecar_pod, events, generation, occurrences, running_job_pod,
    sidecar_deployment, template_annotations, wait_all_rolled_out, wait_rolled_out,
};
use wasmop_tests::{Operator, create_in, eventually, kubectl, sample, wait_until, with_temp_ns};

const TIMEOUT: Duration = Duration::from_secs(60);
const SELECTOR_LABEL: &str = "wasmop.dev/e2e";
const CONFIG: &str = "wasmop.dev/restart-config";

/// Deletes the test's policies (cluster-scoped, so not removed with its namespace).
struct Policies(String);

impl Drop for Policies {
    fn drop(&mut self) {
        let _ = kubectl()
            .args(["delete", "proxyrestartpolicies", "-l"])
            .arg(format!("{SELECTOR_LABEL}={}", self.0))
            .args(["--wait=false", "--ignore-not-found"])
            .output();
    }
}

/// Starts the restart controller alone for `ns` and waits until it is active.
async fn operator(ns: &str, extra: &[&str]) -> (Operator, Policies) {
    let selector = format!("{SELECTOR_LABEL}={ns}");
    let mut args = vec!["--controllers", "restart", "--selector", &selector];
    args.extend_from_slice(extra);
    let mut op = Operator::start(env!("CARGO_BIN_EXE_wasmop"), ns, &args).await;
    op.wait_active(TIMEOUT).await;
    (op, Policies(ns.to_owned()))
}

/// Creates policy `name`, labelled for the test's operator, selecting namespace `ns` only
/// (unless `spec` has a namespaceSelector).
async fn create_policy(
    client: &Client,
    ns: &str,
    name: &str,
    mut spec: Value,
) -> Api<ProxyRestartPolicy> {
    if spec.get("namespaceSelector").is_none() {
        spec["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    }
    let api: Api<ProxyRestartPolicy> = Api::all(client.clone());
    let policy: ProxyRestartPolicy = serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "ProxyRestartPolicy",
        "metadata": {"name": name, "labels": {SELECTOR_LABEL: ns}},
        "spec": spec,
    }))
    .expect("a valid policy");
    api.create(&PostParams::default(), &policy)
        .await
        .expect("create the policy");
    api
}

async fn patch_spec(api: &Api<ProxyRestartPolicy>, name: &str, spec: Value) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
    .expect("patch the policy");
}

fn condition<'a>(p: &'a ProxyRestartPolicy, type_: &str) -> Option<&'a Condition> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

fn state(p: &ProxyRestartPolicy) -> Option<&str> {
    p.status.as_ref()?.state.as_deref()
}

fn summary(p: &ProxyRestartPolicy) -> (i64, i64, i64, i64) {
    let s = p
        .status
        .as_ref()
        .and_then(|s| s.summary.clone())
        .unwrap_or_default();
    (
        s.workloads_restarted,
        s.workloads_pending,
        s.warnings,
        s.excluded,
    )
}

/// Waits until the policy satisfies `pred`.
async fn wait_policy(
    api: &Api<ProxyRestartPolicy>,
    name: &str,
    what: &str,
    pred: impl Fn(&ProxyRestartPolicy) -> bool + Send + 'static,
) -> ProxyRestartPolicy {
    wait_until(
        api,
        name,
        TIMEOUT,
        what,
        move |p: Option<&ProxyRestartPolicy>| p.is_some_and(&pred),
    )
    .await
}

/// Waits until the policy was reconciled at its current generation into `want`.
async fn wait_state(
    api: &Api<ProxyRestartPolicy>,
    name: &str,
    want: &'static str,
) -> ProxyRestartPolicy {
    wait_policy(api, name, &format!("state {want}"), move |p| {
        state(p) == Some(want)
            && p.status.as_ref().and_then(|s| s.observed_generation) == p.metadata.generation
    })
    .await
}

/// The operator's `/metrics`.
fn metrics(op: &Operator) -> String {
    op.get("/metrics").map(|(_, b)| b).unwrap_or_default()
}

const RECONCILED: &str = r#"wasmop_reconcile_total{controller="restart",outcome="ok"}"#;
const ROLLOUTS: &str = r#"wasmop_restart_restarts_total{kind="Deployment"}"#;

/// Makes the operator reconcile `name` again without changing its spec (a label change), and
/// waits until it has.
async fn reconcile_again(op: &Operator, api: &Api<ProxyRestartPolicy>, name: &str) {
    let before = sample(&metrics(op), RECONCILED);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"e2e-nudge": format!("{before}")}}})),
    )
    .await
    .expect("label the policy");
    eventually("another reconcile", TIMEOUT, async || {
        (sample(&metrics(op), RECONCILED) > before).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn only_outdated_workloads_restart_each_once_and_their_new_pods_come_up() {
    with_temp_ns("restart-once", |client: Client, ns: String| async move {
        let (op, _policies) = operator(&ns, &[]).await;
        for (name, image) in [("old-a", OLD_PROXY), ("old-b", OLD_PROXY), ("new-c", NEW_PROXY)] {
            sidecar_deployment(&client, &ns, name, 2, image, json!({}), json!({})).await;
        }
        // No sidecar: never a candidate, whatever its images.
        create_in::<k8s_openapi::api::apps::v1::Deployment>(
            &client,
            &ns,
            json!({"metadata": {"name": "plain"},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "plain"}},
                            "template": {"metadata": {"labels": {"app": "plain"}},
                                         "spec": {"containers": [{"name": "istio-proxy", "image": OLD_PROXY}]}}}}),
        )
        .await;
        wait_all_rolled_out(&client, &ns, &["old-a", "old-b", "new-c", "plain"], TIMEOUT).await;

        let name = format!("{ns}-mesh");
        let api = create_policy(&client, &ns, &name, json!({"proxy": {"image": NEW_PROXY}})).await;
        let p = wait_policy(&api, &name, "Ready after restarting the two outdated workloads", |p| {
            state(p) == Some("Ready") && summary(p).0 == 2
        })
        .await;
        let status = p.status.clone().unwrap();
        let hash = status
            .applied_configuration
            .as_ref()
            .and_then(|a| a.proxy_hash.clone())
            .expect("the applied proxy hash");
        assert_eq!(
            status.applied_configuration.unwrap().proxy.unwrap().proxy.image.as_deref(),
            Some(NEW_PROXY)
        );
        let ready = condition(&p, "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str(), ready.message.as_str()),
                   ("True", "ReconcileSucceeded", "Reconciliation succeeded"));
        let psrs = condition(&p, "ProxySidecarRestartSucceeded").unwrap();
        assert_eq!((psrs.status.as_str(), psrs.reason.as_str(), psrs.message.as_str()),
                   ("True", "ProxySidecarRestartSucceeded", "Proxy sidecar restart succeeded"));
        assert_eq!(condition(&p, "OverlappingPolicies").unwrap().status, "False");

        for old in ["old-a", "old-b"] {
            assert_eq!(generation(&client, &ns, old).await, 2, "{old} rolled out once");
            let annotations = template_annotations(&client, &ns, old).await;
            assert_eq!(annotations.get(CONFIG), Some(&hash), "{old}");
            assert_eq!(annotations.get("wasmop.dev/restarted-by"), Some(&name));
            assert!(annotations.contains_key("wasmop.dev/restartedAt"));
            // The new pods come up, and they are the only pods left.
            wait_rolled_out(&client, &ns, old, TIMEOUT).await;
            let restarted = events(&client, &ns, "Deployment", old, "ProxySidecarRestarted").await;
            assert_eq!(occurrences(&restarted), 1, "one Event per restarted workload: {restarted:?}");
            let note = restarted[0].note.clone().unwrap_or_default();
            assert!(note.contains(OLD_PROXY) && note.contains(NEW_PROXY), "{note}");
            assert_eq!(
                restarted[0].related.as_ref().and_then(|r| r.name.as_deref()),
                Some(name.as_str()),
                "the Event names the policy"
            );
        }
        for untouched in ["new-c", "plain"] {
            assert_eq!(generation(&client, &ns, untouched).await, 1, "{untouched}");
            assert!(events(&client, &ns, "Deployment", untouched, "ProxySidecarRestarted").await.is_empty());
        }
        let summary_event = events(&client, "default", "ProxyRestartPolicy", &name, "ProxySidecarsRestarted").await;
        assert_eq!(summary_event.len(), 1, "{summary_event:?}");

        // The re-created pods still run the old image (nothing injects here), but they were
        // restarted for this state: another reconcile restarts nothing.
        assert_eq!(sample(&metrics(&op), ROLLOUTS), 2.0);
        reconcile_again(&op, &api, &name).await;
        assert_eq!(sample(&metrics(&op), ROLLOUTS), 2.0, "no workload restarted twice");
        for old in ["old-a", "old-b"] {
            assert_eq!(generation(&client, &ns, old).await, 2, "{old}");
        }
        let p = wait_state(&api, &name, "Ready").await;
        let s = p.status.unwrap().summary.unwrap();
        assert_eq!((s.workloads_restarted, s.already_restarted), (0, 4), "{s:?}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn bare_and_job_pods_warn_with_the_reference_text_and_a_retry_restarts_nothing() {
    with_temp_ns("restart-warn", |client: Client, ns: String| async move {
        let (op, _policies) = operator(&ns, &[]).await;
        sidecar_deployment(&client, &ns, "web", 1, OLD_PROXY, json!({}), json!({})).await;
        bare_sidecar_pod(&client, &ns, "bare", OLD_PROXY).await;
        let job_pod = running_job_pod(&client, &ns, "job", OLD_PROXY).await;
        wait_rolled_out(&client, &ns, "web", TIMEOUT).await;
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
        wait_until(&pods, "bare", TIMEOUT, "bare pod Running", |p: Option<&k8s_openapi::api::core::v1::Pod>| {
            p.and_then(|p| p.status.as_ref()?.phase.as_deref()) == Some("Running")
        })
        .await;

        let name = format!("{ns}-mesh");
        let api = create_policy(&client, &ns, &name, json!({"proxy": {"image": NEW_PROXY, "dnsProxying": true}})).await;
        let p = wait_state(&api, &name, "Warning").await;
        let psrs = condition(&p, "ProxySidecarRestartSucceeded").unwrap();
        assert_eq!(psrs.status, "False");
        assert_eq!(psrs.reason, "ProxySidecarManualRestartRequired");
        assert_eq!(
            psrs.message,
            format!("The sidecars of the following workloads could not be restarted: {ns}/bare, {ns}/{job_pod}")
        );
        let status = p.status.clone().unwrap();
        assert_eq!(
            status.description.as_deref(),
            Some("Some Pods with Istio sidecar injection failed to restart. To learn more about the warning, see the ProxySidecarRestartSucceeded condition and the Events of this ProxyRestartPolicy: could not restart one or more Istio-injected Pods")
        );
        assert_eq!(summary(&p).2, 2);
        // Recorded even with warnings (upstream records nothing and restarts everything again).
        let applied = status.applied_configuration.unwrap().proxy.unwrap();
        assert_eq!(applied.proxy.image.as_deref(), Some(NEW_PROXY));
        assert_eq!(applied.proxy.dns_proxying, Some(true));
        assert_eq!(generation(&client, &ns, "web").await, 2);

        let bare = events(&client, &ns, "Pod", "bare", "ProxySidecarManualRestartRequired").await;
        assert_eq!(bare.len(), 1, "{bare:?}");
        assert!(bare[0].note.as_deref().unwrap_or_default().starts_with(
            "pod sidecar could not be updated because OwnerReferences was not found."
        ));
        assert_eq!(bare[0].type_.as_deref(), Some("Warning"));
        let job = events(&client, &ns, "Pod", &job_pod, "ProxySidecarManualRestartRequired").await;
        assert_eq!(job.len(), 1, "{job:?}");
        assert!(job[0].note.as_deref().unwrap_or_default().starts_with(
            "pod sidecar could not be updated because it is owned by a Job."
        ));

        // A retry: the warnings stay, nothing is restarted again.
        wait_rolled_out(&client, &ns, "web", TIMEOUT).await;
        reconcile_again(&op, &api, &name).await;
        let p = wait_state(&api, &name, "Warning").await;
        assert_eq!(summary(&p).0, 0, "nothing restarted by the retry");
        assert_eq!(sample(&metrics(&op), ROLLOUTS), 1.0);
        assert_eq!(generation(&client, &ns, "web").await, 2);

        // A DNS proxying change restarts every selected workload once more, and only once.
        patch_spec(&api, &name, json!({"proxy": {"dnsProxying": false}})).await;
        let p = wait_state(&api, &name, "Warning").await;
        assert_eq!(summary(&p).0, 1, "web restarted for the DNS change");
        assert_eq!(generation(&client, &ns, "web").await, 3);
        wait_rolled_out(&client, &ns, "web", TIMEOUT).await;
        reconcile_again(&op, &api, &name).await;
        assert_eq!(sample(&metrics(&op), ROLLOUTS), 2.0);
        assert_eq!(generation(&client, &ns, "web").await, 3);
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn excluded_workloads_are_untouched() {
    with_temp_ns("restart-exclude", |client: Client, ns: String| async move {
        let (_op, _policies) = operator(&ns, &[]).await;
        let exclude = json!({"wasmop.dev/restart-exclude": "true"});
        sidecar_deployment(
            &client,
            &ns,
            "pods-excluded",
            1,
            OLD_PROXY,
            json!({}),
            exclude.clone(),
        )
        .await;
        sidecar_deployment(
            &client,
            &ns,
            "workload-excluded",
            1,
            OLD_PROXY,
            exclude,
            json!({}),
        )
        .await;
        sidecar_deployment(&client, &ns, "web", 1, OLD_PROXY, json!({}), json!({})).await;
        wait_all_rolled_out(
            &client,
            &ns,
            &["pods-excluded", "workload-excluded", "web"],
            TIMEOUT,
        )
        .await;

        let name = format!("{ns}-mesh");
        let api = create_policy(&client, &ns, &name, json!({"proxy": {"image": NEW_PROXY}})).await;
        let p = wait_state(&api, &name, "Ready").await;
        let (restarted, pending, warnings, excluded) = summary(&p);
        assert_eq!((restarted, pending, warnings, excluded), (1, 0, 0, 2));
        assert_eq!(generation(&client, &ns, "web").await, 2);
        for name in ["pods-excluded", "workload-excluded"] {
            assert_eq!(generation(&client, &ns, name).await, 1, "{name} untouched");
            assert!(
                !template_annotations(&client, &ns, name)
                    .await
                    .contains_key(CONFIG)
            );
        }
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_num_trusted_proxies_change_restarts_the_gateway_only() {
    with_temp_ns("restart-gateway", |client: Client, ns: String| async move {
        let (_op, _policies) = operator(&ns, &[]).await;
        create_in::<k8s_openapi::api::apps::v1::Deployment>(
            &client,
            &ns,
            json!({"metadata": {"name": "istio-ingressgateway"},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "istio-ingressgateway"}},
                            "template": {"metadata": {"labels": {"app": "istio-ingressgateway"}},
                                         "spec": {"containers": [{"name": "istio-proxy", "image": NEW_PROXY}]}}}}),
        )
        .await;
        sidecar_deployment(&client, &ns, "web", 1, NEW_PROXY, json!({}), json!({})).await;
        wait_all_rolled_out(&client, &ns, &["istio-ingressgateway", "web"], TIMEOUT).await;

        let name = format!("{ns}-mesh");
        let gateway = json!({"namespace": ns, "name": "istio-ingressgateway", "numTrustedProxies": 1});
        let api = create_policy(&client, &ns, &name, json!({"proxy": {"image": NEW_PROXY}, "ingressGateway": gateway})).await;
        let p = wait_state(&api, &name, "Ready").await;
        let gw = condition(&p, "IngressGatewayRestartSucceeded").unwrap();
        assert_eq!((gw.status.as_str(), gw.reason.as_str(), gw.message.as_str()),
                   ("True", "IngressGatewayRestartSucceeded", "Istio Ingress Gateway restart succeeded"));
        let applied = p.status.unwrap().applied_configuration.unwrap().ingress_gateway.unwrap();
        assert_eq!(applied.num_trusted_proxies, Some(1));
        assert_eq!(generation(&client, &ns, "istio-ingressgateway").await, 1, "not restarted for a new policy");

        patch_spec(&api, &name, json!({"ingressGateway": {"numTrustedProxies": 2}})).await;
        let p = wait_policy(&api, &name, "numTrustedProxies 2 applied", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.applied_configuration.as_ref()?.ingress_gateway.as_ref()?.num_trusted_proxies)
                == Some(2)
        })
        .await;
        assert_eq!(state(&p), Some("Ready"));
        assert_eq!(generation(&client, &ns, "istio-ingressgateway").await, 2, "the gateway restarted");
        assert!(template_annotations(&client, &ns, "istio-ingressgateway").await.contains_key("wasmop.dev/gateway-config"));
        assert_eq!(generation(&client, &ns, "web").await, 1, "the sidecars did not");
        let e = events(&client, &ns, "Deployment", "istio-ingressgateway", "IngressGatewayRestarted").await;
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].note.as_deref().unwrap_or_default().contains("numTrustedProxies changed from 1 to 2"));
        wait_rolled_out(&client, &ns, "istio-ingressgateway", TIMEOUT).await;
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_chunk_limit_of_2_over_5_workloads_requeues_until_done() {
    with_temp_ns("restart-chunks", |client: Client, ns: String| async move {
        let (op, _policies) = operator(&ns, &[]).await;
        let names = ["w1", "w2", "w3", "w4", "w5"];
        for n in names {
            sidecar_deployment(&client, &ns, n, 1, OLD_PROXY, json!({}), json!({})).await;
        }
        wait_all_rolled_out(&client, &ns, &names, TIMEOUT).await;

        let name = format!("{ns}-mesh");
        let api = create_policy(
            &client,
            &ns,
            &name,
            json!({"proxy": {"image": NEW_PROXY}, "limits": {"restartsPerReconcile": 2, "requeueAfter": "2s"}}),
        )
        .await;
        let p = wait_policy(&api, &name, "the first partial chunk", |p| {
            state(p) == Some("Processing") && summary(p).0 == 2
        })
        .await;
        assert_eq!(summary(&p).1, 3, "three left");
        let ready = condition(&p, "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str(), ready.message.as_str()),
                   ("False", "ReconcileRequeued", "Proxy reset is still ongoing. Reconciliation requeued"));
        let psrs = condition(&p, "ProxySidecarRestartSucceeded").unwrap();
        assert_eq!((psrs.status.as_str(), psrs.reason.as_str(), psrs.message.as_str()),
                   ("False", "ProxySidecarRestartPartiallySucceeded", "Proxy sidecar restart partially succeeded"));
        assert!(
            p.status.as_ref().unwrap().applied_configuration.as_ref().and_then(|a| a.proxy.as_ref()).is_none(),
            "not applied while workloads wait"
        );

        let p = wait_policy(&api, &name, "Ready after the last chunk", |p| state(p) == Some("Ready")).await;
        assert_eq!(summary(&p).1, 0);
        assert_eq!(sample(&metrics(&op), ROLLOUTS), 5.0);
        for n in names {
            assert_eq!(generation(&client, &ns, n).await, 2, "{n} restarted once");
            assert_eq!(occurrences(&events(&client, &ns, "Deployment", n, "ProxySidecarRestarted").await), 1);
        }
        let requeued = events(&client, "default", "ProxyRestartPolicy", &name, "RestartsPending").await;
        assert!(!requeued.is_empty(), "the policy says what is left for the next chunk");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn nothing_restarts_outside_the_maintenance_window() {
    with_temp_ns("restart-window", |client: Client, ns: String| async move {
        let (_op, _policies) = operator(&ns, &[]).await;
        sidecar_deployment(&client, &ns, "web", 1, OLD_PROXY, json!({}), json!({})).await;
        wait_rolled_out(&client, &ns, "web", TIMEOUT).await;

        // A one-minute window twelve hours from now.
        let hour = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 3600
            + 12)
            % 24;
        let name = format!("{ns}-mesh");
        let api = create_policy(
            &client,
            &ns,
            &name,
            json!({"proxy": {"image": NEW_PROXY}, "maintenanceWindow": {"schedule": format!("0 {hour} * * *"), "duration": "1m"}}),
        )
        .await;
        let p = wait_state(&api, &name, "Processing").await;
        let ready = condition(&p, "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "MaintenanceWindowClosed"));
        assert!(ready.message.contains(&format!("T{hour:02}:00:00Z")), "{}", ready.message);
        assert_eq!(summary(&p).1, 1, "one workload waits");
        assert_eq!(generation(&client, &ns, "web").await, 1, "nothing restarted outside the window");

        // A window open now.
        patch_spec(&api, &name, json!({"maintenanceWindow": {"schedule": "* * * * *", "duration": "1h"}})).await;
        let p = wait_state(&api, &name, "Ready").await;
        assert_eq!(summary(&p).0, 1);
        assert_eq!(generation(&client, &ns, "web").await, 2);
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn overlapping_policies_are_reported_on_both_and_the_oldest_restarts() {
    with_temp_ns("restart-overlap", |client: Client, ns: String| async move {
        let (_op, _policies) = operator(&ns, &[]).await;
        sidecar_deployment(&client, &ns, "web", 1, OLD_PROXY, json!({}), json!({})).await;
        wait_rolled_out(&client, &ns, "web", TIMEOUT).await;

        let (first, second) = (format!("{ns}-a"), format!("{ns}-b"));
        let api = create_policy(&client, &ns, &first, json!({"proxy": {"image": NEW_PROXY}})).await;
        wait_state(&api, &first, "Ready").await;
        create_policy(
            &client,
            &ns,
            &second,
            json!({"proxy": {"image": NEW_PROXY}}),
        )
        .await;
        for (me, other) in [(&first, &second), (&second, &first)] {
            let other = other.clone();
            let p = wait_policy(&api, me, "an overlap naming the other policy", move |p| {
                p.status
                    .as_ref()
                    .is_some_and(|s| s.overlapping_policies == [other.clone()])
                    && condition(p, "OverlappingPolicies").is_some_and(|c| c.status == "True")
            })
            .await;
            let c = condition(&p, "OverlappingPolicies").unwrap();
            assert_eq!(c.reason, "PodsSelectedByOtherPolicies");
            assert!(
                c.message.contains(&format!("{first} is the oldest"))
                    || c.message.contains("left to an older policy"),
                "{}",
                c.message
            );
        }
        assert_eq!(
            generation(&client, &ns, "web").await,
            2,
            "restarted once, by the older policy"
        );
        assert_eq!(
            template_annotations(&client, &ns, "web")
                .await
                .get("wasmop.dev/restarted-by"),
            Some(&first)
        );

        api.delete(&first, &DeleteParams::default())
            .await
            .expect("delete the older policy");
        let p = wait_policy(&api, &second, "the overlap gone", |p| {
            condition(p, "OverlappingPolicies")
                .is_some_and(|c| c.status == "False" && c.reason == "NoOverlap")
        })
        .await;
        assert!(p.status.unwrap().overlapping_policies.is_empty());
    })
    .await;
}

/// A registry whose entries run the default plugin with an output limit a page of 12 pods'
/// reasons exceeds, so that every evaluate call fails.
fn failing_registry() -> String {
    let entry = |name: &str, policy: &str| {
        format!(
            "  - name: {name}\n    hook: restart\n    source: builtin://restart-sidecar\n    limits: {{maxOutputKiB: 1}}\n    failurePolicy: {policy}\n"
        )
    };
    format!(
        "plugins:\n{}{}",
        entry("tiny-fail", "Fail"),
        entry("tiny-ignore", "Ignore")
    )
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn plugin_failures_follow_the_failure_policy() {
    with_temp_ns("restart-plugin", |client: Client, ns: String| async move {
        create_in::<ConfigMap>(&client, &ns, json!({"metadata": {"name": "wasmop-plugins"}, "data": {"plugins.yaml": failing_registry()}})).await;
        let (op, _policies) = operator(&ns, &["--restart-error-interval", "2s"]).await;
        sidecar_deployment(&client, &ns, "web", 12, OLD_PROXY, json!({}), json!({})).await;
        wait_rolled_out(&client, &ns, "web", TIMEOUT).await;

        // Fail: the reconcile reports the error and restarts nothing.
        let name = format!("{ns}-mesh");
        let api = create_policy(&client, &ns, &name, json!({"proxy": {"image": NEW_PROXY}, "plugin": "tiny-fail"})).await;
        let p = wait_state(&api, &name, "Error").await;
        let psrs = condition(&p, "ProxySidecarRestartSucceeded").unwrap();
        assert_eq!((psrs.status.as_str(), psrs.reason.as_str(), psrs.message.as_str()),
                   ("False", "ProxySidecarRestartFailed", "Proxy sidecar restart failed"));
        let ready = condition(&p, "Ready").unwrap();
        assert_eq!(ready.reason, "ReconcileFailed");
        assert!(ready.message.contains("tiny-fail") && ready.message.contains("maxOutputKiB"), "{}", ready.message);
        assert!(ready.message.contains("failurePolicy Fail"), "{}", ready.message);
        assert_eq!(generation(&client, &ns, "web").await, 1);
        let failed = events(&client, "default", "ProxyRestartPolicy", &name, "PluginFailed").await;
        assert!(!failed.is_empty());
        // ... and retries.
        let before = sample(&metrics(&op), r#"wasmop_reconcile_total{controller="restart",outcome="failed"}"#);
        eventually("a retry", TIMEOUT, async || {
            (sample(&metrics(&op), r#"wasmop_reconcile_total{controller="restart",outcome="failed"}"#) > before).then_some(())
        })
        .await;

        // Ignore: the host's default is no restart; the pods are judged again next time.
        patch_spec(&api, &name, json!({"plugin": "tiny-ignore"})).await;
        let p = wait_state(&api, &name, "Warning").await;
        let psrs = condition(&p, "ProxySidecarRestartSucceeded").unwrap();
        assert_eq!((psrs.status.as_str(), psrs.reason.as_str()), ("False", "PluginFailureIgnored"));
        assert!(psrs.message.starts_with("12 pod(s) were not evaluated"), "{}", psrs.message);
        assert!(p.status.unwrap().applied_configuration.unwrap().proxy.is_none());
        assert_eq!(generation(&client, &ns, "web").await, 1);
        assert!(sample(&metrics(&op), r#"wasmop_restart_pods_total{outcome="not_evaluated"}"#) >= 12.0);
    })
    .await;
}

/// Creates policy `spec` in a server-side dry run; the API server's answer on refusal.
async fn dry_run(client: &Client, spec: Value) -> Result<(), String> {
    // Untyped, so that values the Rust types refuse reach the API server too.
    let resource = kube::api::ApiResource::erase::<ProxyRestartPolicy>(&());
    let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
    let policy: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wasmop.dev/v1alpha1", "kind": "ProxyRestartPolicy",
        "metadata": {"name": "e2e-dry-run"}, "spec": spec,
    }))
    .expect("the shape of an object");
    api.create(
        &PostParams {
            dry_run: true,
            ..PostParams::default()
        },
        &policy,
    )
    .await
    .map(drop)
    .map_err(|e| e.to_string())
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn the_api_server_rejects_invalid_policies_and_accepts_the_example() {
    wasmop_tests::install_crds();
    let client = wasmop_tests::client().await;
    let example =
        std::fs::read_to_string(wasmop_tests::repo_root().join("examples/proxyrestartpolicy.yaml"))
            .expect("read the example");
    let example: Value = serde_yaml::from_str(&example).expect("YAML");
    dry_run(&client, example["spec"].clone())
        .await
        .expect("the example is valid");
    for (spec, says) in [
        (
            json!({"restartAfter": "yesterday"}),
            "spec.restartAfter in body must be of type date-time",
        ),
        (
            json!({"restartAfter": "2026-13-45T00:00:00Z"}),
            "must be of type date-time",
        ),
        (
            json!({"proxy": {"resources": {"requests": {"cpu": "lots"}}}}),
            "cpu must be a Kubernetes quantity",
        ),
        (
            json!({"proxy": {"resources": {"limits": {"memory": "1x"}}}}),
            "memory must be a Kubernetes quantity",
        ),
        (json!({"proxy": {"statusPort": 0}}), "spec.proxy.statusPort"),
        (
            json!({"limits": {"restartsPerReconcile": 0}}),
            "spec.limits.restartsPerReconcile",
        ),
        (json!({"limits": {"pageSize": 501}}), "spec.limits.pageSize"),
        (
            json!({"limits": {"requeueAfter": "500ms"}}),
            "requeueAfter must be at least 1s",
        ),
        (
            json!({"limits": {"requeueAfter": "soon"}}),
            "spec.limits.requeueAfter",
        ),
        (
            json!({"maintenanceWindow": {"schedule": "0 2 * *", "duration": "1h"}}),
            "spec.maintenanceWindow.schedule",
        ),
        (
            json!({"maintenanceWindow": {"schedule": "0 2 * * *", "duration": "0s"}}),
            "duration must be positive",
        ),
        (
            json!({"ingressGateway": {"forwardClientCertDetails": "MAYBE"}}),
            "spec.ingressGateway.forwardClientCertDetails",
        ),
        (
            json!({"ingressGateway": {"numTrustedProxies": -1}}),
            "spec.ingressGateway.numTrustedProxies",
        ),
        (json!({"mode": "Audit"}), "spec.mode"),
        (json!({"suspend": "yes"}), "spec.suspend"),
    ] {
        let e = dry_run(&client, spec.clone())
            .await
            .expect_err(&format!("{spec} is refused"));
        assert!(e.contains(says), "{spec}: {e}");
    }
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn an_operator_restarted_mid_way_goes_on_where_it_stopped() {
    with_temp_ns("restart-crash", |client: Client, ns: String| async move {
        let names = ["w1", "w2", "w3"];
        for n in names {
            sidecar_deployment(&client, &ns, n, 1, OLD_PROXY, json!({}), json!({})).await;
        }
        wait_all_rolled_out(&client, &ns, &names, TIMEOUT).await;
        let (op, policies) = operator(&ns, &[]).await;
        let name = format!("{ns}-mesh");
        // One restart per reconcile, and the next chunk an hour later: only a new operator
        // process makes progress within the test.
        let api = create_policy(
            &client,
            &ns,
            &name,
            json!({"proxy": {"image": NEW_PROXY}, "limits": {"restartsPerReconcile": 1, "requeueAfter": "1h"}}),
        )
        .await;
        wait_policy(&api, &name, "the first chunk", |p| {
            state(p) == Some("Processing") && summary(p).0 == 1
        })
        .await;
        drop(op);
        let restarted = |generations: &[i64]| generations.iter().filter(|g| **g == 2).count();
        let mut first = Vec::new();
        for n in names {
            first.push(generation(&client, &ns, n).await);
        }
        assert_eq!(restarted(&first), 1, "{first:?}");

        // A new process knows nothing of the first: the pod-template hash tells it what was done.
        let (_op, _also_policies) = operator(&ns, &[]).await;
        let p = wait_policy(&api, &name, "the second chunk by the new process", |p| {
            state(p) == Some("Processing") && summary(p).0 == 1 && summary(p).1 == 1
        })
        .await;
        let mut second = Vec::new();
        for n in names {
            second.push(generation(&client, &ns, n).await);
        }
        assert_eq!(restarted(&second), 2, "{second:?}");
        assert!(
            first.iter().zip(&second).all(|(a, b)| a <= b && *b <= 2),
            "nothing restarted twice: {first:?} then {second:?}"
        );
        assert_eq!(
            p.status.unwrap().summary.unwrap().already_restarted,
            1,
            "the first chunk's workload was recognised"
        );
        drop(policies);
    })
    .await;
}

/// A registry whose entry `everything` is the restart-everything fixture
/// (tests/fixtures/hostile-restart), loaded from its file with its digest.
fn restart_everything_registry() -> String {
    let file = wasmop_tests::components_dir().join("wasmop_hostile_restart.wasm");
    let bytes = std::fs::read(&file).expect("the fixture is built by plugin-host's build script");
    format!(
        "plugins:\n  - name: everything\n    hook: restart\n    source: file://{}\n    sha256: \"{}\"\n",
        file.display(),
        wasmop_plugin_host::sha256_hex(&bytes)
    )
}

/// A predicate that answers "restart" for every pod of every page gets only what the host
/// selects: pods of the policy's selectors, eligible and not excluded, each workload once, at
/// most `restartsPerReconcile` per reconcile.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_restart_everything_predicate_restarts_only_what_the_host_selects() {
    with_temp_ns("restart-everything", |client: Client, ns: String| async move {
        create_in::<ConfigMap>(&client, &ns, json!({"metadata": {"name": "wasmop-plugins"}, "data": {"plugins.yaml": restart_everything_registry()}})).await;
        let (op, _policies) = operator(&ns, &[]).await;
        let selected = ["web-a", "web-b", "web-c"];
        for n in selected.iter().chain(&["unselected"]) {
            sidecar_deployment(&client, &ns, n, 1, NEW_PROXY, json!({}), json!({})).await;
        }
        let exclude = json!({"wasmop.dev/restart-exclude": "true"});
        sidecar_deployment(&client, &ns, "excluded", 1, NEW_PROXY, exclude, json!({})).await;
        create_in::<k8s_openapi::api::apps::v1::Deployment>(
            &client,
            &ns,
            json!({"metadata": {"name": "no-sidecar"},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "no-sidecar"}},
                            "template": {"metadata": {"labels": {"app": "no-sidecar"}},
                                         "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}}),
        )
        .await;
        let all = ["web-a", "web-b", "web-c", "unselected", "excluded", "no-sidecar"];
        wait_all_rolled_out(&client, &ns, &all, TIMEOUT).await;

        let name = format!("{ns}-mesh");
        let pods = json!({"matchExpressions": [{"key": "app", "operator": "In",
                                                "values": ["web-a", "web-b", "web-c", "excluded", "no-sidecar"]}]});
        let api = create_policy(
            &client,
            &ns,
            &name,
            json!({"proxy": {"image": NEW_PROXY}, "podSelector": pods, "plugin": "everything",
                   "limits": {"restartsPerReconcile": 2, "requeueAfter": "2s"}}),
        )
        .await;
        let p = wait_policy(&api, &name, "the first chunk", |p| {
            state(p) == Some("Processing") && summary(p).0 == 2
        })
        .await;
        assert_eq!(summary(&p).1, 1, "one selected workload left for the next chunk");
        let p = wait_policy(&api, &name, "Ready after the last chunk", |p| state(p) == Some("Ready")).await;
        assert_eq!(summary(&p).3, 1, "the excluded workload is counted, not restarted");
        reconcile_again(&op, &api, &name).await;
        for n in selected {
            assert_eq!(generation(&client, &ns, n).await, 2, "{n} restarted once");
            assert_eq!(occurrences(&events(&client, &ns, "Deployment", n, "ProxySidecarRestarted").await), 1);
        }
        for n in ["unselected", "excluded", "no-sidecar"] {
            assert_eq!(generation(&client, &ns, n).await, 1, "{n} untouched");
        }
        assert_eq!(sample(&metrics(&op), ROLLOUTS), 3.0);
    })
    .await;
}

/// A policy that has converged gets no write when it is reconciled again: no status, no patch,
/// no Event (the API server's audit log says so).
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_converged_policy_gets_no_writes_when_reconciled_again() {
    with_temp_ns("restart-quiet", |client: Client, ns: String| async move {
        let (op, _policies) = operator(&ns, &[]).await;
        sidecar_deployment(&client, &ns, "web", 2, OLD_PROXY, json!({}), json!({})).await;
        wait_rolled_out(&client, &ns, "web", TIMEOUT).await;
        let name = format!("{ns}-mesh");
        let api = create_policy(&client, &ns, &name, json!({"proxy": {"image": NEW_PROXY}})).await;
        wait_policy(&api, &name, "Ready after the restart", |p| {
            state(p) == Some("Ready") && summary(p).0 == 1
        })
        .await;
        wait_rolled_out(&client, &ns, "web", TIMEOUT).await;
        // The first pass after the restart records its new summary (nothing restarted).
        reconcile_again(&op, &api, &name).await;
        wait_policy(
            &api,
            &name,
            "the summary of a pass that restarts nothing",
            |p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.summary.as_ref())
                    .is_some_and(|s| s.workloads_restarted == 0)
            },
        )
        .await;

        let since = k8s_openapi::jiff::Timestamp::now();
        for _ in 0..3 {
            reconcile_again(&op, &api, &name).await;
        }
        let writes: Vec<_> = wasmop_tests::dr::audit_writes(&[&wasmop_tests::dr::operator_user()])
            .into_iter()
            .filter(|w| w.at >= since && !w.object.starts_with("leases "))
            .filter(|w| {
                w.object.contains(&format!(" {ns}/")) || w.object.contains(&format!("/{name}"))
            })
            .collect();
        assert!(writes.is_empty(), "no write at steady state: {writes:?}");
    })
    .await;
}

/// An overlap shows on both policies as soon as either sees it, even when the other's pass
/// fails before it judges the shared pods (its plugin fails, `failurePolicy: Fail`).
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn an_overlap_shows_on_a_policy_whose_pass_fails_early() {
    with_temp_ns("restart-overlap-fail", |client: Client, ns: String| async move {
        create_in::<ConfigMap>(&client, &ns, json!({"metadata": {"name": "wasmop-plugins"}, "data": {"plugins.yaml": failing_registry()}})).await;
        let (_op, _policies) = operator(&ns, &["--restart-error-interval", "2s"]).await;
        // 12 pods: the page's answer is more than tiny-fail's 1 KiB of output.
        sidecar_deployment(&client, &ns, "web", 12, OLD_PROXY, json!({}), json!({})).await;
        wait_rolled_out(&client, &ns, "web", TIMEOUT).await;

        let (failing, working) = (format!("{ns}-a"), format!("{ns}-b"));
        let api = create_policy(&client, &ns, &failing, json!({"proxy": {"image": NEW_PROXY}, "plugin": "tiny-fail"})).await;
        wait_state(&api, &failing, "Error").await;
        create_policy(&client, &ns, &working, json!({"proxy": {"image": NEW_PROXY}})).await;
        let want = failing.clone();
        wait_policy(&api, &working, "the newer policy sees the overlap", move |p| {
            p.status.as_ref().is_some_and(|s| s.overlapping_policies == [want.clone()])
        })
        .await;
        let want = working.clone();
        let p = wait_policy(&api, &failing, "the failing policy shows it too", move |p| {
            p.status.as_ref().is_some_and(|s| s.overlapping_policies == [want.clone()])
                && condition(p, "OverlappingPolicies").is_some_and(|c| c.status == "True")
        })
        .await;
        assert_eq!(state(&p), Some("Error"), "its pass still fails");
        let c = condition(&p, "OverlappingPolicies").unwrap();
        assert!(c.message.contains(&working), "{}", c.message);
    })
    .await;
}

/// The operator's writes since `since` about namespace `ns` or policy `name` (its status, its
/// Events), leases aside.
fn operator_writes(
    since: k8s_openapi::jiff::Timestamp,
    ns: &str,
    name: &str,
) -> Vec<wasmop_tests::dr::AuditWrite> {
    wasmop_tests::dr::audit_writes(&[&wasmop_tests::dr::operator_user()])
        .into_iter()
        .filter(|w| w.at >= since && !w.object.starts_with("leases "))
        .filter(|w| w.object.contains(&format!(" {ns}/")) || w.object.contains(&format!("/{name}")))
        .collect()
}

/// A suspended policy evaluates and restarts nothing while its pods are out of date, says so
/// (state `Suspended`, `Ready` False / `Suspended`, one Event), writes nothing at steady state,
/// and restarts what is out of date once `suspend` is set back to false.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_suspended_policy_restarts_nothing_until_it_is_resumed() {
    with_temp_ns("restart-suspend", |client: Client, ns: String| async move {
        let (op, _policies) = operator(&ns, &[]).await;
        let names = ["old-a", "old-b"];
        for n in names {
            sidecar_deployment(&client, &ns, n, 1, OLD_PROXY, json!({}), json!({})).await;
        }
        wait_all_rolled_out(&client, &ns, &names, TIMEOUT).await;
        let before: Vec<_> = {
            let mut v = Vec::new();
            for n in names {
                v.push(template_annotations(&client, &ns, n).await);
            }
            v
        };

        let name = format!("{ns}-mesh");
        let since = k8s_openapi::jiff::Timestamp::now();
        let api = create_policy(
            &client,
            &ns,
            &name,
            json!({"proxy": {"image": NEW_PROXY}, "suspend": true}),
        )
        .await;
        let p = wait_state(&api, &name, "Suspended").await;
        let ready = condition(&p, "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Suspended")
        );
        assert!(ready.message.contains("spec.suspend"), "{}", ready.message);
        assert!(
            p.status
                .as_ref()
                .unwrap()
                .applied_configuration
                .as_ref()
                .and_then(|a| a.proxy.as_ref())
                .is_none()
        );

        // At steady state (PluginReady written too): no write at all, however often reconciled.
        wait_policy(&api, &name, "PluginReady", |p| {
            condition(p, "PluginReady").is_some()
        })
        .await;
        let steady = k8s_openapi::jiff::Timestamp::now();
        for _ in 0..3 {
            reconcile_again(&op, &api, &name).await;
        }
        let writes = operator_writes(steady, &ns, &name);
        assert!(writes.is_empty(), "no write at steady state: {writes:?}");
        let writes = operator_writes(since, &ns, &name);
        assert!(
            writes
                .iter()
                .all(|w| !w.object.contains(&format!(" {ns}/"))),
            "no workload or pod written: {writes:?}"
        );
        let suspended = events(&client, "default", "ProxyRestartPolicy", &name, "Suspended").await;
        assert_eq!(
            occurrences(&suspended),
            1,
            "one Event on entering suspension: {suspended:?}"
        );
        for (n, annotations) in names.iter().zip(&before) {
            assert_eq!(
                generation(&client, &ns, n).await,
                1,
                "{n} not restarted while suspended"
            );
            assert_eq!(
                &template_annotations(&client, &ns, n).await,
                annotations,
                "{n}"
            );
        }
        assert_eq!(sample(&metrics(&op), ROLLOUTS), 0.0);

        // Resumed: what is out of date restarts now.
        patch_spec(&api, &name, json!({"suspend": false})).await;
        let p = wait_policy(&api, &name, "Ready after restarting both", |p| {
            state(p) == Some("Ready") && summary(p).0 == 2
        })
        .await;
        assert_eq!(condition(&p, "Ready").unwrap().reason, "ReconcileSucceeded");
        for n in names {
            assert_eq!(
                generation(&client, &ns, n).await,
                2,
                "{n} restarted once resumed"
            );
            assert!(
                template_annotations(&client, &ns, n)
                    .await
                    .contains_key(CONFIG)
            );
        }
        let resumed = events(&client, "default", "ProxyRestartPolicy", &name, "Resumed").await;
        assert_eq!(occurrences(&resumed), 1, "{resumed:?}");
        assert_eq!(
            occurrences(
                &events(&client, "default", "ProxyRestartPolicy", &name, "Suspended").await
            ),
            1
        );
    })
    .await;
}

/// A dry run evaluates as usual (the plugin, the chunk limit) and reports what it would
/// restart, in `status.wouldRestart` and one Event, without writing any workload or pod and
/// without recording anything as applied; the result is told once, not at every requeue.
/// Switching the mode to `Restart` restarts those workloads.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_dry_run_reports_what_would_restart_and_restarts_nothing_until_switched_off() {
    with_temp_ns("restart-dry-run", |client: Client, ns: String| async move {
        let (op, _policies) = operator(&ns, &[]).await;
        let outdated = ["old-a", "old-b", "old-c"];
        for n in outdated {
            sidecar_deployment(&client, &ns, n, 1, OLD_PROXY, json!({}), json!({})).await;
        }
        sidecar_deployment(&client, &ns, "new-d", 1, NEW_PROXY, json!({}), json!({})).await;
        let all = ["old-a", "old-b", "old-c", "new-d"];
        wait_all_rolled_out(&client, &ns, &all, TIMEOUT).await;
        let mut before = Vec::new();
        for n in all {
            before.push(template_annotations(&client, &ns, n).await);
        }

        let name = format!("{ns}-mesh");
        let since = k8s_openapi::jiff::Timestamp::now();
        // Two restarts per reconcile, the next chunk 2s later: the dry run requeues every 2s.
        let api = create_policy(
            &client,
            &ns,
            &name,
            json!({"proxy": {"image": NEW_PROXY}, "mode": "DryRun",
                   "limits": {"restartsPerReconcile": 2, "requeueAfter": "2s"}}),
        )
        .await;
        let p = wait_state(&api, &name, "DryRun").await;
        let status = p.status.clone().unwrap();
        let would = status.would_restart.clone().expect("status.wouldRestart");
        assert_eq!(would.count, 2, "the chunk limit is evaluated: {would:?}");
        let listed: Vec<_> = would
            .workloads
            .iter()
            .map(|w| (w.namespace.as_str(), w.kind.as_str(), w.name.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                (ns.as_str(), "Deployment", "old-a"),
                (ns.as_str(), "Deployment", "old-b")
            ]
        );
        assert!(
            would.workloads.iter().all(|w| w.reason.contains(NEW_PROXY)),
            "{would:?}"
        );
        assert_eq!(
            summary(&p),
            (0, 1, 0, 0),
            "nothing restarted, old-c would wait"
        );
        let ready = condition(&p, "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "DryRun")
        );
        let psrs = condition(&p, "ProxySidecarRestartSucceeded").unwrap();
        assert_eq!(
            (psrs.status.as_str(), psrs.reason.as_str()),
            ("False", "DryRun")
        );
        assert!(
            psrs.message
                .starts_with("2 workload(s) would restart now and 1 would wait"),
            "{}",
            psrs.message
        );
        assert!(
            status.applied_configuration.and_then(|a| a.proxy).is_none(),
            "nothing recorded as applied"
        );

        // Several requeues later: one Event, the same status, no workload touched.
        wait_policy(&api, &name, "PluginReady", |p| {
            condition(p, "PluginReady").is_some()
        })
        .await;
        let steady = k8s_openapi::jiff::Timestamp::now();
        let reconciled = sample(&metrics(&op), RECONCILED);
        eventually("three more dry-run reconciles", TIMEOUT, async || {
            (sample(&metrics(&op), RECONCILED) >= reconciled + 3.0).then_some(())
        })
        .await;
        let told = events(
            &client,
            "default",
            "ProxyRestartPolicy",
            &name,
            "WouldRestart",
        )
        .await;
        assert_eq!(
            occurrences(&told),
            1,
            "told once, not at every requeue: {told:?}"
        );
        let note = told[0].note.clone().unwrap_or_default();
        assert!(
            note.contains(&format!("Deployment {ns}/old-a"))
                && note.contains("1 workload(s) would wait"),
            "{note}"
        );
        for (n, annotations) in all.iter().zip(&before) {
            assert_eq!(
                generation(&client, &ns, n).await,
                1,
                "{n} not restarted by a dry run"
            );
            let now = template_annotations(&client, &ns, n).await;
            assert_eq!(&now, annotations, "{n}: pod template annotations unchanged");
            assert!(!now.contains_key("wasmop.dev/restartedAt"));
        }
        assert_eq!(sample(&metrics(&op), ROLLOUTS), 0.0);
        let writes = operator_writes(since, &ns, &name);
        assert!(
            writes
                .iter()
                .all(|w| !w.object.contains(&format!(" {ns}/"))),
            "no write in the workloads' namespace: {writes:?}"
        );
        let writes = operator_writes(steady, &ns, &name);
        assert!(
            writes.is_empty(),
            "no write at steady state, requeues or not: {writes:?}"
        );

        // Switched off: the same workloads restart, chunk by chunk.
        patch_spec(&api, &name, json!({"mode": "Restart"})).await;
        let p = wait_policy(&api, &name, "Ready after the last chunk", |p| {
            state(p) == Some("Ready")
                && p.status.as_ref().and_then(|s| s.observed_generation) == p.metadata.generation
        })
        .await;
        assert!(
            p.status.unwrap().would_restart.is_none(),
            "no dry-run result outside a dry run"
        );
        assert_eq!(sample(&metrics(&op), ROLLOUTS), 3.0);
        for n in outdated {
            assert_eq!(generation(&client, &ns, n).await, 2, "{n} restarted once");
        }
        assert_eq!(generation(&client, &ns, "new-d").await, 1);
    })
    .await;
}
