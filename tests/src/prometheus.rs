//! A real Prometheus server for the scaling tests, on loopback, scraping a test exporter whose
//! metrics the test sets.
//!
//! The binary comes from the Debian package `prometheus`, unpacked by
//! `scripts/setup.d/30-prometheus.sh`: `$WASMOP_PROMETHEUS`, else `prometheus` on `PATH`, else the
//! newest copy under `${WASMOP_CACHE:-~/.cache/wasmop}/prometheus-*/usr/bin/prometheus`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::{Process, dump_dir, eventually, free_port, http_get};

/// The scrape job of the exporter; `up{job="wasmop-exporter"}` is the `uptimeFilter` to use.
pub const EXPORTER_JOB: &str = "wasmop-exporter";

/// An HTTP server on `127.0.0.1` answering `GET /metrics` with a text the test sets, in the
/// Prometheus exposition format. Its thread lives as long as the process.
pub struct Exporter {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    body: Arc<Mutex<String>>,
}

impl Exporter {
    /// Starts the exporter with an empty body.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the exporter");
        let addr = listener.local_addr().expect("exporter address").to_string();
        let body = Arc::new(Mutex::new(String::new()));
        let served = body.clone();
        serve(listener, None, Arc::default(), move |_| {
            let text = served.lock().unwrap_or_else(|e| e.into_inner()).clone();
            ("text/plain; version=0.0.4", text)
        });
        Self { addr, body }
    }

    /// Replaces the whole exposition text.
    pub fn set_body(&self, text: impl Into<String>) {
        *self.body.lock().unwrap_or_else(|e| e.into_inner()) = text.into();
    }

    /// Exposes one gauge `name` with `value`.
    pub fn set_gauge(&self, name: &str, value: f64) {
        self.set_body(format!("# TYPE {name} gauge\n{name} {value}\n"));
    }
}

/// Prometheus's instant-query API on `127.0.0.1` for plugin calls without a Prometheus process:
/// every request is answered with a vector of one sample, `1` for the health query of the
/// `scaling-prometheus` plugin (`min_over_time(...)`) and `value` for any other. Connections
/// are kept alive, as Prometheus keeps them; its threads live as long as the process. While
/// [`QueryStub::set_silent`] is on, it reads requests and answers none (a Prometheus that
/// times out).
pub struct QueryStub {
    /// `127.0.0.1:PORT`, the `serverAddress` authority and the grant.
    pub addr: String,
    served: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    /// Whether requests go unanswered, and the wake-up for the held ones when that ends.
    silent: Arc<(Mutex<bool>, Condvar)>,
}

impl QueryStub {
    /// Starts the stub.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn start(value: &'static str) -> Self {
        Self::start_with(value, None)
    }

    /// Starts the stub behind TLS with `config` (e.g. [`crate::tls::TestCa::server_config`]).
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn start_tls(value: &'static str, config: Arc<rustls::ServerConfig>) -> Self {
        Self::start_with(value, Some(config))
    }

    fn start_with(value: &'static str, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the query stub");
        let addr = listener.local_addr().expect("stub address").to_string();
        let served = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let silent = Arc::new((Mutex::new(false), Condvar::new()));
        let (count, quiet) = (served.clone(), silent.clone());
        serve(listener, tls, connections.clone(), move |request| {
            let (on, changed) = &*quiet;
            drop(
                changed
                    .wait_while(on.lock().unwrap_or_else(|e| e.into_inner()), |on| *on)
                    .unwrap_or_else(|e| e.into_inner()),
            );
            count.fetch_add(1, Ordering::Relaxed);
            let v = if request.contains("min_over_time") {
                "1"
            } else {
                value
            };
            let body = serde_json::json!({
                "status": "success",
                "data": {
                    "resultType": "vector",
                    "result": [{"metric": {}, "value": [1_795_424_400, v]}],
                },
            });
            ("application/json", body.to_string())
        });
        Self {
            addr,
            served,
            connections,
            silent,
        }
    }

    /// Turns silence on (requests are read and not answered until it is turned off) or off.
    pub fn set_silent(&self, on: bool) {
        let (silent, changed) = &*self.silent;
        *silent.lock().unwrap_or_else(|e| e.into_inner()) = on;
        changed.notify_all();
    }

    /// How many queries it has answered.
    pub fn served(&self) -> usize {
        self.served.load(Ordering::Relaxed)
    }

    /// How many connections it has accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }
}

/// How long a connection of [`serve`] may stay idle: longer than the plugin host's pool keeps
/// an idle connection, so that the client always closes first.
const IDLE: Duration = Duration::from_secs(120);

