//! wasmop: a Kubernetes operator whose policy decisions are made by sandboxed WebAssembly
//! components. See `docs/architecture.md` for the data flow and `wit/plugin.wit` for the
//! plugin contract.

/// The allocator of every program built on this library: the `wasmop` binary, its tests and
/// its benchmarks, so that their memory figures are the binary's. jemalloc, with the options
/// of `.cargo/config.toml` (freed pages go back to the OS at once). Unlike glibc malloc it
/// writes nothing into or next to a block it hands out, so the pages of a buffer that nothing
/// has written to yet are not resident: a held HTTP/1 connection's 8 KiB write buffer and
/// spare read buffer cost no memory until they are used (docs/resolver.md, Benchmark).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub mod api;
pub mod cli;
pub mod dr;
pub mod metrics;
pub mod plugins;
pub mod restart;
pub mod routing;
pub mod runtime;
pub mod scaling;
