//! The status of a ProxyRestartPolicy from the outcome of a reconcile: state, description,
//! conditions with the Kyma Istio Operator's reasons and messages (docs/restart.md), what to
//! record as applied, and when to come back. Pure; the controller writes the result.
//!
//! | condition | status / reason | message |
//! |---|---|---|
//! | `Ready` | True / `ReconcileSucceeded` | `Reconciliation succeeded` |
//! | | False / `ReconcileRequeued` | `Proxy reset is still ongoing. Reconciliation requeued` |
//! | | False / `MaintenanceWindowClosed` | when the window opens next |
//! | | False / `ReconcileFailed` | the error |
//! | `ProxySidecarRestartSucceeded` | True / `ProxySidecarRestartSucceeded` | `Proxy sidecar restart succeeded` |
//! | | False / `ProxySidecarRestartFailed` | `Proxy sidecar restart failed` |
//! | | False / `ProxySidecarRestartPartiallySucceeded` | `Proxy sidecar restart partially succeeded` |
//! | | False / `ProxySidecarManualRestartRequired` | the warning list |
//! | | False / `MaintenanceWindowClosed` | how many wait, and until when |
//! | | False / `PluginFailureIgnored` | what was not evaluated |
//! | `IngressGatewayRestartSucceeded` | True / `IngressGatewayRestartSucceeded` | `Istio Ingress Gateway restart succeeded` |
//! | | False / `IngressGatewayRestartFailed` | `Istio Ingress Gateway restart failed` |
//! | | False / `MaintenanceWindowClosed` | when the window opens next |
//! | `OverlappingPolicies` | True / `PodsSelectedByOtherPolicies` | the other policies |
//! | | False / `NoOverlap` | `no pod is selected by another ProxyRestartPolicy` |
//!
//! This project's own: `Ready` False / `Suspended` (`spec.suspend`, the other conditions kept
//! from the last pass), and with `spec.mode: DryRun` ([`dry_run`]) `Ready` False / `DryRun`,
//! `ProxySidecarRestartSucceeded` and `IngressGatewayRestartSucceeded` False / `DryRun` when
//! something would restart.
//!
//! Upstream sets the two ingress gateway reasons on `Ready`, where the end of every reconcile
//! overwrites them; here they have a condition of their own.

use std::collections::BTreeSet;

use k8s_openapi::jiff::Timestamp;
use wasmop_api::proxyrestartpolicy::{
    MAX_WOULD_RESTART, ProxyRestartPolicyStatus, WouldRestart, WouldRestartWorkload,
};
use wasmop_kernel::conditions;

use super::plan::warning_message;

/// Condition type: the whole reconcile.
pub(crate) const READY: &str = "Ready";
/// Condition type: the proxy sidecar restarts (upstream's PSRS).
pub(crate) const SIDECARS: &str = "ProxySidecarRestartSucceeded";
/// Condition type: the ingress gateway restart.
pub(crate) const GATEWAY: &str = "IngressGatewayRestartSucceeded";
/// Condition type: other policies select some of the same pods.
pub(crate) const OVERLAP: &str = "OverlappingPolicies";
/// Every condition type this controller writes.
pub(crate) const TYPES: [&str; 4] = [READY, SIDECARS, GATEWAY, OVERLAP];

