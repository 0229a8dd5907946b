//! Plugin tier: real components through the real host. The default plugins answer; the hostile
//! fixture (tests/fixtures/hostile) fails each call with the right cause, and the host keeps
//! serving the next call.

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wasmop_plugin_host::registry::{
    CONCURRENT_LOADS, Fetch, LocalFetch, Registry, RegistryConfig, Source,
};
use wasmop_plugin_host::{
    CallError, DataRoot, DrState, Failure, Hook, LeaseAction, LeaseRecord, LoadError, Plugin,
    PluginRuntime, PluginSpec, RouteRequest, RuntimeOptions, StateRequest, builtin, sha256_hex,
};
use wasmop_tests::tls::{self, TestCa};

fn components_dir() -> std::path::PathBuf {
    wasmop_tests::components_dir()
}

fn runtime() -> Arc<PluginRuntime> {
    runtime_trusting(None)
}

/// The tests' runtime, trusting `extra_ca_pem` for plugins' `https://` requests.
fn runtime_trusting(extra_ca_pem: Option<&str>) -> Arc<PluginRuntime> {
    let dir = std::env::temp_dir().join(format!("wasmop-plugin-tests-{}", std::process::id()));
    PluginRuntime::new(RuntimeOptions {
        cache_dir: Some(dir),
        max_concurrent_calls: 2,
        pooling: false,
        extra_ca_pem: extra_ca_pem.map(|pem| pem.as_bytes().to_vec()),
    })
    .unwrap()
}

async fn hostile(rt: &Arc<PluginRuntime>, edit: impl FnOnce(&mut PluginSpec)) -> Arc<Plugin> {
    load_hostile(rt, edit).await.unwrap()
}

/// The hostile fixture loaded as entry `hostile` with `edit` applied to its spec.
async fn load_hostile(
    rt: &Arc<PluginRuntime>,
    edit: impl FnOnce(&mut PluginSpec),
) -> Result<Arc<Plugin>, LoadError> {
    let bytes = std::fs::read(components_dir().join("wasmop_hostile_fixture.wasm")).unwrap();
    let mut spec = PluginSpec::new("hostile", Hook::Routing, "file:///hostile.wasm");
    edit(&mut spec);
    rt.load(&spec, &bytes).await
}

fn request(behaviour: &str, param: &str) -> RouteRequest {
    RouteRequest {
        dynamic_env: "ns/de".into(),
        unique_name: "u".into(),
        subset: behaviour.into(),
        host: param.into(),
        namespace: "ns".into(),
        default_version: "shared".into(),
        matches: vec![],
        route_prefix: "p-".into(),
        virtual_service: "{}".into(),
    }
}

async fn fails(p: &Arc<Plugin>, behaviour: &str, param: &str) -> CallError {
    let e = p
        .route(request(behaviour, param))
        .await
        .expect_err("the call must fail");
    assert_eq!(
        (e.plugin.as_str(), e.hook),
        ("hostile", Hook::Routing),
        "the error names plugin and hook: {e}"
    );
    // The host still serves the next call.
    p.route(request("ok", ""))
        .await
        .expect("the next call succeeds");
    e
}

/// [`fails`] with `behaviour`, which must fail as a timeout at `limit_ms` within twice that
/// long.
async fn times_out(p: &Arc<Plugin>, behaviour: &str, param: &str, limit_ms: u32) -> CallError {
    let started = Instant::now();
    let e = fails(p, behaviour, param).await;
    let elapsed = started.elapsed();
    assert_eq!(e.failure, Failure::Timeout { limit_ms }, "{e}");
    assert!(
        elapsed < Duration::from_millis(2 * u64::from(limit_ms)),
        "took {elapsed:?}"
    );
    e
}

#[tokio::test]
async fn infinite_loop_times_out_within_twice_the_deadline() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    let e = times_out(&p, "loop", "", 250).await;
    assert!(e.to_string().contains("timed out after 250 ms"), "{e}");
}

#[tokio::test]
async fn memory_growth_hits_the_limit() {
    let rt = runtime();
    let p = hostile(&rt, |s| s.limits.memory_mib = 16).await;
    let e = fails(&p, "oom", "").await;
    assert_eq!(e.failure, Failure::OutOfMemory { limit_mib: 16 }, "{e}");
    assert!(e.to_string().contains("out of memory"), "{e}");
}

#[tokio::test]
async fn a_panic_is_a_trap_with_its_message() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    let e = fails(&p, "trap", "").await;
    let Failure::Trap(m) = &e.failure else {
        panic!("{e}")
    };
    assert!(
        m.starts_with("wasm trap: wasm `unreachable` instruction executed; stderr: thread"),
        "{e}"
    );
    // The location's line and column move with the fixture's source: not asserted.
    let at = "panicked at tests/fixtures/hostile/src/component.rs:";
    let tail = m.split_once(at).map(|(_, t)| t);
    assert!(
        tail.is_some_and(|t| t
            .split_once(": ")
            .is_some_and(|(_, msg)| msg.starts_with("fixture panic"))),
        "the panic message, from the plugin's stderr: {e}"
    );
    assert!(
        !m.contains("backtrace:"),
        "the backtrace goes to the debug log: {e}"
    );
}

/// stderr never fails a plugin, however much it writes, and a failure quotes its last bytes.
#[tokio::test]
async fn stderr_is_kept_to_its_tail_and_never_fails_the_plugin() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    p.route(request("stderr", "1024,ok"))
        .await
        .expect("1 MiB of stderr is written and dropped, the call succeeds");
    let e = fails(&p, "stderr", "64").await;
    let Failure::Trap(m) = &e.failure else {
        panic!("{e}")
    };
    assert!(m.contains("gave up after the chatter"), "{e}");
    let stderr = m.split_once("; stderr: ").expect("stderr quoted").1;
    // Its last 2 KiB of 64 KiB, newlines written as "; ".
    assert!(
        stderr.ends_with("gave up after the chatter; note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace")
            && stderr.len() < wasmop_plugin_host::sandbox::STDERR_TAIL + 16,
        "only the tail: {} bytes",
        stderr.len()
    );
}

#[tokio::test]
async fn oversized_output_is_rejected() {
    let rt = runtime();
    // 1 MiB of output against a 512 KiB cap.
    let p = hostile(&rt, |s| s.limits.max_output_kib = 512).await;
    let e = fails(&p, "huge", "1").await;
    assert_eq!(
        e.failure,
        Failure::OutputTooLarge {
            size_kib: 1024,
            limit_kib: 512
        },
        "{e}"
    );
    // 100 MiB: refused while it is copied out of the guest, past the hostcall fuel (the 1 MiB
    // cap plus 1 MiB), before the host holds it.
    let big = hostile(&rt, |s| {
        s.limits.memory_mib = 256;
        s.limits.timeout_ms = 20_000;
    })
    .await;
    let e = fails(&big, "huge", "100").await;
    assert_eq!(
        e.failure,
        Failure::TransferTooLarge { limit_kib: 2048 },
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("handed the host more than 2048 KiB at once"),
        "{e}"
    );
    let small = hostile(&rt, |s| s.limits.timeout_ms = 20_000).await;
    let e = fails(&small, "huge", "100").await;
    assert_eq!(e.failure, Failure::OutOfMemory { limit_mib: 64 }, "{e}");
}

/// Every string of a `plugin-error` counts against `limits.maxOutputKiB`, its field as much as
/// its message.
#[tokio::test]
async fn an_oversized_error_field_is_output_too_large() {
    let rt = runtime();
    let p = hostile(&rt, |s| s.limits.max_output_kib = 64).await;
    let e = fails(&p, "error-field", "128").await;
    assert_eq!(
        e.failure,
        Failure::OutputTooLarge {
            size_kib: 128,
            limit_kib: 64
        },
        "{e}"
    );
    let e = fails(&p, "error-field", "1").await;
    assert!(
        matches!(&e.failure, Failure::Plugin { field: Some(f), .. } if f.len() == 1024),
        "a field within the cap is kept: {e}"
    );
}

/// A plugin that floods the host with requests it was not granted gets a failure naming the
/// first few authorities (each cut short) and counting the rest: what the host keeps and says
/// stays small however many it sends.
#[tokio::test]
async fn a_flood_of_denied_requests_is_named_within_bounds() {
    use wasmop_plugin_host::sandbox::{MAX_DENIED_HOST_BYTES, MAX_DENIED_HOSTS};
    let rt = runtime();
    let p = hostile(&rt, |s| s.limits.timeout_ms = 20_000).await;
    let e = fails(&p, "deny-flood", "2000").await;
    let Failure::DeniedHost { hosts, more } = &e.failure else {
        panic!("{e}");
    };
    assert_eq!(hosts.len(), MAX_DENIED_HOSTS, "{e}");
    assert_eq!(*more, 2000 - MAX_DENIED_HOSTS, "{e}");
    assert!(hosts.iter().all(|h| h.len() <= MAX_DENIED_HOST_BYTES));
    assert!(hosts[0].starts_with("h0-ppp"), "{e}");
    let message = e.to_string();
    assert!(
        message.contains(&format!("and {more} more (not in grants.allowedHosts)")),
        "{message}"
    );
    assert!(message.len() < 2048, "{} bytes", message.len());
}

