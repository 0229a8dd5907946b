//! Options of the scaling controller: the flags of `wasmop run`.

use std::time::Duration;

/// Options of the scaling controller (flags of `wasmop run`).
#[derive(Clone, Debug, clap::Args)]
pub struct Options {
    /// How often the trigger poller asks the scaler plugin for every trigger's vote (e.g.
    /// `30s`, `500ms`, `1m`).
    #[arg(long = "poll-interval", env = "WASMOP_SCALING_POLL_INTERVAL", default_value = "30s", value_parser = crate::schedule::parse_interval)]
    pub poll_interval: Duration,
    /// Namespace of the resolver pods; the operator namespace (`--namespace`) when unset.
    #[arg(long = "resolver-namespace", env = "WASMOP_SCALING_RESOLVER_NAMESPACE")]
    pub resolver_namespace: Option<String>,
    /// Label selector of the resolver pods whose IPs the public Services point at in proxy mode.
    #[arg(
        long = "resolver-selector",
        env = "WASMOP_SCALING_RESOLVER_SELECTOR",
        default_value = "app.kubernetes.io/name=wasmop-resolver"
    )]
    pub resolver_selector: String,
    /// The resolver's proxy port: every port of a public Service is redirected to it.
    #[arg(long = "resolver-port", env = "WASMOP_SCALING_RESOLVER_PORT", default_value_t = 8012, value_parser = clap::value_parser!(i32).range(1..=65535))]
    pub resolver_port: i32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(30),
            resolver_namespace: None,
            resolver_selector: "app.kubernetes.io/name=wasmop-resolver".into(),
            resolver_port: 8012,
        }
    }
}
