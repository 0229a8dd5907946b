//! Resolver benchmark: what the scale-from-zero data plane costs, on loopback only.
//!
//! The resolver runs in-process with its catalog fed by hand (as the EndpointSlice watch feeds
//! it), so the figures are the resolver's own, without the API server's watch latency.
//!
//! 1. **Wake-up latency.** A request is held for a service at zero; then its private Service's
//!    EndpointSlice gets a ready endpoint. Measured: from that catalog update to the backend
//!    reading the first byte of the forwarded request (a new connection each round, as to a new
//!    pod). p50/p99 over [`WAKE_ROUNDS`] rounds. Target: p99 under 50 ms (upstream re-checks
//!    readiness every 3–5 s).
//! 2. **10,000 held requests across 100 services.** A child process (this binary again) opens
//!    [`HELD_REQUESTS`] HTTP/1.1 connections, one request each, to [`HELD_SERVICES`] services
//!    at zero and serves as their backend. Measured in the resolver's process: resident memory
//!    with all of them held (target under 128 MiB), then every service is made ready at once
//!    and the child counts the answers: lost = sent − 200s (target 0), and the time until the
//!    last answer.
//! 3. **Warm-path overhead.** Sequential requests on one keep-alive HTTP/1.1 connection,
//!    straight to a backend and through the resolver to the same backend, in the same run:
//!    p50, p99 and mean per request, and the ratio resolver/direct.
//!
//! The benchmark runs on the `wasmop` binary's allocator, jemalloc (its own
//! `#[global_allocator]` below), and it starts itself again under the options `wasmop resolver`
//! runs with (`wasmop_resolver::malloc`), as the resolver does. Resident memory depends on both: jemalloc leaves
//! the untouched pages of a held connection's buffers out of RSS, and the resolver's options
//! return freed pages at once, so section 2b does not start on what 2a left behind.
//!
//! Run with `cargo bench -p wasmop-resolver --bench resolver` (about half a minute once
//! built). Every address is on 127.0.0.0/8; loops are bounded in count and time. Figures depend on the
//! machine and on whatever else runs on it; the header prints the CPU count and load.

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kube::runtime::watcher::Event;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use wasmop_resolver::{Catalog, ProxyConfig, Resolver};

/// Rounds of section 1.
const WAKE_ROUNDS: usize = 300;
/// Target: p99 from endpoint ready to the first forwarded byte.
const WAKE_P99_TARGET: Duration = Duration::from_millis(50);
/// Held requests of section 2.
const HELD_REQUESTS: usize = 10_000;
/// Services they are spread over.
const HELD_SERVICES: usize = 100;
/// Target: the resolver's resident memory with all of them held.
const HELD_RSS_TARGET_MIB: f64 = 128.0;
/// Held requests of one service forwarded at once in section 2 (keeps both processes well
/// under the file descriptor limit).
const RELEASE_CONCURRENCY: usize = 25;
/// Connections the child opens at a time.
const CONNECT_CONCURRENCY: usize = 256;
/// Requests of section 3, per path, after as many warm-up requests.
const WARM_REQUESTS: usize = 5_000;
/// Bound of every wait.
const DEADLINE: Duration = Duration::from_secs(120);
/// Set in the child process of section 2: the resolver's address.
#[path = "../tests/common/fixtures.rs"]
mod fixtures;

/// As the `wasmop` binary's (host/wasmop/src/main.rs).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const CHILD_ENV: &str = "WASMOP_BENCH_RESOLVER";
/// Set in the child process of section 2: `1` for h2c clients, `0` for HTTP/1.1.
const CHILD_H2C_ENV: &str = "WASMOP_BENCH_H2C";

const NS: &str = "bench";

