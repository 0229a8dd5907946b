//! Prometheus metrics of the operator, served at `/metrics`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `wasmop_plugin_calls_total` | counter | plugin, hook, outcome (`ok` or a failure label) |
//! | `wasmop_plugin_call_duration_seconds` | histogram | plugin, hook |
//! | `wasmop_plugin_memory_peak_bytes` | histogram | plugin, hook (linear memory at its largest per call) |
//! | `wasmop_plugin_memory_grows_total` | counter | plugin, hook (calls whose memory grew past its initial size) |
//! | `wasmop_plugin_reloads_total` | counter | plugin, result (`loaded`, `failed`) |
//! | `wasmop_plugin_ready` | gauge | plugin, hook (1 while the entry's latest version serves, else 0) |
//! | `wasmop_plugins_config_last_reload_successful` | gauge | (1 while ConfigMap `wasmop-plugins` is in use, 0 while the builtins stand in for it) |
//! | `wasmop_writes_total` | counter | verb, kind, outcome (`ok`, `passive`, `conflict`, `not_found`, `api`, `client`) |
//! | `wasmop_reconcile_total` | counter | controller, outcome (`ok` or an error label) |
//! | `wasmop_reconcile_duration_seconds` | histogram | controller |
//!
//! Controllers register metrics of their own with [`register`].

use std::collections::BTreeSet;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::plugins::PluginSpec;
use crate::plugins::registry::PluginStatus;
use crate::plugins::sandbox::MemoryUse;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    plugin: String,
    hook: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
    hook: String,
}

impl PluginLabels {
    fn of(spec: &PluginSpec) -> Self {
        Self {
            plugin: spec.name.clone(),
            hook: spec.hook.as_str().to_owned(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    plugin: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    verb: String,
    kind: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    controller: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

struct Metrics {
    registry: Mutex<Registry>,
    calls: Family<CallLabels, Counter>,
    durations: Family<PluginLabels, Histogram>,
    memory_peaks: Family<PluginLabels, Histogram>,
    memory_grows: Family<PluginLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    registry_gauges: RegistryGauges,
    writes: Family<WriteLabels, Counter>,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_durations: Family<ControllerLabels, Histogram>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("wasmop");
    let calls = Family::<CallLabels, Counter>::default();
    let durations = Family::<PluginLabels, Histogram>::new_with_constructor(|| {
        Histogram::new(exponential_buckets(0.000_01, 4.0, 10))
    });
    let reloads = Family::<ReloadLabels, Counter>::default();
    registry.register("plugin_calls", "Plugin calls by outcome", calls.clone());
    registry.register(
        "plugin_call_duration_seconds",
        "Plugin call wall time",
        durations.clone(),
    );
    // 1 MiB to 128 MiB: the default memory limit is 64 MiB.
    let memory_peaks = Family::<PluginLabels, Histogram>::new_with_constructor(|| {
        Histogram::new(exponential_buckets(1_048_576.0, 2.0, 8))
    });
    registry.register(
        "plugin_memory_peak_bytes",
        "Linear memory of a plugin call at its largest",
        memory_peaks.clone(),
    );
    let memory_grows = Family::<PluginLabels, Counter>::default();
    registry.register(
        "plugin_memory_grows",
        "Plugin calls whose linear memory grew past its initial size",
        memory_grows.clone(),
    );
    registry.register(
        "plugin_reloads",
        "Plugin (re)loads by result",
        reloads.clone(),
    );
    let registry_gauges = RegistryGauges::registered(&mut registry);
    let writes = Family::<WriteLabels, Counter>::default();
    registry.register(
        "writes",
        "Writes to the API server by verb, kind and outcome",
        writes.clone(),
    );
    let reconciles = Family::<ReconcileLabels, Counter>::default();
    registry.register(
        "reconcile",
        "Reconciles by controller and outcome",
        reconciles.clone(),
    );
    let reconcile_durations = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
        Histogram::new(exponential_buckets(0.000_5, 4.0, 10))
    });
    registry.register(
        "reconcile_duration_seconds",
        "Reconcile wall time",
        reconcile_durations.clone(),
    );
    Metrics {
        registry: Mutex::new(registry),
        calls,
        durations,
        memory_peaks,
        memory_grows,
        reloads,
        registry_gauges,
        writes,
        reconciles,
        reconcile_durations,
    }
});

/// Records one plugin call; `failure` is the failure label, `None` for success.
pub fn plugin_call(spec: &PluginSpec, elapsed: Duration, failure: Option<&str>) {
    let m = &*METRICS;
    let labels = PluginLabels::of(spec);
    m.calls
        .get_or_create(&CallLabels {
            plugin: labels.plugin.clone(),
            hook: labels.hook.clone(),
            outcome: failure.unwrap_or("ok").into(),
        })
        .inc();
    m.durations
        .get_or_create(&labels)
        .observe(elapsed.as_secs_f64());
}

/// Records the linear memory of one plugin call: its peak, and whether it grew past the
/// initial size (see `plugins::sandbox::MemoryUse`).
pub fn plugin_memory(spec: &PluginSpec, memory: MemoryUse) {
    let m = &*METRICS;
    let labels = PluginLabels::of(spec);
    m.memory_peaks
        .get_or_create(&labels)
        .observe(memory.peak as f64);
    if memory.grew() {
        m.memory_grows.get_or_create(&labels).inc();
    }
}

/// Records one plugin (re)load.
pub fn plugin_reload(plugin: &str, ok: bool) {
    METRICS
        .reloads
        .get_or_create(&ReloadLabels {
            plugin: plugin.into(),
            result: if ok { "loaded" } else { "failed" }.into(),
        })
        .inc();
}

/// Sets the registry gauges after a reload from its entries' readiness and its configuration
/// error (`Registry::statuses`): `wasmop_plugin_ready` per entry, removing entries that left
/// the registry, and `wasmop_plugins_config_last_reload_successful`, as Prometheus' own
/// `prometheus_config_last_reload_successful`.
pub fn plugin_registry(statuses: &[PluginStatus], config_error: Option<&str>) {
    METRICS.registry_gauges.set(statuses, config_error);
}

/// The gauges of the plugin registry's state (see [`plugin_registry`]).
struct RegistryGauges {
    ready: Family<PluginLabels, Gauge>,
    /// The label sets `ready` holds, so entries that left the registry can be removed.
    entries: Mutex<BTreeSet<PluginLabels>>,
    config_valid: Gauge,
}

impl RegistryGauges {
    fn registered(registry: &mut Registry) -> Self {
        let gauges = Self {
            ready: Family::default(),
            entries: Mutex::default(),
            config_valid: Gauge::default(),
        };
        registry.register(
            "plugin_ready",
            "1 while the registry entry's latest version serves calls, else 0",
            gauges.ready.clone(),
        );
        registry.register(
            "plugins_config_last_reload_successful",
            "1 while the plugin registry ConfigMap is in use, 0 while the builtin defaults stand in for it",
            gauges.config_valid.clone(),
        );
        gauges
    }