/// Reasons, as the reference spells them (plus this project's own).
pub mod reason {
    /// Ready/True.
    pub(crate) const RECONCILE_SUCCEEDED: &str = "ReconcileSucceeded";
    /// Ready/False: more restarts in the next chunk.
    pub(crate) const RECONCILE_REQUEUED: &str = "ReconcileRequeued";
    /// Ready/False: an error.
    pub(crate) const RECONCILE_FAILED: &str = "ReconcileFailed";
    /// PSRS/True.
    pub(crate) const SIDECARS_SUCCEEDED: &str = "ProxySidecarRestartSucceeded";
    /// PSRS/False: an error.
    pub(crate) const SIDECARS_FAILED: &str = "ProxySidecarRestartFailed";
    /// PSRS/False: more restarts in the next chunk.
    pub(crate) const SIDECARS_PARTIAL: &str = "ProxySidecarRestartPartiallySucceeded";
    /// PSRS/False: some workloads need a manual restart.
    pub(crate) const SIDECARS_MANUAL: &str = "ProxySidecarManualRestartRequired";
    /// Gateway/True.
    pub(crate) const GATEWAY_SUCCEEDED: &str = "IngressGatewayRestartSucceeded";
    /// Gateway/False.
    pub(crate) const GATEWAY_FAILED: &str = "IngressGatewayRestartFailed";
    /// Restarts wait for the maintenance window.
    pub(crate) const WINDOW_CLOSED: &str = "MaintenanceWindowClosed";
    /// The plugin failed with `failurePolicy: Ignore`: those pods were not restarted.
    pub(crate) const PLUGIN_IGNORED: &str = "PluginFailureIgnored";
    /// Overlap/True.
    pub(crate) const OVERLAP: &str = "PodsSelectedByOtherPolicies";
    /// Overlap/False.
    pub(crate) const NO_OVERLAP: &str = "NoOverlap";
    /// Ready/False: `spec.suspend`.
    pub(crate) const SUSPENDED: &str = "Suspended";
    /// Ready, PSRS, Gateway/False: `spec.mode: DryRun`, something would restart.
    pub(crate) const DRY_RUN: &str = "DryRun";
}

/// Messages, as the reference spells them.
pub mod message {
    /// Ready/True.
    pub(crate) const RECONCILE_SUCCEEDED: &str = "Reconciliation succeeded";
    /// Ready/False, requeued.
    pub(crate) const RECONCILE_REQUEUED: &str =
        "Proxy reset is still ongoing. Reconciliation requeued";
    /// PSRS/True.
    pub(crate) const SIDECARS_SUCCEEDED: &str = "Proxy sidecar restart succeeded";
    /// PSRS/False, failed.
    pub(crate) const SIDECARS_FAILED: &str = "Proxy sidecar restart failed";
    /// PSRS/False, partial.
    pub(crate) const SIDECARS_PARTIAL: &str = "Proxy sidecar restart partially succeeded";
    /// Gateway/True.
    pub(crate) const GATEWAY_SUCCEEDED: &str = "Istio Ingress Gateway restart succeeded";
    /// Gateway/False.
    pub(crate) const GATEWAY_FAILED: &str = "Istio Ingress Gateway restart failed";
    /// Overlap/False.
    pub(crate) const NO_OVERLAP: &str = "no pod is selected by another ProxyRestartPolicy";
    /// The description of the Warning state (upstream's, pointing at this resource).
    pub(crate) const WARNING_DESCRIPTION: &str = "Some Pods with Istio sidecar injection failed to restart. To learn more about the warning, see the ProxySidecarRestartSucceeded condition and the Events of this ProxyRestartPolicy";
    /// The error of the Warning state (upstream's).
    pub(crate) const WARNING_ERROR: &str = "could not restart one or more Istio-injected Pods";
    /// Ready/False, suspended, and the description of the Suspended state.
    pub(crate) const SUSPENDED: &str = "Restarts are suspended (spec.suspend): nothing is evaluated or restarted until it is false, then what is out of date restarts";
}

/// `status.state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Everything selected is in the desired state (or waits for nobody).
    Ready,
    /// Restarts continue in the next chunk or maintenance window.
    Processing,
    /// Some workloads need a manual restart, or were not evaluated.
    Warning,
    /// A restart, a read or the plugin failed.
    Error,
    /// `spec.suspend`: nothing is evaluated or restarted.
    Suspended,
    /// `spec.mode: DryRun`: evaluated, nothing restarted (see `status.wouldRestart`).
    DryRun,
}

impl State {
    /// The value of `status.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ready => "Ready",
            State::Processing => "Processing",
            State::Warning => "Warning",
            State::Error => "Error",
            State::Suspended => "Suspended",
            State::DryRun => "DryRun",
        }
    }
}

/// How the proxy sidecar pass ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sidecars {
    /// Every selected pod was judged and every restart made (warnings aside).
    Done,
    /// The chunk limit left `pending` workloads for the next reconcile.
    Partial {
        /// Workloads left.
        pending: usize,
    },
    /// Outside the maintenance window, `pending` workloads wait.
    Waiting {
        /// Workloads that wait.
        pending: usize,
        /// When the window opens next.
        opens: Option<Timestamp>,
    },
    /// A read, a restart or the plugin (`failurePolicy: Fail`) failed.
    Failed(String),
}

