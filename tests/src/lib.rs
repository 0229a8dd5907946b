//! Helpers for the end-to-end tests, which run against the local control plane of
//! `deploy/dev/cluster.sh` (the test command starts it and exports `KUBECONFIG`).
//!
//! Every test works in its own throwaway namespace ([`with_temp_ns`]); when a test fails, the
//! namespace's objects are dumped to stderr and to `target/e2e-dumps/<namespace>.yaml`.

pub mod dr;
pub mod oci;
pub mod prometheus;

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

pub mod resolver;
pub mod restart;
pub mod routing;
pub mod tls;

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

/// Removes from `cmd` the variables of the cargo that runs the test, which would point a cargo
/// or build script it starts at this workspace's target directory and flags.
pub fn without_cargo_env(cmd: &mut Command) -> &mut Command {
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MANIFEST_DIR",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Where failed tests' namespace dumps, process logs and generated files are written
/// (`target/e2e-dumps`, created if absent).
pub fn dump_dir() -> PathBuf {
    let dir = repo_root().join("target").join("e2e-dumps");
    std::fs::create_dir_all(&dir).expect("create target/e2e-dumps");
    dir
}

/// The compile cache of the operators the tests start ([`Operator::start`]):
/// `target/e2e-dumps/component-cache`, created by the first compile. A test that compiles a
/// component with `wasmop plugin check` there first has an operator load it from the cache.
pub fn operator_cache_dir() -> PathBuf {
    repo_root()
        .join("target")
        .join("e2e-dumps")
        .join("component-cache")
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
    let file = dump_dir().join(format!("{ns}.yaml"));
    let _ = std::fs::write(&file, &text);
    eprintln!(
        "==== objects in namespace {ns} (also in {}) ====\n{text}",
        file.display()
    );
    file
}

/// Removes the finalizers of wasmop's custom resources left in `ns`: the test's operator has
/// stopped, so nothing would remove them and the namespace would never finish terminating.
pub fn release_finalizers(ns: &str) {
    let Ok(out) = kubectl()
        .args([
            "api-resources",
            "--api-group=wasmop.dev",
            "--namespaced=true",
            "-o",
            "name",
        ])
        .output()
    else {
        return;
    };
    let kinds = String::from_utf8_lossy(&out.stdout)
        .trim()
        .replace('\n', ",");
    if kinds.is_empty() {
        return;
    }
    let Ok(out) = kubectl()
        .args(["get", &kinds, "-n", ns, "-o", "name"])
        .output()
    else {
        return;
    };
    for object in String::from_utf8_lossy(&out.stdout).lines() {
        let _ = kubectl()
            .args(["patch", object, "-n", ns, "--type=merge"])
            .args(["-p", r#"{"metadata":{"finalizers":null}}"#])
            .output();
    }
}

/// Runs `test` with a fresh namespace; dumps the namespace if `test` panics, deletes it either
/// way (releasing the finalizers its stopped operator left on wasmop resources), and re-raises
/// the panic.
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
    release_finalizers(&name);
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
    // A watch may end with an error (e.g. 410 Expired when the API server compacts); the wait
    // then starts over with a fresh list, within the same deadline.
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match tokio::time::timeout_at(
            deadline,
            await_condition(api.clone(), name, |o: Option<&K>| cond.matches_object(o)),
        )
        .await
        {
            Ok(Ok(Some(obj))) => return obj,
            Ok(Ok(None)) => panic!("{name} was deleted while waiting for: {what}"),
            Ok(Err(e)) => last_error = Some(e.to_string()),
            Err(_) => panic!(
                "timed out after {timeout:?} waiting for {name}: {what} (last watch error: {})",
                last_error.as_deref().unwrap_or("none")
            ),
        }
    }
}

/// Runs `kubectl ARGS`, panics with its stderr unless it succeeds, and returns its stdout.
pub fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl().args(args).output().expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The repository's `crds/` directory.
pub fn crds_dir() -> PathBuf {
    repo_root().join("crds")
}

/// Applies `crds/` (server-side, idempotent; takes over fields another manager such as a
/// client-side `kubectl apply` left), waits until every CRD is Established, and returns
/// `kubectl apply`'s output.
///
/// # Panics
/// When kubectl fails or a CRD does not become Established within a minute.
pub fn install_crds() -> String {
    let dir = crds_dir();
    let dir = dir.to_string_lossy();
    let applied = kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=wasmop-e2e",
        "-f",
        &dir,
    ]);
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "-f",
        &dir,
    ]);
    applied
}