#[tokio::test]
async fn a_component_of_another_world_is_refused_at_load() {
    let rt = runtime();
    let dr = builtin::find("dr-lease").unwrap();
    let spec = PluginSpec::new("dr-as-router", Hook::Routing, "builtin://dr-lease");
    let e = rt.load(&spec, dr.wasm).await.unwrap_err();
    assert_eq!(
        e.message,
        "does not export the router world of wasmop:plugin@0.1.0: it exports state-checker, \
         the world of a dr plugin"
    );
    // An empty component: none of the worlds, so it could be of another version.
    let empty = rt.load(&spec, b"\0asm\x0d\x00\x01\x00").await.unwrap_err();
    assert!(
        empty.message.starts_with(
            "does not export the router world of wasmop:plugin@0.1.0 (wrong world or version?)"
        ),
        "{empty}"
    );
    let garbage = rt.load(&spec, b"\0asm not really").await.unwrap_err();
    assert!(
        garbage.message.contains("not a valid component"),
        "{garbage}"
    );
}

/// A loopback HTTP server answering `200 ok` to each connection, for `count` connections.
fn serve_ok(count: usize) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        use std::io::Write;
        for stream in listener.incoming().take(count) {
            let mut s = stream.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    (addr, handle)
}

#[tokio::test]
async fn outbound_http_only_to_allowed_hosts() {
    let rt = runtime();
    let (allowed, server) = serve_ok(1);
    let (other, _other_server) = serve_ok(1);
    let p = hostile(&rt, |s| s.grants.allowed_hosts = vec![allowed.clone()]).await;
    p.route(request("http", &format!("http://{allowed}/")))
        .await
        .expect("an allowed loopback host succeeds");
    server.join().unwrap();
    let e = fails(&p, "http", &format!("http://{other}/")).await;
    assert_eq!(
        e.failure,
        Failure::DeniedHost {
            hosts: vec![other.clone()],
            more: 0
        },
        "{e}"
    );
    assert!(e.to_string().contains("not in grants.allowedHosts"), "{e}");
    let nothing = hostile(&rt, |_| {}).await;
    let e = fails(&nothing, "http", &format!("http://{allowed}/")).await;
    assert!(
        matches!(e.failure, Failure::DeniedHost { .. }),
        "nothing is granted by default: {e}"
    );
}

/// A granted host that refuses the connection fails the request as `connection-refused`, and
/// only the call's error reports it: nothing is logged at warning level without the plugin's
/// name.
#[tokio::test]
async fn a_refused_connection_fails_the_request_without_an_anonymous_warning() {
    #[derive(Clone, Default)]
    struct Log(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Log {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let log = Log::default();
    let writer = log.clone();
    // This test's runtime has one thread: the request's tasks log into this subscriber too.
    let _logging = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let closed = format!("127.0.0.1:{}", wasmop_tests::free_port());
    let rt = runtime();
    let p = hostile(&rt, |s| s.grants.allowed_hosts = vec![closed.clone()]).await;
    let e = fails(&p, "http", &format!("http://{closed}/")).await;
    assert!(
        matches!(&e.failure, Failure::Plugin { message, .. } if message.contains("ConnectionRefused")),
        "{e}"
    );
    let logged = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(logged.is_empty(), "logged: {logged}");
}

/// `https://` requests: a server signed by the extra CA is trusted and its connection kept
/// alive across calls; a certificate for another name, or from a CA nobody trusts, fails as
/// `TLS-certificate-error`; a bad extra CA stops the runtime from starting.
#[tokio::test]
async fn https_requests_keep_alive_and_verify_the_server() {
    let ca = TestCa::new("wasmop test CA");
    let (port, accepted) = tls::serve(ca.server_config(&["localhost"]), b"ok".to_vec()).await;
    let (by_name, by_ip) = (format!("localhost:{port}"), format!("127.0.0.1:{port}"));
    let grant = |s: &mut PluginSpec| s.grants.allowed_hosts = vec![by_name.clone(), by_ip.clone()];
    let p = hostile(&runtime_trusting(Some(ca.pem())), grant).await;
    for _ in 0..6 {
        p.route(request("http", &format!("https://{by_name}/")))
            .await
            .expect("a server signed by the extra CA is trusted");
    }
    let connections = accepted.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&connections),
        "six requests, {connections} TLS connections: kept alive, at most one more when a \
         request starts before the last connection is idle again"
    );

    let e = fails(&p, "http", &format!("https://{by_ip}/")).await;
    assert!(
        e.to_string().contains("TlsCertificateError"),
        "the certificate names localhost, not 127.0.0.1: {e}"
    );
    let untrusting = hostile(&runtime(), grant).await;
    let e = fails(&untrusting, "http", &format!("https://{by_name}/")).await;
    assert!(
        e.to_string().contains("TlsCertificateError"),
        "without the extra CA the server is not trusted: {e}"
    );

    let bad = PluginRuntime::new(RuntimeOptions {
        extra_ca_pem: Some(b"not a certificate".to_vec()),
        ..RuntimeOptions::default()
    });
    let e = bad.err().expect("a bad extra CA is refused");
    assert!(
        e.to_string()
            .starts_with("extra CA certificates (--extra-ca-file): no PEM certificate found"),
        "{e}"
    );
}

/// A loopback server that accepts connections and never answers.
fn serve_silence() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().collect();
        drop(held);
    });
    addr
}

/// Epochs cannot interrupt a call waiting in the host (here on an allowed host that never
/// answers), so the whole call is capped too: it fails as a timeout within twice its limit.
#[tokio::test]
async fn a_call_waiting_on_a_silent_host_times_out() {
    let rt = runtime();
    let silent = serve_silence();
    let (answering, server) = serve_ok(1);
    let p = hostile(&rt, |s| {
        s.grants.allowed_hosts = vec![silent.clone(), answering.clone()];
        s.limits.timeout_ms = 200;
    })
    .await;
    times_out(&p, "http", &format!("http://{silent}/"), 200).await;
    p.route(request("http", &format!("http://{answering}/")))
        .await
        .expect("the next call is served");
    server.join().unwrap();
}

/// A router's answer must be a JSON array of objects; anything else fails the call as invalid
/// output, saying which.
#[tokio::test]
async fn a_router_answer_that_is_not_an_array_of_routes_is_invalid_output() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    let routes = r#"[{"name":"a","route":[{"destination":{"host":"h"}}]},{}]"#;
    let answer = p.route(request("answer", routes)).await.expect("routes");
    assert_eq!(answer.http, routes);
    let (_, parsed) = p.route_parsed(request("answer", routes)).await.unwrap();
    assert_eq!(parsed.len(), 2);
    for (http, says) in [
        ("[1]", "must be a JSON array of HTTPRoute objects"),
        (
            r#"{"name":"a"}"#,
            "must be a JSON array of HTTPRoute objects",
        ),
        (
            r#"[{"name":"a"},"b"]"#,
            "must be a JSON array of HTTPRoute objects",
        ),
        (r#"[{"name":"a"}"#, "is not JSON"),
        ("", "is not JSON"),
    ] {
        let e = fails(&p, "answer", http).await;
        assert!(
            matches!(&e.failure, Failure::InvalidOutput(m) if m.contains(says)),
            "{http:?}: {e}"
        );
        let e = p.route_parsed(request("answer", http)).await.unwrap_err();
        assert!(
            matches!(&e.failure, Failure::InvalidOutput(m) if m.contains(says)),
            "{http:?} parsed: {e}"
        );
    }
}

/// A plugin sleeping in the host (a `wasi:clocks` poll) runs no wasm, so no epoch stops it;
/// the wall-clock cap does, and a short sleep within the limit is served.
#[tokio::test]
async fn a_sleeping_call_is_stopped_at_its_deadline() {
    let rt = runtime();
    let p = hostile(&rt, |s| s.limits.timeout_ms = 200).await;
    times_out(&p, "sleep", "60000", 200).await;
    let started = Instant::now();
    p.route(request("sleep", "20"))
        .await
        .expect("a sleep within the limit is served");
    assert!(started.elapsed() >= Duration::from_millis(20));
}

