//! Restart benchmark: 10,000 pods judged by the `restart-sidecar` plugin page by page, and the
//! operator's memory while it pages through them.
//!
//! 1. **Plugin time.** 10,000 sidecar pods (half of them with an outdated `istio-proxy` image,
//!    a tenth of them up to date but annotated with other proxy resources) are cut into pages of 30, 100 (the
//!    default `limits.pageSize`) and 500 pods. Each page is judged the way the controller does
//!    it: the page's JSON is encoded from the typed pods (`restart::pods::page_json`, timed as
//!    "encode"), then `Plugin::evaluate` runs the builtin component (semaphore, the calling task,
//!    fresh `Store`, instantiation, call, decision check). Reported: per-page p50/p99 and the
//!    total over all 10,000 pods, next to the same logic called natively
//!    (`restart_sidecar::evaluate_request` on the same JSON) in the same run, and their ratio.
//!    Target: a page of the largest size (500, the most `limits.pageSize` allows) decided
//!    through wasm within a quarter of the default call timeout (250 ms) at p99, so no page
//!    comes near a timeout. Both sides must agree on every decision.
//! 2. **Memory while paging.** A child process (this binary again) serves the 10,000 pods as a
//!    minimal Kubernetes API on 127.0.0.1 (`GET /api/v1/pods` with `limit` and `continue`,
//!    each pod about 3 KiB of JSON with its managed fields), so its memory is not counted. In
//!    this process the operator's own code pages through them: `restart::pods::PodPager` over a
//!    `kube::Client` (the list request, the JSON parse into `Pod`s, dropping managed fields),
//!    `restart::plan::eligible` and `restart::pods::page_json` for every page, and the plugin
//!    call. Resident memory (VmRSS) is sampled after every page; the peak (VmHWM, reset through
//!    `/proc/self/clear_refs` before the pass) is reported as growth over the resident memory
//!    before the pass. Target: flat (the last quarter's samples within a few MiB of the first)
//!    and under 100 MiB. For contrast, the same pods listed in one request (no `limit`, what a
//!    cluster-wide list or cache holds), in the same run.
//!
//! Run with `cargo bench -p wasmop-controllers --bench restart` (about half a minute once
//! built). Loopback only; every loop is bounded. Figures depend on the machine and its load;
//! the header prints the CPU count and load.

use std::convert::Infallible;
use std::hint::black_box;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube::core::Selector;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use wasmop_controllers::restart::plan::eligible;
use wasmop_controllers::restart::pods::{PodPager, page_json};
use wasmop_plugin_host::registry::{LocalFetch, Registry, RegistryConfig};
use wasmop_plugin_host::{Hook, Plugin, PluginRuntime, RestartRequest, RuntimeOptions};

/// Pods judged.
const PODS: usize = 10_000;
/// Page sizes of section 1; the middle one is the default.
const PAGE_SIZES: [usize; 3] = [30, 100, 500];
/// `limits.pageSize` by default.
const DEFAULT_PAGE: usize = 100;
/// The largest page size, the most `limits.pageSize` allows.
const LARGEST_PAGE: usize = 500;
/// Target: p99 of a page of [`LARGEST_PAGE`] pods through wasm, a quarter of the default call
/// timeout (`limits.timeoutMs`, 250 ms).
const PAGE_TARGET: Duration = Duration::from_micros(62_500);
/// Target: peak growth of resident memory while paging.
const MEMORY_TARGET_MIB: f64 = 100.0;
/// Set in the child process: serve the fake API server.
const CHILD_ENV: &str = "WASMOP_BENCH_RESTART_API";
const OLD: &str = "docker.io/istio/proxyv2:1.26.4";
const NEW: &str = "docker.io/istio/proxyv2:1.27.1";