/// `GET http://{addr}{path}` over HTTP/1.0 on loopback: (status, body). `None` when the server
/// does not answer (yet).
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let status = raw.split_whitespace().nth(1)?.parse().ok()?;
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// A free loopback port (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `timeout` naming `what`.
/// For conditions that span several objects or a process's HTTP answers; single objects use
/// [`wait_until`] (a watch).
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the sample `series` (name and labels exactly as exposed, e.g.
/// `wasmop_reconcile_total{controller="restart",outcome="ok"}`) in a Prometheus text
/// exposition; 0 when absent.
pub fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(series))
        .filter_map(|rest| rest.trim().parse::<f64>().ok())
        .next()
        .unwrap_or(0.0)
}

/// A child process killed on drop; its log is printed if the test is failing.
pub struct Process {
    child: std::process::Child,
    log: PathBuf,
}

impl Process {
    /// Starts `cmd` with stdout and stderr appended to `log`.
    ///
    /// # Panics
    /// When the log cannot be created or the command cannot start.
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).expect("create the process log");
        cmd.stdout(file.try_clone().expect("clone log handle"))
            .stderr(file);
        let child = cmd.spawn().expect("start the process");
        Self { child, log }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The environment the process runs with now (`/proc/PID/environ`), as `NAME=value`: after
    /// an `exec`, the new image's.
    ///
    /// # Panics
    /// When it cannot be read.
    pub fn environment(&self) -> Vec<String> {
        std::fs::read(format!("/proc/{}/environ", self.id()))
            .expect("the process's environment")
            .split(|b| *b == 0)
            .filter(|v| !v.is_empty())
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect()
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "==== log of pid {} ({}) ====\n{}",
                self.child.id(),
                self.log.display(),
                self.log()
            );
        }
    }
}

/// The chart rendered with its default values (`deploy/manifests`: the namespace, then the
/// ServiceAccounts, RBAC, Deployments, Services, PodDisruptionBudgets and the plugin registry of
/// `deploy/helm/wasmop`).
pub fn manifests_dir() -> PathBuf {
    repo_root().join("deploy").join("manifests")
}

/// Installs the rendered chart (`deploy/manifests`) with server-side apply and strict field
/// validation (idempotent), so the operator runs with exactly the chart's ServiceAccounts and
/// RBAC. Pods of its Deployments only ever run on kwok's simulated nodes.
///
/// # Panics
/// When kubectl fails.
pub fn install_operator_rbac() {
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager=wasmop-e2e",
        "--force-conflicts",
        "--validate=strict",
        "-f",
        &manifests_dir().to_string_lossy(),
    ]);
}

/// The repository root: the nearest ancestor (holding `crds/` and `plugins/sdk/wit/`) of the
/// directory of the package whose test or benchmark runs (`CARGO_MANIFEST_DIR` as cargo sets it
/// at run time), else the parent of this crate's directory when it was built. Read at run time because one target directory may serve several checkouts, and cargo does not
/// rebuild this crate when only the checkout's path changed.
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .and_then(|dir| {
            dir.ancestors()
                .find(|d| d.join("crds").is_dir() && d.join("plugins/sdk/wit").is_dir())
                .map(std::path::Path::to_path_buf)
        })
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
}

/// The cargo target directory the running test or benchmark was built in
/// (`<target>/<profile>/deps/<name>`).
///
/// # Panics
/// When the running executable is not under a cargo target directory.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running executable");
    exe.ancestors()
        .nth(3)
        .expect("a test executable in <target>/<profile>/deps")
        .to_path_buf()
}

/// Where the build script of `wasmop-plugin-host` leaves the components it builds, the
/// default plugins and the test fixtures: `<target>/plugins/wasm32-wasip2/plugin`.
///
/// # Panics
/// As [`target_dir`].
pub fn components_dir() -> PathBuf {
    target_dir()
        .join("plugins")
        .join("wasm32-wasip2")
        .join("plugin")
}

/// Builds the example plugins `names` (directory names under examples/plugins, e.g.
/// `c-business-hours-dr`; all of them when empty) with examples/plugins/build.sh into
/// `<target>/example-plugins` and returns that directory. `target` is the Cargo target
/// directory; the Rust example shares its `plugins/` build with the default plugins. Rebuilds
/// only what changed; concurrent callers take turns.
///
/// # Panics
/// When the build fails, e.g. a plugin toolchain is missing (scripts/setup.sh installs them).
pub fn example_plugins(target: &std::path::Path, names: &[&str]) -> PathBuf {
    let out = target.join("example-plugins");
    let status = Command::new(repo_root().join("examples/plugins/build.sh"))
        .arg(&out)
        .args(names)
        .env("CARGO_TARGET_DIR", target)
        .status()
        .expect("run examples/plugins/build.sh");
    assert!(
        status.success(),
        "examples/plugins/build.sh failed; are the plugin toolchains installed (scripts/setup.sh)?"
    );
    out
}