#[tokio::test]
async fn files_only_inside_the_read_only_dir() {
    let rt = runtime();
    let dir = std::env::temp_dir().join(format!("wasmop-ro-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("allowed.txt"), "hello").unwrap();
    rt.set_plugin_data_root(DataRoot::new(&dir).unwrap());
    let p = hostile(&rt, |s| {
        s.grants.read_only_dir = Some(dir.display().to_string())
    })
    .await;
    p.route(request("read", "/data/allowed.txt"))
        .await
        .expect("reading inside readOnlyDir works");
    let e = fails(&p, "write", "/data/new.txt").await;
    assert!(
        matches!(&e.failure, Failure::Plugin { message, .. } if message.contains("write /data/new.txt")),
        "{e}"
    );
    assert!(!dir.join("new.txt").exists(), "nothing was written");
    let e = fails(&p, "read", "/etc/passwd").await;
    assert!(
        matches!(&e.failure, Failure::Plugin { message, .. } if message.contains("read /etc/passwd")),
        "{e}"
    );
    let none = hostile(&rt, |_| {}).await;
    fails(&none, "read", "/data/allowed.txt").await;
}

/// A fresh plugin data root for `test`: `data/` holding `allowed.txt`, `outside/` next to the
/// root holding `secret.txt`, and the root itself.
fn data_root(test: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let base = std::env::temp_dir().join(format!("wasmop-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("root");
    std::fs::create_dir_all(root.join("data")).unwrap();
    std::fs::write(root.join("data/allowed.txt"), "hello").unwrap();
    std::fs::create_dir_all(base.join("outside")).unwrap();
    std::fs::write(base.join("outside/secret.txt"), "secret").unwrap();
    (base, root)
}

/// `grants.readOnlyDir` resolves under the plugin data root only: `..`, a symlink that leads
/// out of it, a directory elsewhere and the ServiceAccount token's directory fail the load with
/// the reason; a symlink inside the root to a directory inside it is followed.
#[tokio::test]
async fn read_only_dirs_resolve_under_the_plugin_data_root_only() {
    use std::os::unix::fs::symlink;
    let (base, root) = data_root("data-root");
    let rt = runtime();
    rt.set_plugin_data_root(DataRoot::new(&root).unwrap());
    symlink("data", root.join("relative")).unwrap();
    symlink(root.join("data"), root.join("absolute")).unwrap();
    symlink("../outside", root.join("up")).unwrap();
    symlink(base.join("outside"), root.join("away")).unwrap();
    symlink("/proc/self", root.join("proc")).unwrap();

    for inside in ["data", "relative", "absolute", "./data"] {
        let dir = format!("{}/{inside}", root.display());
        let p = load_hostile(&rt, |s| s.grants.read_only_dir = Some(dir.clone()))
            .await
            .unwrap_or_else(|e| panic!("{inside}: {e}"));
        p.route(request("read", "/data/allowed.txt"))
            .await
            .unwrap_or_else(|e| panic!("{inside}: {e}"));
    }

    let refused = async |dir: String| {
        let e = load_hostile(&rt, |s| s.grants.read_only_dir = Some(dir.clone()))
            .await
            .expect_err(&dir);
        assert!(
            e.message
                .starts_with(&format!("grants.readOnlyDir {dir:?}: ")),
            "{e}"
        );
        e.message
    };
    let r = root.display();
    let dotdot = refused(format!("{r}/data/../../outside")).await;
    assert!(dotdot.contains("`..` is not allowed"), "{dotdot}");
    let up = refused(format!("{r}/up")).await;
    assert!(
        up.contains(&format!(
            "{r}/up is a symlink to ../outside, which leads out of the plugin data root"
        )),
        "{up}"
    );
    let away = refused(format!("{r}/away")).await;
    assert!(
        away.contains("which leads out of the plugin data root"),
        "{away}"
    );
    let proc = refused(format!("{r}/proc")).await;
    assert!(proc.contains("is a symlink to /proc/self"), "{proc}");
    let elsewhere = refused(base.join("outside").display().to_string()).await;
    assert!(
        elsewhere.contains(": outside the plugin data root"),
        "{elsewhere}"
    );
    assert!(
        elsewhere.contains(&format!(
            "under the plugin data root {r} (--plugin-data-root)"
        )),
        "{elsewhere}"
    );
    let token = refused("/var/run/secrets/kubernetes.io/serviceaccount".into()).await;
    assert!(
        token.contains(": refused: /var/run/secrets holds the pod's ServiceAccount token"),
        "{token}"
    );
    for dir in ["/", "/proc/1", "/dev", "/run/secrets"] {
        let e = refused(dir.into()).await;
        assert!(e.contains(": refused: "), "{e}");
    }
    let missing = refused(format!("{r}/missing")).await;
    assert!(missing.contains("cannot be read"), "{missing}");
    let _ = std::fs::remove_dir_all(&base);
}

/// A directory replaced by a symlink after its entry loaded (by someone who can write inside
/// the root) is not followed: the call fails to instantiate and reads nothing.
#[tokio::test]
async fn a_symlink_planted_after_the_load_leads_nowhere() {
    let (base, root) = data_root("planted");
    let rt = runtime();
    rt.set_plugin_data_root(DataRoot::new(&root).unwrap());
    let dir = root.join("data").display().to_string();
    let p = hostile(&rt, |s| s.grants.read_only_dir = Some(dir.clone())).await;
    p.route(request("read", "/data/allowed.txt")).await.unwrap();

    std::fs::rename(root.join("data"), base.join("moved")).unwrap();
    std::os::unix::fs::symlink(base.join("outside"), root.join("data")).unwrap();
    let e = p
        .route(request("read", "/data/secret.txt"))
        .await
        .expect_err("the planted symlink is not followed");
    let Failure::Instantiate(why) = &e.failure else {
        panic!("{e}")
    };
    assert!(
        why.contains("is not the directory it was when the entry loaded"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A `grants.readOnlyDir` refused by the rule fails its entry alone, as a failed load does:
/// the last good version keeps serving and the status says why.
#[tokio::test]
async fn a_refused_read_only_dir_fails_its_entry_alone() {
    let (base, root) = data_root("registry-dir");
    let rt = runtime();
    rt.set_plugin_data_root(DataRoot::new(&root).unwrap());
    let registry = Registry::new(rt);
    let doc = |dir: &str| {
        RegistryConfig::parse(&format!(
            "plugins:\n\
             - {{name: reader, hook: routing, source: 'builtin://routing-istio', \
                 grants: {{readOnlyDir: '{dir}'}}}}\n\
             - {{name: other, hook: routing, source: 'builtin://routing-istio', \
                 settings: {{responseHeader: x-{}}}}}\n",
            dir.len()
        ))
        .unwrap()
    };
    let fetch = LocalFetch::default();
    let good = format!("{}/data", root.display());
    let report = registry.apply(doc(&good), &fetch).await;
    assert!(report.failed.is_empty(), "{report:?}");
    let first = registry.status(Hook::Routing, Some("reader"));
    assert!(first.ready, "{first:?}");

    let token = "/var/run/secrets/kubernetes.io/serviceaccount";
    let report = registry.apply(doc(token), &fetch).await;
    assert_eq!(report.loaded, ["other"], "{report:?}");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(report.failed[0].1.contains(": refused: "), "{report:?}");
    let reader = registry.status(Hook::Routing, Some("reader"));
    assert_eq!(reader.reason, "LoadFailed", "{reader:?}");
    assert!(
        reader.message.contains("ServiceAccount token"),
        "{reader:?}"
    );
    assert_eq!(reader.serving_digest, first.serving_digest);
    assert!(
        !registry.has_retryable(),
        "only a change of the entry fixes it"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A `tracing` writer collecting what it is given, for tests that read the log.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The log lines written so far.
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// What a plugin logs is one line per call of `log`, whatever it holds (a newline, a carriage
/// return, a terminal escape are escaped), so a plugin cannot forge a log line of the operator
/// or of another plugin; and a call keeps at most `MAX_LOG_LINES_PER_CALL` lines, however
/// short, then says once that it dropped the rest.
#[tokio::test]
async fn plugin_log_lines_cannot_be_forged_and_are_capped_in_number() {
    use wasmop_plugin_host::sandbox::MAX_LOG_LINES_PER_CALL;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;

    p.route(request("log-forge", "")).await.unwrap();
    let lines = captured.lines();
    let forged: Vec<_> = lines.iter().filter(|l| l.contains("forged")).collect();
    assert_eq!(forged.len(), 1, "{lines:#?}");
    assert!(
        forged[0].contains(r"innocent\nlevel=ERROR plugin=other forged line\r\u{1b}[2K"),
        "{}",
        forged[0]
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("level=ERROR")),
        "{lines:#?}"
    );

    p.route(request("log-lines", "1000")).await.unwrap();
    let lines = captured.lines();
    let kept = lines.iter().filter(|l| l.contains(" line ")).count();
    assert_eq!(kept, MAX_LOG_LINES_PER_CALL, "{kept} of 1000 lines kept");
    let dropped = lines
        .iter()
        .filter(|l| l.contains("further log lines of this call dropped"))
        .count();
    assert_eq!(dropped, 1, "said once: {lines:#?}");
}

#[tokio::test]
async fn plugin_logs_are_capped() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    // 1,000 lines of 1 KiB: the host keeps 64 KiB and the call still succeeds.
    p.route(request("log", "1000"))
        .await
        .expect("logging past the cap is not an error");
}

#[tokio::test]
async fn every_default_plugin_answers_through_the_host() {
    let rt = runtime();
    let registry = Registry::new(rt.clone());
    let report = registry
        .apply(RegistryConfig::default(), &LocalFetch::default())
        .await;
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(
        report.loaded.len(),
        5,
        "four defaults and the `none` state checker"
    );

    // `none`, the state checker of single instances: always active, no lease write.
    let none = registry.resolve(Hook::Dr, Some("none")).unwrap();
    let d = none
        .check(StateRequest {
            identity: "solo".into(),
            now: 100_000,
            lease: None,
            wait_time_seconds: 5,
            failure_threshold: 3,
            started_at: 0,
            warmup_seconds: 0,
        })
        .await
        .unwrap();
    assert_eq!((d.state, d.action), (DrState::Active, LeaseAction::None));

    let dr = registry.resolve(Hook::Dr, None).unwrap();
    let d = dr
        .check(StateRequest {
            identity: "me".into(),
            now: 100_000,
            lease: Some(LeaseRecord {
                owner: "other".into(),
                updated_time: 0,
                notes: String::new(),
            }),
            wait_time_seconds: 1,
            failure_threshold: 3,
            started_at: 0,
            warmup_seconds: 0,
        })
        .await
        .unwrap();
    assert_eq!(d.action, LeaseAction::Takeover, "{}", d.reason);

    let routing = registry.resolve(Hook::Routing, None).unwrap();
    let vs = serde_json::json!({
        "metadata": {"name": "reviews", "namespace": "ns"},
        "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews", "subset": "shared"}}]}]}
    });
    let mut req = request("sub", "reviews");
    req.virtual_service = vs.to_string();
    req.matches = vec![wasmop_plugin_host::IstioMatch {
        headers: vec![wasmop_plugin_host::HeaderMatch {
            name: "end-user".into(),
            value: wasmop_plugin_host::StringMatch::Exact("jason".into()),
        }],
        source_labels: vec![],
    }];
    let routes: serde_json::Value =
        serde_json::from_str(&routing.route(req).await.unwrap().http).unwrap();
    assert_eq!(
        routes.as_array().unwrap().len(),
        2,
        "one copy before the default route: {routes}"
    );
    assert_eq!(routes[0]["route"][0]["destination"]["subset"], "sub");

    let restart = registry.resolve(Hook::Restart, None).unwrap();
    let pod = serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns", "annotations": {"sidecar.istio.io/status": "{}"}},
        "spec": {"containers": [{"name": "istio-proxy", "image": "proxyv2:1.0"}]}
    });
    let decisions = restart
        .evaluate(
            wasmop_plugin_host::RestartRequest {
                policy: "p".into(),
                desired: r#"{"image":"proxyv2:1.1"}"#.into(),
                applied: "null".into(),
                pods: serde_json::json!([pod]).to_string(),
            },
            1,
        )
        .await
        .unwrap();
    assert!(decisions[0].restart, "{}", decisions[0].reason);

    let scaling = registry.resolve(Hook::Scaling, None).unwrap();
    let e = scaling
        .vote(wasmop_plugin_host::TriggerRequest {
            elastic_service: "ns/es".into(),
            trigger_type: "prometheus".into(),
            metadata: r#"{"query":"up","serverAddress":"http://127.0.0.1:1","threshold":"0.5"}"#
                .into(),
            cooldown_seconds: 60,
            now: 0,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(e.failure, Failure::DeniedHost { .. }),
        "the default scaler reaches Prometheus only when granted: {e}"
    );
}

