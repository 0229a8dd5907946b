//! Options of the restart controller: the flags of `wasmop run`.

use std::time::Duration;

/// Options of the restart controller (flags of `wasmop run`).
#[derive(Clone, Debug, clap::Args)]
#[group(skip)]
pub struct Options {
    /// How often a policy is reconciled when nothing changes and all is done (upstream: 10h).
    #[arg(long = "restart-resync-interval", env = "WASMOP_RESTART_RESYNC_INTERVAL", default_value = "10h", value_parser = crate::schedule::parse_interval)]
    pub resync_interval: Duration,
    /// How soon a policy with warnings (workloads that need a manual restart) is reconciled
    /// again (upstream: 1h).
    #[arg(long = "restart-warning-interval", env = "WASMOP_RESTART_WARNING_INTERVAL", default_value = "1h", value_parser = crate::schedule::parse_interval)]
    pub warning_interval: Duration,
    /// How soon a failed reconcile (an API error, a plugin failure with `failurePolicy: Fail`)
    /// is retried.
    #[arg(long = "restart-error-interval", env = "WASMOP_RESTART_ERROR_INTERVAL", default_value = "30s", value_parser = crate::schedule::parse_interval)]
    pub error_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            resync_interval: Duration::from_secs(10 * 3600),
            warning_interval: Duration::from_secs(3600),
            error_interval: Duration::from_secs(30),
        }
    }
}
