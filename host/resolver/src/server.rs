//! The resolver's two listeners: the proxy (HTTP/1.1 and h2c with prior knowledge on one
//! port) and the admin server.
//!
//! | admin path | answer |
//! |---|---|
//! | `/healthz` | 200 while the process serves (liveness) |
//! | `/readyz` | 200 once ElasticServices, Services and EndpointSlices are listed; 503 before, and while shutting down |
//! | `/metrics` | Prometheus text format (see [`super::metrics`]) |
//!
//! A connection gets `--header-read-timeout` for each request head: one that sends nothing,
//! stalls in a head, or sits idle between requests (HTTP/1 keep-alive, h2c without an open
//! stream) that long is closed. HTTP/1 requests with ambiguous framing get 400
//! (host/resolver/src/framing.rs).
//!
//! On shutdown the resolver turns unready, stops accepting, and lets open connections finish
//! for up to the grace period: a held request is still forwarded if its service turns ready.
//! Then every request still held is answered 503 with `Retry-After`, and connections still open
//! after [`SHUTDOWN_DRAIN`] more are closed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use bytes::Bytes;
use futures::FutureExt as _;
use hyper::body::{Body, Frame, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use super::framing::{Framing, H2_PREFACE};
use super::proxy::{Phase, ProxyBody, Resolver};

/// How long connections may take after the grace period to write the answers of the requests
/// that were still held then.
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(2);

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

/// The two connection builders: HTTP/1 only, and auto-detecting (h2c).
type Builders = (http1::Builder, auto::Builder<TokioExecutor>);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The requests open on one auto-detected (h2c) connection: (open now, opened in all). hyper
/// has no idle timeout for HTTP/2; this is what the connection's idle timer watches.
#[derive(Clone)]
struct Activity(Arc<watch::Sender<(usize, u64)>>);

/// One open request of an [`Activity`], until its response body ends or is dropped.
struct Open(Activity);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.0.send_modify(|(open, _)| *open -= 1);
    }
}

impl Activity {
    fn new() -> Self {
        Self(Arc::new(watch::Sender::new((0, 0))))
    }

    fn open(&self) -> Open {
        self.0.send_modify(|(open, opened)| {
            *open += 1;
            *opened += 1;
        });
        Open(self.clone())
    }

    /// Resolves once no request has been open for `timeout`.
    async fn idle(self, timeout: Duration) {
        let mut rx = self.0.subscribe();
        loop {
            let Ok(opened) = rx.wait_for(|(open, _)| *open == 0).await.map(|r| r.1) else {
                return;
            };
            let busy =
                tokio::time::timeout(timeout, rx.wait_for(|(open, n)| *open > 0 || *n != opened))
                    .await;
            if busy.is_err() {
                return;
            }
        }
    }
}