/// An entry that failed at its source is loaded again by `retry` without a registry change;
/// one whose bytes matched and whose settings were rejected is not retried.
#[tokio::test]
async fn entries_that_failed_at_their_source_are_retried() {
    let dir = std::env::temp_dir().join(format!("wasmop-retry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let router = std::fs::read(components_dir().join("routing_istio.wasm")).unwrap();
    let path = dir.join("router.wasm");
    let _ = std::fs::remove_file(&path);
    let config = RegistryConfig::parse(&format!(
        "plugins:\n\
         - {{name: later, hook: routing, source: 'file://{}', sha256: {}}}\n\
         - {{name: picky, hook: routing, source: 'builtin://routing-istio', settings: {{colour: red}}}}\n",
        path.display(),
        sha256_hex(&router),
    ))
    .unwrap();
    let registry = Registry::new(runtime());
    let fetch = LocalFetch::default();
    let report = registry.apply(config, &fetch).await;
    let failed: Vec<&str> = report.failed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(failed, ["later", "picky"], "{report:?}");
    let later = registry.status(Hook::Routing, Some("later"));
    assert_eq!(later.reason, "NotLoaded");
    assert!(
        later.message.ends_with("(retried with backoff)"),
        "{later:?}"
    );
    assert!(registry.has_retryable(), "the file may appear");

    // Still missing: the same failure, reported once (at the load), not again.
    let report = registry.retry(&fetch).await;
    assert!(
        report.failed.is_empty() && report.loaded.is_empty(),
        "{report:?}"
    );
    assert!(registry.has_retryable());

    // The wrong bytes: a new failure, still worth retrying.
    std::fs::write(&path, b"\0asm not this one").unwrap();
    let report = registry.retry(&fetch).await;
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(report.failed[0].1.contains("sha256 mismatch"), "{report:?}");
    assert!(registry.has_retryable());

    // The right bytes: it loads and serves.
    std::fs::write(&path, &router).unwrap();
    let report = registry.retry(&fetch).await;
    assert_eq!(report.loaded, ["later"], "{report:?}");
    let status = registry.status(Hook::Routing, Some("later"));
    assert!(status.ready, "{status:?}");
    assert!(registry.resolve(Hook::Routing, Some("later")).is_ok());

    // Rejected settings stay rejected until the registry changes: nothing is left to retry.
    assert!(!registry.has_retryable());
    let picky = registry.status(Hook::Routing, Some("picky"));
    assert!(picky.message.contains("settings rejected"), "{picky:?}");
    assert!(!picky.message.contains("retried"), "{picky:?}");
}

/// A compile cache directory the runtime must not use (others can write it, so an artifact
/// there could be planted) or cannot create costs compiling at each load, not the plugins.
#[tokio::test]
async fn an_unusable_cache_directory_costs_compiles_not_plugins() {
    use std::os::unix::fs::PermissionsExt;
    let shared = std::env::temp_dir().join(format!("wasmop-shared-cache-{}", std::process::id()));
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let none = builtin::find("none").unwrap();
    for dir in [shared.clone(), "/proc/wasmop-cache".into()] {
        let rt = PluginRuntime::new(RuntimeOptions {
            cache_dir: Some(dir.clone()),
            max_concurrent_calls: 1,
            pooling: false,
            extra_ca_pem: None,
        })
        .unwrap_or_else(|e| panic!("{}: {e:#}", dir.display()));
        let spec = PluginSpec::new("none", Hook::Dr, "builtin://none");
        rt.load(&spec, none.wasm).await.unwrap();
    }
    assert_eq!(
        std::fs::read_dir(&shared).unwrap().count(),
        0,
        "nothing written where others can write"
    );
    let _ = std::fs::remove_dir_all(&shared);
}

/// A mistake within one entry (here a URL where `allowedHosts` wants a host) fails that entry
/// alone: its last good version keeps serving, and the other entries of the same document
/// load, where a document that does not parse is replaced by the builtins.
#[tokio::test]
async fn a_bad_entry_fails_alone_and_its_last_good_version_serves() {
    let doc = |host: &str, colour: &str| {
        RegistryConfig::parse(&format!(
            "plugins:\n\
             - {{name: fetcher, hook: routing, source: 'builtin://routing-istio', \
                 grants: {{allowedHosts: ['{host}']}}}}\n\
             - {{name: other, hook: routing, source: 'builtin://routing-istio', \
                 settings: {{responseHeader: x-{colour}}}}}\n\
             defaults: {{routing: fetcher}}\n"
        ))
        .expect("a mistake within an entry leaves the document valid")
    };
    let registry = Registry::new(runtime());
    let fetch = LocalFetch::default();
    let report = registry
        .apply(doc("prometheus:9090", "first"), &fetch)
        .await;
    assert!(report.failed.is_empty(), "{report:?}");
    let good = registry.status(Hook::Routing, None);
    assert!(good.ready, "{good:?}");

    let report = registry
        .apply(doc("http://prometheus:9090", "second"), &fetch)
        .await;
    assert_eq!(report.loaded, ["other"], "{report:?}");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert_eq!(report.failed[0].0, "fetcher");
    assert_eq!(
        report.failed[0].1,
        "invalid plugins.yaml entry: grants.allowedHosts[0]: \"http://prometheus:9090\" is a \
         URL; write host or host:port, e.g. prometheus.monitoring:9090"
    );
    let fetcher = registry.status(Hook::Routing, None);
    assert_eq!(fetcher.reason, "LoadFailed", "{fetcher:?}");
    assert_eq!(fetcher.serving_digest, good.serving_digest);
    assert!(
        !registry.has_retryable(),
        "only a change of the entry fixes it"
    );
    assert!(registry.resolve(Hook::Routing, None).is_ok());
    assert!(registry.statuses().1.is_none(), "the document is in use");
}

/// Serves `file:///gated*` once its gate opens (a download that hangs), everything else
/// as [`LocalFetch`].
struct GatedFetch {
    gate: tokio::sync::Semaphore,
    bytes: Vec<u8>,
}

impl GatedFetch {
    /// Serves `bytes` at the gated paths once permits are added to its gate.
    fn closed(bytes: Vec<u8>) -> Self {
        Self {
            gate: tokio::sync::Semaphore::new(0),
            bytes,
        }
    }
}

#[async_trait::async_trait]
impl Fetch for GatedFetch {
    async fn fetch(&self, source: &Source) -> Result<Vec<u8>, String> {
        match source {
            Source::File(path) if path.starts_with("/gated") => {
                let _open = self.gate.acquire().await.map_err(|e| e.to_string())?;
                Ok(self.bytes.clone())
            }
            other => LocalFetch::default().fetch(other).await,
        }
    }
}

/// The interim snapshots of [`Registry::apply_notifying`]: the entries each left loading.
#[derive(Default)]
struct Swaps {
    loading: std::sync::Mutex<Vec<Vec<String>>>,
    swapped: tokio::sync::Notify,
}

impl Swaps {
    fn record(&self, loading: &[String]) {
        self.loading.lock().unwrap().push(loading.to_vec());
        self.swapped.notify_one();
    }

    /// Waits (30 s at most) for the first interim snapshot.
    async fn first(&self) {
        tokio::time::timeout(Duration::from_secs(30), self.swapped.notified())
            .await
            .expect("an interim snapshot while an entry loads");
    }

    fn seen(&self) -> Vec<Vec<String>> {
        self.loading.lock().unwrap().clone()
    }
}

/// A reload serves what loaded while one entry still loads: that entry is `Loading`, its last
/// good version serving, then loads when its source answers. A reload dropped meanwhile (a
/// newer ConfigMap) leaves the entry to the next one, which loads it again.
#[tokio::test]
async fn a_slow_entry_holds_back_neither_the_others_nor_the_next_reload() {
    let router = std::fs::read(components_dir().join("routing_istio.wasm")).unwrap();
    let fetch = GatedFetch::closed(router.clone());
    let doc = |source: &str, colour: &str| {
        RegistryConfig::parse(&format!(
            "plugins:\n\
             - {{name: slow, hook: routing, source: '{source}', sha256: {}}}\n\
             - {{name: quick, hook: routing, source: 'builtin://routing-istio', \
                 settings: {{responseHeader: x-{colour}}}}}\n",
            sha256_hex(&router),
        ))
        .unwrap()
    };
    let registry = Registry::new(runtime());
    let report = registry
        .apply(doc("builtin://routing-istio", "first"), &fetch)
        .await;
    assert!(report.failed.is_empty(), "{report:?}");
    let first = registry.status(Hook::Routing, Some("slow"));
    let first_digest = first.serving_digest.clone().unwrap();

    let swaps = Swaps::default();
    let on_swap = |loading: &[String]| swaps.record(loading);
    let wait = Some(Duration::from_millis(200));
    let (report, ()) = tokio::join!(
        registry.apply_notifying(doc("file:///gated.wasm", "second"), &fetch, wait, &on_swap),
        async {
            swaps.first().await;
            let quick = registry.status(Hook::Routing, Some("quick"));
            assert!(quick.ready, "the quick entry serves at once: {quick:?}");
            let slow = registry.status(Hook::Routing, Some("slow"));
            assert!(!slow.ready);
            assert_eq!(slow.reason, "Loading", "{slow:?}");
            assert!(slow.message.contains("keeps serving"), "{slow:?}");
            assert_eq!(slow.serving_digest.as_deref(), Some(first_digest.as_str()));
            assert!(registry.resolve(Hook::Routing, Some("slow")).is_ok());
            fetch.gate.add_permits(1);
        },
    );
    assert_eq!(report.loaded, ["quick", "slow"], "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(swaps.seen(), [["slow"]]);
    let slow = registry.status(Hook::Routing, Some("slow"));
    assert!(slow.ready, "{slow:?}");

    // A reload dropped while its entry loads (a newer ConfigMap came); the same document
    // again loads that entry instead of keeping it `Loading`.
    fetch.gate.forget_permits(usize::MAX);
    let third = || doc("file:///gated-again.wasm", "third");
    let dropped = tokio::time::timeout(
        Duration::from_secs(2),
        registry.apply_notifying(third(), &fetch, wait, &|_| {}),
    )
    .await;
    assert!(dropped.is_err(), "the gate is closed: {dropped:?}");
    assert_eq!(
        registry.status(Hook::Routing, Some("slow")).reason,
        "Loading"
    );
    assert!(registry.status(Hook::Routing, Some("quick")).ready);
    fetch.gate.add_permits(1);
    let report = registry.apply(third(), &fetch).await;
    assert_eq!(report.loaded, ["slow"], "{report:?}");
    assert!(registry.status(Hook::Routing, Some("slow")).ready);
}

/// A reload loads builtin entries before the others: with as many custom entries as loads run
/// at once, all of them hanging at their source and listed first, a changed builtin still
/// loads and serves while they are `Loading`.
#[tokio::test]
async fn builtins_load_before_custom_entries_that_hang() {
    let router = std::fs::read(components_dir().join("routing_istio.wasm")).unwrap();
    let fetch = GatedFetch::closed(router.clone());
    let gated: Vec<String> = (1..=CONCURRENT_LOADS)
        .map(|i| format!("custom-{i}"))
        .collect();
    // Each document moves the custom entries to another path, so that both reloads load them.
    let doc = |colour: &str| {
        let mut yaml = String::from("plugins:\n");
        for name in &gated {
            yaml.push_str(&format!(
                "- {{name: {name}, hook: routing, source: 'file:///gated-{colour}-{name}.wasm', \
                    sha256: {}}}\n",
                sha256_hex(&router)
            ));
        }
        yaml.push_str(&format!(
            "- {{name: quick, hook: routing, source: 'builtin://routing-istio', \
                settings: {{responseHeader: x-{colour}}}}}\n"
        ));
        RegistryConfig::parse(&yaml).unwrap()
    };
    let registry = Registry::new(runtime());
    fetch.gate.add_permits(gated.len());
    let report = registry.apply(doc("first"), &fetch).await;
    assert!(report.failed.is_empty(), "{report:?}");
    fetch.gate.forget_permits(usize::MAX);

    // Only `quick` and the custom entries changed; the custom ones come first in the document.
    let swaps = Swaps::default();
    let on_swap = |loading: &[String]| swaps.record(loading);
    // Loading `quick` again reuses its compiled component: milliseconds, well within `wait`.
    let wait = Some(Duration::from_secs(2));
    let (report, ()) = tokio::join!(
        registry.apply_notifying(doc("second"), &fetch, wait, &on_swap),
        async {
            swaps.first().await;
            let quick = registry.status(Hook::Routing, Some("quick"));
            assert!(quick.ready, "the builtin loaded first: {quick:?}");
            for name in &gated {
                let custom = registry.status(Hook::Routing, Some(name));
                assert_eq!(custom.reason, "Loading", "{custom:?}");
            }
            fetch.gate.add_permits(gated.len());
        },
    );
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(report.loaded.len(), gated.len() + 1, "{report:?}");
    assert_eq!(swaps.seen(), std::slice::from_ref(&gated));
}

/// A resource naming an entry of another hook is not ready, in its condition as in its calls.
#[tokio::test]
async fn an_entry_of_another_hook_is_reported_as_the_wrong_hook() {
    let registry = Registry::new(runtime());
    let report = registry
        .apply(RegistryConfig::default(), &LocalFetch::default())
        .await;
    assert!(report.failed.is_empty(), "{report:?}");

    let status = registry.status(Hook::Routing, Some("dr-lease"));
    assert!(!status.ready);
    assert_eq!(status.reason, "WrongHook");
    // The condition's message is "plugin NAME: " and this.
    assert_eq!(
        status.message,
        "it is a dr plugin; this resource needs a routing plugin"
    );
    let Err(err) = registry.resolve(Hook::Routing, Some("dr-lease")) else {
        panic!("a dr plugin does not route");
    };
    assert_eq!(
        err.to_string(),
        "plugin \"dr-lease\" is a dr plugin; this resource needs a routing plugin"
    );

    let missing = registry.status(Hook::Routing, Some("typo"));
    assert_eq!(
        (missing.ready, missing.reason.as_str()),
        (false, "NotFound")
    );
    assert_eq!(
        missing.message,
        "no entry of that name in ConfigMap wasmop-plugins, nor a builtin"
    );

    let right = registry.status(Hook::Dr, Some("dr-lease"));
    assert!(right.ready, "{right:?}");
    assert_eq!(right.reason, "Loaded");
}

#[tokio::test]
async fn compiled_components_are_cached_by_digest() {
    let dir = std::env::temp_dir().join(format!("wasmop-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let rt = PluginRuntime::new(RuntimeOptions {
        cache_dir: Some(dir.clone()),
        max_concurrent_calls: 1,
        pooling: false,
        extra_ca_pem: None,
    })
    .unwrap();
    let b = builtin::find("dr-lease").unwrap();
    let spec = PluginSpec::new("dr", Hook::Dr, "builtin://dr-lease");
    rt.load(&spec, b.wasm).await.unwrap();
    let digest = sha256_hex(b.wasm);
    let artifact = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("an artifact was written");
    assert!(
        artifact
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&digest)
    );
    // A tampered artifact is not loaded: the host recompiles and still works.
    std::fs::write(&artifact, b"tampered").unwrap();
    rt.load(&spec, b.wasm)
        .await
        .expect("recompiles when the artifact does not match its recorded digest");
    assert_ne!(
        std::fs::read(&artifact).unwrap(),
        b"tampered",
        "the artifact was rewritten"
    );
    // A wrong sha256 in the registry is refused before compiling.
    let mut wrong = spec.clone();
    wrong.sha256 = Some("00".repeat(32));
    assert!(
        rt.load(&wrong, b.wasm)
            .await
            .unwrap_err()
            .message
            .contains("sha256 mismatch")
    );
}

#[tokio::test]
async fn entries_of_one_component_share_one_pre_instance() {
    let rt = runtime();
    let b = builtin::find("routing-istio").unwrap();
    let a = rt
        .load(
            &PluginSpec::new("a", Hook::Routing, "builtin://routing-istio"),
            b.wasm,
        )
        .await
        .unwrap();
    let mut with_settings = PluginSpec::new("b", Hook::Routing, "builtin://routing-istio");
    with_settings.settings = Some(serde_json::json!({"responseHeader": "x-env"}));
    let b2 = rt.load(&with_settings, b.wasm).await.unwrap();
    assert!(a.shares_code_with(&b2), "same digest, same pre-instance");
    let other = rt
        .load(
            &PluginSpec::new("c", Hook::Dr, "builtin://dr-lease"),
            builtin::find("dr-lease").unwrap().wasm,
        )
        .await
        .unwrap();
    assert!(!a.shares_code_with(&other));
    let mut bad = PluginSpec::new("d", Hook::Routing, "builtin://routing-istio");
    bad.settings = Some(serde_json::json!({"colour": "red"}));
    let e = rt.load(&bad, b.wasm).await.unwrap_err();
    assert!(
        e.message.contains("settings rejected") && e.message.contains("colour"),
        "{e}"
    );
}

/// The hostile-memories fixture (tests/fixtures/hostile-memories: four memories, 12 MiB and a
/// little at instantiation, 4 MiB each) loaded with `limits.memoryMiB` = `mib`.
async fn load_memories(rt: &Arc<PluginRuntime>, mib: u32) -> Result<Arc<Plugin>, LoadError> {
    let bytes = std::fs::read(components_dir().join("wasmop_hostile_memories.wasm")).unwrap();
    let mut spec = PluginSpec::new("hostile", Hook::Routing, "file:///hostile-memories.wasm");
    spec.limits.memory_mib = mib;
    rt.load(&spec, &bytes).await
}

/// `limits.memoryMiB` bounds every linear memory and table of a call together, at
/// instantiation and as they grow, not each memory alone; a component of several memories
/// runs within the sum, with the pooling allocator too.
#[tokio::test]
async fn memories_and_tables_of_a_call_count_together() {
    let rt = runtime();
    // Four memories of 4 MiB or less: each is under 12 MiB, together they are over it.
    let e = load_memories(&rt, 12).await.unwrap_err();
    assert!(
        e.message.contains(
            "out of memory: the call's linear memories and tables together exceeded 12 MiB \
             (limits.memoryMiB)"
        ),
        "{e}"
    );
    // Growing three of them to 8 MiB each: each under 16 MiB, together about 24.
    let p = load_memories(&rt, 16).await.unwrap();
    p.route(request("ok", "")).await.unwrap();
    let e = fails(&p, "grow", "").await;
    assert_eq!(e.failure, Failure::OutOfMemory { limit_mib: 16 }, "{e}");
    // Within the sum they grow.
    let roomy = load_memories(&rt, 32).await.unwrap();
    roomy.route(request("grow", "")).await.unwrap();

    let pooled = PluginRuntime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 1,
        ..RuntimeOptions::default()
    })
    .unwrap();
    let p = load_memories(&pooled, 32).await.unwrap();
    p.route(request("grow", "")).await.unwrap();
    let p = load_memories(&pooled, 16).await.unwrap();
    let e = fails(&p, "grow", "").await;
    assert_eq!(e.failure, Failure::OutOfMemory { limit_mib: 16 }, "{e}");
}

