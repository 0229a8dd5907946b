//! The process's Prometheus registry (every metric under the `wasmop_` prefix, served at
//! `/metrics`) and the metrics of the kernel itself:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `wasmop_writes_total` | counter | verb, kind, outcome (`ok`, `passive`, `conflict`, `not_found`, `api`, `client`) |
//! | `wasmop_reconcile_total` | counter | controller, outcome (`ok` or an error label) |
//! | `wasmop_reconcile_duration_seconds` | histogram | controller |
//! | `wasmop_build_info` | gauge, always 1 | version (the crate version), commit (`WASMOP_COMMIT` at build time, set by scripts/build-release.sh; `unknown` otherwise) |
//!
//! Beside them, without the prefix, the process metrics every Prometheus client library
//! exports, read from `/proc/self` at each scrape: `process_cpu_seconds_total`,
//! `process_resident_memory_bytes` and `process_open_fds` (none off Linux).
//!
//! Controllers register metrics of their own with [`register`]; the plugin host registers its
//! metrics through [`register_with`] (`wasmop_plugin_host::metrics`).

use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

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
struct BuildLabels {
    version: String,
    commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

struct Metrics {
    registry: Mutex<Registry>,
    writes: Family<WriteLabels, Counter>,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_durations: Family<ControllerLabels, Histogram>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("wasmop");
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
    let build = Family::<BuildLabels, prometheus_client::metrics::gauge::Gauge>::default();
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            commit: option_env!("WASMOP_COMMIT").unwrap_or("unknown").to_owned(),
        })
        .set(1);
    registry.register(
        "build_info",
        "The running build: its version and commit (always 1)",
        build,
    );
    Metrics {
        registry: Mutex::new(registry),
        writes,
        reconciles,
        reconcile_durations,
    }
});

/// Records one write to the API server (the gate's writer calls it for every write).
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

/// Registers a metric under the `wasmop_` prefix (call once per metric, at start).
pub fn register(name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
    register_with(|registry| registry.register(name, help, metric));
}

/// Hands the process registry (prefix `wasmop_`) to `f`, e.g. for a component that registers
/// a set of metrics of its own.
pub fn register_with(f: impl FnOnce(&mut Registry)) {
    f(&mut METRICS.registry.lock().unwrap_or_else(|e| e.into_inner()));
}

/// The registered metrics in the Prometheus text format.
pub fn encode() -> String {
    use prometheus_client::encoding::text;
    static PROCESS: LazyLock<Registry> = LazyLock::new(|| {
        let mut r = Registry::default();
        r.register_collector(Box::new(ProcessCollector));
        r
    });
    let mut out = String::new();
    let registry = METRICS.registry.lock().unwrap_or_else(|e| e.into_inner());
    text::encode_registry(&mut out, &registry)
        .and_then(|()| text::encode_registry(&mut out, &PROCESS))
        .and_then(|()| text::encode_eof(&mut out))
        .expect("writing to a String cannot fail");
    out
}

/// `process_*` from `/proc/self` (module documentation). CPU time is in clock ticks of 1/100 s,
/// the `USER_HZ` Linux reports on every architecture.
#[derive(Debug)]
struct ProcessCollector;

impl prometheus_client::collector::Collector for ProcessCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        if let (Some(utime), Some(stime)) = (ticks(11), ticks(12)) {
            let cpu = ConstCounter::new((utime + stime) as f64 / 100.0);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds",
                None,
                cpu.metric_type(),
            )?)?;
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok());
        if let Some(kib) = rss_kib {
            let rss = ConstGauge::new(kib * 1024);
            rss.encode(encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory, in bytes",
                None,
                rss.metric_type(),
            )?)?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            let open = ConstGauge::new(i64::try_from(fds.count()).unwrap_or(i64::MAX));
            open.encode(encoder.encode_descriptor(
                "process_open_fds",
                "Open file descriptors",
                None,
                open.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_metrics_are_read_at_each_scrape() {
        let value = |text: &str, name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} in\n{text}"))
                .parse()
                .unwrap()
        };
        let before = encode();
        assert!(value(&before, "process_resident_memory_bytes") > 1_000_000.0);
        assert!(value(&before, "process_open_fds") >= 3.0);
        let spin = std::time::Instant::now();
        let mut n = 0u64;
        while spin.elapsed() < Duration::from_millis(300) {
            n = n.wrapping_add(std::hint::black_box(1));
        }
        let after = encode();
        assert!(
            value(&after, "process_cpu_seconds_total")
                > value(&before, "process_cpu_seconds_total"),
            "CPU time moves ({n} spins)"
        );
        assert_eq!(after.matches("# EOF").count(), 1, "{after}");
        assert!(after.trim_end().ends_with("# EOF"));
    }

    #[test]
    fn the_build_is_named_in_the_metrics() {
        let text = encode();
        let line = text
            .lines()
            .find(|l| l.starts_with("wasmop_build_info{"))
            .unwrap_or_else(|| panic!("no wasmop_build_info in\n{text}"));
        assert!(
            line.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
                && line.contains("commit=\"")
                && line.ends_with(" 1"),
            "{line}"
        );
    }

    #[test]
    fn writes_and_reconciles_are_counted_in_the_process_registry() {
        write("patch", "TestKind", "ok");
        write("patch", "TestKind", "ok");
        reconcile("test-controller", Duration::from_millis(3), "ok");
        let text = encode();
        assert!(
            text.contains(r#"wasmop_writes_total{verb="patch",kind="TestKind",outcome="ok"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"wasmop_reconcile_total{controller="test-controller",outcome="ok"} 1"#),
            "{text}"
        );
    }
}