/// How the ingress gateway step ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gateway {
    /// Its settings did not change.
    Unchanged,
    /// Restarted for the change described.
    Restarted(String),
    /// The gateway Deployment does not exist (as upstream: counts as done).
    NotFound,
    /// Its settings changed; the restart waits for the window.
    Waiting(Option<Timestamp>),
    /// Its settings changed and it would restart now, for the change described
    /// (`spec.mode: DryRun`).
    WouldRestart(String),
    /// The restart failed.
    Failed(String),
}

/// Everything the status depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The sidecar pass.
    pub sidecars: Sidecars,
    /// Workloads (`namespace/name`) that need a manual restart.
    pub warnings: BTreeSet<String>,
    /// Plugin failures under `failurePolicy: Ignore`, described.
    pub ignored: Option<String>,
    /// The gateway step, when the policy has an ingress gateway.
    pub gateway: Option<Gateway>,
    /// The overlap message (`None`: no overlap); unknown (outer `None`) when paging failed
    /// before the end, and the previous condition stays.
    pub overlap: Option<Option<String>>,
}

/// When to reconcile again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// After the resync interval.
    Resync,
    /// After the warning interval.
    Warning,
    /// After `limits.requeueAfter`.
    Chunk,
    /// When the maintenance window opens.
    Window(Option<Timestamp>),
    /// After the error backoff.
    Error,
}

/// One condition to set: (type, status, reason, message).
pub(crate) type Wanted = (&'static str, bool, &'static str, String);

/// The status a reconcile writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// `status.state`.
    pub state: State,
    /// `status.description`.
    pub description: String,
    /// The conditions to set (others of this controller are removed).
    pub conditions: Vec<Wanted>,
    /// Whether the desired proxy state is recorded as applied.
    pub record_proxy: bool,
    /// Whether the desired gateway settings are recorded as applied.
    pub record_gateway: bool,
    /// When to come back.
    pub next: Next,
}

fn when(opens: Option<Timestamp>) -> String {
    opens.map_or_else(|| "not within a year".to_owned(), |t| format!("at {t:.0}"))
}