/// A table grown to millions of elements counts against `limits.memoryMiB` (8 bytes an
/// element) and fails the call, with instances allocated on demand (no pool bounds the table
/// there) as with the pool.
#[tokio::test]
async fn a_table_grown_to_millions_of_elements_fails_the_call() {
    let p = load_memories(&runtime(), 64).await.unwrap();
    let e = fails(&p, "table", "").await;
    assert_eq!(e.failure, Failure::OutOfMemory { limit_mib: 64 }, "{e}");
    let pooled = PluginRuntime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 1,
        ..RuntimeOptions::default()
    })
    .unwrap();
    let p = load_memories(&pooled, 64).await.unwrap();
    fails(&p, "table", "").await;
}

/// Recursion without end fails the call with a stack overflow; the host keeps serving.
#[tokio::test]
async fn deep_recursion_fails_the_call_with_a_stack_overflow() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    let e = fails(&p, "recurse", "").await;
    assert!(
        matches!(&e.failure, Failure::Trap(m) if m.starts_with("stack overflow: the call used more than 1024 KiB")),
        "{e}"
    );
}

/// A plugin calling `exit` (Rust's `std::process::exit`) fails that call only, whatever the
/// status, with a message that says what it did; the host keeps serving.
#[tokio::test]
async fn a_plugin_calling_exit_fails_only_that_call() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    for status in ["3", "0"] {
        let e = fails(&p, "exit", status).await;
        assert!(matches!(e.failure, Failure::Exited { .. }), "{e}");
        assert!(e.to_string().contains("instead of answering"), "{e}");
    }
}

