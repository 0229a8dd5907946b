//! Demand: while the resolver holds a request for a service with no ready endpoint, it sets
//! the annotation [`DEMAND_ANNOTATION`] on the service's ElasticService to the RFC 3339 time
//! (UTC, whole seconds) of the oldest held request, with a JSON merge patch, at most once per
//! service per `--demand-interval` (docs/resolver.md). The controller scales the
//! target up when that time is newer than `status.lastScaledUpTime`. RBAC is the
//! authentication: unlike KubeElasti's `POST /informer/incoming-request`, there is no
//! unauthenticated scale-up endpoint.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube::api::Patch;
use kube::runtime::events::Reporter;
use kube::{Api, Client};

use super::catalog::Catalog;
use super::metrics;
use super::queue::ServiceQueue;
use wasmop_api::elasticservice::{DEMAND_ANNOTATION, ElasticService};
use wasmop_kernel::gate::{WriteGate, Writer};

/// Where demand goes: the Kubernetes API in production, a recorder in tests.
#[async_trait::async_trait]
pub trait DemandSink: Send + Sync {
    /// Sets the demand of ElasticService `elastic_service` in `namespace` to `oldest` (RFC 3339).
    ///
    /// # Errors
    /// A message saying why it could not be written (it is retried after the interval).
    async fn signal(
        &self,
        namespace: &str,
        elastic_service: &str,
        oldest: &str,
    ) -> Result<(), String>;
}

/// Writes the demand annotation through the write gate (always open: the resolver has no DR
/// role), so that writes are counted in `wasmop_writes_total`.
pub struct KubeDemand {
    client: Client,
    writer: Writer,
}

impl KubeDemand {
    /// A sink writing with `client` as `identity` (the pod name).
    pub fn new(client: Client, identity: &str) -> Self {
        let reporter = Reporter {
            controller: "wasmop-resolver".into(),
            instance: Some(identity.into()),
        };
        Self {
            writer: Writer::new(WriteGate::new(true), client.clone(), reporter),
            client,
        }
    }
}

#[async_trait::async_trait]
impl DemandSink for KubeDemand {
    async fn signal(
        &self,
        namespace: &str,
        elastic_service: &str,
        oldest: &str,
    ) -> Result<(), String> {
        let api: Api<ElasticService> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({"metadata": {"annotations": {DEMAND_ANNOTATION: oldest}}});
        self.writer
            .patch(&api, elastic_service, &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// `t` as RFC 3339 in UTC, in whole seconds (e.g. `2025-01-31T12:00:05Z`).
pub(crate) fn rfc3339_seconds(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    k8s_openapi::jiff::Timestamp::from_second(i64::try_from(secs).unwrap_or(i64::MAX))
        .unwrap_or(k8s_openapi::jiff::Timestamp::MAX)
        .to_string()
}

/// The demand loop of one service: runs while it holds requests, signals when the service has
/// no ready endpoint and the oldest held request's time is not yet written, and looks again
/// every `interval`.
pub(crate) async fn run(
    queue: Arc<ServiceQueue>,
    catalog: Arc<Catalog>,
    sink: Arc<dyn DemandSink>,
    interval: Duration,
) {
    loop {
        if let Some(wait) = queue.signal_wait(interval) {
            tokio::time::sleep(wait).await;
        }
        let Some(oldest) = queue.oldest_or_stop() else {
            return;
        };
        let value = rfc3339_seconds(oldest);
        let elastic = catalog.cold_elastic_service(&queue.namespace, &queue.service);
        match elastic {
            Some(name) if queue.is_new_demand(&value) => {
                let result = sink.signal(&queue.namespace, &name, &value).await;
                metrics::demand(result.is_ok());
                match result {
                    Ok(()) => {
                        tracing::info!(
                            namespace = %queue.namespace,
                            service = %queue.service,
                            elasticservice = %name,
                            oldest = %value,
                            held = queue.len(),
                            "demand signalled: the controller scales the target up"
                        );
                        queue.record_signal(Some(value));
                    }
                    Err(e) => {
                        tracing::warn!(
                            namespace = %queue.namespace,
                            elasticservice = %name,
                            "cannot write the demand annotation ({e}); retrying in {interval:?}. Check the RBAC of the resolver's ServiceAccount (patch on elasticservices)"
                        );
                        queue.record_signal(None);
                    }
                }
            }
            _ => tokio::time::sleep(interval).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::{es, slice};
    use crate::fixtures::RecordedDemand;
    use crate::queue::Queues;
    use kube::runtime::watcher::Event;
    use wasmop_api::names::private_service_name;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    async fn sleep_ms(ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn signals_the_oldest_held_request_at_most_once_per_interval_while_cold() {
        let catalog = Catalog::new();
        catalog.elastic_service_event(Event::Apply(es(
            "ns",
            "es-web",
            "web",
            serde_json::json!({}),
        )));
        let queues = Queues::new(10, 1, 100);
        let sink = Arc::new(RecordedDemand::default());
        let a = queues.admit("ns", "web", at(100)).unwrap();
        assert!(a.start_demand);
        let task = tokio::spawn(run(
            a.held.queue().clone(),
            catalog.clone(),
            sink.clone(),
            Duration::from_secs(2),
        ));
        sleep_ms(10).await;
        let first = format!("ns/es-web={}", rfc3339_seconds(at(100)));
        assert_eq!(
            sink.signals(),
            std::slice::from_ref(&first),
            "signalled at once"
        );

        // The oldest request leaves; the next oldest is signalled, but not before the interval.
        let b = queues.admit("ns", "web", at(103)).unwrap();
        drop(a);
        sleep_ms(1000).await;
        assert_eq!(sink.signals().len(), 1, "rate-limited");
        sleep_ms(1500).await;
        let second = format!("ns/es-web={}", rfc3339_seconds(at(103)));
        assert_eq!(sink.signals(), [first.clone(), second.clone()]);

        // Once an endpoint is ready nothing more is signalled; the loop ends with the queue.
        catalog.endpoint_slice_event(Event::Apply(slice(
            "ns",
            "s",
            &private_service_name("web"),
            serde_json::json!([{"port": 80}]),
            serde_json::json!([{"addresses": ["10.244.0.1"], "conditions": {"ready": true}}]),
        )));
        let c = queues.admit("ns", "web", at(110)).unwrap();
        drop(b);
        sleep_ms(5000).await;
        assert_eq!(sink.signals(), [first, second]);
        drop(c);
        sleep_ms(5000).await;
        assert!(task.is_finished());
    }

    #[test]
    fn rfc3339_in_whole_seconds_utc() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_999);
        assert_eq!(rfc3339_seconds(t), "2023-11-14T22:13:20Z");
        let parsed: k8s_openapi::jiff::Timestamp = rfc3339_seconds(t).parse().unwrap();
        assert_eq!(parsed.as_second(), 1_700_000_000);
    }
}