/// A kubeconfig that authenticates as ServiceAccount `ns/sa` (deploy/dev/sa-kubeconfig.sh).
///
/// # Panics
/// When the script fails.
pub fn service_account_kubeconfig(ns: &str, sa: &str) -> PathBuf {
    let out = dump_dir().join(format!("{ns}-{sa}-{}.kubeconfig", std::process::id()));
    let status = Command::new(repo_root().join("deploy/dev/sa-kubeconfig.sh"))
        .args([ns, sa])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run sa-kubeconfig.sh");
    assert!(status.success(), "sa-kubeconfig.sh {ns} {sa} failed");
    out
}

/// The operator's namespace-scoped rules (ClusterRole `wasmop-namespace` of the chart) bound
/// in `ns` to ServiceAccount `wasmop-system/wasmop`, so an operator run with `--namespace ns`
/// has there what it has in `wasmop-system` and nothing more.
pub fn bind_operator_namespace(ns: &str) {
    let yaml = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: wasmop, namespace: {ns}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wasmop-namespace}}\n\
         subjects: [{{kind: ServiceAccount, name: wasmop, namespace: wasmop-system}}]\n"
    );
    let file = dump_dir().join(format!("{ns}-rbac.yaml"));
    std::fs::write(&file, yaml).expect("write the RoleBinding");
    kubectl_ok(&["apply", "-f", file.to_str().expect("a UTF-8 path")]);
}

/// `wasmop run` started for one test, as ServiceAccount `wasmop-system/wasmop` (the chart's
/// RBAC, from deploy/manifests), with `--namespace` and `--watch-namespace` set to the test's namespace, so
/// that its registry ConfigMap, DR lease and Events stay there and tests running side by side
/// never reconcile each other's objects ([`Operator::start_all_namespaces`] watches every
/// namespace and keeps apart by a label selector instead). Killed on drop.
pub struct Operator {
    /// The process (its log is printed when the test fails).
    pub process: Process,
    /// `127.0.0.1:PORT` of its health, metrics and plugins server.
    pub addr: String,
    /// Its operator namespace.
    pub namespace: String,
}

impl Operator {
    /// The label whose value (the operator namespace) an operator of
    /// [`Operator::start_all_namespaces`] selects custom resources by.
    pub const SELECTOR_LABEL: &str = "wasmop.dev/e2e-operator";

    /// Installs the CRDs and the operator RBAC, binds the namespace rules in `ns`, and starts
    /// `bin` (`env!("CARGO_BIN_EXE_wasmop")`) with `extra_args` appended; returns once
    /// `/readyz` answers 200.
    ///
    /// # Panics
    /// When the operator exits or is not ready within 60 s.
    pub async fn start(bin: &str, ns: &str, extra_args: &[&str]) -> Self {
        Self::start_as(bin, ns, &format!("wasmop-{ns}"), extra_args).await
    }

    /// As [`Operator::start`] with identity `identity` (the DR lease holder name).
    ///
    /// # Panics
    /// When the operator exits or is not ready within 60 s.
    pub async fn start_as(bin: &str, ns: &str, identity: &str, extra_args: &[&str]) -> Self {
        Self::launch(bin, ns, identity, &["--watch-namespace", ns], extra_args).await
    }

    /// As [`Operator::start`], but watching every namespace (as the chart installs it without
    /// `operator.watchNamespace`) and reconciling only the custom resources labelled
    /// `wasmop.dev/e2e-operator=<ns>` (`--selector`), so that it leaves other tests' alone.
    ///
    /// # Panics
    /// When the operator exits or is not ready within 60 s.
    pub async fn start_all_namespaces(bin: &str, ns: &str, extra_args: &[&str]) -> Self {
        let selector = format!("{}={ns}", Self::SELECTOR_LABEL);
        Self::launch(
            bin,
            ns,
            &format!("wasmop-{ns}"),
            &["--selector", &selector],
            extra_args,
        )
        .await
    }