/// wasmtime's hostcall fuel is `maxOutputKiB` plus 1 MiB, not its default 128 MiB: a plugin
/// handing the host more in one call (a 3 MiB log line) fails, as it is copied; 512 KiB goes
/// through (and is cut to a line of 4 KiB).
#[tokio::test]
async fn a_plugin_handing_the_host_more_than_its_fuel_fails() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    p.route(request("log-bytes", "512")).await.unwrap();
    let e = fails(&p, "log-bytes", "3072").await;
    assert_eq!(
        e.failure,
        Failure::TransferTooLarge { limit_kib: 2048 },
        "{e}"
    );
}

/// `wasi:random` gives at most `MAX_RANDOM_BYTES` (1 MiB, not wasmtime's 64 MiB) per request.
#[tokio::test]
async fn random_bytes_are_capped() {
    use wasmop_plugin_host::sandbox::MAX_RANDOM_BYTES;
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    p.route(request("random", &MAX_RANDOM_BYTES.to_string()))
        .await
        .unwrap();
    let e = fails(&p, "random", &(MAX_RANDOM_BYTES + 1).to_string()).await;
    assert!(
        matches!(&e.failure, Failure::Trap(m) if m.contains(&format!("exceeds limit {MAX_RANDOM_BYTES}"))),
        "{e}"
    );
}

/// A call holds at most `MAX_RESOURCES` resources at once (10,000, not wasmtime's 1,000,000
/// host entries and 100,000 handles).
#[tokio::test]
async fn resources_a_call_holds_are_capped() {
    use wasmop_plugin_host::sandbox::MAX_RESOURCES;
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    // A pollable of a clock takes two entries of the host's table.
    p.route(request("resources", &(MAX_RESOURCES / 2 - 100).to_string()))
        .await
        .unwrap();
    let e = fails(&p, "resources", &(MAX_RESOURCES + 1).to_string()).await;
    assert!(matches!(e.failure, Failure::Trap(_)), "{e}");
}

/// The headers of a `wasi:http` request hold at most `MAX_HTTP_FIELDS_BYTES` (64 KiB, not
/// wasmtime's 128 KiB): an append past it fails the call.
#[tokio::test]
async fn http_fields_are_capped() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    p.route(request("fields", &(32 << 10).to_string()))
        .await
        .unwrap();
    let e = fails(&p, "fields", &(100 << 10).to_string()).await;
    assert!(
        matches!(&e.failure, Failure::Trap(m) if m.contains("total size of fields exceeds limit")),
        "{e}"
    );
}

/// One write to an outgoing `wasi:http` body carries at most `HTTP_BODY_CHUNK_BYTES` (64 KiB,
/// not wasmtime's 1 MiB), and `HTTP_BODY_BUFFER_CHUNKS` (1) is buffered beyond the one in
/// flight: a larger write, or a third write the network has not taken, traps.
#[tokio::test]
async fn http_body_writes_are_capped() {
    use wasmop_plugin_host::sandbox::HTTP_BODY_CHUNK_BYTES;
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    p.route(request("body", &format!("{HTTP_BODY_CHUNK_BYTES},2")))
        .await
        .unwrap();
    for host in [
        format!("{},1", HTTP_BODY_CHUNK_BYTES + 1),
        format!("{HTTP_BODY_CHUNK_BYTES},3"),
    ] {
        let e = fails(&p, "body", &host).await;
        assert!(
            matches!(&e.failure, Failure::Trap(m) if m.contains("write exceeded budget")),
            "{host}: {e}"
        );
    }
}

/// A DR tick's request for an instance without a lease.
fn tick_request() -> StateRequest {
    StateRequest {
        identity: "solo".into(),
        now: 100_000,
        lease: None,
        wait_time_seconds: 5,
        failure_threshold: 3,
        started_at: 0,
        warmup_seconds: 0,
    }
}

/// Each hook has a permit of its own: with a router looping to its deadline and 100 routing
/// calls queued on the shared permits, a DR call still runs at once, well within any DR period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dr_calls_keep_their_own_permit_under_a_flood_of_routing_calls() {
    let rt = runtime();
    let router = hostile(&rt, |s| s.limits.timeout_ms = 100).await;
    let none = builtin::find("none").unwrap();
    let spec = PluginSpec::new("none", Hook::Dr, "builtin://none");
    let dr = rt.load(&spec, none.wasm).await.unwrap();
    let (queued, done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let flood: Vec<_> = (0..100)
        .map(|_| {
            let (router, queued, done) = (router.clone(), queued.clone(), done.clone());
            tokio::spawn(async move {
                // Counted in the same poll that queues the call for a permit.
                queued.fetch_add(1, Ordering::SeqCst);
                let e = router.route(request("loop", "")).await.unwrap_err();
                assert!(matches!(e.failure, Failure::Timeout { .. }), "{e}");
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    eventually("every routing call is queued", || {
        queued.load(Ordering::SeqCst) == 100
    })
    .await;
    for _ in 0..5 {
        let started = Instant::now();
        dr.check(tick_request()).await.expect("a DR decision");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a DR call waited {:?} behind the routing calls",
            started.elapsed()
        );
    }
    assert!(
        done.load(Ordering::SeqCst) < 50,
        "the routing flood was still queued"
    );
    for call in flood {
        call.await.unwrap();
    }
}

/// More instantiations at once than the pool has slots (16 loads whose settings check holds
/// the instance for 100 ms, and 16 calls that sleep, on a pool of 7 slots) all succeed: each
/// waits for a permit, and every permit has a slot. Before, loads took no permit and the
/// excess failed with the pool's "maximum concurrent limit … reached".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_instantiations_than_the_pool_holds_wait_for_a_slot() {
    let rt = PluginRuntime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 1,
        ..RuntimeOptions::default()
    })
    .unwrap();
    assert_eq!(wasmop_plugin_host::instance_slots(1), 7);
    let p = hostile(&rt, |_| {}).await;
    let bytes = std::fs::read(components_dir().join("wasmop_hostile_fixture.wasm")).unwrap();
    let loads = (0..16).map(|i| {
        let (rt, bytes) = (rt.clone(), bytes.clone());
        tokio::spawn(async move {
            let mut spec = PluginSpec::new(&format!("slow-{i}"), Hook::Routing, "file:///h.wasm");
            spec.settings = Some(serde_json::json!({ "sleep": 100 }));
            rt.load(&spec, &bytes).await.map(drop)
        })
    });
    let calls = (0..16).map(|_| {
        let p = p.clone();
        tokio::spawn(async move { p.route(request("sleep", "50")).await.map(drop) })
    });
    let (loads, calls) = tokio::join!(
        futures::future::join_all(loads),
        futures::future::join_all(calls)
    );
    for load in loads {
        load.unwrap().expect("every load finds a slot");
    }
    for call in calls {
        call.unwrap().expect("every call finds a slot");
    }
}

/// A task on the current runtime that counts its wake-ups from 1 ms sleeps: how often the
/// executor got to run it. Abort the handle when done.
fn ticker() -> (
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = ticks.clone();
    let handle = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    (ticks, handle)
}