fn main() {
    if std::env::var_os(CHILD_ENV).is_some() {
        fake_api::main();
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!("wasmop restart benchmark: {PODS} pods");
    println!(
        "cpus: {}, load average at start: {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average()
    );
    let cache = std::env::temp_dir().join(format!("wasmop-bench-restart-{}", std::process::id()));
    let plugin = rt.block_on(load_plugin(&cache));

    println!(
        "\n1. plugin time (page JSON encoded by the operator, then one evaluate call per page)"
    );
    println!(
        "   {:>5} {:>6} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} | {:>6} | {:>9} | {:>8}",
        "page",
        "pages",
        "wasm p50",
        "wasm p99",
        "wasm all",
        "nat. p50",
        "nat. p99",
        "nat. all",
        "ratio",
        "encode",
        "restarts"
    );
    let pods: Vec<Pod> = (0..PODS)
        .map(|i| serde_json::from_value(pod(i)).expect("a pod"))
        .collect();
    for size in PAGE_SIZES {
        plugin_time(&rt, &plugin, &pods, size);
    }
    drop(pods);

    println!(
        "\n2. memory while paging through {PODS} pods served by a fake API server (child process)"
    );
    rt.block_on(memory(&plugin));
    let _ = std::fs::remove_dir_all(&cache);
    println!("\nload average at end: {}", load_average());
}

/// The builtin restart plugin, loaded as the operator loads it.
async fn load_plugin(cache: &std::path::Path) -> Arc<Plugin> {
    let runtime = PluginRuntime::new(RuntimeOptions {
        cache_dir: Some(cache.to_path_buf()),
        max_concurrent_calls: 2,
        pooling: false,
        extra_ca_pem: None,
    })
    .expect("plugin runtime");
    let registry = Registry::new(runtime);
    let report = registry
        .apply(RegistryConfig::default(), &LocalFetch::default())
        .await;
    assert!(report.failed.is_empty(), "builtins failed: {report:?}");
    registry
        .resolve(Hook::Restart, None)
        .expect("restart-sidecar")
}

/// The desired state every page is judged against.
fn desired() -> String {
    json!({"image": NEW, "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
           "cni": true, "dnsProxying": true, "statsMatcher": {"inclusionRegexps": [".*outlier.*"]}})
    .to_string()
}

/// Pod `i` as the API server returns it: even ones outdated, one in ten of the others annotated
/// with a CPU request other than the desired one.
fn pod(i: usize) -> Value {
    let image = if i.is_multiple_of(2) { OLD } else { NEW };
    let mut annotations = json!({
        "sidecar.istio.io/status": "{\"initContainers\":[\"istio-validation\"],\"containers\":[\"istio-proxy\"],\"volumes\":[\"workload-socket\",\"credential-socket\",\"workload-certs\",\"istio-envoy\",\"istio-data\",\"istio-podinfo\",\"istio-token\",\"istiod-ca-cert\"],\"imagePullSecrets\":null,\"revision\":\"default\"}",
        "kubectl.kubernetes.io/default-container": "app",
        "prometheus.io/path": "/stats/prometheus",
        "prometheus.io/port": "15020",
    });
    if i % 10 == 5 {
        annotations["sidecar.istio.io/proxyCPU"] = "200m".into();
    }
    let ns = format!("team-{}", i % 50);
    let app = format!("app-{}", i % 400);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-7d9f8b6c5d-{i:05}"), "namespace": ns,
            "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "resourceVersion": format!("{}", 100_000 + i),
            "creationTimestamp": "2026-08-01T10:00:00Z",
            "labels": {"app": app, "pod-template-hash": "7d9f8b6c5d",
                       "security.istio.io/tlsMode": "istio", "service.istio.io/canonical-name": app},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": format!("{app}-7d9f8b6c5d"), "uid": "11111111-1111-1111-1111-111111111111",
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-08-01T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                                            "f:ownerReferences": {".": {}, "k:{\"uid\":\"11111111\"}": {}}},
                                            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}}},
                              {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                               "time": "2026-08-01T10:00:05Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:phase": {}, "f:podIP": {}}}}]
        },
        "spec": {
            "initContainers": [{"name": "istio-validation", "image": image,
                                "args": ["istio-iptables", "--run-validation", "--skip-rule-apply"]}],
            "containers": [
                {"name": "app", "image": format!("registry.example/{app}:1.4.2"),
                 "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}},
                {"name": "istio-proxy", "image": image,
                 "args": ["proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"],
                 "ports": [{"containerPort": 15090, "name": "http-envoy-prom", "protocol": "TCP"}],
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                               "limits": {"cpu": "2", "memory": "1Gi"}}}
            ],
            "nodeName": format!("node-{}", i % 20), "serviceAccountName": "default"
        },
        "status": {
            "phase": "Running", "podIP": format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"},
                           {"type": "ContainersReady", "status": "True"}, {"type": "PodScheduled", "status": "True"}]
        }
    })
}

/// Latencies, sorted, with nearest-rank percentiles.
struct Samples(Vec<Duration>);