/// The status for `o`. Precedence as upstream's aggregation: an error anywhere is `Error`;
/// restarts left for later are `Processing`; warnings (or plugin failures ignored) are
/// `Warning`; else `Ready`. The desired proxy state is recorded as applied when the sidecar
/// pass is done, **even with warnings** (upstream records nothing then, so every retry
/// restarted every matching pod again), but not while pods wait or were not evaluated.
pub fn report(o: &Outcome) -> Report {
    let mut conditions = Vec::new();
    let mut errors = Vec::new();

    let sidecars = match &o.sidecars {
        Sidecars::Failed(e) => {
            errors.push(format!("{}: {e}", message::SIDECARS_FAILED));
            (
                false,
                reason::SIDECARS_FAILED,
                message::SIDECARS_FAILED.to_owned(),
            )
        }
        Sidecars::Partial { .. } => (
            false,
            reason::SIDECARS_PARTIAL,
            message::SIDECARS_PARTIAL.to_owned(),
        ),
        Sidecars::Waiting { pending, opens } => (
            false,
            reason::WINDOW_CLOSED,
            format!(
                "{pending} workload(s) wait for the maintenance window, which opens next {}",
                when(*opens)
            ),
        ),
        Sidecars::Done => match (&o.ignored, o.warnings.is_empty()) {
            (Some(ignored), _) => (false, reason::PLUGIN_IGNORED, ignored.clone()),
            (None, false) => (false, reason::SIDECARS_MANUAL, warning_message(&o.warnings)),
            (None, true) => (
                true,
                reason::SIDECARS_SUCCEEDED,
                message::SIDECARS_SUCCEEDED.to_owned(),
            ),
        },
    };
    conditions.push((SIDECARS, sidecars.0, sidecars.1, sidecars.2));

    let mut gateway_waits = None;
    if let Some(g) = &o.gateway {
        let c = match g {
            Gateway::Unchanged | Gateway::Restarted(_) | Gateway::NotFound => (
                true,
                reason::GATEWAY_SUCCEEDED,
                message::GATEWAY_SUCCEEDED.to_owned(),
            ),
            Gateway::Waiting(opens) => {
                gateway_waits = Some(*opens);
                (
                    false,
                    reason::WINDOW_CLOSED,
                    format!(
                        "the restart waits for the maintenance window, which opens next {}",
                        when(*opens)
                    ),
                )
            }
            Gateway::WouldRestart(change) => (
                false,
                reason::DRY_RUN,
                format!("the gateway would restart (spec.mode DryRun): {change}"),
            ),
            Gateway::Failed(e) => {
                errors.push(format!("{}: {e}", message::GATEWAY_FAILED));
                (
                    false,
                    reason::GATEWAY_FAILED,
                    message::GATEWAY_FAILED.to_owned(),
                )
            }
        };
        conditions.push((GATEWAY, c.0, c.1, c.2));
    }

    if let Some(overlap) = &o.overlap {
        conditions.push(match overlap {
            Some(m) => (OVERLAP, true, reason::OVERLAP, m.clone()),
            None => (
                OVERLAP,
                false,
                reason::NO_OVERLAP,
                message::NO_OVERLAP.to_owned(),
            ),
        });
    }

    let window_opens = match (&o.sidecars, gateway_waits) {
        (Sidecars::Waiting { opens, .. }, _) => Some(*opens),
        (_, Some(opens)) => Some(opens),
        _ => None,
    };
    let (state, ready, description, next) = if !errors.is_empty() {
        let e = errors.join("; ");
        (
            State::Error,
            (false, reason::RECONCILE_FAILED, e.clone()),
            e,
            Next::Error,
        )
    } else if matches!(o.sidecars, Sidecars::Partial { .. }) {
        (
            State::Processing,
            (
                false,
                reason::RECONCILE_REQUEUED,
                message::RECONCILE_REQUEUED.to_owned(),
            ),
            message::RECONCILE_REQUEUED.to_owned(),
            Next::Chunk,
        )
    } else if let Some(opens) = window_opens {
        let m = format!(
            "Restarts wait for the maintenance window, which opens next {}",
            when(opens)
        );
        (
            State::Processing,
            (false, reason::WINDOW_CLOSED, m.clone()),
            m,
            Next::Window(opens),
        )
    } else if o.ignored.is_some() || !o.warnings.is_empty() {
        let description = match &o.ignored {
            Some(ignored) => format!("Some Pods were not evaluated: {ignored}"),
            None => format!(
                "{}: {}",
                message::WARNING_DESCRIPTION,
                message::WARNING_ERROR
            ),
        };
        (
            State::Warning,
            (
                true,
                reason::RECONCILE_SUCCEEDED,
                message::RECONCILE_SUCCEEDED.to_owned(),
            ),
            description,
            Next::Warning,
        )
    } else {
        (
            State::Ready,
            (
                true,
                reason::RECONCILE_SUCCEEDED,
                message::RECONCILE_SUCCEEDED.to_owned(),
            ),
            message::RECONCILE_SUCCEEDED.to_owned(),
            Next::Resync,
        )
    };
    conditions.insert(0, (READY, ready.0, ready.1, ready.2));
    Report {
        state,
        // Errors quote the plugin.
        description: wasmop_kernel::text::status_text(&description),
        conditions,
        record_proxy: o.sidecars == Sidecars::Done && o.ignored.is_none(),
        record_gateway: matches!(
            o.gateway,
            Some(Gateway::Unchanged | Gateway::Restarted(_) | Gateway::NotFound)
        ),
        next,
    }
}