/// The ticks of a [`ticker`] while `p` loops until its deadline (which it must report).
async fn ticks_during_a_loop(p: &Arc<Plugin>, ticks: &std::sync::atomic::AtomicUsize) -> usize {
    let before = ticks.load(std::sync::atomic::Ordering::Relaxed);
    let e = p.route(request("loop", "")).await.unwrap_err();
    assert!(matches!(e.failure, Failure::Timeout { .. }), "{e}");
    ticks.load(std::sync::atomic::Ordering::Relaxed) - before
}

/// The operator's setting: the pooling allocator (the default) on a multi-thread runtime,
/// where a call runs in the calling task until it has computed for a whole epoch tick, then
/// off the executor. The limits hold, and while a call loops until its deadline the executor's
/// other tasks keep running as often as when it is idle, even with one worker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn the_pooling_allocator_serves_calls_and_keeps_the_limits() {
    let dir = std::env::temp_dir().join(format!("wasmop-pooling-{}", std::process::id()));
    let rt = PluginRuntime::new(RuntimeOptions {
        cache_dir: Some(dir),
        max_concurrent_calls: 2,
        ..RuntimeOptions::default()
    })
    .unwrap();
    let p = hostile(&rt, |s| s.limits.memory_mib = 16).await;
    let (ticks, ticker) = ticker();
    // On a worker thread, as a reconcile runs.
    tokio::spawn(async move {
        p.route(request("ok", ""))
            .await
            .expect("a pooled instance answers");
        let e = fails(&p, "oom", "").await;
        assert_eq!(e.failure, Failure::OutOfMemory { limit_mib: 16 }, "{e}");
        let e = fails(&p, "trap", "").await;
        assert!(
            matches!(&e.failure, Failure::Trap(m) if m.contains("unreachable")),
            "{e}"
        );
        let during = ticks_during_a_loop(&p, &ticks).await;
        // In the calling task, yielding at each 10 ms epoch tick, the ticker would run at most
        // once per tick (25 times); off the executor it runs about every millisecond.
        assert!(
            during >= 50,
            "the executor ran {during} ticks of 1 ms during a 250 ms call"
        );
        // More calls than pool slots, one after another: slots are returned after each call.
        for _ in 0..50 {
            p.route(request("ok", "")).await.unwrap();
        }
    })
    .await
    .unwrap();
    ticker.abort();

    // A memory limit over what a pooled instance can have is refused at load, not left to
    // fail as a trap inside the guest; without the pool it loads.
    let bytes = std::fs::read(components_dir().join("wasmop_hostile_fixture.wasm")).unwrap();
    let mut spec = PluginSpec::new("big", Hook::Routing, "file:///hostile.wasm");
    spec.limits.memory_mib = 2048;
    let e = rt.load(&spec, &bytes).await.unwrap_err();
    assert_eq!(
        e.message,
        "limits.memoryMiB 2048 is over the 1024 MiB an instance of the pooling allocator can \
         have: give at most 1024, or turn pooling off (`wasmop run --pooling=false`, Helm value \
         `operator.pooling: false`)"
    );
    runtime()
        .load(&spec, &bytes)
        .await
        .expect("on demand, 2 GiB is allowed");
}

/// On a current-thread runtime (the CLI's `plugin run` and `check`, embedders) a call cannot
/// leave the executor, but it yields at every epoch tick, so the runtime's other tasks, timers
/// included, still run while a plugin loops.
#[tokio::test]
async fn a_looping_call_yields_to_the_other_tasks_at_every_tick() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    let (ticks, ticker) = ticker();
    tokio::task::yield_now().await;
    let during = ticks_during_a_loop(&p, &ticks).await;
    assert!(
        during >= 5,
        "the ticker ran {during} times during a 250 ms call that yields every 10 ms"
    );
    ticker.abort();
}

/// Polls `cond` every millisecond, for up to 5 s, until it holds.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(started.elapsed() < Duration::from_secs(5), "{what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The epoch ticker ticks only while a call is in flight: idle, it parks (an operator with
/// nothing to do takes no wake-ups for it); a call wakes it, so a loop still stops at its
/// limit, and it parks again after. The calls run on their own thread, so a ticker that never
/// woke would fail the test instead of hanging it.
#[tokio::test]
async fn the_epoch_ticker_ticks_only_while_a_call_is_in_flight() {
    let rt = runtime();
    let p = hostile(&rt, |_| {}).await;
    eventually("the ticker parks once loading is done", || {
        rt.epoch_ticker_parked()
    })
    .await;
    let idle = rt.epoch_ticks();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let calls = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        calls.block_on(async {
            for _ in 0..2 {
                times_out(&p, "loop", "", 250).await;
            }
        });
        done.send(()).unwrap();
    });
    match finished.recv_timeout(Duration::from_secs(10)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("a looping call was not stopped at its limit: the ticker did not wake")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("the calls failed (their panic is above)")
        }
    }
    let ticked = rt.epoch_ticks() - idle;
    // 25 ticks each, unless the ticker falls behind on a busy machine and the wall-clock cap
    // (limit plus one tick) stops the call first.
    assert!(
        ticked >= 40,
        "two calls looping until 250 ms took {ticked} ticks of 10 ms"
    );
    eventually("the ticker parks again when no call is in flight", || {
        rt.epoch_ticker_parked()
    })
    .await;
}

/// The value of `metric` (a sample name of the runtime's metrics in the operator's registry,
/// prefix `wasmop`) for `plugin` of `hook`, 0 when it has no sample yet.
fn metric(rt: &PluginRuntime, metric: &str, plugin: &str, hook: Hook) -> f64 {
    let mut registry = prometheus_client::registry::Registry::with_prefix("wasmop");
    rt.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let series = format!("{metric}{{plugin=\"{plugin}\",hook=\"{}\"}}", hook.as_str());
    wasmop_tests::sample(&text, &series)
}

/// A VirtualService of `routes` routes with matches, retries and headers, as the routing
/// benchmark's.
fn virtual_service(routes: usize) -> String {
    let http: Vec<serde_json::Value> = (0..routes)
        .map(|i| {
            serde_json::json!({
                "name": format!("route-{i}"),
                "match": [
                    {"uri": {"prefix": format!("/api/v{i}/")}},
                    {"uri": {"exact": format!("/legacy/{i}")}, "method": {"exact": "GET"}},
                ],
                "route": [
                    {"destination": {"host": "reviews", "subset": "shared"}, "weight": 90},
                    {"destination": {"host": "reviews", "subset": "canary"}, "weight": 10},
                ],
                "timeout": "5s",
                "retries": {"attempts": 3, "perTryTimeout": "2s", "retryOn": "5xx,reset"},
                "headers": {"request": {"set": {"x-route": format!("route-{i}")}}},
            })
        })
        .collect();
    serde_json::json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "reviews", "namespace": "shop", "resourceVersion": "48213"},
        "spec": {"hosts": ["reviews"], "http": http},
    })
    .to_string()
}

/// A running pod with an Istio sidecar as the API server returns it: labels, annotations,
/// managed fields, containers and status.
fn sidecar_pod(i: usize) -> serde_json::Value {
    let image = if i.is_multiple_of(3) {
        "proxyv2:1.26.4"
    } else {
        "proxyv2:1.27.1"
    };
    let managed: Vec<serde_json::Value> = ["kube-controller-manager", "kubelet", "istio-sidecar"]
        .iter()
        .map(|manager| {
            serde_json::json!({
                "manager": manager, "operation": "Update", "apiVersion": "v1",
                "time": "2026-08-01T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:version": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"reviews\"}": {".": {}, "f:image": {}}}}},
            })
        })
        .collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("reviews-7d9f8c6b5d-{i:05}"),
            "namespace": "shop",
            "uid": format!("5b0c3f7e-2a41-4c8e-9d6b-{i:012}"),
            "labels": {"app": "reviews", "version": "shared", "pod-template-hash": "7d9f8c6b5d"},
            "annotations": {
                "sidecar.istio.io/status": r#"{"initContainers":["istio-validation"],"containers":["istio-proxy"],"volumes":["istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"],"revision":"default"}"#,
                "prometheus.io/path": "/stats/prometheus",
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "reviews-7d9f8c6b5d", "uid": "0f1e2d3c", "controller": true}],
            "managedFields": managed,
        },
        "spec": {
            "containers": [
                {"name": "reviews", "image": "shop/reviews:2.4.1",
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}},
                {"name": "istio-proxy", "image": image,
                 "args": ["proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"],
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                               "limits": {"cpu": "2", "memory": "1Gi"}}},
            ],
            "nodeName": format!("worker-{}", i % 4),
        },
        "status": {
            "phase": "Running",
            "podIP": format!("10.244.{}.{}", i % 4, i % 250),
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "reviews", "ready": true, "restartCount": 0, "image": "shop/reviews:2.4.1",
                 "state": {"running": {"startedAt": "2026-08-01T10:00:05Z"}}},
                {"name": "istio-proxy", "ready": true, "restartCount": 0, "image": image,
                 "state": {"running": {"startedAt": "2026-08-01T10:00:04Z"}}},
            ],
        },
    })
}

