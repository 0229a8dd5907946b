//! Processes that listen on every interface (KubeElasti's operator and resolver bind `:PORT`)
//! run in a network and mount namespace of their own, made by `unshare`, where the only
//! interface is a loopback of their own:
//!
//! - this benchmark's binary, started there in child mode ([`CHILD_ENV`]), brings the loopback
//!   up, mounts its own `/etc/hosts` (the Service names those processes dial, mapped to
//!   addresses of that loopback) and, when asked, a tmpfs on `/run` holding a ServiceAccount
//!   token where in-cluster clients look for it;
//! - it listens on the namespace's loopback for what those processes dial (the API server,
//!   the fake Prometheus, the backend) and forwards each connection to a unix socket of the
//!   benchmark outside, and it forwards unix sockets it creates to ports inside (the
//!   resolver's proxy port), which is how the benchmark reaches them;
//! - it starts them under `setpriv --pdeathsig KILL`, so they end with it, and it ends with the
//!   benchmark (the same).
//!
//! Nothing outside the namespace changes but the unix sockets in the benchmark's scratch
//! directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, UnixStream};

/// Set (to the spec's path) when this binary runs as the namespace's child.
pub const CHILD_ENV: &str = "WASMOP_BENCH_SCALE_NETNS";

/// A ServiceAccount's credentials, where in-cluster clients read them
/// (`/var/run/secrets/kubernetes.io/serviceaccount`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServiceAccount {
    /// The bearer token.
    pub token: String,
    /// The API server's CA, PEM.
    pub ca_pem: String,
    /// The namespace.
    pub namespace: String,
}

/// A process to start in the namespace.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proc {
    /// The executable.
    pub bin: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables added to the child's.
    pub env: Vec<(String, String)>,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

/// What the child sets up.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    /// TCP addresses to listen on inside, each forwarded to a unix socket outside.
    pub outward: Vec<(String, PathBuf)>,
    /// Unix sockets to create, each forwarded to a TCP address inside.
    pub inward: Vec<(PathBuf, String)>,
    /// The text of `/etc/hosts` inside.
    pub hosts: String,
    /// Credentials to put where in-cluster clients read them.
    pub service_account: Option<ServiceAccount>,
    /// The processes to start, in order.
    pub processes: Vec<Proc>,
    /// Where the child writes the processes' ids (one line, space-separated) once started.
    pub pids: PathBuf,
    /// Where the child writes the hosts file before mounting it.
    pub hosts_file: PathBuf,
}

/// The child running in its namespaces; killed on drop, and the processes it started with it.
pub struct Netns {
    process: wasmop_tests::Process,
    /// The ids of [`Spec::processes`], in order.
    pub pids: Vec<u32>,
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

impl Netns {
    /// Starts the child with `spec` (written to `dir/<name>.json`, logged to `dir/<name>.log`)
    /// and waits until it has started its processes.
    ///
    /// # Panics
    /// When it exits or does not start them within 60 s.
    pub async fn start(spec: &Spec, dir: &Path, name: &str) -> Self {
        let spec_file = dir.join(format!("{name}.json"));
        std::fs::write(&spec_file, serde_json::to_vec(spec).expect("JSON")).expect("write spec");
        let _ = std::fs::remove_file(&spec.pids);
        let mut cmd = Command::new("setpriv");
        cmd.args(["--pdeathsig", "KILL", "--", "unshare"]);
        if !is_root() {
            cmd.args(["--user", "--map-root-user"]);
        }
        cmd.args(["--net", "--mount", "--"])
            .arg(std::env::current_exe().expect("this binary"))
            .env(CHILD_ENV, &spec_file);
        let mut process = wasmop_tests::Process::spawn(cmd, dir.join(format!("{name}.log")));
        let pids = wasmop_tests::eventually(
            "the network namespace's processes to start",
            Duration::from_secs(60),
            async || {
                assert!(
                    process.alive(),
                    "the namespace's child exited:\n{}",
                    process.log()
                );
                let text = std::fs::read_to_string(&spec.pids).ok()?;
                let pids: Vec<u32> = text
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect();
                (pids.len() == spec.processes.len()).then_some(pids)
            },
        )
        .await;
        Self { process, pids }
    }

    /// Whether the child still runs.
    pub fn alive(&mut self) -> bool {
        self.process.alive()
    }

    /// The child's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for pid in &self.pids {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// Runs `cmd` in the child, panicking with its output unless it succeeds.
fn run(cmd: &[&str]) {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The child: sets up the namespace as `spec_path` says, starts the processes and keeps
/// forwarding until it is killed.
pub fn child(spec_path: &str) {
    let spec: Spec =
        serde_json::from_slice(&std::fs::read(spec_path).expect("read the spec")).expect("a spec");
    run(&["ip", "link", "set", "lo", "up"]);
    if let Some(sa) = &spec.service_account {
        run(&["mount", "-t", "tmpfs", "-o", "size=1m", "bench-run", "/run"]);
        let dir = Path::new("/run/secrets/kubernetes.io/serviceaccount");
        std::fs::create_dir_all(dir).expect("create the token directory");
        std::fs::write(dir.join("token"), &sa.token).expect("write the token");
        std::fs::write(dir.join("ca.crt"), &sa.ca_pem).expect("write the CA");
        std::fs::write(dir.join("namespace"), &sa.namespace).expect("write the namespace");
    }
    std::fs::write(&spec.hosts_file, &spec.hosts).expect("write the hosts file");
    run(&[
        "mount",
        "--bind",
        spec.hosts_file.to_str().expect("a UTF-8 path"),
        "/etc/hosts",
    ]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        for (listen, socket) in &spec.outward {
            let listener = TcpListener::bind(listen)
                .await
                .unwrap_or_else(|e| panic!("bind {listen} in the namespace: {e}"));
            let socket = socket.clone();
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let socket = socket.clone();
                    let _ = inbound.set_nodelay(true);
                    tokio::spawn(async move {
                        if let Ok(mut outbound) = UnixStream::connect(&socket).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                }
            });
        }
        for (socket, to) in &spec.inward {
            crate::fakes::forward_unix_to_tcp(socket, to.clone());
        }
        let mut children = Vec::new();
        for p in &spec.processes {
            let log = std::fs::File::create(&p.log).expect("create the process log");
            let child = Command::new("setpriv")
                .args(["--pdeathsig", "KILL", "--"])
                .arg(&p.bin)
                .args(&p.args)
                .envs(p.env.iter().map(|(k, v)| (k, v)))
                .stdout(log.try_clone().expect("clone the log handle"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("start {}: {e}", p.bin.display()));
            children.push((p.bin.clone(), child));
        }
        let pids: Vec<String> = children.iter().map(|(_, c)| c.id().to_string()).collect();
        std::fs::write(&spec.pids, pids.join(" ")).expect("write the pids");
        let mut reported = vec![false; children.len()];
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            for (n, (bin, child)) in children.iter_mut().enumerate() {
                if !reported[n]
                    && let Ok(Some(status)) = child.try_wait()
                {
                    eprintln!("{} exited: {status}", bin.display());
                    reported[n] = true;
                }
            }
        }
    });
}
