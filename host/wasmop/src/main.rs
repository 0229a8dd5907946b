//! The `wasmop` binary: the command line, the assembly of the operator (`wasmop run`), its
//! HTTP server and the plugin registry's watch. The reconcile loops, the plugin host, the
//! resolver and the plugin authors' tools (`wasmop plugin …`) are libraries (host/controllers,
//! host/plugin-host, host/resolver, host/plugin-tools); see docs/architecture.md.
#![forbid(unsafe_code)]

mod cli;
mod migrate;
mod registry_watch;
mod run;
mod server;

/// jemalloc for the whole process: unlike glibc malloc it writes nothing into or next to a
/// block it hands out, so the untouched pages of a held connection's buffers stay out of
/// resident memory (the resolver's options for it: `wasmop_resolver::malloc`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
