//! The trigger poller: every `--poll-interval` (default 30 s, as upstream's `POLLING_INTERVAL`)
//! it asks the scaler plugin (`spec.plugin`, else the registry's default) for the vote of every
//! trigger of every ElasticService, leaves the votes for the reconciler and triggers a
//! reconcile of all of them. It makes no write itself: the reconciler decides
//! ([`super::decide`]) and scales, so a poll round and a demand for the same ElasticService
//! are never applied at once.
//!
//! No plugin is called when the decision needs no votes (within the cooldown since creation,
//! outside `enabledPeriod`, no triggers), nor while this instance is passive. A promotion
//! starts a round at once (and the interval from there), so the votes after a failover do not
//! wait up to one interval.

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use wasmop_kernel::cache::Ready;

use super::controller::{Poll, Scaling, VoteLabels, metrics};
use super::decide::{self, TriggerOutcome, Vote};
use wasmop_api::elasticservice::ElasticService;
use wasmop_plugin_host::{FailurePolicy, Hook, TriggerRequest};

/// How many ElasticServices are polled at once.
const CONCURRENCY: usize = 8;

/// Polls until the reconciler goes away.
///
/// # Errors
/// The ElasticService store never becomes ready, or the reconciler's channel closed.
pub async fn run(
    scaling: Arc<Scaling>,
    store: Store<ElasticService>,
    ready: Ready,
    reconcile_all: UnboundedSender<()>,
) -> anyhow::Result<()> {
    ready.wait().await;
    let mut tick = tokio::time::interval(scaling.opts.poll_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut promotions = std::pin::pin!(scaling.ctx.kernel.gate().promotions());
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Some(()) = promotions.next() => {
                tracing::debug!("promoted: polling the triggers now");
                tick.reset();
            }
        }
        if !scaling.ctx.kernel.gate().is_active() {
            tracing::debug!("passive: triggers not polled");
            continue;
        }
        let all = store.state();
        futures::stream::iter(all)
            .for_each_concurrent(CONCURRENCY, |es| {
                let scaling = scaling.clone();
                async move { poll(&scaling, &es).await }
            })
            .await;
        if reconcile_all.unbounded_send(()).is_err() {
            anyhow::bail!("the ElasticService controller stopped");
        }
    }
}

/// Takes the votes of one ElasticService and leaves them for its next reconcile.
async fn poll(scaling: &Scaling, es: &ElasticService) {
    if es.meta().deletion_timestamp.is_some() {
        return;
    }
    let now = Timestamp::now();
    let inputs = scaling.inputs(es, now);
    if decide::precheck(&inputs).is_some() {
        scaling.leave_poll(
            es,
            Poll {
                at: now,
                votes: vec![],
                policy: FailurePolicy::Fail,
            },
        );
        return;
    }
    let id = format!("{}/{}", es.namespace().unwrap_or_default(), es.name_any());
    let (votes, policy) = match scaling.ctx.plugins.resolve_for(
        Hook::Scaling,
        es.spec.plugin.as_deref(),
        es.metadata.namespace.as_deref(),
    ) {
        Err(e) => {
            let reason = format!("no scaler plugin: {e}");
            let votes = es
                .spec
                .triggers
                .iter()
                .map(|t| TriggerOutcome {
                    trigger_type: t.type_.clone(),
                    vote: Vote::Failed,
                    value: None,
                    reason: reason.clone(),
                })
                .collect();
            (votes, FailurePolicy::Fail)
        }
        Ok(plugin) => {
            let mut votes = Vec::with_capacity(es.spec.triggers.len());
            for t in &es.spec.triggers {
                let request = TriggerRequest {
                    elastic_service: id.clone(),
                    trigger_type: t.type_.clone(),
                    metadata: t.metadata.to_string(),
                    cooldown_seconds: u32::try_from(inputs.cooldown.as_secs()).unwrap_or(u32::MAX),
                    now: now.as_millisecond(),
                };
                let outcome = match plugin.vote(request).await {
                    Ok(v) => TriggerOutcome {
                        trigger_type: t.type_.clone(),
                        vote: match v.vote {
                            wasmop_plugin_host::Vote::Up => Vote::Up,
                            wasmop_plugin_host::Vote::Down => Vote::Down,
                        },
                        value: v.value,
                        reason: v.reason,
                    },
                    Err(e) => TriggerOutcome {
                        trigger_type: t.type_.clone(),
                        vote: Vote::Failed,
                        value: None,
                        reason: e.to_string(),
                    },
                };
                metrics()
                    .votes
                    .get_or_create(&VoteLabels {
                        plugin: plugin.spec().name.clone(),
                        vote: outcome.vote.as_str().into(),
                    })
                    .inc();
                tracing::debug!(elasticservice = %id, trigger = %t.type_, vote = outcome.vote.as_str(), reason = %outcome.reason, "trigger vote");
                votes.push(outcome);
            }
            (votes, plugin.spec().failure_policy)
        }
    };
    scaling.leave_poll(
        es,
        Poll {
            at: now,
            votes,
            policy,
        },
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::runtime::watcher::Event;

    use super::*;
    use crate::scaling::Options;
    use crate::scaling::controller::tests::no_caches;

    /// An ElasticService without triggers: its round needs no plugin.
    fn idle() -> ElasticService {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "wasmop.dev/v1alpha1", "kind": "ElasticService",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u"},
            "spec": {"service": "web", "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_promotion_polls_at_once_instead_of_at_the_next_interval() {
        let ctx = crate::test_support::unreachable_context();
        let opts = Options {
            poll_interval: Duration::from_secs(3600),
            ..Options::default()
        };
        let scaling = Arc::new(Scaling::new(ctx.clone(), opts, no_caches()));
        let (store, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(idle()));
        writer.apply_watcher_event(&Event::InitDone);
        let (tx, mut rounds) = futures::channel::mpsc::unbounded();
        let poller = tokio::spawn(run(
            scaling.clone(),
            store.clone(),
            Ready::of_store(&store),
            tx,
        ));

        // The first tick comes while passive: no round.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(rounds.try_recv().is_err(), "a passive instance polled");

        ctx.kernel.gate().set_active(true);
        tokio::time::timeout(Duration::from_secs(10), rounds.next())
            .await
            .expect("no round within 10 s of the promotion (the interval is an hour)")
            .expect("the poller ended");
        assert!(
            scaling.take_poll(&idle()).is_some(),
            "the round left no poll for the reconciler"
        );
        poller.abort();
    }
}