impl Samples {
    fn new(mut v: Vec<Duration>) -> Self {
        v.sort_unstable();
        Self(v)
    }
    fn percentile(&self, p: f64) -> Duration {
        let n = self.0.len();
        let rank = (p / 100.0 * n as f64).ceil() as usize;
        self.0[rank.clamp(1, n) - 1]
    }
    fn total(&self) -> Duration {
        self.0.iter().sum()
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1e3)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

/// Section 1 at `size` pods per page.
fn plugin_time(rt: &tokio::runtime::Runtime, plugin: &Arc<Plugin>, pods: &[Pod], size: usize) {
    let desired = desired();
    let mut encode = Vec::new();
    let mut wasm = Vec::new();
    let mut native = Vec::new();
    let mut restarts = 0;
    // One warm-up page on each side.
    let warm: Vec<&Pod> = pods.iter().take(size).collect();
    let warm_json = page_json(&warm).expect("encode");
    let _ = rt.block_on(plugin.evaluate(request(&desired, &warm_json), warm.len()));
    let _ = restart_sidecar::evaluate_request("{}", &desired, "null", &warm_json);
    for page in pods.chunks(size) {
        let refs: Vec<&Pod> = page.iter().collect();
        let started = Instant::now();
        let json = page_json(&refs).expect("encode");
        encode.push(started.elapsed());

        let started = Instant::now();
        let native_decisions =
            restart_sidecar::evaluate_request("{}", &desired, "null", black_box(&json))
                .expect("native");
        native.push(started.elapsed());

        let req = request(&desired, &json);
        let started = Instant::now();
        let decisions = rt
            .block_on(plugin.evaluate(req, refs.len()))
            .expect("wasm evaluate");
        wasm.push(started.elapsed());

        assert_eq!(decisions.len(), native_decisions.len());
        for (w, n) in decisions.iter().zip(&native_decisions) {
            assert_eq!(
                (w.restart, &w.reason),
                (n.restart, &n.reason),
                "wasm and native agree"
            );
        }
        restarts += decisions.iter().filter(|d| d.restart).count();
    }
    assert_eq!(
        restarts,
        PODS / 2 + PODS / 10,
        "the outdated half, and the up-to-date pods whose annotation asks for other resources"
    );
    let (wasm, native, encode) = (
        Samples::new(wasm),
        Samples::new(native),
        Samples::new(encode),
    );
    let ratio = wasm.total().as_secs_f64() / native.total().as_secs_f64();
    println!(
        "   {:>5} {:>6} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} | {:>5.1}x | {:>9} | {:>8}{}",
        size,
        wasm.0.len(),
        ms(wasm.percentile(50.0)),
        ms(wasm.percentile(99.0)),
        ms(wasm.total()),
        ms(native.percentile(50.0)),
        ms(native.percentile(99.0)),
        ms(native.total()),
        ratio,
        ms(encode.total()),
        restarts,
        if size == LARGEST_PAGE {
            format!(
                "   target wasm p99 < {}: {}",
                ms(PAGE_TARGET),
                verdict(wasm.percentile(99.0) < PAGE_TARGET)
            )
        } else {
            String::new()
        }
    );
}

fn request(desired: &str, pods: &str) -> RestartRequest {
    RestartRequest {
        policy: "bench".into(),
        desired: desired.to_owned(),
        applied: "null".into(),
        pods: pods.to_owned(),
    }
}

/// (VmRSS, VmHWM) of this process in MiB.
fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets VmHWM to the current resident memory (Linux: `5` to `/proc/self/clear_refs`).
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Section 2.
async fn memory(plugin: &Arc<Plugin>) {
    let mut child = Command::new(std::env::current_exe().expect("this binary"))
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the fake API server");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("the child's address");
    let addr = line.trim().to_owned();
    let config = kube::Config::new(format!("http://{addr}").parse().expect("a URL"));
    let client = kube::Client::try_from(config).expect("a client");
    let api: Api<Pod> = Api::all(client);
    let desired = desired();

    // Warm up: one page through the whole path, so lazily built state is not counted.
    let mut warm = PodPager::new(api.clone(), &Selector::default(), DEFAULT_PAGE as u32);
    let page = warm.next_page().await.expect("list").expect("a page");
    let refs: Vec<&Pod> = page.iter().filter(|p| eligible(p).is_ok()).collect();
    plugin
        .evaluate(
            request(&desired, &page_json(&refs).expect("encode")),
            refs.len(),
        )
        .await
        .expect("evaluate");
    drop(page);

    let (before, _) = memory_mib();
    let peak_reset = reset_peak();
    let started = Instant::now();
    let mut pager = PodPager::new(api.clone(), &Selector::default(), DEFAULT_PAGE as u32);
    let (mut seen, mut judged, mut restarts) = (0, 0, 0);
    let mut samples = Vec::new();
    while let Some(page) = pager.next_page().await.expect("list a page") {
        seen += page.len();
        let refs: Vec<&Pod> = page.iter().filter(|p| eligible(p).is_ok()).collect();
        judged += refs.len();
        let json = page_json(&refs).expect("encode");
        let decisions = plugin
            .evaluate(request(&desired, &json), refs.len())
            .await
            .expect("evaluate");
        restarts += decisions.iter().filter(|d| d.restart).count();
        samples.push(memory_mib().0);
    }
    let elapsed = started.elapsed();
    let (_, peak) = memory_mib();
    assert_eq!((seen, judged), (PODS, PODS), "every pod paged and judged");
    assert_eq!(pager.pages(), PODS / DEFAULT_PAGE);
    let at = |q: usize| samples[(samples.len() * q / 4).min(samples.len() - 1)];
    let quarter = samples.len() / 4;
    let first_quarter = samples[..quarter].iter().cloned().fold(f64::MIN, f64::max);
    let last_quarter = samples[samples.len() - quarter..]
        .iter()
        .cloned()
        .fold(f64::MIN, f64::max);
    let growth = peak - before;
    println!(
        "   paged: {} pages of {DEFAULT_PAGE} in {} ({restarts} restart decisions)",
        pager.pages(),
        ms(elapsed)
    );
    println!(
        "   resident before: {before:.1} MiB; after page 1, 25%, 50%, 75%, last: {:.1} / {:.1} / {:.1} / {:.1} / {:.1} MiB",
        samples[0],
        at(1),
        at(2),
        at(3),
        samples[samples.len() - 1]
    );
    println!(
        "   peak{}: {peak:.1} MiB, growth over before: {growth:.1} MiB; highest sample first quarter {first_quarter:.1} MiB, last quarter {last_quarter:.1} MiB",
        if peak_reset {
            " (VmHWM, reset before the pass)"
        } else {
            " (VmHWM since start: clear_refs refused)"
        }
    );
    println!(
        "   target: flat (last quarter within 8 MiB of the first: {}) and growth under {MEMORY_TARGET_MIB} MiB: {}",
        verdict(last_quarter - first_quarter < 8.0),
        verdict(growth < MEMORY_TARGET_MIB)
    );

    // Contrast: the same pods in one list request.
    let (before, _) = memory_mib();
    reset_peak();
    let started = Instant::now();
    let all = api.list(&ListParams::default()).await.expect("list all");
    let elapsed = started.elapsed();
    let (held, peak) = memory_mib();
    println!(
        "   contrast, one list of all {} pods (what a cluster-wide list or cache holds): {} , resident {held:.1} MiB while held, peak growth {:.1} MiB",
        all.items.len(),
        ms(elapsed),
        peak - before
    );
    drop(all);
    let _ = child.kill();
    let _ = child.wait();
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "n/a".into())
}