/// `r` for a policy in `spec.mode: DryRun` whose pass would make `sidecars` restarts now
/// (rollouts and pod deletions; the gateway is in `r` already) and leave `pending` workloads
/// for the next chunk or the window. Nothing is recorded as applied. Unless the reconcile
/// failed (`Error` stays, with its conditions), the state is `DryRun` and `Ready` is False /
/// `DryRun`; `ProxySidecarRestartSucceeded` True or `...PartiallySucceeded` become False /
/// `DryRun` when something would restart (a closed window, warnings and ignored plugin
/// failures keep their own reasons).
pub fn dry_run(mut r: Report, sidecars: usize, gateway: bool, pending: usize) -> Report {
    r.record_proxy = false;
    r.record_gateway = false;
    if r.state == State::Error {
        return r;
    }
    let total = sidecars + usize::from(gateway);
    let mut description = format!("Dry run (spec.mode DryRun): {total} restart(s) would be made");
    if pending > 0 {
        description.push_str(&format!(", {pending} workload(s) would wait"));
    }
    description.push_str("; nothing is restarted (see status.wouldRestart)");
    r.state = State::DryRun;
    r.description = description.clone();
    for c in &mut r.conditions {
        match c.0 {
            READY => *c = (READY, false, reason::DRY_RUN, description.clone()),
            SIDECARS
                if (c.2 == reason::SIDECARS_SUCCEEDED && sidecars > 0)
                    || c.2 == reason::SIDECARS_PARTIAL =>
            {
                let mut m = format!("{sidecars} workload(s) would restart now");
                if pending > 0 {
                    m.push_str(&format!(" and {pending} would wait for the next chunk"));
                }
                m.push_str(" (spec.mode DryRun)");
                *c = (SIDECARS, false, reason::DRY_RUN, m);
            }
            _ => {}
        }
    }
    r
}

/// The status of a suspended policy at `generation`, from its `previous` one: what the last
/// pass found is kept (summary, applied configuration, overlaps, `wouldRestart`, this
/// controller's other conditions), with `state: Suspended` and `Ready` False / `Suspended`.
/// Applied to its own result it gives the same status, so a suspended policy is written once.
pub fn suspended(
    previous: &ProxyRestartPolicyStatus,
    generation: Option<i64>,
) -> ProxyRestartPolicyStatus {
    let mut next = previous.clone();
    next.conditions
        .retain(|c| TYPES.contains(&c.type_.as_str()));
    conditions::set(
        &mut next.conditions,
        conditions::condition(
            &previous.conditions,
            READY,
            false,
            reason::SUSPENDED,
            message::SUSPENDED,
            generation,
        ),
    );
    next.state = Some(State::Suspended.as_str().to_owned());
    next.description = Some(message::SUSPENDED.to_owned());
    next.observed_generation = generation;
    next
}

