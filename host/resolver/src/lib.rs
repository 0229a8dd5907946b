//! `wasmop resolver`: the scale-from-zero data plane (KubeElasti's resolver, improved;
//! docs/resolver.md). It depends on the API types and the kernel's write gate only: no plugin
//! host, no DR backends.
//!
//! While an ElasticService is in proxy mode, its public Service's traffic reaches the resolver
//! (port 8012, HTTP/1.1 and h2c). The resolver finds the target Service from the Host,
//! forwards at once when the private Service has a ready endpoint, answers `probeResponse`
//! rules itself, and otherwise holds the request in a bounded per-service queue, signals
//! demand through the Kubernetes API (the `wasmop.dev/demand` annotation, see [`demand`]), and
//! forwards the moment the EndpointSlice watch reports a ready endpoint. Every request gets an
//! answer (see [`proxy`] for the status codes). The admin port (8013) serves `/healthz`,
//! `/readyz` and `/metrics` ([`server`], [`metrics`]).
#![forbid(unsafe_code)]

pub mod catalog;
pub mod demand;
pub mod dial;
mod framing;
pub mod host;
pub mod malloc;
pub mod metrics;
mod pool;
pub mod probe;
pub mod proxy;
pub mod queue;
pub mod server;
mod watch;

#[cfg(test)]
extern crate self as wasmop_resolver;
#[cfg(test)]
#[path = "../tests/common/fixtures.rs"]
mod fixtures;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

pub use catalog::Catalog;
pub use demand::{DemandSink, KubeDemand};
pub use dial::{PrefixMap, PrefixRule};
pub use proxy::{ConnectPolicy, ProxyConfig, Resolver};

/// Options of `wasmop resolver`.
#[derive(Clone, Debug, clap::Args)]
pub struct ResolverOptions {
    /// Address of the proxy (HTTP/1.1 and h2c on one port).
    #[arg(long, env = "WASMOP_RESOLVER_LISTEN", default_value = "0.0.0.0:8012")]
    pub listen: SocketAddr,
    /// Address of the admin server (`/healthz`, `/readyz`, `/metrics`).
    #[arg(
        long,
        env = "WASMOP_RESOLVER_ADMIN_LISTEN",
        default_value = "0.0.0.0:8013"
    )]
    pub admin_listen: SocketAddr,
    /// Header that names the target before `Host` (e.g. `X-Envoy-Decorator-Operation` behind
    /// Istio); `Host` is used when it is absent.
    #[arg(long, env = "WASMOP_RESOLVER_HOST_HEADER")]
    pub host_header: Option<String>,
    /// Watch ElasticServices, Services and EndpointSlices in this namespace only; all
    /// namespaces when unset.
    #[arg(long, env = "WASMOP_RESOLVER_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Requests held per service at most; more get 503 with Retry-After.
    #[arg(long, env = "WASMOP_RESOLVER_QUEUE_SIZE", default_value_t = 1000)]
    pub queue_size: usize,
    /// Requests held across all services at most; more get 503 with Retry-After (each service
    /// is also bounded by --queue-size).
    #[arg(long, env = "WASMOP_RESOLVER_MAX_HELD", default_value_t = 10_000)]
    pub max_held: usize,
    /// Time allowed for each request head: a connection that sends nothing, stalls in a head,
    /// or sits idle between requests (HTTP/1 keep-alive, h2c without an open stream) this long
    /// is closed.
    #[arg(long, env = "WASMOP_RESOLVER_HEADER_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// How long a request is held for a ready endpoint before 504 (e.g. `120s`, `2m`).
    #[arg(long, env = "WASMOP_RESOLVER_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Demand annotations per service at most once per this interval.
    #[arg(long, env = "WASMOP_RESOLVER_DEMAND_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub demand_interval: Duration,
    /// `Retry-After` of 503 answers.
    #[arg(long, env = "WASMOP_RESOLVER_RETRY_AFTER", default_value = "5s", value_parser = parse_duration)]
    pub retry_after: Duration,
    /// Held requests of one service forwarded at the same time at most, once it is ready.
    #[arg(
        long,
        env = "WASMOP_RESOLVER_RELEASE_CONCURRENCY",
        default_value_t = 100
    )]
    pub release_concurrency: usize,
    /// Connection attempts to the endpoints before 502 (refused and timed-out connects are
    /// retried with backoff).
    #[arg(long, env = "WASMOP_RESOLVER_CONNECT_ATTEMPTS", default_value_t = 15)]
    pub connect_attempts: u32,
    /// Wait after the first failed connect; ×1.4 after each further one, at most 2 s.
    #[arg(long, env = "WASMOP_RESOLVER_CONNECT_BACKOFF", default_value = "50ms", value_parser = parse_duration)]
    pub connect_backoff: Duration,
    /// Time allowed for one connect.
    #[arg(long, env = "WASMOP_RESOLVER_CONNECT_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// How long open connections may take to finish after SIGTERM; requests still held then
    /// are answered 503 with Retry-After.
    #[arg(long, env = "WASMOP_RESOLVER_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Development and tests only: `FROM_CIDR=TO_CIDR` rewrites dialed addresses keeping the
    /// host bits (`10.0.0.0/8=127.0.0.0/8` dials 10.244.1.5 as 127.244.1.5); while set, no
    /// address outside the FROM networks is dialed. Repeat or comma-separate for more rules.
    #[arg(long, env = "WASMOP_RESOLVER_DIAL_PREFIX_MAP", value_delimiter = ',')]
    pub dial_prefix_map: Vec<PrefixRule>,
    /// This instance's name (the pod name in a cluster), for the Kubernetes client's Events.
    #[arg(
        long,
        env = "WASMOP_RESOLVER_IDENTITY",
        default_value = "wasmop-resolver"
    )]
    pub identity: String,
}

