//! Plugin tier: the default scaler (`builtin://scaling-prometheus`) through the real host
//! against a real Prometheus on loopback, which scrapes a test exporter whose value the test
//! sets. The plugin reaches Prometheus over `wasi:http` only because its address is granted.

use std::sync::Arc;
use std::time::Duration;

use wasmop_plugin_host::{
    Failure, Hook, Plugin, PluginRuntime, PluginSpec, RuntimeOptions, TriggerRequest, Vote, builtin,
};
use wasmop_tests::prometheus::{EXPORTER_JOB, Exporter, Prometheus, QueryStub};
use wasmop_tests::tls::TestCa;
use wasmop_tests::{eventually, free_port};

const TIMEOUT: Duration = Duration::from_secs(30);
/// The health window: the exporter must have been up this long before a vote is given.
const COOLDOWN_SECONDS: u32 = 2;

async fn scaler(allowed: &[&str]) -> Arc<Plugin> {
    scaler_with(allowed, None, None).await
}

/// The scaler granted `allowed`, with `settings`, in a runtime that trusts `extra_ca_pem`.
async fn scaler_with(
    allowed: &[&str],
    settings: Option<serde_json::Value>,
    extra_ca_pem: Option<&str>,
) -> Arc<Plugin> {
    let rt = PluginRuntime::new(RuntimeOptions {
        cache_dir: Some(std::env::temp_dir().join(format!(
            "wasmop-scaling-prometheus-tests-{}",
            std::process::id()
        ))),
        max_concurrent_calls: 2,
        pooling: false,
        extra_ca_pem: extra_ca_pem.map(|pem| pem.as_bytes().to_vec()),
    })
    .unwrap();
    let mut spec = PluginSpec::new("prometheus", Hook::Scaling, "builtin://scaling-prometheus");
    spec.grants.allowed_hosts = allowed.iter().map(|s| (*s).to_owned()).collect();
    spec.limits.timeout_ms = 5000;
    spec.settings = settings;
    rt.load(&spec, builtin::find("scaling-prometheus").unwrap().wasm)
        .await
        .unwrap()
}

fn trigger(prom: &Prometheus, query: &str, threshold: serde_json::Value) -> TriggerRequest {
    trigger_request(serde_json::json!({
        "query": query,
        "serverAddress": prom.url(),
        "threshold": threshold,
        "uptimeFilter": format!("job=\"{EXPORTER_JOB}\""),
    }))
}

/// A trigger asking the Prometheus API at `http://{addr}` (`host:port`).
fn trigger_at(addr: &str) -> TriggerRequest {
    trigger_for(&format!("http://{addr}"))
}

/// A trigger asking the Prometheus API at `server_address`.
fn trigger_for(server_address: &str) -> TriggerRequest {
    trigger_request(serde_json::json!({
        "query": "sum(rate(http_requests_total[1m]))",
        "serverAddress": server_address,
        "threshold": "0.5",
    }))
}

/// The request for one trigger with `metadata`.
fn trigger_request(metadata: serde_json::Value) -> TriggerRequest {
    TriggerRequest {
        elastic_service: "ns/es".into(),
        trigger_type: "prometheus".into(),
        metadata: metadata.to_string(),
        cooldown_seconds: COOLDOWN_SECONDS,
        now: 0,
    }
}

