//! Helpers of the DR tests, benchmark and demo: operators under a second ServiceAccount, the
//! API server's audit log read by user, a watcher of `/health/ready?checkifreadonly=true`,
//! moto (a DynamoDB-compatible server) on loopback, and a TCP proxy that can cut one instance
//! off from it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use crate::{
    Operator, Process, dump_dir, eventually, free_port, http_get, kubectl_ok, repo_root,
    service_account_kubeconfig,
};

/// The second ServiceAccount of the DR tests, in the test namespace.
pub const PEER_ACCOUNT: &str = "wasmop-peer";

/// The audit user name of ServiceAccount `ns/sa`.
pub fn sa_user(ns: &str, sa: &str) -> String {
    format!("system:serviceaccount:{ns}:{sa}")
}

/// The user of the chart's ServiceAccount (`wasmop-system/wasmop`).
pub fn operator_user() -> String {
    sa_user("wasmop-system", "wasmop")
}

/// ServiceAccount `ns/wasmop-peer` with the chart's ClusterRoles: `wasmop` cluster-wide and
/// `wasmop-namespace` in `ns`. The ClusterRoleBinding is removed on drop.
pub struct PeerAccount {
    binding: String,
    /// A kubeconfig authenticating as the account.
    pub kubeconfig: PathBuf,
    /// Its audit user name.
    pub user: String,
}

impl PeerAccount {
    /// Creates the account and its bindings.
    ///
    /// # Panics
    /// When kubectl fails.
    pub fn create(ns: &str) -> Self {
        let binding = format!("{PEER_ACCOUNT}-{ns}");
        let yaml = format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {PEER_ACCOUNT}, namespace: {ns}}}\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {PEER_ACCOUNT}, namespace: {ns}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wasmop-namespace}}\n\
             subjects: [{{kind: ServiceAccount, name: {PEER_ACCOUNT}, namespace: {ns}}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {binding}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: wasmop}}\n\
             subjects: [{{kind: ServiceAccount, name: {PEER_ACCOUNT}, namespace: {ns}}}]\n"
        );
        let file = dump_dir().join(format!("{ns}-peer-rbac.yaml"));
        std::fs::write(&file, yaml).expect("write the peer's RBAC");
        kubectl_ok(&["apply", "-f", file.to_str().expect("a UTF-8 path")]);
        Self {
            binding,
            kubeconfig: service_account_kubeconfig(ns, PEER_ACCOUNT),
            user: sa_user(ns, PEER_ACCOUNT),
        }
    }
}

impl Drop for PeerAccount {
    fn drop(&mut self) {
        let _ = crate::kubectl()
            .args([
                "delete",
                "clusterrolebinding",
                &self.binding,
                "--ignore-not-found",
            ])
            .output();
    }
}

