//! Prometheus metrics of the operator, served at `/metrics`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `wasmop_plugin_calls_total` | counter | plugin, hook, outcome (`ok` or a failure label) |
//! | `wasmop_plugin_call_duration_seconds` | histogram | plugin, hook |
//! | `wasmop_plugin_reloads_total` | counter | plugin, result (`loaded`, `failed`) |

use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::plugins::PluginSpec;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    plugin: String,
    hook: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
    hook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    plugin: String,
    result: String,
}

struct Metrics {
    registry: Mutex<Registry>,
    calls: Family<CallLabels, Counter>,
    durations: Family<PluginLabels, Histogram>,
    reloads: Family<ReloadLabels, Counter>,
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
    registry.register(
        "plugin_reloads",
        "Plugin (re)loads by result",
        reloads.clone(),
    );
    Metrics {
        registry: Mutex::new(registry),
        calls,
        durations,
        reloads,
    }
});

/// Records one plugin call; `failure` is the failure label, `None` for success.
pub fn plugin_call(spec: &PluginSpec, elapsed: Duration, failure: Option<&str>) {
    let m = &*METRICS;
    let (plugin, hook) = (spec.name.clone(), spec.hook.as_str().to_owned());
    m.calls
        .get_or_create(&CallLabels {
            plugin: plugin.clone(),
            hook: hook.clone(),
            outcome: failure.unwrap_or("ok").into(),
        })
        .inc();
    m.durations
        .get_or_create(&PluginLabels { plugin, hook })
        .observe(elapsed.as_secs_f64());
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

/// The registered metrics in the Prometheus text format.
pub fn encode() -> String {
    let mut out = String::new();
    let registry = METRICS.registry.lock().unwrap_or_else(|e| e.into_inner());
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}
