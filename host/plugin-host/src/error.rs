//! How a plugin call or load fails: every error names the plugin, the hook and the cause.

use std::fmt;

use crate::spec::Hook;

/// Why a call failed.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// The call ran past `limits.timeoutMs`.
    Timeout {
        /// The limit in milliseconds.
        limit_ms: u32,
    },
    /// Growth of the call's linear memories and tables, together, past `limits.memoryMiB` was
    /// refused (at instantiation, or at a `memory.grow` or `table.grow`).
    OutOfMemory {
        /// The limit in MiB.
        limit_mib: u32,
    },
    /// The guest trapped (panic, unreachable, bounds, stack overflow...).
    Trap(String),
    /// The guest called `exit` (`wasi:cli/exit`, e.g. Rust's `std::process::exit`) instead of
    /// returning an answer.
    Exited {
        /// The exit status it asked for (1 for `exit(err)` without a code).
        status: i32,
    },
    /// The guest handed the host more bytes at once (its answer, a log line, a stderr write, an
    /// HTTP body chunk) than the call's hostcall fuel, `limits.maxOutputKiB` plus
    /// [`HOSTCALL_FUEL_MARGIN`](crate::sandbox::HOSTCALL_FUEL_MARGIN): refused while copying.
    TransferTooLarge {
        /// The fuel in KiB.
        limit_kib: usize,
    },
    /// The output is larger than `limits.maxOutputKiB`: the answer's strings, or a
    /// `plugin-error`'s message and field together.
    OutputTooLarge {
        /// Output size in KiB.
        size_kib: usize,
        /// The limit in KiB.
        limit_kib: u32,
    },
    /// The output does not have the documented shape.
    InvalidOutput(String),
    /// The plugin tried to reach hosts it was not granted.
    DeniedHost {
        /// The first distinct authorities (`host:port`) denied, at most
        /// [`MAX_DENIED_HOSTS`](crate::sandbox::MAX_DENIED_HOSTS), each cut to
        /// [`MAX_DENIED_HOST_BYTES`](crate::sandbox::MAX_DENIED_HOST_BYTES).
        hosts: Vec<String>,
        /// Denied requests past those.
        more: usize,
    },
    /// The plugin returned a `plugin-error`.
    Plugin {
        /// Its message.
        message: String,
        /// The field it names, if any.
        field: Option<String>,
    },
    /// The component could not be instantiated (missing imports, wrong world).
    Instantiate(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Timeout { limit_ms } => {
                write!(f, "timed out after {limit_ms} ms (limits.timeoutMs)")
            }
            Failure::OutOfMemory { limit_mib } => write!(
                f,
                "out of memory: the call's linear memories and tables together exceeded \
                 {limit_mib} MiB (limits.memoryMiB)"
            ),
            Failure::Trap(m) => write!(f, "trapped: {m}"),
            Failure::Exited { status } => write!(
                f,
                "exited with status {status} instead of answering (a plugin returns its answer \
                 or a plugin-error; it must not call exit)"
            ),
            Failure::TransferTooLarge { limit_kib } => write!(
                f,
                "handed the host more than {limit_kib} KiB at once (an answer, log line or \
                 HTTP body chunk; limits.maxOutputKiB plus {} KiB)",
                crate::sandbox::HOSTCALL_FUEL_MARGIN >> 10
            ),
            Failure::OutputTooLarge {
                size_kib,
                limit_kib,
            } => {
                write!(
                    f,
                    "output of {size_kib} KiB exceeds {limit_kib} KiB (limits.maxOutputKiB)"
                )
            }
            Failure::InvalidOutput(m) => write!(f, "invalid output: {m}"),
            Failure::DeniedHost { hosts, more: 0 } => write!(
                f,
                "denied outbound request to {} (not in grants.allowedHosts)",
                hosts.join(", ")
            ),
            Failure::DeniedHost { hosts, more } => write!(
                f,
                "denied outbound request to {} and {more} more (not in grants.allowedHosts)",
                hosts.join(", ")
            ),
            Failure::Plugin {
                message,
                field: Some(field),
            } => write!(f, "plugin error at {field}: {message}"),
            Failure::Plugin {
                message,
                field: None,
            } => write!(f, "plugin error: {message}"),
            Failure::Instantiate(m) => write!(f, "cannot instantiate: {m}"),
        }
    }
}

impl Failure {
    /// A stable label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Failure::Timeout { .. } => "timeout",
            Failure::OutOfMemory { .. } => "oom",
            Failure::Trap(_) => "trap",
            Failure::Exited { .. } => "exit",
            Failure::OutputTooLarge { .. } | Failure::TransferTooLarge { .. } => "output_too_large",
            Failure::InvalidOutput(_) => "invalid_output",
            Failure::DeniedHost { .. } => "denied_host",
            Failure::Plugin { .. } => "plugin_error",
            Failure::Instantiate(_) => "instantiate",
        }
    }
}

/// A failed plugin call: which plugin, which hook, and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("plugin {plugin:?} ({hook}): {failure}")]
pub struct CallError {
    /// The registry name of the plugin.
    pub plugin: String,
    /// The hook it was called for.
    pub hook: Hook,
    /// The cause.
    pub failure: Failure,
}

/// A plugin that could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("plugin {plugin:?}: {message}")]
pub struct LoadError {
    /// The registry name of the plugin.
    pub plugin: String,
    /// What went wrong and what to do.
    pub message: String,
    /// Whether it failed at its source (unreachable, or bytes that do not match the entry's
    /// sha256), which may pass without a change to the registry; everything after the digest
    /// matched (compiling, `info`, `validate-settings`) gives the same answer for the same
    /// bytes and settings.
    pub at_source: bool,
    /// Whether the component does not export the hook's world (another world, or another
    /// version of the package): `plugin check` then reports only the hooks whose world it does
    /// export.
    pub wrong_world: bool,
}

impl LoadError {
    /// A failure of `plugin` past its source and world (both flags false).
    pub fn new(plugin: &str, message: String) -> Self {
        Self {
            plugin: plugin.to_owned(),
            message,
            at_source: false,
            wrong_world: false,
        }
    }
}

/// `text` cut to at most `max` bytes at a character boundary, ending in `…` when cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    const MARK: &str = "…";
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cuts_at_a_char_boundary_with_a_mark() {
        assert_eq!(cut("short", 8), "short");
        assert_eq!(cut("abcdefghij", 8), "abcde…");
        assert_eq!(cut("ééééé", 8), "éé…", "never inside a character");
        assert!(cut(&"x".repeat(1000), 256).len() <= 256);
    }
}