/// Starts `wasmop run` (binary `bin`) in operator namespace `ns` as `identity`, authenticated by
/// `kubeconfig`, with `extra_args` and `env`; returns once `/readyz` answers 200.
///
/// # Panics
/// When the operator exits or is not ready within 60 s.
pub async fn start_operator(
    bin: &str,
    ns: &str,
    identity: &str,
    kubeconfig: &std::path::Path,
    extra_args: &[&str],
    env: &[(&str, &str)],
) -> Operator {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(bin);
    cmd.args(["run", "--namespace", ns, "--watch-namespace", ns])
        .args(["--listen", &addr, "--identity", identity])
        .args(extra_args)
        .env("KUBECONFIG", kubeconfig)
        .env("WASMOP_LOG", "info,wasmop=debug")
        .env("WASMOP_CACHE_DIR", crate::operator_cache_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut process = Process::spawn(cmd, dump_dir().join(format!("{ns}-{identity}.log")));
    let ready = addr.clone();
    eventually(
        "the operator to be ready",
        Duration::from_secs(60),
        async || {
            assert!(process.alive(), "the operator exited:\n{}", process.log());
            http_get(&ready, "/readyz").filter(|(s, _)| *s == 200)
        },
    )
    .await;
    Operator {
        process,
        addr,
        namespace: ns.to_owned(),
    }
}

/// `/health/ready?checkifreadonly=true` of `addr`: `Some(200)` active, `Some(502)` passive,
/// `None` when nothing answers.
pub fn readonly_check(addr: &str) -> Option<u16> {
    http_get(addr, "/health/ready?checkifreadonly=true").map(|(s, _)| s)
}

/// `/dr` of `addr` as JSON.
pub fn dr_status(addr: &str) -> Option<serde_json::Value> {
    let (status, body) = http_get(addr, "/dr")?;
    (status == 200).then(|| serde_json::from_str(&body).ok())?
}

/// One sample of every watched instance's `checkifreadonly` answer.
#[derive(Clone, Debug)]
pub struct Sample {
    /// When it was taken.
    pub at: Instant,
    /// The answer per instance name (`None`: no answer).
    pub answers: BTreeMap<String, Option<u16>>,
}

/// Polls `/health/ready?checkifreadonly=true` of several instances every 50 ms on a thread.
pub struct HealthWatch {
    /// Dropping it ends the sampling at once.
    stop: Option<std::sync::mpsc::Sender<()>>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HealthWatch {
    /// Starts watching `instances` (name, address).
    pub fn start(instances: &[(&str, &str)]) -> Self {
        let instances: Vec<(String, String)> = instances
            .iter()
            .map(|(n, a)| ((*n).to_owned(), (*a).to_owned()))
            .collect();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let out = samples.clone();
        let thread = std::thread::spawn(move || {
            loop {
                let answers = instances
                    .iter()
                    .map(|(n, a)| (n.clone(), readonly_check(a)))
                    .collect();
                out.lock().unwrap().push(Sample {
                    at: Instant::now(),
                    answers,
                });
                // The sampling period, cut short when the watch is stopped.
                match stopped.recv_timeout(Duration::from_millis(50)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        });
        Self {
            stop: Some(stop),
            samples,
            thread: Some(thread),
        }
    }

    /// Stops and returns the samples.
    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

/// Checks the samples: every answer is 200, 502 or none, and no sample has two 200s.
///
/// # Panics
/// When a sample breaks either rule.
pub fn assert_one_active_at_a_time(samples: &[Sample]) {
    assert!(!samples.is_empty(), "no health samples");
    for s in samples {
        for (name, answer) in &s.answers {
            assert!(
                matches!(answer, None | Some(200) | Some(502)),
                "{name} answered {answer:?} to checkifreadonly=true"
            );
        }
        let active: Vec<&String> = s
            .answers
            .iter()
            .filter(|(_, a)| **a == Some(200))
            .map(|(n, _)| n)
            .collect();
        assert!(
            active.len() <= 1,
            "two instances answered 200 at once: {active:?}"
        );
    }
}

/// One request (a write, or a read with [`audit_reads`]) in the API server's audit log.
#[derive(Clone, Debug)]
pub struct AuditWrite {
    /// The user it acts as (e.g. `system:serviceaccount:ns:sa`; the impersonated one if any).
    pub user: String,
    /// `create`, `update`, `patch`, `delete`.
    pub verb: String,
    /// `resource[/subresource] namespace/name`.
    pub object: String,
    /// The response code.
    pub code: u16,
    /// When the API server received it.
    pub at: Timestamp,
}

/// The API server's audit log (`deploy/dev/cluster.sh logs`/audit.log).
///
/// # Panics
/// When cluster.sh fails.
pub fn audit_log() -> PathBuf {
    let out = Command::new(repo_root().join("deploy/dev/cluster.sh"))
        .arg("logs")
        .output()
        .expect("run cluster.sh logs");
    assert!(out.status.success(), "cluster.sh logs failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("audit.log")
}

const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

/// The write requests of `users` in the audit log, in the order received. A request made with
/// impersonation (`kubectl --as USER`) counts as the impersonated user's.
///
/// # Panics
/// When the audit log cannot be read.
pub fn audit_writes(users: &[&str]) -> Vec<AuditWrite> {
    audit_requests(users, WRITE_VERBS)
}

/// The `get` and `list` requests of `users` in the audit log (watches not included), in the
/// order received, as [`audit_writes`] gives writes.
///
/// # Panics
/// When the audit log cannot be read.
pub fn audit_reads(users: &[&str]) -> Vec<AuditWrite> {
    audit_requests(users, &["get", "list"])
}

/// The requests of `users` with one of `verbs` in the audit log, in the order received.
fn audit_requests(users: &[&str], verbs: &[&str]) -> Vec<AuditWrite> {
    let text = std::fs::read_to_string(audit_log()).expect("read the audit log");
    let mut out: Vec<AuditWrite> = text
        .lines()
        .filter(|l| users.iter().any(|u| l.contains(u)))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["stage"] == "ResponseComplete")
        .filter(|v| verbs.contains(&v["verb"].as_str().unwrap_or_default()))
        .filter_map(|v| {
            // Whom a request acts as: the impersonated user (`kubectl --as`), else its sender.
            let user = v["impersonatedUser"]["username"]
                .as_str()
                .or(v["user"]["username"].as_str())?
                .to_owned();
            if !users.contains(&user.as_str()) {
                return None;
            }
            let o = &v["objectRef"];
            let resource = match o["subresource"].as_str() {
                Some(sub) => format!("{}/{sub}", o["resource"].as_str().unwrap_or_default()),
                None => o["resource"].as_str().unwrap_or_default().to_owned(),
            };
            Some(AuditWrite {
                user,
                verb: v["verb"].as_str()?.to_owned(),
                object: format!(
                    "{resource} {}/{}",
                    o["namespace"].as_str().unwrap_or_default(),
                    o["name"].as_str().unwrap_or_default()
                ),
                code: u16::try_from(v["responseStatus"]["code"].as_u64().unwrap_or(0)).unwrap_or(0),
                at: v["requestReceivedTimestamp"].as_str()?.parse().ok()?,
            })
        })
        .collect();
    out.sort_by_key(|w| w.at);
    out
}

/// Checks that the writes of `first` all came before those of `second` (after `since`): no
/// moment when both instances wrote.
///
/// # Panics
/// When a write of `first` came after one of `second`.
pub fn assert_writes_do_not_overlap(
    writes: &[AuditWrite],
    first: &str,
    second: &str,
    since: Timestamp,
) {
    let times = |u: &str| -> Vec<Timestamp> {
        writes
            .iter()
            .filter(|w| w.user == u && w.at >= since)
            .map(|w| w.at)
            .collect()
    };
    let last_first = times(first).into_iter().max();
    let first_second = times(second).into_iter().min();
    if let (Some(a), Some(b)) = (last_first, first_second) {
        assert!(
            a < b,
            "{first} wrote at {a} after {second} began writing at {b}:\n{}",
            writes
                .iter()
                .filter(|w| w.at >= since)
                .map(|w| format!("{} {} {} {} {}", w.at, w.user, w.verb, w.object, w.code))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// `moto_server`: `$WASMOP_MOTO_SERVER`, else the venv of scripts/setup.d/40-moto.sh.
///
/// # Panics
/// When neither exists (run scripts/setup.sh).
pub fn moto_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("WASMOP_MOTO_SERVER") {
        return PathBuf::from(p);
    }
    let setup = std::fs::read_to_string(repo_root().join("scripts/setup.d/40-moto.sh"))
        .expect("read scripts/setup.d/40-moto.sh");
    let version = setup
        .lines()
        .find_map(|l| l.strip_prefix("version="))
        .expect("a version= line");
    let cache = std::env::var_os("WASMOP_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/wasmop")
        });
    let bin = cache.join(format!("moto-{version}/bin/moto_server"));
    assert!(
        bin.exists(),
        "{} is missing: run scripts/setup.sh",
        bin.display()
    );
    bin
}

/// moto in server mode on a free loopback port; killed on drop.
pub struct Moto {
    /// The process.
    pub process: Process,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Moto {
    /// Starts moto and waits until it answers.
    ///
    /// # Panics
    /// When it does not answer within 30 s.
    pub async fn start(name: &str) -> Self {
        let port = free_port();
        let mut cmd = Command::new(moto_server_bin());
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
        let mut process = Process::spawn(cmd, dump_dir().join(format!("{name}-moto.log")));
        let addr = format!("127.0.0.1:{port}");
        let a = addr.clone();
        eventually("moto to answer", Duration::from_secs(30), async || {
            assert!(process.alive(), "moto exited:\n{}", process.log());
            http_get(&a, "/moto-api/").map(|_| ())
        })
        .await;
        Self {
            process,
            endpoint: format!("http://{addr}"),
            addr,
        }
    }
}

/// The environment an AWS SDK client needs against moto: static credentials, a region, and no
/// instance-metadata lookups.
pub const MOTO_ENV: &[(&str, &str)] = &[
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

/// A TCP proxy on loopback to `target` whose connections can be cut (and accepted again).
pub struct CutProxy {
    /// `127.0.0.1:PORT` to connect to instead of the target.
    pub addr: String,
    open: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    /// Starts forwarding to `target`.
    ///
    /// # Panics
    /// When it cannot listen.
    pub async fn start(target: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address").to_string();
        let open = Arc::new(AtomicBool::new(true));
        let (target, o) = (target.to_owned(), open.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            let mut check = tokio::time::interval(Duration::from_millis(20));
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((mut client, _)) = accepted else { continue };
                        if !o.load(Ordering::Relaxed) {
                            continue; // dropped: refused
                        }
                        let target = target.clone();
                        conns.spawn(async move {
                            if let Ok(mut server) = tokio::net::TcpStream::connect(&target).await {
                                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            }
                        });
                    }
                    _ = check.tick() => {
                        if !o.load(Ordering::Relaxed) {
                            conns.abort_all();
                        }
                        while conns.try_join_next().is_some() {}
                    }
                }
            }
        });
        Self { addr, open, task }
    }

    /// Cuts every connection and refuses new ones (`false`), or accepts again (`true`).
    pub fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Relaxed);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Creates `table` as Admiral's lease table: hash key `leaseName` (string), on demand.
///
/// # Panics
/// When DynamoDB refuses it.
pub async fn create_table(client: &aws_sdk_dynamodb::Client, table: &str) {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("leaseName")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("an attribute definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("leaseName")
                .key_type(KeyType::Hash)
                .build()
                .expect("a key schema"),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("create the table");
}
