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
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use futures::FutureExt as _;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::proxy::Resolver;

/// The HTTP/2 connection preface (RFC 9113 §3.4): what an h2c client with prior knowledge
/// sends first.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the first bytes of a connection say it speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sniffed {
    /// They differ from the HTTP/2 preface: HTTP/1.
    Http1,
    /// The preface, or a part of it so far: left to the auto-detecting builder.
    MaybeH2,
    /// The client closed without sending anything.
    Closed,
}

/// Looks at the first bytes of `stream` without consuming them (`MSG_PEEK`).
async fn sniff(stream: &TcpStream) -> std::io::Result<Sniffed> {
    let mut first = [0u8; H2_PREFACE.len()];
    let n = stream.peek(&mut first).await?;
    Ok(if n == 0 {
        Sniffed::Closed
    } else if first[..n] == H2_PREFACE[..n] {
        Sniffed::MaybeH2
    } else {
        Sniffed::Http1
    })
}

impl Resolver {
    /// Serves the proxy on `listener` until `shutdown` resolves, then waits up to `grace` for
    /// open connections to finish.
    ///
    /// HTTP/1.1 and h2c (prior knowledge) share the port. The first bytes of a connection are
    /// peeked at, not read: HTTP/1 connections go straight to hyper's HTTP/1 server, which reads
    /// the request head in one go into its 8 KiB buffer, and their task holds only what HTTP/1
    /// needs. Connections that start with (a part of) the HTTP/2 preface go to hyper_util's
    /// auto-detecting builder. Serving HTTP/1 through that builder too cost each held request
    /// 3 KiB (glibc malloc) to 14 KiB (jemalloc) more resident memory (docs/performance.md,
    /// resolver benchmark): it reads the first 24 bytes itself and hands them back as a read of their
    /// own, after which hyper grows its read buffer from 8 to 16 KiB by copying it whole, and
    /// its connection task is sized for HTTP/2 as well (3.5 KiB instead of 1.1 KiB).
    ///
    /// # Errors
    /// None so far: accept errors (e.g. too many open files) are logged and retried.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
        grace: Duration,
    ) -> std::io::Result<()> {
        let mut http1 = http1::Builder::new();
        http1.timer(TokioTimer::new());
        let mut auto = auto::Builder::new(TokioExecutor::new());
        auto.http1().timer(TokioTimer::new());
        auto.http2().timer(TokioTimer::new());
        let builders = Arc::new((http1, auto));
        let graceful = GracefulShutdown::new();
        // Ends the connections still waiting for their first bytes when shutting down.
        let (stop, stopped) = watch::channel(());
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
            // The handler's future as it is (no async block around it, which would keep a
            // second copy of the request): it is the state of a held request.
            let service =
                service_fn(move |req| this.clone().handle(req, peer).map(Ok::<_, Infallible>));
            let (builders, watcher, mut stopped) =
                (builders.clone(), graceful.watcher(), stopped.clone());
            tokio::spawn(async move {
                let sniffed = tokio::select! {
                    sniffed = sniff(&stream) => sniffed,
                    _ = stopped.changed() => return,
                };
                drop(stopped);
                let (http1, auto) = &*builders;
                let io = TokioIo::new(stream);
                let ended: Result<(), Box<dyn std::error::Error + Send + Sync>> = match sniffed {
                    Ok(Sniffed::Http1) => watcher
                        .watch(http1.serve_connection(io, service))
                        .await
                        .map_err(Into::into),
                    // Boxed: only HTTP/1 connections are many, so they alone set the task's size.
                    Ok(Sniffed::MaybeH2) => {
                        Box::pin(watcher.watch(auto.serve_connection(io, service))).await
                    }
                    Ok(Sniffed::Closed) => Ok(()),
                    Err(e) => {
                        tracing::debug!(%peer, "connection ended before its first byte: {e}");
                        Ok(())
                    }
                };
                if let Err(e) = ended {
                    tracing::debug!(%peer, "connection ended: {e}");
                }
            });
        }
        self.set_stopping();
        drop(listener);
        stop.send_replace(());
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
            .route(
                "/metrics",
                get(|| async { wasmop_kernel::metrics::encode() }),
            )
            .with_state(self.clone())
    }

    /// Serves [`Resolver::admin_router`] on `listener` until the process ends.
    ///
    /// # Errors
    /// The server fails.
    pub(crate) async fn serve_admin(&self, listener: TcpListener) -> std::io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::{H2_PREFACE, Sniffed, sniff};
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    /// A connected pair on loopback: (client, server side).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn the_first_bytes_so_far_tell_the_protocol_and_stay_unread() {
        let (mut client, server) = pair().await;
        client.write_all(b"G").await.unwrap();
        assert_eq!(sniff(&server).await.unwrap(), Sniffed::Http1);

        let (mut client, server) = pair().await;
        client.write_all(&H2_PREFACE[..10]).await.unwrap();
        assert_eq!(sniff(&server).await.unwrap(), Sniffed::MaybeH2);
        client.write_all(&H2_PREFACE[10..]).await.unwrap();
        let mut all = [0u8; 24];
        let mut read = 0;
        while read < all.len() {
            server.readable().await.unwrap();
            match server.try_read(&mut all[read..]) {
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(&all, H2_PREFACE, "peeking consumed nothing");

        let (client, server) = pair().await;
        drop(client);
        assert_eq!(sniff(&server).await.unwrap(), Sniffed::Closed);
    }
}