    fn set(&self, statuses: &[PluginStatus], config_error: Option<&str>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut now = BTreeSet::new();
        for status in statuses {
            let labels = PluginLabels {
                plugin: status.name.clone(),
                hook: status.hook.map_or("", |h| h.as_str()).to_owned(),
            };
            self.ready
                .get_or_create(&labels)
                .set(i64::from(status.ready));
            now.insert(labels);
        }
        for gone in entries.difference(&now) {
            self.ready.remove(gone);
        }
        *entries = now;
        self.config_valid.set(i64::from(config_error.is_none()));
    }
}

/// Records one write to the API server (see `runtime::gate::Writer`).
pub fn write(verb: &str, kind: &str, outcome: &str) {
    METRICS
        .writes
        .get_or_create(&WriteLabels {
            verb: verb.into(),
            kind: kind.into(),
            outcome: outcome.into(),
        })
        .inc();
}

/// Records one reconcile of `controller`; `outcome` is `ok` or a stable error label.
pub fn reconcile(controller: &str, elapsed: Duration, outcome: &str) {
    let m = &*METRICS;
    m.reconciles
        .get_or_create(&ReconcileLabels {
            controller: controller.into(),
            outcome: outcome.into(),
        })
        .inc();
    m.reconcile_durations
        .get_or_create(&ControllerLabels {
            controller: controller.into(),
        })
        .observe(elapsed.as_secs_f64());
}

/// Registers a metric of a controller under the `wasmop_` prefix (call once, at start).
pub fn register(name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
    METRICS
        .registry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .register(name, help, metric);
}

/// The registered metrics in the Prometheus text format.
pub fn encode() -> String {
    let mut out = String::new();
    let registry = METRICS.registry.lock().unwrap_or_else(|e| e.into_inner());
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::Hook;

    fn status(name: &str, ready: bool) -> PluginStatus {
        PluginStatus {
            name: name.into(),
            hook: Some(Hook::Routing),
            ready,
            reason: if ready { "Loaded" } else { "LoadFailed" }.into(),
            message: String::new(),
            serving_digest: None,
        }
    }

    /// The sample lines of `registry` that start with `prefix`, sorted.
    fn lines(registry: &Registry, prefix: &str) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn the_registry_gauges_follow_each_reload() {
        let mut registry = Registry::with_prefix("wasmop");
        let gauges = RegistryGauges::registered(&mut registry);
        gauges.set(&[status("a", true), status("b", false)], None);
        assert_eq!(
            lines(&registry, "wasmop_plugin_ready{"),
            [
                "wasmop_plugin_ready{plugin=\"a\",hook=\"routing\"} 1",
                "wasmop_plugin_ready{plugin=\"b\",hook=\"routing\"} 0",
            ]
        );
        assert_eq!(
            lines(&registry, "wasmop_plugins_config_last_reload_successful "),
            ["wasmop_plugins_config_last_reload_successful 1"]
        );

        // b recovers, a leaves the registry, and the ConfigMap turns invalid.
        gauges.set(&[status("b", true)], Some("invalid"));
        assert_eq!(
            lines(&registry, "wasmop_plugin_ready{"),
            ["wasmop_plugin_ready{plugin=\"b\",hook=\"routing\"} 1"]
        );
        assert_eq!(
            lines(&registry, "wasmop_plugins_config_last_reload_successful "),
            ["wasmop_plugins_config_last_reload_successful 0"]
        );
    }
}
