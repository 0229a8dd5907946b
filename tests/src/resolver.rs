//! Helpers for the resolver's tests: a `wasmop resolver` process under its own RBAC, and an
//! HTTP backend that plays the workload's pod on a loopback address.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::{
    Process, dump_dir, eventually, free_port, http_get, install_crds, service_account_kubeconfig,
};

/// The body of the backend's answers outside `/echo`.
pub const HELLO: &str = "hello from the backend";

/// Applies the resolver's ServiceAccount and RBAC, which the rendered chart in
/// `deploy/manifests` holds next to the operator's (idempotent).
pub fn install_resolver_rbac() {
    super::install_operator_rbac();
}

/// `wasmop resolver` started for one test as ServiceAccount `wasmop-system/wasmop-resolver`
/// (the RBAC of the chart, rendered in deploy/manifests), watching only the test's namespace, with its proxy
/// and admin servers on free loopback ports. Killed on drop.
pub struct ResolverProcess {
    /// The process (its log is printed when the test fails).
    pub process: Process,
    /// `127.0.0.1:PORT` of the proxy.
    pub proxy: SocketAddr,
    /// `127.0.0.1:PORT` of the admin server.
    pub admin: String,
}

impl ResolverProcess {
    /// Installs the CRDs and the resolver's RBAC and starts `bin`
    /// (`env!("CARGO_BIN_EXE_wasmop")`) with `--watch-namespace ns` and `extra_args`; returns
    /// once `/readyz` answers 200.
    ///
    /// # Panics
    /// When the resolver exits or is not ready within 60 s.
    pub async fn start(bin: &str, ns: &str, extra_args: &[&str]) -> Self {
        install_crds();
        install_resolver_rbac();
        let kubeconfig = service_account_kubeconfig("wasmop-system", "wasmop-resolver");
        let proxy: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("an address");
        let admin = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(bin);
        cmd.args(["resolver", "--watch-namespace", ns, "--listen"])
            .arg(proxy.to_string())
            .args([
                "--admin-listen",
                &admin,
                "--identity",
                &format!("resolver-{ns}"),
            ])
            .args(extra_args)
            .env("KUBECONFIG", &kubeconfig)
            .env("WASMOP_LOG", "info,wasmop=debug");
        let log = dump_dir().join(format!("{ns}-resolver.log"));
        let mut process = Process::spawn(cmd, log);
        let ready_addr = admin.clone();
        eventually(
            "the resolver to be ready",
            Duration::from_secs(60),
            async || {
                assert!(process.alive(), "the resolver exited:\n{}", process.log());
                http_get(&ready_addr, "/readyz").filter(|(s, _)| *s == 200)
            },
        )
        .await;
        Self {
            process,
            proxy,
            admin,
        }
    }

    /// The environment the process runs with now (`/proc/PID/environ`), as `NAME=value`.
    ///
    /// # Panics
    /// When it cannot be read.
    pub fn environment(&self) -> Vec<String> {
        self.process.environment()
    }

    /// Its `/metrics` text (empty when it does not answer).
    pub fn metrics(&self) -> String {
        http_get(&self.admin, "/metrics").map_or_else(String::new, |(_, body)| body)
    }

    /// The `wasmop_resolver_held_requests` value of `service` in `ns` (0 when absent).
    pub fn held(&self, ns: &str, service: &str) -> u64 {
        let prefix =
            format!("wasmop_resolver_held_requests{{namespace=\"{ns}\",service=\"{service}\"}} ");
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// Starts an HTTP backend (HTTP/1.1 and h2c) on `addr` (port 0: any) and returns its address.
/// `/echo` streams the request body back, trailers included; any other path answers
/// [`HELLO`]. Every answer reports what arrived in headers: `x-seen-version`, `-method`,
/// `-uri`, `-host`, `-xff` (X-Forwarded-For), `-xfh` (X-Forwarded-Host), `-xfp`
/// (X-Forwarded-Proto) and `-custom` (X-Custom).
///
/// # Panics
/// When `addr` cannot be bound.
pub async fn start_backend(addr: &str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("cannot bind the test backend on {addr}: {e}"));
    let local = listener.local_addr().expect("a bound address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(
                        |req| async move { Ok::<_, Infallible>(answer(req)) },
                    );
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    local
}

type BackendBody = http_body_util::combinators::UnsyncBoxBody<Bytes, hyper::Error>;

fn answer(req: Request<Incoming>) -> Response<BackendBody> {
    let seen = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let builder = Response::builder()
        .header("x-seen-version", format!("{:?}", req.version()))
        .header("x-seen-method", req.method().as_str())
        .header("x-seen-uri", req.uri().to_string())
        .header("x-seen-host", seen("host"))
        .header("x-seen-xff", seen("x-forwarded-for"))
        .header("x-seen-xfh", seen("x-forwarded-host"))
        .header("x-seen-xfp", seen("x-forwarded-proto"))
        .header("x-seen-custom", seen("x-custom"));
    let body = if req.uri().path() == "/echo" {
        req.into_body().boxed_unsync()
    } else {
        Full::new(Bytes::from(HELLO))
            .map_err(|never| match never {})
            .boxed_unsync()
    };
    builder.body(body).expect("a valid response")
}