/// Serves `listener` on a thread that lives as long as the process, each connection on a
/// thread of its own (behind TLS with `tls`): reads request heads (no bodies) and answers each
/// `200` with the content type and body `answer` gives for it, keeping the connection open for
/// the next; counts the connections in `connections`.
fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    connections: Arc<AtomicUsize>,
    answer: impl Fn(&str) -> (&'static str, String) + Send + Sync + 'static,
) {
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            connections.fetch_add(1, Ordering::Relaxed);
            let (answer, tls) = (answer.clone(), tls.clone());
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(IDLE));
                let _ = conn.set_nodelay(true);
                match tls.map(rustls::ServerConnection::new) {
                    None => answer_requests(conn, &*answer),
                    Some(Ok(session)) => {
                        answer_requests(rustls::StreamOwned::new(session, conn), &*answer);
                    }
                    Some(Err(_)) => {}
                }
            });
        }
    });
}

/// Answers the requests of one connection until the client closes it or stays idle past
/// [`IDLE`].
fn answer_requests(mut conn: impl Read + Write, answer: &dyn Fn(&str) -> (&'static str, String)) {
    let mut buf = [0u8; 4096];
    let mut pending = Vec::new();
    loop {
        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
            continue;
        };
        let head: Vec<u8> = pending.drain(..end + 4).collect();
        let (content_type, body) = answer(&String::from_utf8_lossy(&head));
        // One write, as a server that buffers its response sends it.
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if conn.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// A Prometheus server on `127.0.0.1` scraping one exporter every second; killed on drop.
pub struct Prometheus {
    /// `127.0.0.1:PORT` of its HTTP API.
    pub addr: String,
    /// The process (its log is printed when the test fails).
    pub process: Process,
}

/// The Prometheus binary (see the module docs).
///
/// # Panics
/// When none is found: run `scripts/setup.sh`.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("WASMOP_PROMETHEUS") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("prometheus"))
            .find(|p| p.is_file())
    }) {
        return p;
    }
    let cache = std::env::var_os("WASMOP_CACHE").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache")
                .join("wasmop")
        },
        PathBuf::from,
    );
    let mut found: Vec<PathBuf> = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("prometheus-"))
        .map(|e| e.path().join("usr/bin/prometheus"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "no Prometheus binary: run scripts/setup.sh (scripts/setup.d/30-prometheus.sh) or set WASMOP_PROMETHEUS"
        )
    })
}

impl Prometheus {
    /// Starts Prometheus scraping `exporter` (job [`EXPORTER_JOB`]) with scrape and rule
    /// evaluation intervals of 1 s, and waits until it is ready and has scraped the exporter
    /// once.
    ///
    /// # Panics
    /// When it does not start or scrape within 60 s.
    pub async fn start(exporter: &Exporter) -> Self {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let dir = dump_dir().join(format!("prometheus-{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the Prometheus directory");
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 1s}}\n\
             scrape_configs:\n  - job_name: {EXPORTER_JOB}\n    static_configs: [{{targets: ['{}']}}]\n",
            exporter.addr
        );
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write prometheus.yml");
        let mut cmd = Command::new(binary());
        cmd.arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn");
        let mut process = Process::spawn(cmd, dir.join("prometheus.log"));
        let query = format!("/api/v1/query?query=up%7Bjob%3D%22{EXPORTER_JOB}%22%7D");
        eventually(
            "Prometheus to scrape the exporter",
            Duration::from_secs(60),
            async || {
                assert!(process.alive(), "Prometheus exited:\n{}", process.log());
                http_get(&addr, &query).filter(|(s, body)| *s == 200 && body.contains("\"1\""))
            },
        )
        .await;
        Self { addr, process }
    }

    /// `http://127.0.0.1:PORT`, the `serverAddress` of a trigger.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `plugins.yaml` registry whose default scaler, `prometheus-test`, is the builtin
    /// `scaling-prometheus` granted this server's address, with 5 s per vote.
    pub fn registry(&self) -> String {
        format!(
            "plugins:\n  - name: prometheus-test\n    hook: scaling\n    source: builtin://scaling-prometheus\n    limits: {{timeoutMs: 5000}}\n    grants: {{allowedHosts: [\"{}\"]}}\ndefaults: {{scaling: prometheus-test}}\n",
            self.addr
        )
    }

    /// The value of an instant query, `None` when it has no single sample yet.
    pub fn query(&self, promql: &str) -> Option<f64> {
        let encoded: String = promql
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let (status, body) = http_get(&self.addr, &format!("/api/v1/query?query={encoded}"))?;
        if status != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        match v["data"]["result"].as_array()?.as_slice() {
            [one] => one["value"][1].as_str()?.parse().ok(),
            _ => None,
        }
    }
}