#[tokio::test]
#[ignore = "needs Prometheus from scripts/setup.sh: run with make test"]
async fn votes_follow_the_exported_value_and_bad_results_are_errors() {
    let exporter = Exporter::start();
    exporter.set_gauge("wasmop_test_load", 5.0);
    let prom = Prometheus::start(&exporter).await;
    let plugin = scaler(&[prom.addr.as_str()]).await;

    // Until the exporter has been up for a whole cooldown, there is no vote.
    // (Prometheus has just started: the first sample of `up` is younger than the window
    // only briefly, so this waits for the vote instead of asserting the error.)
    let up = eventually("an up vote at value 5", TIMEOUT, async || {
        plugin
            .vote(trigger(&prom, "sum(wasmop_test_load)", "1".into()))
            .await
            .ok()
    })
    .await;
    assert_eq!(up.vote, Vote::Up, "{}", up.reason);
    assert_eq!(up.value, Some(5.0));
    assert_eq!(up.reason, "value 5 at or above threshold 1");

    // The value drops below the threshold: down. The threshold may be a number.
    exporter.set_gauge("wasmop_test_load", 0.0);
    let down = eventually("a down vote at value 0", TIMEOUT, async || {
        let v = plugin
            .vote(trigger(&prom, "sum(wasmop_test_load)", 1.into()))
            .await
            .ok()?;
        (v.vote == Vote::Down).then_some(v)
    })
    .await;
    assert_eq!(down.value, Some(0.0));
    assert_eq!(down.reason, "value 0 below threshold 1");

    // No series and several series are errors that say what to change.
    let e = plugin
        .vote(trigger(&prom, "wasmop_no_such_metric", 1.into()))
        .await
        .unwrap_err();
    let Failure::Plugin { message, field } = &e.failure else {
        panic!("{e}")
    };
    assert_eq!(field.as_deref(), Some("request.metadata.query"));
    // The host names the field once, before the plugin's message.
    assert!(message.starts_with("query returned no series"), "{message}");
    assert!(
        e.to_string()
            .contains("plugin error at request.metadata.query: query returned no series"),
        "{e}"
    );
    exporter.set_body(
        "# TYPE wasmop_test_load gauge\nwasmop_test_load{pod=\"a\"} 1\nwasmop_test_load{pod=\"b\"} 2\n",
    );
    let e = eventually("two series to be scraped", TIMEOUT, async || {
        plugin
            .vote(trigger(&prom, "wasmop_test_load", 1.into()))
            .await
            .err()
    })
    .await;
    assert!(
        e.to_string()
            .contains("query returned 2 series; aggregate it to one, e.g. with sum()"),
        "{e}"
    );

    // A PromQL syntax error is Prometheus' 400, reported against the query.
    let e = plugin
        .vote(trigger(&prom, "sum(", 1.into()))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("metadata.query") && e.to_string().contains("HTTP 400"),
        "{e}"
    );
}

/// On a multi-thread runtime (the operator's) a call runs in the calling task on a worker
/// thread, its `wasi:http` requests awaited there; they go out and come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Prometheus from scripts/setup.sh: run with make test"]
async fn votes_from_a_worker_thread() {
    let exporter = Exporter::start();
    exporter.set_gauge("wasmop_test_load", 5.0);
    let prom = Prometheus::start(&exporter).await;
    let plugin = scaler(&[prom.addr.as_str()]).await;
    let request = trigger(&prom, "sum(wasmop_test_load)", "1".into());
    // Each attempt on a worker thread, as the scaling poller runs.
    let up = eventually("an up vote from a worker thread", TIMEOUT, async || {
        let (plugin, request) = (plugin.clone(), request.clone());
        tokio::spawn(async move { plugin.vote(request).await.ok() })
            .await
            .unwrap()
    })
    .await;
    assert_eq!(up.vote, Vote::Up, "{}", up.reason);
    assert_eq!(up.value, Some(5.0));
}

#[tokio::test]
#[ignore = "needs Prometheus from scripts/setup.sh: run with make test"]
async fn an_unhealthy_scrape_target_gives_no_vote() {
    let exporter = Exporter::start();
    exporter.set_gauge("wasmop_test_load", 0.0);
    let prom = Prometheus::start(&exporter).await;
    let plugin = scaler(&[prom.addr.as_str()]).await;
    // `up` of a job that does not exist is 0 (`or vector(0)`): the health check fails and the
    // trigger query, whose value would vote down, is not counted.
    let mut request = trigger(&prom, "sum(wasmop_test_load)", 1.into());
    let mut meta: serde_json::Value = serde_json::from_str(&request.metadata).unwrap();
    meta["uptimeFilter"] = "job=\"not-scraped\"".into();
    request.metadata = meta.to_string();
    let e = plugin.vote(request).await.unwrap_err();
    let Failure::Plugin { message, field } = &e.failure else {
        panic!("{e}")
    };
    assert_eq!(field.as_deref(), Some("request.metadata.uptimeFilter"));
    assert!(
        message.contains("Prometheus health check failed: up{job=\"not-scraped\"} was not 1"),
        "{message}"
    );
}