fn main() {
    if let Err(e) =
        wasmop_resolver::malloc::reexec_with(wasmop_resolver::malloc::RESOLVER_MALLOC_CONF)
    {
        panic!("cannot start again with the resolver's allocator options: {e}");
    }
    if let Ok(resolver) = std::env::var(CHILD_ENV) {
        let h2c = std::env::var(CHILD_H2C_ENV).is_ok_and(|v| v == "1");
        child::main(resolver.parse().expect("the resolver's address"), h2c);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!("wasmop resolver benchmark");
    println!(
        "cpus: {}, load average at start: {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "n/a".into()),
    );
    rt.block_on(async {
        wake_latency().await;
        held_memory(true).await;
        held_memory(false).await;
        warm_overhead().await;
    });
}

/// A resolver on a free loopback port with its catalog listed (empty).
async fn resolver(config: ProxyConfig) -> (Resolver, SocketAddr) {
    let catalog = Catalog::new();
    catalog.mark_synced();
    let resolver = Resolver::new(
        config,
        catalog,
        Arc::new(fixtures::RecordedDemand::default()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    let serving = resolver.clone();
    tokio::spawn(async move {
        serving
            .serve(listener, std::future::pending(), Duration::from_secs(1))
            .await
    });
    (resolver, addr)
}

fn add_service(catalog: &Catalog, service: &str) {
    catalog.elastic_service_event(Event::Apply(fixtures::elastic_service(
        NS,
        service,
        json!({}),
        json!({}),
    )));
    catalog.service_event(Event::Apply(fixtures::public_service(NS, service)));
}

fn make_ready(catalog: &Catalog, service: &str, endpoint: SocketAddr) {
    catalog.endpoint_slice_event(Event::Apply(fixtures::ready_slice(NS, service, endpoint)));
}

/// An HTTP/1.1 connection to `addr`.
async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    sender
}

fn get(host: &str) -> Request<Empty<Bytes>> {
    Request::get("/")
        .header("host", host)
        .body(Empty::new())
        .expect("a request")
}

/// Waits (bounded) until `check` holds, looking every 200 µs.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}

/// Section 1.
async fn wake_latency() {
    println!("\n1. wake-up: endpoint ready -> first forwarded byte ({WAKE_ROUNDS} rounds)");
    let (resolver, addr) = resolver(ProxyConfig::default()).await;
    let catalog = resolver.catalog().clone();
    // A raw backend that stamps the first byte of each connection, then answers.
    let backend = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let backend_addr = backend.local_addr().expect("an address");
    let (stamps, mut stamped) = mpsc::unbounded_channel::<Instant>();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = backend.accept().await {
            let stamps = stamps.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut first = true;
                let mut seen = Vec::new();
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    if first {
                        let _ = stamps.send(Instant::now());
                        first = false;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        seen.clear();
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await;
                    }
                }
            });
        }
    });
    let mut latencies = Vec::with_capacity(WAKE_ROUNDS);
    for round in 0..WAKE_ROUNDS {
        let service = format!("wake{round}");
        add_service(&catalog, &service);
        let mut sender = connect(addr).await;
        let host = format!("{service}.{NS}");
        let response = tokio::spawn(async move { sender.send_request(get(&host)).await });
        until("the request to be held", || {
            resolver.queues().held(NS, &service) == 1
        })
        .await;
        let ready = Instant::now();
        make_ready(&catalog, &service, backend_addr);
        let first_byte = tokio::time::timeout(DEADLINE, stamped.recv())
            .await
            .expect("the backend got the request")
            .expect("a stamp");
        latencies.push(first_byte.duration_since(ready));
        let response = response.await.expect("joined").expect("an answer");
        assert_eq!(response.status(), 200);
    }
    latencies.sort();
    let p99 = percentile(&latencies, 0.99);
    println!(
        "   p50 {}   p99 {}   max {}   target p99 < {}: {}",
        ms(percentile(&latencies, 0.5)),
        ms(p99),
        ms(*latencies.last().expect("rounds")),
        ms(WAKE_P99_TARGET),
        verdict(p99 < WAKE_P99_TARGET)
    );
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

