//! The plugin host's metrics. A `PluginRuntime` owns one
//! [`PluginMetrics`] and records every call and load in it; the operator registers them into its
//! process registry once (`PluginRuntime::register_metrics`).
//!
//! | metric (after the registry's `wasmop_` prefix) | type | labels |
//! |---|---|---|
//! | `wasmop_plugin_calls_total` | counter | plugin, hook, outcome (`ok` or a failure label) |
//! | `wasmop_plugin_call_duration_seconds` | histogram | plugin, hook |
//! | `wasmop_plugin_memory_peak_bytes` | histogram | plugin, hook (linear memory at its largest per call) |
//! | `wasmop_plugin_memory_grows_total` | counter | plugin, hook (calls whose memory grew past its initial size) |
//! | `wasmop_plugin_reloads_total` | counter | plugin, result (`loaded`, `failed`) |
//! | `wasmop_plugin_ready` | gauge | plugin, hook (1 while the entry's latest version serves, else 0) |
//! | `wasmop_plugins_config_last_reload_successful` | gauge | (1 while ConfigMap `wasmop-plugins` is in use, 0 while the builtins stand in for it) |

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::sandbox::MemoryUse;
use crate::spec::{Hook, PluginSpec};

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

/// The plugin host's metric families (see the module's table). Recording works whether or not
/// they are registered anywhere.
pub struct PluginMetrics {
    calls: Family<CallLabels, Counter>,
    durations: Family<PluginLabels, Histogram>,
    memory_peaks: Family<PluginLabels, Histogram>,
    memory_grows: Family<PluginLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    ready: Family<PluginLabels, Gauge>,
    /// The label sets `ready` holds, so entries that left the registry can be removed.
    entries: Mutex<BTreeSet<PluginLabels>>,
    config_valid: Gauge,
}

impl Default for PluginMetrics {
    fn default() -> Self {
        Self {
            calls: Family::default(),
            durations: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_01, 4.0, 10))
            }),
            // 1 MiB to 128 MiB: the default memory limit is 64 MiB.
            memory_peaks: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1_048_576.0, 2.0, 8))
            }),
            memory_grows: Family::default(),
            reloads: Family::default(),
            ready: Family::default(),
            entries: Mutex::default(),
            config_valid: Gauge::default(),
        }
    }
}

impl PluginMetrics {
    /// Registers every family into `registry` (whose prefix, `wasmop` in the operator, comes
    /// first in each name).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "plugin_calls",
            "Plugin calls by outcome",
            self.calls.clone(),
        );
        registry.register(
            "plugin_call_duration_seconds",
            "Plugin call wall time",
            self.durations.clone(),
        );
        registry.register(
            "plugin_memory_peak_bytes",
            "Linear memory of a plugin call at its largest",
            self.memory_peaks.clone(),
        );
        registry.register(
            "plugin_memory_grows",
            "Plugin calls whose linear memory grew past its initial size",
            self.memory_grows.clone(),
        );
        registry.register(
            "plugin_reloads",
            "Plugin (re)loads by result",
            self.reloads.clone(),
        );
        registry.register(
            "plugin_ready",
            "1 while the registry entry's latest version serves calls, else 0",
            self.ready.clone(),
        );
        registry.register(
            "plugins_config_last_reload_successful",
            "1 while the plugin registry ConfigMap is in use, 0 while the builtin defaults stand in for it",
            self.config_valid.clone(),
        );
    }

    /// Records one plugin call; `failure` is the failure label, `None` for success.
    pub(crate) fn call(&self, spec: &PluginSpec, elapsed: Duration, failure: Option<&str>) {
        let labels = PluginLabels::of(spec);
        self.calls
            .get_or_create(&CallLabels {
                plugin: labels.plugin.clone(),
                hook: labels.hook.clone(),
                outcome: failure.unwrap_or("ok").into(),
            })
            .inc();
        self.durations
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Records the linear memory of one plugin call: its peak, and whether it grew past the
    /// initial size.
    pub(crate) fn memory(&self, spec: &PluginSpec, memory: MemoryUse) {
        let labels = PluginLabels::of(spec);
        self.memory_peaks
            .get_or_create(&labels)
            .observe(memory.peak as f64);
        if memory.grew() {
            self.memory_grows.get_or_create(&labels).inc();
        }
    }

    /// Records one plugin (re)load of registry entry `plugin`.
    pub fn reload(&self, plugin: &str, ok: bool) {
        self.reloads
            .get_or_create(&ReloadLabels {
                plugin: plugin.into(),
                result: if ok { "loaded" } else { "failed" }.into(),
            })
            .inc();
    }

    /// Sets the registry gauges from its entries, each `(name, hook, ready)`, and whether its
    /// configuration is in use (the registry's statuses after a reload): `wasmop_plugin_ready`
    /// per entry, removing entries that left the registry, and
    /// `wasmop_plugins_config_last_reload_successful`, as Prometheus' own
    /// `prometheus_config_last_reload_successful`.
    pub fn registry_state<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, Option<Hook>, bool)>,
        config_in_use: bool,
    ) {
        let mut known = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut now = BTreeSet::new();
        for (name, hook, ready) in entries {
            let labels = PluginLabels {
                plugin: name.to_owned(),
                hook: hook.map_or("", |h| h.as_str()).to_owned(),
            };
            self.ready.get_or_create(&labels).set(i64::from(ready));
            now.insert(labels);
        }
        for gone in known.difference(&now) {
            self.ready.remove(gone);
        }
        *known = now;
        self.config_valid.set(i64::from(config_in_use));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let metrics = PluginMetrics::default();
        metrics.register(&mut registry);
        metrics.registry_state(
            [
                ("a", Some(Hook::Routing), true),
                ("b", Some(Hook::Routing), false),
            ],
            true,
        );
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
        metrics.registry_state([("b", Some(Hook::Routing), true)], false);
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
