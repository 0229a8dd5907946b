//! Bounded per-service queues of held requests (`--queue-size` each; upstream had one global
//! breaker), under one cap across all of them (`--max-held`), so that requests for many
//! services cannot together hold more than the resolver can afford.
//!
//! A held request is a [`Held`] guard: it records the request's arrival time until it is
//! dropped, whatever ends the wait (forwarded, timed out, the client went away). The oldest
//! arrival is what the demand annotation carries. Released requests are forwarded at most
//! `--release-concurrency` at a time per service, so that a freshly started pod does not get
//! the whole queue at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::metrics;

/// All queues of a resolver.
#[derive(Debug)]
pub struct Queues {
    capacity: usize,
    release_concurrency: usize,
    services: Mutex<HashMap<(String, String), Arc<ServiceQueue>>>,
    /// Held requests in all queues, and the cap on them.
    total: Arc<Total>,
}

/// The held requests of all queues, shared by every [`ServiceQueue`] of a [`Queues`].
#[derive(Debug)]
struct Total {
    held: AtomicUsize,
    max: usize,
}

/// The queue of one public Service.
#[derive(Debug)]
pub struct ServiceQueue {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the public Service.
    pub service: String,
    capacity: usize,
    inner: Mutex<Inner>,
    release: Arc<Semaphore>,
    total: Arc<Total>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    arrivals: BTreeMap<u64, SystemTime>,
    demand_running: bool,
    last_attempt: Option<Instant>,
    last_sent: Option<String>,
}

/// No room to hold a request: it gets 503 with `Retry-After`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueueFull {
    /// The service's queue is full.
    #[error("{held} requests are already held for this service (--queue-size)")]
    Service {
        /// How many are held for the service.
        held: usize,
    },
    /// The resolver holds `--max-held` requests across all services.
    #[error("{held} requests are already held across all services (--max-held)")]
    Resolver {
        /// How many are held in all.
        held: usize,
    },
}

/// A held request; dropping it takes the request out of its queue.
#[derive(Debug)]
pub struct Held {
    queue: Arc<ServiceQueue>,
    seq: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.queue.lock().arrivals.remove(&self.seq);
        self.queue.total.held.fetch_sub(1, Ordering::Relaxed);
        metrics::unheld(&self.queue.namespace, &self.queue.service);
    }
}

impl Held {
    /// The queue the request is held in.
    pub fn queue(&self) -> &Arc<ServiceQueue> {
        &self.queue
    }
}

/// The result of [`Queues::admit`].
#[derive(Debug)]
pub struct Admitted {
    /// The guard of the held request.
    pub held: Held,
    /// Whether the caller must start the service's demand loop (none runs).
    pub start_demand: bool,
}

impl Queues {
    /// Queues of at most `capacity` held requests each, released `release_concurrency` at a
    /// time, and at most `max_held` held requests in all (each at least 1).
    pub fn new(capacity: usize, release_concurrency: usize, max_held: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            release_concurrency: release_concurrency.max(1),
            services: Mutex::new(HashMap::new()),
            total: Arc::new(Total {
                held: AtomicUsize::new(0),
                max: max_held.max(1),
            }),
        }
    }

    fn queue(&self, namespace: &str, service: &str) -> Arc<ServiceQueue> {
        let mut services = self.services.lock().unwrap_or_else(|e| e.into_inner());
        services
            .entry((namespace.to_owned(), service.to_owned()))
            .or_insert_with(|| {
                Arc::new(ServiceQueue {
                    namespace: namespace.to_owned(),
                    service: service.to_owned(),
                    capacity: self.capacity,
                    inner: Mutex::new(Inner::default()),
                    release: Arc::new(Semaphore::new(self.release_concurrency)),
                    total: self.total.clone(),
                })
            })
            .clone()
    }

    /// Holds a request for `service` in `namespace` that arrived at `arrived`.
    ///
    /// # Errors
    /// [`QueueFull`] when `capacity` requests are held for the service already, or `max_held`
    /// in all.
    pub fn admit(
        &self,
        namespace: &str,
        service: &str,
        arrived: SystemTime,
    ) -> Result<Admitted, QueueFull> {
        let queue = self.queue(namespace, service);
        let (seq, start_demand) = {
            let mut inner = queue.lock();
            if inner.arrivals.len() >= queue.capacity {
                return Err(QueueFull::Service {
                    held: inner.arrivals.len(),
                });
            }
            let total = &self.total;
            total
                .held
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                    (held < total.max).then_some(held + 1)
                })
                .map_err(|held| QueueFull::Resolver { held })?;
            let seq = inner.next;
            inner.next += 1;
            inner.arrivals.insert(seq, arrived);
            let start = !std::mem::replace(&mut inner.demand_running, true);
            (seq, start)
        };
        metrics::queued(namespace, service);
        Ok(Admitted {
            held: Held { queue, seq },
            start_demand,
        })
    }

    /// How many requests are held for `service` in `namespace`.
    pub fn held(&self, namespace: &str, service: &str) -> usize {
        let services = self.services.lock().unwrap_or_else(|e| e.into_inner());
        services
            .get(&(namespace.to_owned(), service.to_owned()))
            .map_or(0, |q| q.len())
    }

    /// How many requests are held in all queues.
    pub fn held_total(&self) -> usize {
        self.total.held.load(Ordering::Relaxed)
    }
}

impl ServiceQueue {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many requests are held.
    pub fn len(&self) -> usize {
        self.lock().arrivals.len()
    }

    /// Whether no request is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The arrival time of the oldest held request.
    pub fn oldest(&self) -> Option<SystemTime> {
        self.lock().arrivals.values().min().copied()
    }

