//! E2E: two `wasmop run` processes share one DR lease on the local control plane, each under
//! its own ServiceAccount (the chart's `wasmop-system/wasmop`, and `wasmop-peer` of the test
//! namespace bound to the chart's ClusterRoles), so the API server's audit log tells their
//! writes apart. x = 1 s, y = 3.
//!
//! - `k8s-lease`: one becomes active, the other passive and writes nothing; SIGKILL the active →
//!   the other is active within (y+1)·x plus a margin and reconciles an ElasticService and a
//!   DynamicEnv created meanwhile; cut the active off from the Lease (its namespace RoleBinding removed) while it
//!   is busy writing → it demotes itself before the peer takes over, with no moment when both
//!   wrote.
//! - `dynamodb` against moto on loopback: the same, the cut made by a proxy between one
//!   instance and moto.
//!
//! Throughout, `/health/ready?checkifreadonly=true` answers 200 on the active, 502 on the
//! passive, and never 200 on both.
//!
//! - Under a flood of routing calls (100 DynamicEnvs whose router loops to its deadline, one
//!   shared call permit), a single instance keeps renewing the lease every period and never
//!   demotes: each hook has a plugin-call permit of its own.
//!
//! The reconciled resources are ElasticServices (and, in the SIGKILL test, a DynamicEnv: the
//! DR loop gates every controller alike).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wasmop_tests::dr::create_table;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use wasmop_api::elasticservice::ElasticService;
use wasmop_controllers::scaling::controller::FINALIZER;
use wasmop_tests::dr::{
    CutProxy, HealthWatch, MOTO_ENV, Moto, PeerAccount, assert_one_active_at_a_time,
    assert_writes_do_not_overlap, audit_writes, dr_status, operator_user, readonly_check,
    start_operator,
};
use wasmop_tests::{
    Operator, bind_operator_namespace, create_in, eventually, install_crds, install_operator_rbac,
    kubectl_ok, sample, service_account_kubeconfig, wait_until, with_temp_ns,
};

const BIN: &str = env!("CARGO_BIN_EXE_wasmop");
/// x and y of these tests.
const X: u64 = 1;
const Y: u64 = 3;
/// What may come on top of (y+1)·x: polling, process and API latency.
const MARGIN: Duration = Duration::from_millis(1500);
const TIMEOUT: Duration = Duration::from_secs(30);

/// (y+1)·x.
fn failover_bound() -> Duration {
    Duration::from_secs((Y + 1) * X)
}

/// The registry with the `dr-lease` plugin and `settings` (JSON) as the DR entry.
async fn registry(client: &Client, ns: &str, settings: serde_json::Value) {
    let doc = format!(
        "plugins:\n  - name: dr\n    hook: dr\n    source: builtin://dr-lease\n    settings: {settings}\ndefaults: {{dr: dr}}\n"
    );
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("wasmop-plugins".into());
    cm.data = Some([("plugins.yaml".to_owned(), doc)].into());
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the registry");
}

/// A Deployment and a Service `name`, and an ElasticService `name` for them.
async fn elastic_service(client: &Client, ns: &str, name: &str) -> Api<ElasticService> {
    create_in::<Deployment>(
        client,
        ns,
        json!({"metadata": {"name": name},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}}}}),
    )
    .await;
    create_in::<Service>(
        client,
        ns,
        json!({"metadata": {"name": name},
               "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}]}}),
    )
    .await;
    create_in::<ElasticService>(
        client,
        ns,
        json!({"apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
               "metadata": {"name": name},
               "spec": {"service": name, "cooldownPeriod": 300,
                        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}}}),
    )
    .await;
    Api::namespaced(client.clone(), ns)
}

/// Reconciled: the finalizer is on and the status names a mode.
fn reconciled(es: Option<&ElasticService>) -> bool {
    es.is_some_and(|es| {
        es.finalizers().iter().any(|f| f == FINALIZER)
            && es.status.as_ref().is_some_and(|s| s.mode.is_some())
    })
}

async fn wait_reconciled(client: &Client, ns: &str, name: &str) {
    let api: Api<ElasticService> = Api::namespaced(client.clone(), ns);
    wait_until(
        &api,
        name,
        TIMEOUT,
        "reconciled (finalizer and mode)",
        reconciled,
    )
    .await;
}