/// `status.wouldRestart` from the restarts a dry run would make: sorted, duplicates dropped,
/// reasons cut to 256 bytes, the first [`MAX_WOULD_RESTART`] listed and all counted.
pub fn would_restart(mut all: Vec<WouldRestartWorkload>) -> WouldRestart {
    for w in &mut all {
        w.reason = wasmop_kernel::text::cut(&w.reason, 256).into_owned();
    }
    all.sort();
    all.dedup_by(|a, b| (&a.namespace, &a.kind, &a.name) == (&b.namespace, &b.kind, &b.name));
    let count = i64::try_from(all.len()).unwrap_or(i64::MAX);
    all.truncate(MAX_WOULD_RESTART);
    WouldRestart {
        count,
        workloads: all,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(sidecars: Sidecars) -> Outcome {
        Outcome {
            sidecars,
            warnings: BTreeSet::new(),
            ignored: None,
            gateway: None,
            overlap: Some(None),
        }
    }

    fn cond<'a>(r: &'a Report, type_: &str) -> &'a Wanted {
        r.conditions
            .iter()
            .find(|c| c.0 == type_)
            .unwrap_or_else(|| panic!("no {type_} in {:?}", r.conditions))
    }

    #[test]
    fn a_plugins_long_error_is_cut_in_the_description() {
        let failure = format!(
            "plugin \"p\" (restart): plugin error: {}",
            "x".repeat(50_000)
        );
        let r = report(&outcome(Sidecars::Failed(failure)));
        assert_eq!(r.state, State::Error);
        assert_eq!(r.description.len(), wasmop_kernel::text::STATUS_TEXT_BYTES);
        assert!(r.description.ends_with(wasmop_kernel::text::CUT_MARK));
    }

    #[test]
    fn success_is_ready_and_records_the_applied_state() {
        let r = report(&outcome(Sidecars::Done));
        assert_eq!(r.state, State::Ready);
        assert_eq!(
            cond(&r, READY),
            &(
                READY,
                true,
                "ReconcileSucceeded",
                "Reconciliation succeeded".into()
            )
        );
        assert_eq!(
            cond(&r, SIDECARS),
            &(
                SIDECARS,
                true,
                "ProxySidecarRestartSucceeded",
                "Proxy sidecar restart succeeded".into()
            )
        );
        assert_eq!(
            cond(&r, OVERLAP),
            &(
                OVERLAP,
                false,
                "NoOverlap",
                "no pod is selected by another ProxyRestartPolicy".into()
            )
        );
        assert!(r.conditions.iter().all(|c| c.0 != GATEWAY));
        assert!(r.record_proxy);
        assert!(!r.record_gateway);
        assert_eq!(r.next, Next::Resync);
        assert_eq!(r.conditions[0].0, READY, "Ready first");
    }

    #[test]
    fn warnings_record_the_applied_state_with_upstreams_texts() {
        let mut o = outcome(Sidecars::Done);
        o.warnings = ["ns/bare".to_owned(), "ns/job-x".to_owned()].into();
        let r = report(&o);
        assert_eq!(r.state, State::Warning);
        assert_eq!(
            cond(&r, SIDECARS),
            &(
                SIDECARS,
                false,
                "ProxySidecarManualRestartRequired",
                "The sidecars of the following workloads could not be restarted: ns/bare, ns/job-x"
                    .into()
            )
        );
        assert!(r.record_proxy, "recorded even with warnings");
        assert_eq!(r.next, Next::Warning);
        assert!(
            r.description
                .ends_with(": could not restart one or more Istio-injected Pods")
        );
        assert!(cond(&r, READY).1);
    }

    #[test]
    fn a_partial_chunk_is_processing_and_requeued_without_recording() {
        let mut o = outcome(Sidecars::Partial { pending: 3 });
        o.warnings = ["ns/bare".to_owned()].into();
        let r = report(&o);
        assert_eq!(r.state, State::Processing);
        assert_eq!(
            cond(&r, READY),
            &(
                READY,
                false,
                "ReconcileRequeued",
                "Proxy reset is still ongoing. Reconciliation requeued".into()
            )
        );
        assert_eq!(
            cond(&r, SIDECARS),
            &(
                SIDECARS,
                false,
                "ProxySidecarRestartPartiallySucceeded",
                "Proxy sidecar restart partially succeeded".into()
            )
        );
        assert!(!r.record_proxy);
        assert_eq!(r.next, Next::Chunk);
    }

    #[test]
    fn failures_are_errors_and_record_nothing() {
        let mut o = outcome(Sidecars::Failed(
            "plugin \"sidecar\" (restart): timed out".into(),
        ));
        o.gateway = Some(Gateway::Restarted(
            "numTrustedProxies changed from 1 to 2".into(),
        ));
        let r = report(&o);
        assert_eq!(r.state, State::Error);
        assert_eq!(
            cond(&r, SIDECARS),
            &(
                SIDECARS,
                false,
                "ProxySidecarRestartFailed",
                "Proxy sidecar restart failed".into()
            )
        );
        let ready = cond(&r, READY);
        assert_eq!((ready.1, ready.2), (false, "ReconcileFailed"));
        assert!(ready.3.contains("timed out"), "{}", ready.3);
        assert_eq!(
            r.description,
            "Proxy sidecar restart failed: plugin \"sidecar\" (restart): timed out"
        );
        assert!(!r.record_proxy);
        assert!(
            r.record_gateway,
            "a sidecar error does not block the gateway (#655)"
        );
        assert_eq!(
            cond(&r, GATEWAY),
            &(
                GATEWAY,
                true,
                "IngressGatewayRestartSucceeded",
                "Istio Ingress Gateway restart succeeded".into()
            )
        );
        assert_eq!(r.next, Next::Error);
    }

    #[test]
    fn a_failed_gateway_is_an_error_and_keeps_its_change_pending() {
        let mut o = outcome(Sidecars::Done);
        o.gateway = Some(Gateway::Failed("forbidden".into()));
        let r = report(&o);
        assert_eq!(r.state, State::Error);
        assert_eq!(
            cond(&r, GATEWAY),
            &(
                GATEWAY,
                false,
                "IngressGatewayRestartFailed",
                "Istio Ingress Gateway restart failed".into()
            )
        );
        assert_eq!(
            r.description,
            "Istio Ingress Gateway restart failed: forbidden"
        );
        assert!(r.record_proxy, "the sidecars are done");
        assert!(!r.record_gateway);
        for g in [Gateway::Unchanged, Gateway::NotFound] {
            let mut o = outcome(Sidecars::Done);
            o.gateway = Some(g);
            let r = report(&o);
            assert_eq!(r.state, State::Ready);
            assert!(r.record_gateway);
        }
    }

    #[test]
    fn a_closed_window_is_processing_until_it_opens() {
        let opens: Timestamp = "2026-03-02T02:00:00Z".parse().unwrap();
        let r = report(&outcome(Sidecars::Waiting {
            pending: 2,
            opens: Some(opens),
        }));
        assert_eq!(r.state, State::Processing);
        let ready = cond(&r, READY);
        assert_eq!((ready.1, ready.2), (false, "MaintenanceWindowClosed"));
        assert!(ready.3.contains("2026-03-02T02:00:00Z"), "{}", ready.3);
        assert!(cond(&r, SIDECARS).3.starts_with("2 workload(s) wait"));
        assert_eq!(r.next, Next::Window(Some(opens)));
        assert!(!r.record_proxy);

        let mut o = outcome(Sidecars::Done);
        o.gateway = Some(Gateway::Waiting(Some(opens)));
        let r = report(&o);
        assert_eq!(r.state, State::Processing);
        assert_eq!(r.next, Next::Window(Some(opens)));
        assert!(r.record_proxy);
        assert!(!r.record_gateway);
    }

    #[test]
    fn ignored_plugin_failures_warn_and_record_nothing() {
        let mut o = outcome(Sidecars::Done);
        o.ignored = Some("30 pod(s) not evaluated: plugin failed".into());
        let r = report(&o);
        assert_eq!(r.state, State::Warning);
        assert_eq!(cond(&r, SIDECARS).2, "PluginFailureIgnored");
        assert!(!r.record_proxy, "those pods are judged again next time");
    }

    #[test]
    fn overlap_is_reported_or_left_alone_when_unknown() {
        let mut o = outcome(Sidecars::Done);
        o.overlap = Some(Some("pods are also selected by b".into()));
        let r = report(&o);
        assert_eq!(
            cond(&r, OVERLAP),
            &(
                OVERLAP,
                true,
                "PodsSelectedByOtherPolicies",
                "pods are also selected by b".into()
            )
        );
        o.overlap = None;
        assert!(report(&o).conditions.iter().all(|c| c.0 != OVERLAP));
    }

    fn would(ns: &str, kind: &str, name: &str, reason: &str) -> WouldRestartWorkload {
        WouldRestartWorkload {
            namespace: ns.into(),
            kind: kind.into(),
            name: name.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn a_dry_run_reports_what_would_restart_and_records_nothing() {
        let r = dry_run(report(&outcome(Sidecars::Done)), 2, false, 0);
        assert_eq!(r.state, State::DryRun);
        assert!(!r.record_proxy && !r.record_gateway, "nothing is applied");
        let ready = cond(&r, READY);
        assert_eq!((ready.1, ready.2), (false, "DryRun"));
        assert!(
            ready.3.contains("2 restart(s) would be made"),
            "{}",
            ready.3
        );
        assert_eq!(
            cond(&r, SIDECARS),
            &(
                SIDECARS,
                false,
                "DryRun",
                "2 workload(s) would restart now (spec.mode DryRun)".into()
            )
        );
        assert_eq!(r.next, Next::Resync);

        // Nothing would restart: the sidecars are in the desired state; still not Ready.
        let r = dry_run(report(&outcome(Sidecars::Done)), 0, false, 0);
        assert_eq!(r.state, State::DryRun);
        assert!(cond(&r, SIDECARS).1);
        assert!(!cond(&r, READY).1);

        // The chunk limit and the window are evaluated as usual.
        let r = dry_run(
            report(&outcome(Sidecars::Partial { pending: 3 })),
            2,
            false,
            3,
        );
        assert_eq!(r.next, Next::Chunk);
        assert_eq!(
            cond(&r, SIDECARS).3,
            "2 workload(s) would restart now and 3 would wait for the next chunk (spec.mode DryRun)"
        );
        let opens: Timestamp = "2026-03-02T02:00:00Z".parse().unwrap();
        let r = dry_run(
            report(&outcome(Sidecars::Waiting {
                pending: 1,
                opens: Some(opens),
            })),
            0,
            false,
            1,
        );
        assert_eq!(cond(&r, SIDECARS).2, "MaintenanceWindowClosed");
        assert_eq!(r.next, Next::Window(Some(opens)));
        assert!(
            r.description.contains("1 workload(s) would wait"),
            "{}",
            r.description
        );

        // The gateway.
        let mut o = outcome(Sidecars::Done);
        o.gateway = Some(Gateway::WouldRestart(
            "numTrustedProxies changed from 1 to 2".into(),
        ));
        let r = dry_run(report(&o), 0, true, 0);
        let gw = cond(&r, GATEWAY);
        assert_eq!((gw.1, gw.2), (false, "DryRun"));
        assert!(gw.3.ends_with("numTrustedProxies changed from 1 to 2"));
        assert!(r.description.contains("1 restart(s)"), "{}", r.description);
        assert!(!r.record_gateway);

        // Errors stay errors, and record nothing either.
        let r = dry_run(
            report(&outcome(Sidecars::Failed("boom".into()))),
            1,
            false,
            0,
        );
        assert_eq!(r.state, State::Error);
        assert_eq!(cond(&r, READY).2, "ReconcileFailed");
        assert_eq!(r.next, Next::Error);
    }

    #[test]
    fn the_would_restart_list_is_sorted_unique_and_capped_with_a_count() {
        let mut all: Vec<_> = (0..60)
            .rev()
            .map(|i| would("ns", "Deployment", &format!("w{i:02}"), "image"))
            .collect();
        all.push(would("ns", "Deployment", "w00", "again"));
        all.push(would("a", "Pod", "p", &"x".repeat(1000)));
        let w = would_restart(all);
        assert_eq!(w.count, 61);
        assert_eq!(w.workloads.len(), MAX_WOULD_RESTART);
        assert_eq!(w.workloads[0].name, "p");
        assert!(w.workloads[0].reason.len() <= 256);
        assert_eq!(w.workloads[1].name, "w00");
        assert_eq!(w.workloads[49].name, "w48");
        assert_eq!(would_restart(Vec::new()), WouldRestart::default());
    }

    #[test]
    fn a_suspended_status_keeps_the_last_pass_and_is_written_once() {
        use wasmop_api::proxyrestartpolicy::RestartSummary;
        let c = |t: &str, ok: bool, reason: &str| {
            conditions::condition(&[], t, ok, reason, "m", Some(1))
        };
        let previous = ProxyRestartPolicyStatus {
            state: Some("Processing".into()),
            description: Some("Proxy reset is still ongoing".into()),
            observed_generation: Some(1),
            summary: Some(RestartSummary {
                workloads_pending: 3,
                ..RestartSummary::default()
            }),
            overlapping_policies: vec!["b".into()],
            conditions: vec![
                c(READY, false, reason::RECONCILE_REQUEUED),
                c(SIDECARS, false, reason::SIDECARS_PARTIAL),
                c("PluginReady", true, "Loaded"),
            ],
            ..ProxyRestartPolicyStatus::default()
        };
        let s = suspended(&previous, Some(2));
        assert_eq!(s.state.as_deref(), Some("Suspended"));
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(
            s.summary, previous.summary,
            "what the last pass found is kept"
        );
        assert_eq!(s.overlapping_policies, ["b"]);
        let ready = conditions::find(&s.conditions, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Suspended")
        );
        assert_eq!(ready.observed_generation, Some(2));
        assert_eq!(
            ready.last_transition_time, previous.conditions[0].last_transition_time,
            "Ready was False already"
        );
        assert_eq!(
            conditions::find(&s.conditions, SIDECARS),
            Some(&previous.conditions[1])
        );
        assert!(
            conditions::find(&s.conditions, "PluginReady").is_none(),
            "another field manager's condition is not written"
        );
        assert_eq!(suspended(&s, Some(2)), s, "nothing to write again");
    }
}