    /// The oldest arrival, or `None` after marking the demand loop stopped (in one step, so
    /// that a request admitted right after starts a new loop).
    pub(crate) fn oldest_or_stop(&self) -> Option<SystemTime> {
        let mut inner = self.lock();
        let oldest = inner.arrivals.values().min().copied();
        if oldest.is_none() {
            inner.demand_running = false;
        }
        oldest
    }

    /// How long to wait before the next demand signal may be sent (`interval` after the last
    /// attempt), if at all.
    pub(crate) fn signal_wait(&self, interval: Duration) -> Option<Duration> {
        let last = self.lock().last_attempt?;
        (last + interval).checked_duration_since(Instant::now())
    }

    /// Whether `value` differs from the last demand value written.
    pub(crate) fn is_new_demand(&self, value: &str) -> bool {
        self.lock().last_sent.as_deref() != Some(value)
    }

    /// Records a signal attempt now and, when it succeeded, the value written.
    pub(crate) fn record_signal(&self, sent: Option<String>) {
        let mut inner = self.lock();
        inner.last_attempt = Some(Instant::now());
        if sent.is_some() {
            inner.last_sent = sent;
        }
    }

    /// Waits for a release slot; the caller holds the permit until the backend's response head
    /// has arrived (at most `--timeout`), not while the response body is streamed to a client
    /// that may never read it.
    pub async fn release(&self) -> OwnedSemaphorePermit {
        self.release
            .clone()
            .acquire_owned()
            .await
            .expect("the release semaphore is never closed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn bounded_per_service_with_the_oldest_arrival_tracked() {
        let q = Queues::new(2, 1, 100);
        let a = q.admit("ns", "web", at(20)).unwrap();
        assert!(a.start_demand);
        let b = q.admit("ns", "web", at(10)).unwrap();
        assert!(!b.start_demand, "one demand loop per service");
        assert_eq!(
            q.admit("ns", "web", at(30)).unwrap_err(),
            QueueFull::Service { held: 2 }
        );
        // Another service has its own queue.
        let other = q.admit("ns", "api", at(5)).unwrap();
        assert!(other.start_demand);
        assert_eq!((q.held("ns", "web"), q.held_total()), (2, 3));
        let web = a.held.queue().clone();
        assert_eq!(web.oldest(), Some(at(10)));
        drop(b);
        assert_eq!(web.oldest(), Some(at(20)));
        // Freed room is usable again.
        let c = q.admit("ns", "web", at(40)).unwrap();
        drop((a, c));
        assert!(web.is_empty());
        assert_eq!(q.held("ns", "web"), 0);
    }

    #[test]
    fn the_demand_loop_stops_only_when_empty_and_restarts_on_the_next_request() {
        let q = Queues::new(10, 1, 100);
        let a = q.admit("ns", "web", at(1)).unwrap();
        let queue = a.held.queue().clone();
        assert_eq!(queue.oldest_or_stop(), Some(at(1)));
        assert!(
            !q.admit("ns", "web", at(2)).unwrap().start_demand,
            "still running"
        );
        drop(a);
        assert_eq!(queue.oldest_or_stop(), None);
        assert!(q.admit("ns", "web", at(3)).unwrap().start_demand);
    }

    #[test]
    fn signals_are_spaced_by_the_interval_and_values_deduplicated() {
        let q = Queues::new(10, 1, 100);
        let queue = q.admit("ns", "web", at(1)).unwrap().held.queue().clone();
        assert_eq!(
            queue.signal_wait(Duration::from_secs(60)),
            None,
            "first one at once"
        );
        assert!(queue.is_new_demand("t1"));
        queue.record_signal(Some("t1".into()));
        assert!(!queue.is_new_demand("t1"));
        let wait = queue.signal_wait(Duration::from_secs(60)).unwrap();
        assert!(wait > Duration::from_secs(59));
        queue.record_signal(None);
        assert!(
            !queue.is_new_demand("t1"),
            "a failed attempt keeps the last value"
        );
        assert_eq!(queue.signal_wait(Duration::ZERO), None);
    }

    #[test]
    fn one_cap_bounds_the_held_requests_of_all_services_together() {
        let q = Queues::new(2, 1, 3);
        let a = q.admit("ns", "web", at(1)).unwrap();
        let b = q.admit("ns", "api", at(2)).unwrap();
        let c = q.admit("other", "web", at(3)).unwrap();
        assert_eq!(q.held_total(), 3);
        assert_eq!(
            q.admit("ns", "new", at(4)).unwrap_err(),
            QueueFull::Resolver { held: 3 },
            "a service with an empty queue is refused too"
        );
        let d = q.admit("ns", "web", at(5));
        assert_eq!(d.unwrap_err(), QueueFull::Resolver { held: 3 });
        assert_eq!(q.held("ns", "web"), 1, "a refused request is not held");
        drop(b);
        let e = q.admit("ns", "web", at(6)).unwrap();
        assert_eq!(
            q.admit("ns", "web", at(7)).unwrap_err(),
            QueueFull::Service { held: 2 },
            "--queue-size still applies under the cap"
        );
        drop((a, c, e));
        assert_eq!(q.held_total(), 0);
    }

    #[tokio::test]
    async fn release_slots_bound_concurrent_forwards() {
        let q = Queues::new(10, 2, 100);
        let queue = q.admit("ns", "web", at(1)).unwrap().held.queue().clone();
        let p1 = queue.release().await;
        let _p2 = queue.release().await;
        let third = tokio::time::timeout(Duration::from_millis(50), queue.release()).await;
        assert!(third.is_err(), "a third forward waits");
        drop(p1);
        let _p3 = tokio::time::timeout(Duration::from_secs(1), queue.release())
            .await
            .expect("a slot frees when a forward ends");
    }
}
