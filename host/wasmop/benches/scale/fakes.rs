//! The servers both sides share, all on loopback or on unix sockets of the scratch directory:
//! a fake Prometheus answering each trigger's query from a table the benchmark changes, the
//! backend that plays every service's pods, and a forwarder from a unix socket to the API
//! server (for processes in a network namespace of their own, see `netns.rs`).

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// The body of every backend answer.
pub const HELLO: &str = "hello from the backend";

type Answer = Arc<dyn Fn(&Request<Incoming>) -> String + Send + Sync>;

/// Serves HTTP/1.1 (kept alive) on `io`, answering every request 200 with `answer`'s body.
async fn serve_connection<I>(io: I, answer: Answer, content_type: &'static str)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let body = answer(&req);
        async move {
            Ok::<_, Infallible>(
                Response::builder()
                    .header("content-type", content_type)
                    .body(Full::new(Bytes::from(body)))
                    .expect("a response"),
            )
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .await;
}

fn serve_tcp(listener: TcpListener, answer: Answer, content_type: &'static str) {
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(serve_connection(stream, answer.clone(), content_type));
        }
    });
}

fn serve_unix(path: &Path, answer: Answer, content_type: &'static str) {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).expect("bind a unix socket");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream, answer.clone(), content_type));
        }
    });
}

/// Prometheus's instant-query API, faked: the health query of both operators
/// (`min_over_time(...)`) answers 1; a query naming metric `load_<side>_<i>` answers 5 while
/// that metric is busy and 0 otherwise (the threshold is 1).
pub struct FakePrometheus {
    /// `127.0.0.1:PORT`.
    pub addr: SocketAddr,
    /// The same API on a unix socket.
    pub unix: PathBuf,
    busy: Arc<Mutex<HashSet<String>>>,
    queries: Arc<AtomicU64>,
}

impl FakePrometheus {
    /// Starts it on a free loopback port and on `dir/prometheus.sock`.
    ///
    /// # Panics
    /// When neither can be bound.
    pub async fn start(dir: &Path) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake Prometheus");
        let addr = listener.local_addr().expect("its address");
        let busy: Arc<Mutex<HashSet<String>>> = Arc::default();
        let queries = Arc::new(AtomicU64::new(0));
        let (table, count) = (busy.clone(), queries.clone());
        let answer: Answer = Arc::new(move |req| {
            count.fetch_add(1, Ordering::Relaxed);
            let query = req.uri().query().unwrap_or_default();
            let value = if query.contains("min_over_time") {
                "1"
            } else {
                match metric_in(query) {
                    Some(m) if table.lock().unwrap_or_else(|e| e.into_inner()).contains(m) => "5",
                    _ => "0",
                }
            };
            serde_json::json!({"status": "success", "data": {"resultType": "vector",
                "result": [{"metric": {}, "value": [1_795_424_400, value]}]}})
            .to_string()
        });
        serve_tcp(listener, answer.clone(), "application/json");
        let unix = crate::common::socket_path(dir, "prometheus.sock");
        serve_unix(&unix, answer, "application/json");
        Self {
            addr,
            unix,
            busy,
            queries,
        }
    }

    /// `http://127.0.0.1:PORT`, the triggers' `serverAddress`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Makes `metric` busy (votes up) or idle.
    pub fn set_busy(&self, metric: &str, busy: bool) {
        let mut table = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        if busy {
            table.insert(metric.to_owned());
        } else {
            table.remove(metric);
        }
    }

    /// Queries answered so far.
    pub fn queries(&self) -> u64 {
        self.queries.load(Ordering::Relaxed)
    }
}

/// The `load_...` metric name in a URL-encoded query string (letters, digits and `_` are never
/// encoded).
fn metric_in(query: &str) -> Option<&str> {
    let start = query.find("load_")?;
    let rest = &query[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The backend: answers `200 hello from the backend` to every request, at the loopback address
/// wasmop's resolver dials for each kwok pod (`10.a.b.c` → `127.a.b.c`, `--dial-prefix-map`)
/// and on a unix socket (for KubeElasti's resolver, through `netns.rs`).
pub struct Backend {
    /// The target port of every Service.
    pub port: u16,
    /// The unix socket.
    pub unix: PathBuf,
    answer: Answer,
    /// The loopback addresses listened on so far: kwok gives a later pod an IP of an earlier
    /// one, whose listener then serves it.
    bound: Arc<Mutex<HashSet<String>>>,
}

impl Backend {
    /// Starts the unix socket `dir/backend.sock`; pods get their listeners from
    /// [`Backend::follow_pods`].
    ///
    /// # Panics
    /// When the socket cannot be bound.
    pub fn start(dir: &Path) -> Self {
        let answer: Answer = Arc::new(|_| HELLO.to_owned());
        let unix = crate::common::socket_path(dir, "backend.sock");
        serve_unix(&unix, answer.clone(), "text/plain");
        Self {
            port: wasmop_tests::free_port(),
            unix,
            answer,
            bound: Arc::default(),
        }
    }

    /// Listens on `127.a.b.c:PORT` for every pod labelled `bench-backend=true` in `ns` as soon
    /// as kwok gives it IP `10.a.b.c`, until the returned task is aborted (the listeners stay,
    /// for later pods that get the same IP).
    pub fn follow_pods(&self, client: Client, ns: &str) -> tokio::task::JoinHandle<()> {
        let (answer, port, ns) = (self.answer.clone(), self.port, ns.to_owned());
        let bound = self.bound.clone();
        tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, &ns);
            let config = watcher::Config::default().labels("bench-backend=true");
            let mut pods =
                std::pin::pin!(watcher(pods, config).default_backoff().applied_objects());
            while let Some(pod) = pods.next().await {
                let Some(ip) = pod.ok().and_then(|p| p.status?.pod_ip) else {
                    continue;
                };
                let Some(local) = ip.strip_prefix("10.").map(|rest| format!("127.{rest}")) else {
                    continue;
                };
                if !bound
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(local.clone())
                {
                    continue;
                }
                match TcpListener::bind((local.as_str(), port)).await {
                    Ok(listener) => serve_tcp(listener, answer.clone(), "text/plain"),
                    Err(e) => eprintln!("backend: cannot bind {local}:{port}: {e}"),
                }
            }
        })
    }
}

/// Forwards every connection to unix socket `path` to the TCP address `to` (on loopback).
///
/// # Panics
/// When the socket cannot be bound.
pub fn forward_unix_to_tcp(path: &Path, to: String) {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).expect("bind a unix socket");
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = to.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(&to).await {
                    let _ = outbound.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

/// Opens a connection to unix socket `path`.
pub async fn connect_unix(path: &Path) -> std::io::Result<UnixStream> {
    UnixStream::connect(path).await
}
