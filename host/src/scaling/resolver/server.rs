//! The resolver's two listeners: the proxy (HTTP/1.1 and h2c with prior knowledge on one
//! port) and the admin server.
//!
//! | admin path | answer |
//! |---|---|
//! | `/healthz` | 200 while the process serves (liveness) |
//! | `/readyz` | 200 once ElasticServices, Services and EndpointSlices are listed; 503 before, and while shutting down |
//! | `/metrics` | Prometheus text format (see [`super::metrics`]) |
//!
//! On shutdown the resolver turns unready, stops accepting, and lets open connections (held
//! requests included) finish for up to the grace period.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use super::proxy::Resolver;

impl Resolver {
    /// Serves the proxy on `listener` until `shutdown` resolves, then waits up to `grace` for
    /// open connections to finish.
    ///
    /// # Errors
    /// None so far: accept errors (e.g. too many open files) are logged and retried.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
        grace: Duration,
    ) -> std::io::Result<()> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new());
        builder.http2().timer(TokioTimer::new());
        let graceful = GracefulShutdown::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("cannot accept a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let _ = stream.set_nodelay(true);
            let this = self.clone();
            let service = service_fn(move |req| {
                let this = this.clone();
                async move { Ok::<_, Infallible>(this.handle(req, peer).await) }
            });
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(%peer, "connection ended: {e}");
                }
            });
        }
        self.set_stopping();
        drop(listener);
        let open = graceful.count();
        tracing::info!(
            open,
            "shutting down: waiting up to {grace:?} for open connections"
        );
        if tokio::time::timeout(grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after {grace:?}; closing them");
        }
        Ok(())
    }

    /// The admin router (`/healthz`, `/readyz`, `/metrics`).
    pub fn admin_router(&self) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .route("/metrics", get(|| async { crate::metrics::encode() }))
            .with_state(self.clone())
    }

    /// Serves [`Resolver::admin_router`] on `listener` until the process ends.
    ///
    /// # Errors
    /// The server fails.
    pub async fn serve_admin(&self, listener: TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.admin_router()).await
    }
}

async fn readyz(State(resolver): State<Resolver>) -> (StatusCode, &'static str) {
    if resolver.is_stopping() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else if !resolver.catalog().is_synced() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "listing ElasticServices, Services and EndpointSlices\n",
        )
    } else {
        (StatusCode::OK, "ready\n")
    }
}

/// Binds `addr`, saying which flag to change when it is taken.
///
/// # Errors
/// The address cannot be bound.
pub async fn bind(addr: SocketAddr, flag: &str) -> anyhow::Result<TcpListener> {
    use anyhow::Context as _;
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({flag})"))
}