/// Waits until `op` answers `want` to `checkifreadonly=true`; returns how long it took.
async fn wait_readonly(op: &Operator, want: u16, within: Duration, what: &str) -> Duration {
    let started = Instant::now();
    eventually(what, within, async || {
        (readonly_check(&op.addr) == Some(want)).then_some(())
    })
    .await;
    started.elapsed()
}

/// Waits until `op`'s `/dr` shows `holder` renewing: its record's time moved twice.
async fn wait_renewals(op: &Operator, holder: &str) {
    let mut seen = Vec::new();
    eventually(
        &format!("{holder} renewing, seen by the peer"),
        TIMEOUT,
        async || {
            let s = dr_status(&op.addr)?;
            if s["holder"] != holder {
                return None;
            }
            let t = s["holderUpdatedMs"].as_i64()?;
            if !seen.contains(&t) {
                seen.push(t);
            }
            (seen.len() >= 3).then_some(())
        },
    )
    .await;
}

/// The audit writes of the two accounts in `ns`.
fn writes(ns: &str, users: &[&str]) -> Vec<wasmop_tests::dr::AuditWrite> {
    audit_writes(users)
        .into_iter()
        .filter(|w| w.object.contains(&format!(" {ns}/")))
        .collect()
}

/// Starts A (the chart's account, identity dr-a) and waits for it to be active, then B (the
/// peer account, identity dr-b), passive, watching A renew.
async fn start_pair(
    ns: &str,
    peer: &PeerAccount,
    a_env: &[(&str, &str)],
    b_env: &[(&str, &str)],
) -> (Operator, Operator) {
    let a_kubeconfig = service_account_kubeconfig("wasmop-system", "wasmop");
    let mut a = start_operator(BIN, ns, "dr-a", &a_kubeconfig, &[], a_env).await;
    a.wait_active(TIMEOUT).await;
    let b = start_operator(BIN, ns, "dr-b", &peer.kubeconfig, &[], b_env).await;
    wait_renewals(&b, "dr-a").await;
    assert_eq!(readonly_check(&a.addr), Some(200));
    assert_eq!(readonly_check(&b.addr), Some(502));
    (a, b)
}

fn setup(ns: &str) -> PeerAccount {
    install_crds();
    install_operator_rbac();
    bind_operator_namespace(ns);
    PeerAccount::create(ns)
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn k8s_lease_takeover_after_sigkill() {
    with_temp_ns("dr-kill", |client: Client, ns: String| async move {
        let peer = setup(&ns);
        registry(
            &client,
            &ns,
            json!({"waitTimeInSeconds": X, "failureThreshold": Y, "leaseName": "dr-e2e"}),
        )
        .await;
        let since = Timestamp::now();
        let (a, b) = start_pair(&ns, &peer, &[], &[]).await;
        let watch = HealthWatch::start(&[("a", &a.addr), ("b", &b.addr)]);
        wasmop_tests::routing::bookinfo(&client, &ns, true).await;
        elastic_service(&client, &ns, "before").await;
        wait_reconciled(&client, &ns, "before").await;
        wait_renewals(&b, "dr-a").await;
        let a_user = operator_user();
        assert!(
            writes(&ns, &[&peer.user]).iter().all(|w| w.at < since),
            "the passive instance wrote"
        );
        let lease = kubectl_ok(&[
            "get",
            "lease",
            "dr-e2e",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.holderIdentity} {.spec.leaseDurationSeconds}",
        ]);
        assert_eq!(lease, "dr-a 3");

        let killed_at = Timestamp::now();
        let killed = Instant::now();
        drop(a); // SIGKILL, no goodbye
        elastic_service(&client, &ns, "after").await;
        wasmop_tests::routing::create(
            &client,
            &ns,
            wasmop_tests::routing::dynamic_env("after", &ns, "jason", "reviews:v2", false),
        )
        .await;
        wait_readonly(
            &b,
            200,
            failover_bound() + MARGIN + Duration::from_secs(2),
            "b to take over",
        )
        .await;
        let failover = killed.elapsed();
        assert!(
            failover <= failover_bound() + MARGIN,
            "took over {failover:?} after the kill"
        );
        wait_reconciled(&client, &ns, "after").await;
        wasmop_tests::routing::wait_state(&client, &ns, "after", "ready", Duration::from_secs(60))
            .await;
        let samples = watch.finish();
        assert_one_active_at_a_time(&samples);
        assert!(samples.iter().any(|s| s.answers["b"] == Some(502)));
        assert!(samples.iter().any(|s| s.answers["b"] == Some(200)));

        let all = writes(&ns, &[&a_user, &peer.user]);
        let early: Vec<_> = all
            .iter()
            .filter(|w| w.user == peer.user && w.at < killed_at)
            .collect();
        assert!(early.is_empty(), "the passive instance wrote: {early:?}");
        assert_writes_do_not_overlap(&all, &a_user, &peer.user, since);
        assert!(
            all.iter().any(|w| w.user == peer.user
                && w.object.starts_with("elasticservices")
                && w.object.ends_with("/after")),
            "b reconciled the ElasticService created during the failover: {all:?}"
        );
        assert!(
            all.iter().any(|w| w.user == peer.user
                && w.object.starts_with("virtualservices")
                && w.object.ends_with("/reviews")),
            "b routed the DynamicEnv created during the failover: {all:?}"
        );
        let lease = kubectl_ok(&[
            "get",
            "lease",
            "dr-e2e",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.holderIdentity} {.spec.leaseTransitions}",
        ]);
        assert_eq!(lease, "dr-b 1");
        eprintln!("failover after SIGKILL: {failover:?}");
    })
    .await;
}

