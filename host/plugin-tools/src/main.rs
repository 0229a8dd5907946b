//! `wasmop-plugin`: the plugin authors' tools without the operator, the same commands as
//! `wasmop plugin …` (docs/plugins.md, "The author's path").
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

use wasmop_plugin_tools::{LogFormat, PluginCommand};

/// The tools of wasmop plugin authors: write a plugin to start from, check and test a
/// component as the operator would load it, without a cluster, and move it to and from an OCI
/// registry.
#[derive(Debug, Parser)]
#[command(name = "wasmop-plugin", version)]
struct Cli {
    /// Log filter, as RUST_LOG (e.g. `debug` shows a plugin's stderr) [default: warn].
    #[arg(long, env = "WASMOP_LOG", global = true)]
    log: Option<String>,
    /// Log lines as `text` (for people) or `json` (one object per line).
    #[arg(long, env = "WASMOP_LOG_FORMAT", global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// The command.
    #[command(subcommand)]
    command: Command,
}

/// Subcommands: those of `wasmop plugin`, and `completion`.
#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Plugin(Box<PluginCommand>),
    /// Print the shell completion script for SHELL on stdout, e.g. `source <(wasmop-plugin
    /// completion bash)`.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = match cli.command {
        Command::Completion { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "wasmop-plugin",
                &mut std::io::stdout(),
            );
            return ExitCode::SUCCESS;
        }
        Command::Plugin(command) => *command,
    };
    let default_log = "warn";
    wasmop_plugin_tools::init_logs(cli.log.as_deref(), default_log, cli.log_format);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(wasmop_plugin_tools::run(command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
