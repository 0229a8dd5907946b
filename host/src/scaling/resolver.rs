//! `wasmop resolver`: the scale-from-zero data plane.

/// Options of `wasmop resolver`.
#[derive(Clone, Debug, clap::Args)]
pub struct ResolverOptions {}

/// Runs the resolver until SIGINT or SIGTERM.
///
/// # Errors
/// When it cannot start.
pub async fn run(_opts: ResolverOptions) -> anyhow::Result<std::process::ExitCode> {
    eprintln!("not yet implemented");
    Ok(std::process::ExitCode::from(2))
}
