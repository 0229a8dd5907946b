//! DR metrics, registered under the `wasmop_` prefix on first use:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `wasmop_dr_active` | gauge | 1 while this instance is active, else 0 |
//! | `wasmop_dr_transitions_total` | counter | `to` (`active`, `passive`), `cause` |
//! | `wasmop_dr_lease_writes_total` | counter | `backend`, `action` (`create`, `renew`, `takeover`), `outcome` (`ok`, `conflict`, `error`, `timeout`) |
//! | `wasmop_dr_ticks_total` | counter | `outcome` (`ok`, `read_error`, `plugin_error`, `write_error`, `conflict`, `config_error`, `refused`: a write the host does not allow) |
//! | `wasmop_dr_config_valid` | gauge | 1 while the DR settings are usable, else 0 |
//!
//! `cause` of a transition: `create`, `takeover`, `renew` (a lease this instance wrote earlier,
//! confirmed), `none` (the `none` backend), `decision` (the plugin said passive), `conflict` (the
//! compare-and-swap failed: someone else wrote), `expired` (no renewal before the hold ran out),
//! `config` (unusable settings or backend change), `plugin` (no state checker).

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    to: String,
    cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    backend: String,
    action: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TickLabels {
    outcome: String,
}

struct Metrics {
    active: Gauge,
    transitions: Family<TransitionLabels, Counter>,
    writes: Family<WriteLabels, Counter>,
    ticks: Family<TickLabels, Counter>,
    config_valid: Gauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let m = Metrics {
        active: Gauge::default(),
        transitions: Family::default(),
        writes: Family::default(),
        ticks: Family::default(),
        config_valid: Gauge::default(),
    };
    wasmop_kernel::metrics::register(
        "dr_active",
        "1 while this instance is the active DR instance (writes allowed), 0 while passive",
        m.active.clone(),
    );
    wasmop_kernel::metrics::register(
        "dr_transitions",
        "DR state transitions by new state and cause",
        m.transitions.clone(),
    );
    wasmop_kernel::metrics::register(
        "dr_lease_writes",
        "Lease writes (they bypass the write gate) by backend, action and outcome",
        m.writes.clone(),
    );
    wasmop_kernel::metrics::register("dr_ticks", "DR loop ticks by outcome", m.ticks.clone());
    wasmop_kernel::metrics::register(
        "dr_config_valid",
        "1 while the DR settings are usable, 0 while they are not (the instance stays passive)",
        m.config_valid.clone(),
    );
    m
});

/// Records a transition to `active` (or passive) for `cause`.
pub fn transition(active: bool, cause: &str) {
    let m = &*METRICS;
    m.active.set(i64::from(active));
    m.transitions
        .get_or_create(&TransitionLabels {
            to: if active { "active" } else { "passive" }.into(),
            cause: cause.into(),
        })
        .inc();
}

/// Records one lease write.
pub(crate) fn lease_write(backend: &str, action: &str, outcome: &str) {
    METRICS
        .writes
        .get_or_create(&WriteLabels {
            backend: backend.into(),
            action: action.into(),
            outcome: outcome.into(),
        })
        .inc();
}

/// Records one tick's outcome.
pub fn tick(outcome: &str) {
    METRICS
        .ticks
        .get_or_create(&TickLabels {
            outcome: outcome.into(),
        })
        .inc();
}

/// Records whether the DR settings are usable.
pub fn config_valid(valid: bool) {
    METRICS.config_valid.set(i64::from(valid));
}