#[tokio::test]
#[ignore = "needs Prometheus from scripts/setup.sh: run with make test"]
async fn prometheus_is_reached_only_when_granted() {
    let exporter = Exporter::start();
    exporter.set_gauge("wasmop_test_load", 0.0);
    let prom = Prometheus::start(&exporter).await;
    let plugin = scaler(&["127.0.0.1:1"]).await;
    let e = plugin
        .vote(trigger(&prom, "sum(wasmop_test_load)", 1.into()))
        .await
        .unwrap_err();
    assert!(matches!(e.failure, Failure::DeniedHost { .. }), "{e}");
}

/// Queries go out on kept-alive connections, as upstream's Go client sends them: votes in a row
/// (two queries each) share a connection instead of opening one per query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Prometheus from scripts/setup.sh: run with make test"]
async fn votes_reuse_connections_to_prometheus() {
    let prometheus = QueryStub::start("0.2");
    let plugin = scaler(&[prometheus.addr.as_str()]).await;
    for _ in 0..10 {
        let vote = plugin.vote(trigger_at(&prometheus.addr)).await.unwrap();
        assert_eq!(vote.vote, Vote::Down, "{}", vote.reason);
    }
    assert_eq!(
        prometheus.served(),
        20,
        "the health query and the trigger's, per vote"
    );
    assert!(
        prometheus.connections() <= 2,
        "20 queries in a row opened {} connections",
        prometheus.connections()
    );
}

/// An `https://` Prometheus (as upstream's Go client reaches one): trusted when a CA of
/// `--extra-ca-file` signed its certificate, and its connection kept alive; refused, with a
/// message that says what to do, by a runtime without that CA.
#[tokio::test]
#[ignore = "needs Prometheus from scripts/setup.sh: run with make test"]
async fn votes_over_https_trust_the_extra_ca() {
    let ca = TestCa::new("wasmop test CA");
    let prometheus = QueryStub::start_tls("0.2", ca.server_config(&["localhost"]));
    let (_, port) = prometheus.addr.rsplit_once(':').unwrap();
    let authority = format!("localhost:{port}");
    let server = format!("https://{authority}");
    let plugin = scaler_with(&[authority.as_str()], None, Some(ca.pem())).await;
    for _ in 0..5 {
        let vote = plugin.vote(trigger_for(&server)).await.unwrap();
        assert_eq!(vote.vote, Vote::Down, "{}", vote.reason);
    }
    assert_eq!(prometheus.served(), 10);
    assert!(
        prometheus.connections() <= 2,
        "10 queries in a row opened {} TLS connections",
        prometheus.connections()
    );

    let untrusting = scaler(&[authority.as_str()]).await;
    let e = untrusting.vote(trigger_for(&server)).await.unwrap_err();
    let Failure::Plugin { message, field } = &e.failure else {
        panic!("{e}")
    };
    assert_eq!(
        field.as_deref(),
        Some("request.metadata.serverAddress"),
        "{e}"
    );
    assert!(
        message.contains(&format!(
            "the TLS certificate of serverAddress {server} is not trusted: it must be valid for \
             localhost and signed by a public CA or by a CA of wasmop run --extra-ca-file"
        )),
        "{message}"
    );
}

/// A pooled request fails with its cause: nothing listening is a refused connection, a server
/// that never answers runs into the plugin's `timeoutMs`.
#[tokio::test]
#[ignore = "needs Prometheus from scripts/setup.sh: run with make test"]
async fn unreachable_and_silent_servers_fail_with_their_cause() {
    let closed = format!("127.0.0.1:{}", free_port());
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = silent.local_addr().unwrap().to_string();
    let plugin = scaler_with(
        &[closed.as_str(), silent.as_str()],
        Some(serde_json::json!({"timeoutMs": 300})),
        None,
    )
    .await;
    for (addr, says) in [
        (
            &closed,
            format!("was refused: nothing listens on {closed};"),
        ),
        (&silent, "timed out after 300 ms".to_owned()),
    ] {
        let e = plugin.vote(trigger_at(addr)).await.unwrap_err();
        let Failure::Plugin { message, field } = &e.failure else {
            panic!("{addr}: {e}")
        };
        assert_eq!(
            field.as_deref(),
            Some("request.metadata.serverAddress"),
            "{e}"
        );
        assert!(message.contains(&says), "{addr}: {message}");
        assert!(!message.starts_with("metadata."), "{addr}: {message}");
    }
}
