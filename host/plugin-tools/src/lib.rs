//! The tools of plugin authors, without the operator: `plugin new|check|check-registry|run|
//! test|scaffold|push|pull`, as the `wasmop-plugin` binary (src/main.rs) and as `wasmop plugin
//! …` (host/wasmop/src/cli.rs), which takes [`PluginCommand`] and [`run`] from here.
//!
//! - [`commands`]: the command line of each tool and what it does.
//! - [`plugin_new`]: `plugin new`, a plugin to start from, from the embedded `templates/`.
//! - `conformance`: `plugin test`'s suite, the properties every plugin of a hook must have.
//! - `wit_json`: requests and answers as JSON with the WIT's names (`plugin run`, fixtures).
//!
//! It depends on the plugin host and small crates only, no Kubernetes client and no operator
//! crate (tests/dependencies.rs), so that an author builds it without building the operator.
#![forbid(unsafe_code)]

pub mod commands;
mod conformance;
pub mod plugin_new;
mod wit_json;

pub use commands::{
    PluginCommand, load_for_cli, load_registry_file, parse_data_root, parse_duration, run,
};

/// The format of log lines (`--log-format` of `wasmop` and `wasmop-plugin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the process's log subscriber: lines on stderr filtered by `log` (RUST_LOG syntax;
/// `default` when absent or invalid), as `format`, in colour only on a terminal.
pub fn init_logs(log: Option<&str>, default: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(log.unwrap_or(default))
        .unwrap_or_else(|_| default.into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
}