/// A response body that keeps its request counted as open on its connection.
struct Tracked {
    body: ProxyBody,
    _open: Open,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Serves `conn` until it ends: asks it to close once its requests are answered when the
/// shutdown begins or an `idle` timer resolves, drops it when a second `idle` timer resolves
/// after that (no request opened in between), and when the shutdown closes connections.
async fn drive<C, E, I>(
    conn: C,
    graceful_shutdown: fn(Pin<&mut C>),
    mut phase: watch::Receiver<Phase>,
    mut idle: impl FnMut() -> I,
) -> Result<(), BoxError>
where
    C: Future<Output = Result<(), E>>,
    E: Into<BoxError>,
    I: Future<Output = ()>,
{
    let mut conn = std::pin::pin!(conn);
    let mut idle_timer = std::pin::pin!(idle());
    let mut closing = false;
    let mut idle_closing = false;
    loop {
        tokio::select! {
            ended = conn.as_mut() => return ended.map_err(Into::into),
            () = idle_timer.as_mut() => {
                if std::mem::replace(&mut idle_closing, true) {
                    tracing::debug!("closing an idle connection that did not close when asked");
                    return Ok(());
                }
                tracing::debug!("asking an idle connection to close");
                if !std::mem::replace(&mut closing, true) {
                    graceful_shutdown(conn.as_mut());
                }
                idle_timer.set(idle());
            }
            changed = phase.changed() => {
                let now = *phase.borrow_and_update();
                if changed.is_err() || now >= Phase::Closed {
                    return Ok(());
                }
                if now >= Phase::Stopping && !std::mem::replace(&mut closing, true) {
                    graceful_shutdown(conn.as_mut());
                }
            }
        }
    }
}

impl Resolver {
    /// Serves the proxy on `listener` until `shutdown` resolves, then lets open connections
    /// finish for up to `grace`, answers the requests still held 503 with `Retry-After`, and
    /// closes what is still open [`SHUTDOWN_DRAIN`] later.
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
        let header_read_timeout = self.config().header_read_timeout;
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout);
        let mut auto = auto::Builder::new(TokioExecutor::new());
        auto.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout);
        auto.http2().timer(TokioTimer::new());
        let builders = Arc::new((http1, auto));
        // Each connection's task holds a sender: all are gone once every connection has ended.
        let (open, mut all_closed) = mpsc::channel::<Infallible>(1);
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
            let (this, builders, open) = (self.clone(), builders.clone(), open.clone());
            tokio::spawn(async move {
                this.connection(stream, peer, &builders).await;
                drop(open);
            });
        }
        self.set_phase(Phase::Stopping);
        drop(listener);
        let connections = open.strong_count() - 1;
        drop(open);
        tracing::info!(
            connections,
            "shutting down: waiting up to {grace:?} for open connections"
        );
        let mut closed = std::pin::pin!(all_closed.recv());
        if tokio::time::timeout(grace, &mut closed).await.is_err() {
            tracing::info!(
                held = self.queues().held_total(),
                "grace period over: answering the requests still held with 503"
            );
            self.set_phase(Phase::Answering);
            if tokio::time::timeout(SHUTDOWN_DRAIN, &mut closed)
                .await
                .is_err()
            {
                tracing::warn!(
                    "connections still open {SHUTDOWN_DRAIN:?} after the grace period; closing them"
                );
            }
        }
        self.set_phase(Phase::Closed);
        Ok(())
    }

    /// Serves one accepted connection until it ends or the shutdown closes it.
    async fn connection(self, stream: TcpStream, peer: SocketAddr, builders: &Builders) {
        let mut phase = self.phase();
        let header_read_timeout = self.config().header_read_timeout;
        let sniffed = tokio::select! {
            sniffed = tokio::time::timeout(header_read_timeout, sniff(&stream)) => sniffed,
            // Connections still waiting for their first bytes end at once.
            _ = phase.wait_for(|p| *p >= Phase::Stopping) => return,
        };
        let (http1, auto) = builders;
        let ended = match sniffed {
            Ok(Ok(Sniffed::Http1)) => {
                // The handler's future as it is (no async block around it, which would keep a
                // second copy of the request): it is the state of a held request.
                let service =
                    service_fn(move |req| self.clone().handle(req, peer).map(Ok::<_, Infallible>));
                let io = TokioIo::new(Framing::new(stream));
                // hyper's header read timeout closes idle and stalled HTTP/1 connections.
                let conn = http1.serve_connection(io, service);
                drive(
                    conn,
                    http1::Connection::graceful_shutdown,
                    phase,
                    std::future::pending::<()>,
                )
                .await
            }
            // Boxed: only HTTP/1 connections are many, so they alone set the task's size.
            Ok(Ok(Sniffed::MaybeH2)) => {
                let activity = Activity::new();
                let counted = activity.clone();
                let service = service_fn(move |req| {
                    let open = counted.open();
                    self.clone().handle(req, peer).map(move |response| {
                        Ok::<_, Infallible>(response.map(|body| Tracked { body, _open: open }))
                    })
                });
                let io = TokioIo::new(Framing::new(stream));
                let conn = auto.serve_connection(io, service);
                Box::pin(drive(
                    conn,
                    auto::Connection::graceful_shutdown,
                    phase,
                    || activity.clone().idle(header_read_timeout),
                ))
                .await
            }
            Ok(Ok(Sniffed::Closed)) => Ok(()),
            Ok(Err(e)) => {
                tracing::debug!(%peer, "connection ended before its first byte: {e}");
                Ok(())
            }
            Err(_) => {
                tracing::debug!(
                    %peer,
                    "closing a connection that sent nothing within {header_read_timeout:?} (--header-read-timeout)"
                );
                Ok(())
            }
        };
        if let Err(e) = ended {
            tracing::debug!(%peer, "connection ended: {e}");
        }
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