/// Section 2.
async fn held_memory(h2c: bool) {
    let how = if h2c {
        "h2c: one connection per service, the requests as streams"
    } else {
        "HTTP/1.1: one connection per request"
    };
    println!(
        "\n2{}. {HELD_REQUESTS} held requests across {HELD_SERVICES} services, {how} (clients and backend in a child process)",
        if h2c { 'a' } else { 'b' }
    );
    let config = ProxyConfig {
        release_concurrency: RELEASE_CONCURRENCY,
        timeout: DEADLINE,
        ..ProxyConfig::default()
    };
    let (resolver, addr) = resolver(config).await;
    let catalog = resolver.catalog().clone();
    for s in 0..HELD_SERVICES {
        add_service(&catalog, &format!("held{s}"));
    }
    let (before, _) = memory_mib();
    let mut child = Command::new(std::env::current_exe().expect("this binary"))
        .env(CHILD_ENV, addr.to_string())
        .env(CHILD_H2C_ENV, if h2c { "1" } else { "0" })
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the load child");
    let (lines_tx, mut lines) = mpsc::unbounded_channel::<String>();
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let backend: SocketAddr = lines
        .recv()
        .await
        .and_then(|l| l.strip_prefix("backend ")?.parse().ok())
        .expect("the child's backend address");
    let start = Instant::now();
    until("every request to be held", || {
        resolver.queues().held_total() == HELD_REQUESTS
    })
    .await;
    let filled = start.elapsed();
    let (held_rss, _) = memory_mib();
    let released = Instant::now();
    for s in 0..HELD_SERVICES {
        make_ready(&catalog, &format!("held{s}"), backend);
    }
    let done = tokio::time::timeout(DEADLINE, async {
        loop {
            let line = lines.recv().await.expect("the child's report");
            if let Some(rest) = line.strip_prefix("done ") {
                return rest.to_owned();
            }
        }
    })
    .await
    .expect("the child reports");
    let drained = released.elapsed();
    let _ = child.wait();
    let ok: usize = done
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("ok=")?.parse().ok())
        .unwrap_or(0);
    let (_, peak) = memory_mib();
    println!(
        "   held in {:.2} s; resolver RSS {before:.1} MiB before, {held_rss:.1} MiB with all held ({:.1} KiB per held request), peak {peak:.1} MiB",
        filled.as_secs_f64(),
        (held_rss - before) * 1024.0 / HELD_REQUESTS as f64,
    );
    println!(
        "   target RSS < {HELD_RSS_TARGET_MIB} MiB: {}",
        verdict(held_rss < HELD_RSS_TARGET_MIB)
    );
    println!(
        "   all services ready -> last answer in {:.2} s; answered 200: {ok}, lost: {}   target 0 lost: {}",
        drained.as_secs_f64(),
        HELD_REQUESTS - ok.min(HELD_REQUESTS),
        verdict(ok == HELD_REQUESTS)
    );
}

/// A keep-alive HTTP/1.1 and h2c backend answering `ok`.
async fn ok_backend(addr: &str) -> SocketAddr {
    let listener = TcpListener::bind(addr).await.expect("bind the backend");
    let local = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(
                        b"ok",
                    ))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(TokioIo::new(stream), service)
                .await;
            });
        }
    });
    local
}

async fn timed_requests(addr: SocketAddr, host: &str) -> Vec<Duration> {
    let mut sender = connect(addr).await;
    let mut times = Vec::with_capacity(WARM_REQUESTS);
    for i in 0..2 * WARM_REQUESTS {
        sender.ready().await.expect("the connection stays open");
        let start = Instant::now();
        let response = sender.send_request(get(host)).await.expect("an answer");
        let body = response.into_body().collect().await.expect("the body");
        let elapsed = start.elapsed();
        assert_eq!(body.to_bytes(), "ok");
        if i >= WARM_REQUESTS {
            times.push(elapsed);
        }
    }
    times.sort();
    times
}