/// A duration such as `2s`, `500ms`, `1m30s` or ISO 8601 `PT2S`; a bare number is seconds.
///
/// # Errors
/// Not a duration, or negative.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.trim().parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let d: k8s_openapi::jiff::SignedDuration = s
        .trim()
        .parse()
        .map_err(|e| format!("`{s}` is not a duration such as 2s, 500ms or 1m30s: {e}"))?;
    Duration::try_from(d).map_err(|_| format!("`{s}` is negative"))
}

impl ResolverOptions {
    /// The request path's settings.
    ///
    /// # Errors
    /// `--host-header` is not a header name, or `--timeout`, `--header-read-timeout`,
    /// `--queue-size`, `--max-held`, `--release-concurrency` or `--connect-attempts` is zero.
    pub(crate) fn proxy_config(&self) -> anyhow::Result<ProxyConfig> {
        let host_header = self
            .host_header
            .as_deref()
            .map(|h| {
                http::HeaderName::from_bytes(h.trim().as_bytes())
                    .with_context(|| format!("--host-header `{h}` is not a header name"))
            })
            .transpose()?;
        for (flag, value) in [
            ("--queue-size", self.queue_size),
            ("--max-held", self.max_held),
            ("--release-concurrency", self.release_concurrency),
            ("--connect-attempts", self.connect_attempts as usize),
            ("--timeout", usize::from(!self.timeout.is_zero())),
            (
                "--header-read-timeout",
                usize::from(!self.header_read_timeout.is_zero()),
            ),
        ] {
            anyhow::ensure!(value > 0, "{flag} must be greater than zero");
        }
        Ok(ProxyConfig {
            host_header,
            queue_size: self.queue_size,
            max_held: self.max_held,
            header_read_timeout: self.header_read_timeout,
            timeout: self.timeout,
            retry_after: self.retry_after,
            release_concurrency: self.release_concurrency,
            demand_interval: self.demand_interval,
            connect: ConnectPolicy {
                attempts: self.connect_attempts,
                backoff: self.connect_backoff,
                connect_timeout: self.connect_timeout,
                map: PrefixMap::new(self.dial_prefix_map.clone()),
                ..ConnectPolicy::default()
            },
        })
    }
}