/// The default plugins are built with enough initial linear memory for their usual calls (a
/// VirtualService of 50 routes; a page of 100 pods, the restart controller's default page), so
/// those calls never `memory.grow` and a pooled slot is reused without `mprotect`. The growth
/// a call does make is counted: the hostile fixture's memory bomb is.
#[tokio::test]
async fn default_plugins_serve_usual_calls_without_growing_memory() {
    let rt = runtime();
    async fn load(
        rt: &Arc<PluginRuntime>,
        name: &str,
        hook: Hook,
        builtin_name: &str,
    ) -> Arc<Plugin> {
        let source = format!("builtin://{builtin_name}");
        rt.load(
            &PluginSpec::new(name, hook, &source),
            builtin::find(builtin_name).unwrap().wasm,
        )
        .await
        .unwrap()
    }
    let routing = load(&rt, "routing-memory", Hook::Routing, "routing-istio").await;
    let mut req = request("feature-42", "reviews");
    req.namespace = "shop".into();
    req.virtual_service = virtual_service(50);
    req.matches = vec![wasmop_plugin_host::IstioMatch {
        headers: vec![wasmop_plugin_host::HeaderMatch {
            name: "end-user".into(),
            value: wasmop_plugin_host::StringMatch::Exact("jason".into()),
        }],
        source_labels: vec![],
    }];
    let routes: Vec<serde_json::Value> =
        serde_json::from_str(&routing.route(req).await.unwrap().http).unwrap();
    assert!(
        routes.len() > 50,
        "copies come first: {} routes",
        routes.len()
    );

    let restart = load(&rt, "restart-memory", Hook::Restart, "restart-sidecar").await;
    let pods: Vec<serde_json::Value> = (0..100).map(sidecar_pod).collect();
    let page = serde_json::Value::Array(pods).to_string();
    assert!(page.len() > 200_000, "a page of {} bytes", page.len());
    let decisions = restart
        .evaluate(
            wasmop_plugin_host::RestartRequest {
                policy: "shop/istio".into(),
                desired: r#"{"image":"proxyv2:1.27.1"}"#.into(),
                applied: r#"{"image":"proxyv2:1.26.4"}"#.into(),
                pods: page,
            },
            100,
        )
        .await
        .unwrap();
    assert_eq!(decisions.iter().filter(|d| d.restart).count(), 34);

    // Loading calls `info` and `validate-settings`; then the call above. Each call's memory
    // stays at the 4 MiB it starts with, plus its tables (a few hundred elements of 8 bytes).
    for (plugin, hook) in [
        ("routing-memory", Hook::Routing),
        ("restart-memory", Hook::Restart),
    ] {
        let calls = metric(&rt, "wasmop_plugin_memory_peak_bytes_count", plugin, hook);
        assert_eq!(calls, 3.0, "{plugin}: info, validate-settings and one call");
        let peaks = metric(&rt, "wasmop_plugin_memory_peak_bytes_sum", plugin, hook);
        let memories = calls * 4.0 * 1_048_576.0;
        assert!(
            peaks > memories && peaks < memories + calls * 16_384.0,
            "{plugin}: peaks {peaks} bytes"
        );
        assert_eq!(
            metric(&rt, "wasmop_plugin_memory_grows_total", plugin, hook),
            0.0
        );
    }

    // The declared 4 MiB count against the limit: a smaller one refuses the plugin at load.
    let mut small = PluginSpec::new("routing-small", Hook::Routing, "builtin://routing-istio");
    small.limits.memory_mib = 3;
    let Err(e) = rt
        .load(&small, builtin::find("routing-istio").unwrap().wasm)
        .await
    else {
        panic!("3 MiB is less than the plugin declares");
    };
    assert!(
        e.to_string()
            .contains("out of memory: the call's linear memories and tables together exceeded 3 MiB (limits.memoryMiB)"),
        "{e}"
    );

    let bomb = hostile(&rt, |s| {
        s.name = "hostile-memory".into();
        s.limits.memory_mib = 16;
    })
    .await;
    let e = bomb.route(request("oom", "")).await.unwrap_err();
    assert_eq!(e.failure, Failure::OutOfMemory { limit_mib: 16 }, "{e}");
    assert_eq!(
        metric(
            &rt,
            "wasmop_plugin_memory_grows_total",
            "hostile-memory",
            Hook::Routing
        ),
        1.0
    );
    // Less the 4 MiB of each of the load's two calls.
    let peak = metric(
        &rt,
        "wasmop_plugin_memory_peak_bytes_sum",
        "hostile-memory",
        Hook::Routing,
    ) - 8.0 * 1_048_576.0;
    assert!(
        (12.0 * 1_048_576.0..=16.0 * 1_048_576.0).contains(&peak),
        "the bomb grew to {peak} bytes, under its 16 MiB limit"
    );
}

/// A core module of `functions` functions, each with `body` bytes of `nop` in its body.
fn module(functions: usize, body: usize) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let section = |id: u8, content: Vec<u8>, out: &mut Vec<u8>| {
        out.push(id);
        leb(content.len(), out);
        out.extend(content);
    };
    let mut wasm = b"\0asm\x01\0\0\0".to_vec();
    section(1, vec![1, 0x60, 0, 0], &mut wasm);
    let mut funcs = Vec::new();
    leb(functions, &mut funcs);
    funcs.resize(funcs.len() + functions, 0);
    section(3, funcs, &mut wasm);
    let mut code = Vec::new();
    leb(functions, &mut code);
    for _ in 0..functions {
        leb(body + 2, &mut code);
        code.push(0);
        code.resize(code.len() + body, 0x01);
        code.push(0x0b);
    }
    section(10, code, &mut wasm);
    wasm
}

/// A component whose code is over a compile limit (its functions, its code's bytes, its
/// largest function) is refused before it is compiled, saying which limit and by how much.
#[tokio::test]
async fn code_over_the_compile_limits_is_refused_before_compiling() {
    let rt = runtime();
    let limits = wasmop_plugin_host::CompileLimits::default();
    let refused = async |bytes: Vec<u8>| {
        let spec = PluginSpec::new("big", Hook::Routing, "file:///big.wasm");
        rt.load(&spec, &bytes)
            .await
            .expect_err("over a limit")
            .message
    };
    let hint = "a component may have to be compiled (compiling needs memory in proportion, \
                docs/plugins.md \"Memory to compile\")";
    let many = limits.max_functions + 1;
    assert_eq!(
        refused(module(many, 0)).await,
        format!("the component has {many} functions, over the 100000 {hint}")
    );
    let long = limits.max_function_bytes + 1;
    assert_eq!(
        refused(module(1, long - 2)).await,
        format!("the component has {long} bytes in one function, over the 1048576 {hint}")
    );
    let much = refused(module(13, (1 << 20) - 100)).await;
    assert!(
        much.ends_with(&format!("bytes of code, over the 12582912 {hint}")),
        "{much}"
    );
    // Within the limits, the same bytes reach the compiler, which says what they are.
    let small = refused(module(10, 10)).await;
    assert!(small.starts_with("a core WebAssembly module"), "{small}");
}

/// A component whose compile ended the process last time (its marker left in the compile
/// cache, nobody holding it) fails its load with the reason and the way out, and only it:
/// other components load, and once the marker is removed it compiles.
#[tokio::test]
async fn a_component_whose_compile_ended_the_last_process_is_not_compiled_again() {
    let dir = std::env::temp_dir().join(format!("wasmop-marker-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fixture = components_dir().join("wasmop_hostile_fixture.wasm");
    let digest = sha256_hex(&std::fs::read(&fixture).unwrap());
    // Left by the process before: it was killed while compiling.
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join(format!("{digest}.compiling"));
    std::fs::write(&marker, "compiling since … in process 1\n").unwrap();
    let rt = PluginRuntime::new(RuntimeOptions {
        cache_dir: Some(dir.clone()),
        max_concurrent_calls: 1,
        pooling: false,
        extra_ca_pem: None,
    })
    .unwrap();
    let registry = Registry::new(rt.clone());
    let config = RegistryConfig::parse(&format!(
        "plugins:\n\
         - {{name: killer, hook: routing, source: 'file://{}', sha256: {digest}}}\n\
         - {{name: fine, hook: routing, source: 'builtin://routing-istio'}}\n",
        fixture.display()
    ))
    .unwrap();
    let report = registry.apply(config, &LocalFetch::default()).await;
    assert_eq!(
        report.failed,
        [(
            "killer".to_owned(),
            format!(
                "compiling this component ended the process last time (out of memory?); change \
                 the component or remove {}",
                marker.display()
            )
        )]
    );
    assert!(report.loaded.contains(&"fine".to_owned()), "{report:?}");
    assert!(!registry.has_retryable(), "it waits for a change");
    assert!(marker.exists(), "the marker stays until removed");

    std::fs::remove_file(&marker).unwrap();
    let spec = PluginSpec::new("killer", Hook::Routing, "file:///hostile.wasm");
    rt.load(&spec, &std::fs::read(&fixture).unwrap())
        .await
        .expect("compiles once the marker is removed");
    assert!(
        !marker.exists(),
        "and its own marker is gone once it compiled"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A restart answer with more decisions than the page has pods (the restart-everything fixture
/// with `{"extra": 2}`) is invalid output: the host cannot tell which pods the answer means.
#[tokio::test]
async fn a_restart_answer_with_more_decisions_than_pods_is_invalid_output() {
    let rt = runtime();
    let bytes = std::fs::read(components_dir().join("wasmop_hostile_restart.wasm")).unwrap();
    let pod = serde_json::json!({"metadata": {"name": "p", "namespace": "ns"}});
    let request = || wasmop_plugin_host::RestartRequest {
        policy: "p".into(),
        desired: "{}".into(),
        applied: "null".into(),
        pods: serde_json::json!([pod, pod]).to_string(),
    };
    let mut spec = PluginSpec::new("everything", Hook::Restart, "file:///everything.wasm");
    let everything = rt.load(&spec, &bytes).await.unwrap();
    let decisions = everything.evaluate(request(), 2).await.unwrap();
    assert!(decisions.iter().all(|d| d.restart));

    spec.settings = Some(serde_json::json!({"extra": 2}));
    let extra = rt.load(&spec, &bytes).await.unwrap();
    let e = extra.evaluate(request(), 2).await.unwrap_err();
    assert!(matches!(e.failure, Failure::InvalidOutput(_)), "{e}");
    assert!(
        e.to_string().contains("4 decisions for a page of 2 pods"),
        "{e}"
    );
}
