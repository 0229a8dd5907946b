//! Prometheus metrics of the resolver, served at `/metrics` of the admin port next to the
//! shared families of [`crate::metrics`].
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `wasmop_resolver_requests_queued_total` | counter | namespace, service |
//! | `wasmop_resolver_requests_forwarded_total` | counter | namespace, service, path (`warm`: endpoints were ready; `cold`: the request was held) |
//! | `wasmop_resolver_requests_rejected_total` | counter | namespace, service, reason (`bad_host`, `unknown_service`, `unknown_port`, `queue_full`, `max_held`, `timeout`, `gone`, `forward_failed`, `not_synced`, `shutdown`, `ambiguous_framing`) |
//! | `wasmop_resolver_probe_responses_total` | counter | namespace, service |
//! | `wasmop_resolver_held_requests` | gauge | namespace, service |
//! | `wasmop_resolver_cold_start_seconds` | histogram | namespace, service: from a held request's arrival to the backend's response head |
//! | `wasmop_resolver_demand_signals_total` | counter | outcome (`ok`, `error`) |
//! | `wasmop_resolver_connect_failures_total` | counter | namespace, service: connection attempts to a ready endpoint that were refused or timed out (each is retried up to `--connect-attempts`) |
//!
//! Requests whose Host names no known service count with empty `namespace` and `service`
//! labels, so that clients cannot grow the label sets.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceLabels {
    namespace: String,
    service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ForwardLabels {
    namespace: String,
    service: String,
    path: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    namespace: String,
    service: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

struct Metrics {
    queued: Family<ServiceLabels, Counter>,
    forwarded: Family<ForwardLabels, Counter>,
    rejected: Family<RejectLabels, Counter>,
    probes: Family<ServiceLabels, Counter>,
    held: Family<ServiceLabels, Gauge>,
    cold_start: Family<ServiceLabels, Histogram>,
    demand: Family<OutcomeLabels, Counter>,
    connect_failures: Family<ServiceLabels, Counter>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let m = Metrics {
        queued: Family::default(),
        forwarded: Family::default(),
        rejected: Family::default(),
        probes: Family::default(),
        held: Family::default(),
        // 10 ms to about 3 minutes.
        cold_start: Family::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.01, 2.0, 15))
        }),
        demand: Family::default(),
        connect_failures: Family::default(),
    };
    use wasmop_kernel::metrics::register;
    register(
        "resolver_requests_queued",
        "Requests held for a service at zero",
        m.queued.clone(),
    );
    register(
        "resolver_requests_forwarded",
        "Requests forwarded to an endpoint",
        m.forwarded.clone(),
    );
    register(
        "resolver_requests_rejected",
        "Requests answered with an error, by reason",
        m.rejected.clone(),
    );
    register(
        "resolver_probe_responses",
        "Requests answered by a probeResponse rule",
        m.probes.clone(),
    );
    register(
        "resolver_held_requests",
        "Requests held now",
        m.held.clone(),
    );
    register(
        "resolver_cold_start_seconds",
        "From a held request's arrival to the backend's response head",
        m.cold_start.clone(),
    );
    register(
        "resolver_demand_signals",
        "Demand annotations written, by outcome",
        m.demand.clone(),
    );
    register(
        "resolver_connect_failures",
        "Connection attempts to a ready endpoint refused or timed out",
        m.connect_failures.clone(),
    );
    m
});

fn labels(namespace: &str, service: &str) -> ServiceLabels {
    ServiceLabels {
        namespace: namespace.into(),
        service: service.into(),
    }
}

/// Registers the families (idempotent); call at start so they show before the first request.
pub fn init() {
    LazyLock::force(&METRICS);
}

/// A request was held.
pub fn queued(namespace: &str, service: &str) {
    METRICS
        .queued
        .get_or_create(&labels(namespace, service))
        .inc();
    METRICS
        .held
        .get_or_create(&labels(namespace, service))
        .inc();
}

/// A held request left the queue (forwarded, timed out, rejected or abandoned).
pub(crate) fn unheld(namespace: &str, service: &str) {
    METRICS
        .held
        .get_or_create(&labels(namespace, service))
        .dec();
}

/// A request was forwarded; `held` is how long it was held, `None` on the warm path.
pub fn forwarded(namespace: &str, service: &str, held: Option<Duration>) {
    let path = if held.is_some() { "cold" } else { "warm" };
    METRICS
        .forwarded
        .get_or_create(&ForwardLabels {
            namespace: namespace.into(),
            service: service.into(),
            path,
        })
        .inc();
    if let Some(held) = held {
        METRICS
            .cold_start
            .get_or_create(&labels(namespace, service))
            .observe(held.as_secs_f64());
    }
}

/// A request was answered with an error for `reason` (one of the labels in the table above).
pub fn rejected(namespace: &str, service: &str, reason: &'static str) {
    METRICS
        .rejected
        .get_or_create(&RejectLabels {
            namespace: namespace.into(),
            service: service.into(),
            reason,
        })
        .inc();
}

/// A request was answered by a probeResponse rule.
pub fn probe(namespace: &str, service: &str) {
    METRICS
        .probes
        .get_or_create(&labels(namespace, service))
        .inc();
}

/// A demand annotation was written (`ok`) or failed.
pub fn demand(ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    METRICS
        .demand
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
}

/// A connection attempt to a ready endpoint of the service was refused or timed out.
pub(crate) fn connect_failed(namespace: &str, service: &str) {
    METRICS
        .connect_failures
        .get_or_create(&labels(namespace, service))
        .inc();
}
