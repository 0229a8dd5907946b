//! The allocator options of `wasmop resolver` and `wasmop run`, for jemalloc, the allocator of
//! the `wasmop` binary (its `#[global_allocator]`, in host/wasmop/src/main.rs).
//!
//! Unlike glibc malloc, jemalloc writes nothing into or next to a block it hands out, so the
//! pages of a buffer that nothing has written yet are not resident: a held HTTP/1 connection's
//! 8 KiB write buffer and spare read buffer cost no memory until they are used
//! (docs/resolver.md, docs/performance.md). jemalloc reads its options once, from the environment
//! ([`MALLOC_CONF_ENV`]), before `main`, so each command starts itself again with its own
//! ([`reexec_with`]).
//!
//! - The resolver's memory is its held requests; it returns freed pages at once
//!   ([`RESOLVER_MALLOC_CONF`]), so that the buffers of the next burst are placed on fresh pages
//!   of which only the written part becomes resident.
//! - The operator's reconciles allocate and free megabytes each (a VirtualService of a thousand
//!   routes, its plugin answer and its patch). jemalloc keeps freed pages for reuse for about
//!   10 s by default, and at a few reconciles a second they pile up to most of the operator's
//!   peak memory; it returns them after about 1 s ([`OPERATOR_MALLOC_CONF`]), which costs no
//!   measurable CPU (docs/performance.md, "Routing").
//!
//! Under another allocator these options do nothing.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

/// The environment variable jemalloc reads its options from (the `_rjem_`-prefixed jemalloc
/// that `tikv-jemallocator` links).
pub const MALLOC_CONF_ENV: &str = "_RJEM_MALLOC_CONF";

/// The resolver's jemalloc options: pages that fall free go back to the OS at once.
pub const RESOLVER_MALLOC_CONF: &str = "dirty_decay_ms:0";

/// The operator's jemalloc options: pages that fall free go back to the OS after about a second.
pub const OPERATOR_MALLOC_CONF: &str = "dirty_decay_ms:1000";

/// Starts the running program again, with the same arguments, under the allocator options
/// `conf` (e.g. [`RESOLVER_MALLOC_CONF`]), unless [`MALLOC_CONF_ENV`] is set already (then it
/// returns `Ok` and changes nothing: options given by the environment win). On success it does
/// not return: the process image is replaced (same process id).
///
/// # Errors
/// The program cannot be executed again; the caller goes on with the options it has.
pub fn reexec_with(conf: &str) -> std::io::Result<()> {
    if std::env::var_os(MALLOC_CONF_ENV).is_some() {
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("wasmop"));
    Err(std::process::Command::new(exe)
        .arg0(arg0)
        .args(args)
        .env(MALLOC_CONF_ENV, conf)
        .exec())
}
