//! The `wasmop` command line: `run`, `resolver`, `crdgen`, `plan`, `migrate`, `plugin …` and
//! `completion`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};

use wasmop_controllers::routing::{self, OutputFormat, Router, WasmRouter};
use wasmop_plugin_host::{Grants, Hook, Limits, PluginRuntime, RuntimeOptions};

use wasmop_plugin_tools::{LogFormat, PluginCommand};

/// Kubernetes operator whose policy decisions are made by sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "wasmop", version)]
pub(crate) struct Cli {
    /// Log filter, as RUST_LOG (e.g. `info,wasmop=debug`) [default: info; warn for `plugin`
    /// commands, whose answer is their output].
    #[arg(long, env = "WASMOP_LOG", global = true)]
    pub log: Option<String>,
    /// Log lines as `text` (for people) or `json` (one object per line, for log collectors:
    /// `timestamp`, `level`, `target`, `fields.message` and the other fields).
    #[arg(long, env = "WASMOP_LOG_FORMAT", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the operator.
    Run(crate::run::RunOptions),
    /// Run the scale-from-zero resolver.
    Resolver(wasmop_resolver::ResolverOptions),
    /// Print the CustomResourceDefinitions as YAML, or write one file each into `--out`.
    Crdgen {
        /// Directory to write `<plural>.yaml` files into (e.g. `crds`).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Plan offline: YAML files in, IR and planned objects out.
    Plan(PlanOptions),
    /// Rewrite Riskified DynamicEnv and KubeElasti ElastiService manifests for wasmop.
    Migrate(crate::migrate::MigrateOptions),
    /// Tools for plugin authors (also the `wasmop-plugin` binary).
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Print the shell completion script for SHELL on stdout, e.g. `wasmop completion bash >
    /// /etc/bash_completion.d/wasmop`, or `source <(wasmop completion zsh)` in `~/.zshrc`.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Options of `wasmop plan`.
#[derive(Clone, Debug, clap::Args)]
pub(crate) struct PlanOptions {
    /// Directory of YAML or JSON files: DynamicEnvs and the Deployments, Services,
    /// DestinationRules and VirtualServices they may touch (other kinds are skipped).
    #[arg(short = 'f', long = "filename")]
    pub dir: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// The router: `builtin://NAME` or a component file.
    #[arg(
        long,
        default_value = "builtin://routing-istio",
        conflicts_with = "registry"
    )]
    pub plugin: String,
    /// Settings JSON of the router.
    #[arg(long, default_value = "{}", conflicts_with = "registry")]
    pub settings: String,
    /// Take the router from a registry instead, read as `plugin check-registry` reads it (a
    /// `plugins.yaml`, or YAML holding ConfigMap `wasmop-plugins` and the ConfigMaps its
    /// `configmap://` sources name): the entry `--entry` names, else the routing default,
    /// after the entries it builds on (`after:`), each with its settings, limits and
    /// failurePolicy.
    #[arg(long, value_name = "FILE")]
    pub registry: Option<PathBuf>,
    /// With `--registry`: the routing entry to plan every DynamicEnv with, as a DynamicEnv's
    /// `spec.plugin` names it [default: the registry's routing default].
    #[arg(long, value_name = "NAME", requires = "registry")]
    pub entry: Option<String>,
    /// Plan settings, as `wasmop run`'s.
    #[command(flatten)]
    pub routing: routing::Options,
}

/// Parses the command line and runs it.
pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    use wasmop_resolver::malloc;
    let allocator_options = match cli.command {
        Command::Resolver(_) => Some(malloc::RESOLVER_MALLOC_CONF),
        Command::Run(_) => Some(malloc::OPERATOR_MALLOC_CONF),
        _ => None,
    };
    if let Some(conf) = allocator_options
        && let Err(e) = malloc::reexec_with(conf)
    {
        eprintln!(
            "warning: cannot start again with the allocator options {conf:?} ({e}); \
             going on with the defaults (freed memory returns to the OS more slowly)"
        );
    }
    let default_log = match cli.command {
        Command::Plugin(_) | Command::Completion { .. } => "warn",
        _ => "info",
    };
    wasmop_plugin_tools::init_logs(cli.log.as_deref(), default_log, cli.log_format);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run(opts) => {
            crate::run::run(opts).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crdgen { out } => {
            for (file, crd) in wasmop_api::crds() {
                let yaml = wasmop_api::to_yaml(&crd)?;
                match &out {
                    Some(dir) => std::fs::write(dir.join(file), yaml)
                        .with_context(|| format!("cannot write {}", dir.join(file).display()))?,
                    None => print!("---\n{yaml}"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Resolver(opts) => wasmop_resolver::run(opts).await,
        Command::Plan(opts) => plan(opts).await,
        Command::Migrate(opts) => {
            crate::migrate::migrate(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugin(command) => wasmop_plugin_tools::run(command).await,
        Command::Completion { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(shell, &mut Cli::command(), "wasmop", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `wasmop plan`: the routing pipeline offline, on YAML files, with the same code as the
/// controller. Prints the IR (each resource's key, location, status and errors), the objects
/// it would write and the DynamicEnvs' status. Exit code 0 whether or not the IR holds errors.
///
/// # Errors
/// Unreadable input, or a router that cannot be loaded (with `--registry`: an invalid
/// registry, or an entry of the chain that cannot be used, with why).
async fn plan(opts: PlanOptions) -> anyhow::Result<ExitCode> {
    let router: Arc<dyn Router> = match &opts.registry {
        Some(file) => registry_router(file, opts.entry.as_deref()).await?,
        None => {
            let runtime = PluginRuntime::new(RuntimeOptions::default())?;
            let settings =
                serde_json::from_str(&opts.settings).context("--settings is not valid JSON")?;
            let plugin = wasmop_plugin_tools::load_for_cli(
                &runtime,
                Hook::Routing,
                &opts.plugin,
                settings,
                Limits::default(),
                Grants::default(),
            )
            .await?;
            Arc::new(WasmRouter(plugin))
        }
    };
    let out =
        routing::plan_dir(&opts.dir, &router, &opts.routing.plan_config(), opts.output).await?;
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The router of `wasmop plan --registry FILE [--entry NAME]`: the registry of `file` (read as
/// `plugin check-registry` reads it) loaded as the operator loads it, and the routing entry
/// `entry` (else the routing default) after the entries it builds on (`after:`).
///
/// # Errors
/// The file cannot be read, its registry is invalid, or an entry of the chain cannot be used
/// (unknown, of another hook, failed to load: with its error).
async fn registry_router(file: &Path, entry: Option<&str>) -> anyhow::Result<Arc<dyn Router>> {
    let shown = file.display();
    let registry = wasmop_plugin_tools::load_registry_file(file).await?;
    let chain = registry
        .resolve_chain(Hook::Routing, entry)
        .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    routing::wasm_chain(chain).ok_or_else(|| anyhow::anyhow!("{shown}: no routing plugin"))
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