/// Section 3.
async fn warm_overhead() {
    println!(
        "\n3. warm path: {WARM_REQUESTS} sequential keep-alive requests each (after as many warm-up requests)"
    );
    let backend = ok_backend("127.0.0.1:0").await;
    let (resolver, addr) = resolver(ProxyConfig::default()).await;
    add_service(resolver.catalog(), "warm");
    make_ready(resolver.catalog(), "warm", backend);
    let direct = timed_requests(backend, "warm.bench").await;
    let via = timed_requests(addr, "warm.bench").await;
    let mean = |t: &[Duration]| t.iter().sum::<Duration>() / u32::try_from(t.len()).unwrap_or(1);
    for (name, t) in [("direct", &direct), ("via resolver", &via)] {
        println!(
            "   {name:<13} p50 {}   p99 {}   mean {}",
            ms(percentile(t, 0.5)),
            ms(percentile(t, 0.99)),
            ms(mean(t))
        );
    }
    println!(
        "   ratio resolver/direct: p50 {:.2}x, mean {:.2}x",
        percentile(&via, 0.5).as_secs_f64() / percentile(&direct, 0.5).as_secs_f64(),
        mean(&via).as_secs_f64() / mean(&direct).as_secs_f64()
    );
}

/// The child process of section 2: the clients and the backend.
mod child {
    use super::*;

    pub fn main(resolver: SocketAddr, h2c: bool) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        rt.block_on(async move {
            let backend = ok_backend("127.0.0.2:0").await;
            println!("backend {backend}");
            let ok = Arc::new(AtomicUsize::new(0));
            let tasks = if h2c {
                h2c_requests(resolver, &ok).await
            } else {
                http1_requests(resolver, &ok).await
            };
            let _ = tokio::time::timeout(DEADLINE, futures::future::join_all(tasks)).await;
            println!("done ok={}", ok.load(Ordering::Relaxed));
        });
    }

    async fn count(
        ok: Arc<AtomicUsize>,
        answer: impl Future<Output = hyper::Result<Response<Incoming>>>,
    ) {
        if let Ok(response) = answer.await
            && response.status() == 200
            && response.into_body().collect().await.is_ok()
        {
            ok.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One connection per request.
    async fn http1_requests(
        resolver: SocketAddr,
        ok: &Arc<AtomicUsize>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let connecting = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
        let mut tasks = Vec::with_capacity(HELD_REQUESTS);
        for i in 0..HELD_REQUESTS {
            let (ok, connecting) = (ok.clone(), connecting.clone());
            let permit = connecting.acquire_owned().await.expect("open semaphore");
            tasks.push(tokio::spawn(async move {
                let mut sender = connect(resolver).await;
                drop(permit);
                let host = format!("held{}.{NS}", i % HELD_SERVICES);
                count(ok, sender.send_request(get(&host))).await;
            }));
        }
        tasks
    }

    /// One h2c connection per service, its requests multiplexed on it.
    async fn h2c_requests(
        resolver: SocketAddr,
        ok: &Arc<AtomicUsize>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::with_capacity(HELD_REQUESTS);
        for s in 0..HELD_SERVICES {
            let stream = TcpStream::connect(resolver).await.expect("connect");
            let (sender, conn) = hyper::client::conn::http2::handshake(
                hyper_util::rt::TokioExecutor::new(),
                TokioIo::new(stream),
            )
            .await
            .expect("an h2c handshake");
            tokio::spawn(conn);
            for _ in 0..HELD_REQUESTS / HELD_SERVICES {
                let (ok, mut sender) = (ok.clone(), sender.clone());
                let req = Request::get(format!("http://held{s}.{NS}/"))
                    .body(Empty::<Bytes>::new())
                    .expect("a request");
                tasks.push(tokio::spawn(async move {
                    count(ok, sender.send_request(req)).await;
                }));
            }
        }
        tasks
    }
}