/// Patches the ElasticService's spec every 150 ms (as the admin) until stopped, so the active
/// instance keeps writing its status: a gate left open would show in the audit log.
fn keep_busy(
    client: &Client,
    ns: &str,
    name: &str,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (api, name, s) = (
        Api::<ElasticService>::namespaced(client.clone(), ns),
        name.to_owned(),
        stop.clone(),
    );
    let task = tokio::spawn(async move {
        let mut i = 0;
        while !s.load(Ordering::Relaxed) && i < 400 {
            i += 1;
            let patch = json!({"spec": {"cooldownPeriod": 300 + i}});
            let _ = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    });
    (stop, task)
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn k8s_lease_cut_off_active_demotes_before_takeover() {
    with_temp_ns("dr-cut", |client: Client, ns: String| async move {
        let peer = setup(&ns);
        registry(
            &client,
            &ns,
            json!({"waitTimeInSeconds": X, "failureThreshold": Y}),
        )
        .await;
        let since = Timestamp::now();
        let (a, b) = start_pair(&ns, &peer, &[], &[]).await;
        elastic_service(&client, &ns, "busy").await;
        wait_reconciled(&client, &ns, "busy").await;
        let watch = HealthWatch::start(&[("a", &a.addr), ("b", &b.addr)]);
        let (stop, busy) = keep_busy(&client, &ns, "busy");
        let a_user = operator_user();
        eventually("a busy writing status", TIMEOUT, async || {
            let n = writes(&ns, &[&a_user])
                .iter()
                .filter(|w| w.object.starts_with("elasticservices/status"))
                .count();
            (n >= 5).then_some(())
        })
        .await;

        // A loses the Lease (and the rest of its namespace rules); its cluster rules stay, so
        // only its own gate can keep it from writing the ElasticService.
        let cut_at = Timestamp::now();
        kubectl_ok(&["delete", "rolebinding", "wasmop", "-n", &ns]);
        let hold = Duration::from_millis(2500);
        let demoted = wait_readonly(&a, 502, hold + MARGIN, "a to demote itself").await;
        let took_over = wait_readonly(&b, 200, TIMEOUT, "b to take over").await + demoted;
        eprintln!("after the cut: a passive after {demoted:?}, b active after {took_over:?}");
        assert!(took_over > demoted);
        eventually("b writing the status", TIMEOUT, async || {
            writes(&ns, &[&peer.user])
                .iter()
                .any(|w| w.object.starts_with("elasticservices/status"))
                .then_some(())
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        busy.await.unwrap();
        assert_one_active_at_a_time(&watch.finish());
        let all = writes(&ns, &[&a_user, &peer.user]);
        assert!(
            all.iter().any(|w| w.user == a_user && w.at > cut_at),
            "a kept writing after the cut until it demoted: {all:?}"
        );
        assert_writes_do_not_overlap(&all, &a_user, &peer.user, since);
        let log = a.process.log();
        assert!(log.contains("now passive"), "{log}");
    })
    .await;
}

/// A DynamoDB client for moto, as the tests' setup.
async fn moto_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let creds =
        aws_sdk_dynamodb::config::Credentials::new("testing", "testing", None, None, "test");
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .http_client(wasmop_controllers::dr::dynamodb::http_client())
        .credentials_provider(creds)
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn dynamodb_cut_off_and_sigkill_fail_over() {
    with_temp_ns("dr-ddb", |client: Client, ns: String| async move {
        let peer = setup(&ns);
        let moto = Moto::start(&ns).await;
        create_table(&moto_client(&moto.endpoint).await, "admiral-lease").await;
        registry(
            &client,
            &ns,
            json!({"dynamoDB": {"leaseName": "wasmop-e2e", "tableName": "admiral-lease", "region": "us-east-1",
                                "waitTimeInSeconds": X, "failureThreshold": Y}}),
        )
        .await;
        // A reaches moto through a proxy the test can cut; B directly. The endpoint comes from
        // the SDK's own environment variable, per process.
        let proxy = CutProxy::start(&moto.addr).await;
        let a_endpoint = format!("http://{}", proxy.addr);
        let mut a_env = MOTO_ENV.to_vec();
        a_env.push(("AWS_ENDPOINT_URL_DYNAMODB", &a_endpoint));
        let mut b_env = MOTO_ENV.to_vec();
        b_env.push(("AWS_ENDPOINT_URL_DYNAMODB", &moto.endpoint));
        let since = Timestamp::now();
        let (a, b) = start_pair(&ns, &peer, &a_env, &b_env).await;
        let a_user = operator_user();
        elastic_service(&client, &ns, "busy").await;
        wait_reconciled(&client, &ns, "busy").await;
        let watch = HealthWatch::start(&[("a", &a.addr), ("b", &b.addr)]);
        assert!(writes(&ns, &[&peer.user]).is_empty(), "the passive instance wrote");

        // 1. A is cut off from DynamoDB while busy.
        let (stop, busy) = keep_busy(&client, &ns, "busy");
        eventually("a busy writing status", TIMEOUT, async || {
            (writes(&ns, &[&a_user]).iter().filter(|w| w.object.starts_with("elasticservices/status")).count() >= 5)
                .then_some(())
        })
        .await;
        proxy.set_open(false);
        let demoted = wait_readonly(&a, 502, Duration::from_millis(2500) + MARGIN, "a to demote itself").await;
        let took_over = wait_readonly(&b, 200, TIMEOUT, "b to take over").await + demoted;
        eprintln!("dynamodb cut: a passive after {demoted:?}, b active after {took_over:?}");
        eventually("b writing the status", TIMEOUT, async || {
            writes(&ns, &[&peer.user]).iter().any(|w| w.object.starts_with("elasticservices/status")).then_some(())
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        busy.await.unwrap();
        let all = writes(&ns, &[&a_user, &peer.user]);
        assert_writes_do_not_overlap(&all, &a_user, &peer.user, since);
        let item = moto_client(&moto.endpoint)
            .await
            .get_item()
            .table_name("admiral-lease")
            .key("leaseName", aws_sdk_dynamodb::types::AttributeValue::S("wasmop-e2e".into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        let owner = item.item().and_then(|i| i.get("leaseOwner")).and_then(|v| v.as_s().ok()).cloned();
        assert_eq!(owner.as_deref(), Some("dr-b"));

        // 2. A reaches DynamoDB again (passive); B is killed; A takes over and reconciles an
        //    ElasticService created meanwhile.
        proxy.set_open(true);
        eventually("a sees b's lease again", TIMEOUT, async || {
            dr_status(&a.addr).filter(|s| s["holder"] == "dr-b" && s["error"].is_null()).map(|_| ())
        })
        .await;
        let killed_at = Timestamp::now();
        let killed = Instant::now();
        drop(b);
        elastic_service(&client, &ns, "after").await;
        wait_readonly(&a, 200, failover_bound() + MARGIN + Duration::from_secs(2), "a to take over").await;
        let failover = killed.elapsed();
        // DynamoDB keeps whole seconds, rounded up: a record can look up to 1 s younger than
        // it is, which delays a takeover by as much.
        assert!(
            failover <= failover_bound() + Duration::from_secs(1) + MARGIN,
            "took over {failover:?} after the kill"
        );
        wait_reconciled(&client, &ns, "after").await;
        assert_one_active_at_a_time(&watch.finish());
        let all = writes(&ns, &[&a_user, &peer.user]);
        assert_writes_do_not_overlap(&all, &peer.user, &a_user, killed_at);
        eprintln!("dynamodb failover after SIGKILL: {failover:?}");
    })
    .await;
}

/// Two installs share one DynamoDB lease, each with its own namespace and registry. Deleting
/// the passive install's `wasmop-plugins` makes its registry fall back to the builtin defaults;
/// its DR loop keeps the shared lease (passive, no Lease of its own), and so does a restart of
/// it while the ConfigMap is still missing, told its backend by `--dr-backend`.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_deleted_registry_never_makes_a_second_writer() {
    with_temp_ns("dr-registry", |client: Client, ns: String| async move {
        let other = format!("{ns}-b");
        kubectl_ok(&["create", "namespace", &other]);
        install_crds();
        install_operator_rbac();
        bind_operator_namespace(&ns);
        bind_operator_namespace(&other);
        let moto = Moto::start(&ns).await;
        create_table(&moto_client(&moto.endpoint).await, "admiral-lease").await;
        let settings = json!({"dynamoDB": {"leaseName": "wasmop-e2e", "tableName": "admiral-lease",
                                           "region": "us-east-1", "waitTimeInSeconds": X,
                                           "failureThreshold": Y}});
        registry(&client, &ns, settings.clone()).await;
        registry(&client, &other, settings).await;
        let mut env = MOTO_ENV.to_vec();
        env.push(("AWS_ENDPOINT_URL_DYNAMODB", &moto.endpoint));
        let kubeconfig = service_account_kubeconfig("wasmop-system", "wasmop");
        let args = ["--dr-backend", "dynamodb"];
        let mut a = start_operator(BIN, &ns, "dr-a", &kubeconfig, &args, &env).await;
        a.wait_active(TIMEOUT).await;
        let mut b = start_operator(BIN, &other, "dr-b", &kubeconfig, &args, &env).await;
        wait_renewals(&b, "dr-a").await;

        // B's registry is deleted: B falls back, keeps the shared lease, and stays passive.
        Api::<ConfigMap>::namespaced(client.clone(), &other)
            .delete("wasmop-plugins", &Default::default())
            .await
            .expect("delete B's registry");
        eventually("b to keep its DR settings", TIMEOUT, async || {
            dr_status(&b.addr)
                .filter(|s| {
                    s["registryError"]
                        .as_str()
                        .is_some_and(|e| e.contains("last good"))
                })
                .map(|_| ())
        })
        .await;
        let no_lease_in = |ns: &str| {
            let out = wasmop_tests::kubectl()
                .args(["get", "leases", "-n", ns, "-o", "name"])
                .output()
                .expect("kubectl");
            String::from_utf8_lossy(&out.stdout).trim().is_empty()
        };
        // Longer than a takeover would take (y·x plus a tick): nothing changes.
        let until = Instant::now() + failover_bound() + MARGIN;
        while Instant::now() < until {
            assert_eq!(readonly_check(&b.addr), Some(502), "b became active");
            assert_eq!(readonly_check(&a.addr), Some(200), "a stopped being active");
            assert!(no_lease_in(&other), "b made a Lease of its own");
            let s = dr_status(&b.addr).unwrap();
            assert!(
                s["backend"].as_str().unwrap().starts_with("DynamoDB"),
                "{s}"
            );
            assert_eq!(s["backendKind"], "dynamodb", "{s}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        // B restarts while its registry is still missing: passive, no Lease, no lease write.
        drop(b);
        b = start_operator(BIN, &other, "dr-b", &kubeconfig, &args, &env).await;
        eventually("b to refuse to invent a backend", TIMEOUT, async || {
            dr_status(&b.addr)
                .filter(|s| {
                    s["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("--dr-backend"))
                })
                .map(|_| ())
        })
        .await;
        assert_eq!(readonly_check(&b.addr), Some(502));
        assert!(no_lease_in(&other));
        assert_eq!(readonly_check(&a.addr), Some(200));
        drop(b);
        kubectl_ok(&["delete", "namespace", &other, "--wait=false"]);
    })
    .await;
}

/// The registry of the flood test: the `dr-lease` state checker with x = `x` s, and `looper`,
/// the default router: the hostile fixture (a `file://` source) looping to its 250 ms deadline
/// on every call.
async fn looping_router_registry(client: &Client, ns: &str, x: u64) {
    let fixture = wasmop_tests::components_dir().join("wasmop_hostile_fixture.wasm");
    let sha256 = wasmop_plugin_host::sha256_hex(&std::fs::read(&fixture).expect("the fixture"));
    let doc = format!(
        "plugins:\n\
         \x20 - name: dr\n    hook: dr\n    source: builtin://dr-lease\n\
         \x20   settings: {{waitTimeInSeconds: {x}, failureThreshold: {Y}, leaseName: dr-flood}}\n\
         \x20 - name: looper\n    hook: routing\n    source: file://{}\n    sha256: {sha256}\n\
         \x20   settings: {{behaviour: loop}}\n    limits: {{timeoutMs: 250}}\n\
         defaults: {{dr: dr, routing: looper}}\n",
        fixture.display()
    );
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("wasmop-plugins".into());
    cm.data = Some([("plugins.yaml".to_owned(), doc)].into());
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the registry");
}

/// Each hook has a plugin-call permit of its own: with one shared permit
/// (`--max-concurrent-calls 1`) and 100 DynamicEnvs whose router loops to its 250 ms deadline
/// on each of 16 VirtualServices of `reviews` (the controller reconciles 4 DynamicEnvs at a
/// time, each calling the router for its VirtualServices at once: about 64 calls queued at any
/// moment, 8 s of work for the two permits routing may take), the active instance still renews
/// the lease every period (x = 2 s, each renewal within x plus a margin of the one before) and
/// never demotes (`checkifreadonly` answers 200 throughout, the lease never changes hands). With
/// one semaphore for every hook, the DR tick waited behind the queue, the lease went unrenewed
/// past y·x − x/2 and the instance demoted itself.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh): run with make test or make e2e"]
async fn a_flood_of_looping_routing_calls_never_holds_back_the_dr_lease() {
    const FLOOD_X: u64 = 2;
    with_temp_ns("dr-flood", |client: Client, ns: String| async move {
        looping_router_registry(&client, &ns, FLOOD_X).await;
        wasmop_tests::routing::bookinfo(&client, &ns, true).await;
        for k in 1..16 {
            let mut vs = wasmop_tests::routing::virtual_service("reviews");
            vs["metadata"]["name"] = json!(format!("reviews-{k}"));
            wasmop_tests::routing::create(&client, &ns, vs).await;
        }
        let mut op = Operator::start(BIN, &ns, &["--max-concurrent-calls", "1"]).await;
        op.wait_active(TIMEOUT).await;
        let identity = format!("wasmop-{ns}");
        let watch = HealthWatch::start(&[("op", &op.addr)]);
        for i in 0..100 {
            wasmop_tests::routing::create(
                &client,
                &ns,
                wasmop_tests::routing::dynamic_env(
                    &format!("flood-{i}"),
                    &ns,
                    &format!("user-{i}"),
                    "docker.io/istio/examples-bookinfo-reviews-v3:1.20.3",
                    false,
                ),
            )
            .await;
        }
        // The lease's renewTime as the instance writes it, until the router has timed out 150
        // times (about 19 s of routing calls, with more queued all along).
        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let timeouts =
            r#"wasmop_plugin_calls_total{plugin="looper",hook="routing",outcome="timeout"}"#;
        let mut renewals: Vec<Timestamp> = Vec::new();
        eventually(
            "150 looping routing calls",
            Duration::from_secs(180),
            async || {
                let spec = leases.get("dr-flood").await.ok()?.spec?;
                assert_eq!(spec.holder_identity.as_deref(), Some(identity.as_str()));
                let renewed = spec.renew_time?.0;
                if renewals.last() != Some(&renewed) {
                    renewals.push(renewed);
                }
                let (_, metrics) = op.get("/metrics")?;
                (sample(&metrics, timeouts) >= 150.0).then_some(())
            },
        )
        .await;
        let samples = watch.finish();
        assert!(
            samples.iter().all(|s| s.answers["op"] == Some(200)),
            "the instance demoted itself during the flood"
        );
        assert!(renewals.len() >= 4, "renewals seen: {renewals:?}");
        let period = Duration::from_secs(FLOOD_X) + MARGIN;
        for pair in renewals.windows(2) {
            let gap = pair[1].duration_since(pair[0]);
            assert!(
                gap.unsigned_abs() <= period,
                "a renewal came {gap:#} after the one before, over {period:?}: {renewals:?}"
            );
        }
        let transitions = kubectl_ok(&[
            "get",
            "lease",
            "dr-flood",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.leaseTransitions}",
        ]);
        assert!(matches!(transitions.as_str(), "" | "0"), "{transitions}");
    })
    .await;
}