/// Runs the resolver until SIGINT or SIGTERM.
///
/// # Errors
/// Bad options, no Kubernetes client, a port that cannot be bound, or a watch or server that
/// ends.
pub async fn run(opts: ResolverOptions) -> anyhow::Result<ExitCode> {
    let config = opts.proxy_config()?;
    let client = wasmop_kernel::client::client()
        .await
        .context("cannot connect to the Kubernetes API (in a pod: its ServiceAccount; elsewhere: KUBECONFIG)")?;
    let proxy_listener = server::bind(opts.listen, "--listen").await?;
    let admin_listener = server::bind(opts.admin_listen, "--admin-listen").await?;
    if !config.connect.map.is_empty() {
        tracing::warn!(
            map = ?opts.dial_prefix_map,
            "--dial-prefix-map is set: dialed addresses are rewritten (development and tests only)"
        );
    }
    let catalog = Catalog::new();
    let sink: Arc<dyn DemandSink> = Arc::new(KubeDemand::new(client.clone(), &opts.identity));
    let resolver = Resolver::new(config, catalog.clone(), sink);
    tracing::info!(
        listen = %opts.listen,
        admin = %opts.admin_listen,
        watch_namespace = opts.watch_namespace.as_deref().unwrap_or("(all)"),
        queue_size = opts.queue_size,
        max_held = opts.max_held,
        timeout = ?opts.timeout,
        "wasmop resolver starting"
    );
    tokio::select! {
        r = watch::run(client, opts.watch_namespace.clone(), catalog) => r?,
        r = resolver.serve_admin(admin_listener) => r.context("admin server failed")?,
        r = resolver.serve(proxy_listener, wasmop_kernel::shutdown_signal(), opts.shutdown_grace) => {
            r.context("proxy failed")?;
        }
    }
    tracing::info!("wasmop resolver stopped");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        opts: ResolverOptions,
    }

    fn parse(args: &[&str]) -> Result<ResolverOptions, clap::Error> {
        Cli::try_parse_from(std::iter::once("resolver").chain(args.iter().copied())).map(|c| c.opts)
    }

    #[test]
    fn durations_take_units_iso_8601_or_bare_seconds() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("PT2S"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("600"), Ok(Duration::from_secs(600)));
        assert!(parse_duration("-2s").unwrap_err().contains("negative"));
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .contains("not a duration")
        );
    }

    #[test]
    fn defaults_follow_the_contract_and_bad_flags_are_refused() {
        let opts = parse(&[]).unwrap();
        assert_eq!(opts.listen.port(), 8012);
        assert_eq!(opts.admin_listen.port(), 8013);
        assert_eq!(opts.demand_interval, Duration::from_secs(2));
        let config = opts.proxy_config().unwrap();
        assert!(config.connect.map.is_empty());
        assert_eq!(config.connect.attempts, 15);
        assert_eq!((config.queue_size, config.max_held), (1000, 10_000));
        assert_eq!(config.header_read_timeout, Duration::from_secs(30));

        let opts = parse(&[
            "--host-header",
            "X-Envoy-Decorator-Operation",
            "--dial-prefix-map",
            "10.0.0.0/8=127.0.0.0/8,fd00::/8=fc00::/8",
            "--timeout",
            "3s",
        ])
        .unwrap();
        let config = opts.proxy_config().unwrap();
        assert_eq!(config.host_header.unwrap(), "x-envoy-decorator-operation");
        assert_eq!(
            config
                .connect
                .map
                .dial_addr("10.244.1.5:80".parse().unwrap())
                .unwrap(),
            "127.244.1.5:80".parse().unwrap()
        );
        assert_eq!(config.timeout, Duration::from_secs(3));

        assert!(parse(&["--dial-prefix-map", "10.0.0.0/8"]).is_err());
        assert!(parse(&["--timeout", "soon"]).is_err());
        let zero = parse(&["--queue-size", "0"])
            .unwrap()
            .proxy_config()
            .unwrap_err();
        assert!(zero.to_string().contains("--queue-size"), "{zero}");
        for flag in ["--max-held", "--header-read-timeout"] {
            let zero = parse(&[flag, "0"]).unwrap().proxy_config().unwrap_err();
            assert!(zero.to_string().contains(flag), "{zero}");
        }
        let header = parse(&["--host-header", "bad header"])
            .unwrap()
            .proxy_config()
            .unwrap_err();
        assert!(header.to_string().contains("--host-header"), "{header}");
    }
}
