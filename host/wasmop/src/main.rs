//! The `wasmop` binary: the command line, the assembly of the operator (`wasmop run`), its
//! HTTP server and the plugin registry's watch. The reconcile loops, the plugin host and the
//! resolver are libraries (host/controllers, host/plugin-host, host/resolver); see
//! docs/architecture.md.
#![forbid(unsafe_code)]

mod cli;
mod conformance;
mod migrate;
mod plugin_new;
mod plugin_tools;
mod registry_watch;
mod run;
mod server;
mod wit_json;

/// jemalloc for the whole process: unlike glibc malloc it writes nothing into or next to a
/// block it hands out, so the untouched pages of a held connection's buffers stay out of
/// resident memory (the resolver's options for it: `wasmop_resolver::malloc`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