/// The child process of section 2: a minimal API server for `GET /api/v1/pods` on loopback,
/// answering `limit`/`continue` pages (the token is the offset) of the generated pods.
mod fake_api {
    use super::*;

    pub fn main() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind loopback");
            println!("{}", listener.local_addr().expect("address"));
            let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
            loop {
                let accepted = tokio::time::timeout_at(deadline, listener.accept()).await;
                let Ok(Ok((stream, _))) = accepted else {
                    return;
                };
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), hyper::service::service_fn(answer))
                        .await;
                });
            }
        });
    }

    async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        let query: Vec<(String, String)> = req
            .uri()
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let get = |k: &str| {
            query
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        if req.uri().path() != "/api/v1/pods" {
            return Ok(Response::builder()
                .status(404)
                .body(Full::new(Bytes::new()))
                .unwrap());
        }
        let limit = get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0)
            .unwrap_or(PODS);
        let from = get("continue")
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(0);
        let to = (from + limit).min(PODS);
        let items: Vec<Value> = (from..to).map(pod).collect();
        let mut metadata = json!({"resourceVersion": "200000"});
        if to < PODS {
            metadata["continue"] = to.to_string().into();
        }
        let body =
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": metadata, "items": items});
        Ok(Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                serde_json::to_vec(&body).unwrap_or_default(),
            )))
            .unwrap())
    }
}