    /// As the chart installs it without `operator.watchNamespace`: every namespace, every
    /// custom resource. Only for a test that runs alone (its own test binary, one test), since
    /// it reconciles every other test's objects too.
    ///
    /// # Panics
    /// When the operator exits or is not ready within 60 s.
    pub async fn start_cluster_wide(bin: &str, ns: &str, extra_args: &[&str]) -> Self {
        Self::launch(bin, ns, &format!("wasmop-{ns}"), &[], extra_args).await
    }

    /// Starts `wasmop run` in operator namespace `ns` with `scope_args` (what it watches).
    async fn launch(
        bin: &str,
        ns: &str,
        identity: &str,
        scope_args: &[&str],
        extra_args: &[&str],
    ) -> Self {
        install_crds();
        install_operator_rbac();
        bind_operator_namespace(ns);
        let kubeconfig = service_account_kubeconfig("wasmop-system", "wasmop");
        let addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(bin);
        cmd.args(["run", "--namespace", ns])
            .args(scope_args)
            .args(["--listen", &addr, "--identity", identity])
            .args(extra_args)
            .env("KUBECONFIG", &kubeconfig)
            .env("WASMOP_LOG", "info,wasmop=debug")
            .env("WASMOP_CACHE_DIR", operator_cache_dir());
        let log = dump_dir().join(format!("{ns}-{identity}.log"));
        let mut process = Process::spawn(cmd, log);
        let ready_addr = addr.clone();
        eventually(
            "the operator to be ready",
            Duration::from_secs(60),
            async || {
                assert!(process.alive(), "the operator exited:\n{}", process.log());
                http_get(&ready_addr, "/readyz").filter(|(s, _)| *s == 200)
            },
        )
        .await;
        Self {
            process,
            addr,
            namespace: ns.to_owned(),
        }
    }

    /// `GET path` on its server: (status, body), `None` when it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&self.addr, path)
    }

    /// Waits until this instance is active (writes allowed), as `/health/ready?checkifreadonly=true`
    /// tells.
    ///
    /// # Panics
    /// When it is not active within `timeout`.
    pub async fn wait_active(&mut self, timeout: Duration) {
        let addr = self.addr.clone();
        let process = &mut self.process;
        eventually("the operator to be active", timeout, async || {
            assert!(process.alive(), "the operator exited:\n{}", process.log());
            http_get(&addr, "/health/ready?checkifreadonly=true").filter(|(s, _)| *s == 200)
        })
        .await;
    }
}

/// Creates the namespaced object `obj` (JSON in the API shape, without namespace) in `ns`.
///
/// # Panics
/// When `obj` is not a `K` or the API server refuses it.
pub async fn create_in<K>(client: &Client, ns: &str, obj: serde_json::Value) -> K
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let obj: K = serde_json::from_value(obj).expect("a valid object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create the object")
}

/// The desired replicas (`/scale`) of Deployment `ns/name`.
///
/// # Panics
/// When it cannot be read.
pub async fn deployment_replicas(client: &Client, ns: &str, name: &str) -> i32 {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), ns);
    api.get_scale(name)
        .await
        .expect("get the scale")
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(0)
}

/// Runs Istio's own validation (tests/istio-validate, built by
/// scripts/setup.d/75-istio-validate.sh) on `yaml` (documents separated by `---`, `List`s too):
/// whether every VirtualService and DestinationRule is valid with no warning, and the report.
///
/// # Panics
/// When the command cannot run.
pub fn istio_validate(yaml: &str) -> (bool, String) {
    use std::io::Write as _;
    let mut child = std::process::Command::new("bash")
        .arg("-c")
        .arg(r#". "$0/scripts/istio-validate-version.sh" && exec "$ISTIO_VALIDATE""#)
        .arg(repo_root())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run istio-validate");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), report)
}

/// `GET /` with `Host: host` over `stream` (HTTP/1.1, `Connection: close`): the status code
/// and body.
///
/// # Errors
/// The stream fails.
pub async fn http_get_over<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    host: &str,
) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let raw = String::from_utf8_lossy(&raw);
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// The upstream projects kept beside the repository (`../shared/peers`, read-only): where
/// `WASMOP_PEERS_DIR` says, else `shared/peers` in the nearest folder above the repository
/// that has one.
///
/// # Panics
/// When there is none: the message says how to point at it.
pub fn peers_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WASMOP_PEERS_DIR") {
        return PathBuf::from(dir);
    }
    let root = repo_root();
    root.ancestors()
        .skip(1)
        .map(|d| d.join("shared/peers"))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no shared/peers above {} (upstream projects the tests run): set WASMOP_PEERS_DIR",
                root.display()
            )
        })
}
