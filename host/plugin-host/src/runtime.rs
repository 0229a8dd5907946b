//! The plugin runtime: the wasmtime engine, linker, compile cache, call semaphore, epoch ticker
//! and HTTP pool that every plugin of a process shares.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::Semaphore;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine};

use crate::bindings;
use crate::cache::{CompileCache, Origin};
use crate::data_root::DataRoot;
use crate::epoch;
use crate::http_pool;
use crate::metrics;
use crate::sandbox::Sandbox;
use crate::spec::{Hook, PluginSpec};
use crate::world::WorldPre;

/// The engine, linker, compile cache and call semaphore shared by all plugins.
pub struct PluginRuntime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<Sandbox>,
    pub(crate) cache: CompileCache,
    pub(crate) permits: Arc<Semaphore>,
    /// Keep-alive connections of plugins' granted `http://` and `https://` requests.
    pub(crate) http_pool: http_pool::HttpPool,
    /// [`RuntimeOptions::extra_ca_pem`].
    pub(crate) extra_ca_pem: Option<Vec<u8>>,
    pub(crate) epoch: epoch::EpochTicker,
    /// Whether the engine allocates instances from the pool (linear memory capped at
    /// [`POOLING_MAX_MEMORY`]).
    pub(crate) pooled: bool,
    /// One pre-instance per (digest, hook), shared by every entry using that component.
    pub(crate) pres:
        std::sync::Mutex<std::collections::HashMap<(String, Hook), std::sync::Weak<WorldPre>>>,
    /// One compile (or cache load) at a time: compiling a large component takes hundreds of MiB
    /// (a 12 MiB JavaScript component about 450 MiB), and wasmtime already spreads one compile
    /// over every CPU.
    pub(crate) compiles: Arc<Semaphore>,
    /// Calls, memory and loads ([`metrics`]).
    pub(crate) metrics: metrics::PluginMetrics,
    /// Where `grants.readOnlyDir` must resolve ([`PluginRuntime::set_plugin_data_root`]).
    pub(crate) data_root: std::sync::RwLock<DataRoot>,
}

/// Options for [`PluginRuntime::new`].
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Directory for compiled artifacts; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    /// Calls allowed to run at once (default: the number of CPUs).
    pub max_concurrent_calls: usize,
    /// Use wasmtime's pooling instance allocator (the default): instance slots reserved once,
    /// sized to the concurrency, with copy-on-write memory images, so a call neither maps nor
    /// unmaps memory. Linear memory is then capped at [`POOLING_MAX_MEMORY`]. The reservation
    /// is virtual memory ([`pooling_reservation`]); where it is refused (e.g. `ulimit -v`), the
    /// runtime logs why and allocates each instance on demand instead.
    pub pooling: bool,
    /// PEM CA certificates that plugins' `https://` requests trust besides the webpki roots
    /// (`wasmop run --extra-ca-file`); also used for `https://` plugin sources.
    pub extra_ca_pem: Option<Vec<u8>>,
}

/// The contents of `--extra-ca-file` for [`RuntimeOptions::extra_ca_pem`] (`wasmop run`,
/// `wasmop plugin run`); `None` without the flag. Checked as PEM when the runtime is built.
///
/// # Errors
/// The file cannot be read; the message names the flag and the path.
pub fn read_extra_ca_file(path: Option<&std::path::Path>) -> anyhow::Result<Option<Vec<u8>>> {
    use anyhow::Context;
    path.map(|p| {
        std::fs::read(p).with_context(|| format!("cannot read --extra-ca-file {}", p.display()))
    })
    .transpose()
}

/// Why `bytes` did not compile (`error`), in the words a plugin author needs: a core module
/// and a file that is not WebAssembly at all are told apart from a broken component.
fn not_a_component(bytes: &[u8], error: &anyhow::Error) -> String {
    if wasmparser::Parser::is_core_wasm(bytes) {
        "a core WebAssembly module, not a component: build the plugin for wasm32-wasip2, or \
         wrap the module with `wasm-tools component new`"
            .into()
    } else if !bytes.starts_with(b"\0asm") {
        "not a WebAssembly file (it does not start with the \\0asm header)".into()
    } else {
        format!("not a valid component: {error:#}")
    }
}

/// Environment variable that, set to `1`, makes the runtime write `/tmp/perf-<pid>.map`, so that
/// `perf record`/`perf report` name the functions of plugins (docs/plugins.md, "Profiling").
pub(crate) const PERFMAP_ENV: &str = "WASMOP_PLUGIN_PERFMAP";

/// Largest linear memory a plugin can have when [`RuntimeOptions::pooling`] is on.
pub const POOLING_MAX_MEMORY: usize = 1 << 30;

/// Bytes at the start of each pooled linear memory and table that are reset in place after a
/// call instead of being handed back to the kernel. With Linux's `PAGEMAP_SCAN` (6.7 and
/// later, used when present) only the pages the call wrote are reset, so the next call in that
/// slot takes no page faults on them: a fresh instance of a default plugin costs about 9 µs
/// instead of about 38 µs (`cargo bench -p wasmop-plugin-host --bench plugins`). Older kernels reset the whole
/// prefix with `memset`. Each memory slot of the pool keeps at most this much resident; the
/// default plugins write a few hundred KiB per call.
pub(crate) const POOLING_KEEP_RESIDENT: usize = 4 << 20;

/// Pool sizes for `max_concurrent_calls`: the calls behind the semaphore, plus the `info` and
/// `validate-settings` calls of loads (one at a time), with room for components made of
/// several core modules (a Rust component has about five, other languages more) and for
/// large function tables (interpreters compiled to WebAssembly have tens of thousands).
fn pooling_config(max_concurrent_calls: usize) -> wasmtime::PoolingAllocationConfig {
    let slots = u32::try_from(max_concurrent_calls.max(1) * 2 + 2).unwrap_or(u32::MAX);
    let mut pool = wasmtime::PoolingAllocationConfig::default();
    pool.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(16))
        .total_memories(slots.saturating_mul(4))
        .total_tables(slots.saturating_mul(16))
        .max_tables_per_module(4)
        .table_elements(100_000)
        .max_memory_size(POOLING_MAX_MEMORY)
        .linear_memory_keep_resident(POOLING_KEEP_RESIDENT)
        .table_keep_resident(POOLING_KEEP_RESIDENT)
        .total_stacks(slots)
        .pagemap_scan(wasmtime::Enabled::Auto);
    pool
}

/// Virtual memory, in GiB, that the pooling allocator reserves for `max_concurrent_calls`
/// (memory slots of 4 GiB plus guard pages; nothing of it is committed until used).
pub fn pooling_reservation(max_concurrent_calls: usize) -> usize {
    (max_concurrent_calls.max(1) * 2 + 2) * 4 * 4
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            max_concurrent_calls: std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(2),
            pooling: true,
            extra_ca_pem: None,
        }
    }
}

/// `$WASMOP_CACHE_DIR`, else `$XDG_CACHE_HOME/wasmop/components`, else `~/.cache/wasmop/components`.
pub(crate) fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("WASMOP_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("wasmop").join("components"))
}

impl PluginRuntime {
    /// A runtime with its own engine and an epoch ticker thread (stopped on drop), which ticks
    /// every [`EPOCH_TICK`](crate::epoch::EPOCH_TICK) while a call is in flight and parks while none is.
    ///
    /// A cache directory that cannot be created, or that others can write (an artifact there
    /// could be planted, and loading one runs it), is logged and not used: every load
    /// compiles.
    ///
    /// # Errors
    /// The engine cannot be set up, or `extra_ca_pem` holds no valid CA certificates.
    pub fn new(opts: RuntimeOptions) -> anyhow::Result<Arc<Self>> {
        let http_pool =
            http_pool::HttpPool::new(opts.max_concurrent_calls, opts.extra_ca_pem.as_deref())
                .map_err(anyhow::Error::msg)?;
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(1 << 20);
        // For profiling plugins with `perf`: /tmp/perf-<pid>.map names their functions.
        if std::env::var_os(PERFMAP_ENV).is_some_and(|v| v == "1") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let (engine, pooled) = if opts.pooling {
            let mut pooled = config.clone();
            pooled.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(
                pooling_config(opts.max_concurrent_calls),
            ));
            match Engine::new(&pooled) {
                Ok(engine) => (engine, true),
                Err(e) => {
                    tracing::warn!(
                        "the pooling allocator could not reserve its ~{} GiB of virtual memory ({e:#}); \
                         plugin instances are allocated on demand instead (slower calls). Raise the \
                         virtual memory limit, or set --pooling=false to skip the attempt",
                        pooling_reservation(opts.max_concurrent_calls)
                    );
                    (Engine::new(&config)?, false)
                }
            }
        } else {
            (Engine::new(&config)?, false)
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        bindings::router::wasmop::plugin::log::add_to_linker::<_, HasSelf<Sandbox>>(
            &mut linker,
            |s| s,
        )?;
        // The cache only saves compiling again: a directory that cannot be used costs time,
        // not plugins.
        let cache = CompileCache::new(&engine, opts.cache_dir).unwrap_or_else(|e| {
            tracing::warn!(
                "{e:#}; compiling plugins without a cache. Set WASMOP_CACHE_DIR to a directory \
                 only this user can write (the chart mounts an emptyDir)"
            );
            CompileCache::new(&engine, None).expect("a cache without a directory")
        });
        let epoch = epoch::EpochTicker::start(engine.clone())?;
        Ok(Arc::new(Self {
            engine,
            linker,
            cache,
            permits: Arc::new(Semaphore::new(opts.max_concurrent_calls.max(1))),
            http_pool,
            extra_ca_pem: opts.extra_ca_pem,
            epoch,
            pooled,
            pres: Default::default(),
            compiles: Arc::new(Semaphore::new(1)),
            metrics: metrics::PluginMetrics::default(),
            data_root: std::sync::RwLock::new(DataRoot::default()),
        }))
    }

    /// Sets the directory under which every `grants.readOnlyDir` must resolve, for the loads
    /// that start from now on (`wasmop run --plugin-data-root`; by default
    /// [`DEFAULT_PLUGIN_DATA_ROOT`](crate::data_root::DEFAULT_PLUGIN_DATA_ROOT)). A plugin
    /// already loaded keeps the directory it was granted.
    pub fn set_plugin_data_root(&self, root: DataRoot) {
        *self.data_root.write().unwrap_or_else(|e| e.into_inner()) = root;
    }

    /// The directory under which every `grants.readOnlyDir` must resolve.
    pub fn plugin_data_root(&self) -> DataRoot {
        self.data_root
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `spec` with its `grants.readOnlyDir`, if any, replaced by the real path
    /// [`DataRoot::resolve`] finds under the plugin data root: what the plugin's calls open
    /// (again without following a symlink, `data_root::open_real_dir`). Resolved on the
    /// blocking pool.
    ///
    /// # Errors
    /// `grants.readOnlyDir "DIR": ` and [`DataRoot::resolve`]'s reason.
    pub(crate) async fn resolve_grants<'s>(
        &self,
        spec: &'s PluginSpec,
    ) -> Result<std::borrow::Cow<'s, PluginSpec>, String> {
        let Some(dir) = spec.grants.read_only_dir.clone().filter(|d| !d.is_empty()) else {
            return Ok(std::borrow::Cow::Borrowed(spec));
        };
        let root = self.plugin_data_root();
        let shown = format!("grants.readOnlyDir {dir:?}");
        let real = tokio::task::spawn_blocking(move || root.resolve(&dir))
            .await
            .map_err(|e| format!("{shown}: resolving it failed: {e}"))?
            .map_err(|why| format!("{shown}: {why}"))?;
        let mut resolved = spec.clone();
        resolved.grants.read_only_dir = Some(real.display().to_string());
        Ok(std::borrow::Cow::Owned(resolved))
    }

    /// The runtime's metrics: every call and load of its plugins is recorded there.
    pub fn metrics(&self) -> &metrics::PluginMetrics {
        &self.metrics
    }

    /// Registers the runtime's metrics ([`metrics`]) into `registry`; call once.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.metrics.register(registry);
    }

    /// Removes the compile cache's artifacts of components not in `keep` (sha256 digests) once
    /// they are `min_age` old ([`CompileCache::prune`]); blocking file I/O. Returns the
    /// files removed and the bytes they held.
    pub fn prune_compile_cache(
        &self,
        keep: &std::collections::BTreeSet<String>,
        min_age: std::time::Duration,
    ) -> (usize, u64) {
        self.cache.prune(keep, min_age)
    }

    /// [`RuntimeOptions::extra_ca_pem`]: PEM CA certificates trusted besides the usual roots.
    pub fn extra_ca_pem(&self) -> Option<&[u8]> {
        self.extra_ca_pem.as_deref()
    }

    /// Epoch ticks since the runtime started, one per [`EPOCH_TICK`](crate::epoch::EPOCH_TICK) of a call in flight.
    pub fn epoch_ticks(&self) -> u64 {
        self.epoch.ticks()
    }

    /// Whether the epoch ticker is parked: no call is in flight, and the ticker takes no
    /// wake-ups until one starts.
    pub fn epoch_ticker_parked(&self) -> bool {
        self.epoch.parked()
    }

    /// The shared pre-instance of component `digest` for `hook`: reused while any plugin holds
    /// it, otherwise compiled (or loaded from the cache) and checked against the hook's world.
    pub(crate) fn pre_for(
        &self,
        digest: &str,
        hook: Hook,
        bytes: &[u8],
    ) -> Result<(Arc<WorldPre>, Option<Origin>), (String, bool)> {
        let key = (digest.to_owned(), hook);
        let mut pres = self.pres.lock().unwrap_or_else(|e| e.into_inner());
        pres.retain(|_, weak| weak.strong_count() > 0);
        if let Some(pre) = pres.get(&key).and_then(std::sync::Weak::upgrade) {
            return Ok((pre, None));
        }
        let (component, origin) = self
            .cache
            .load(&self.engine, digest, bytes)
            .map_err(|e| (not_a_component(bytes, &e), false))?;
        let pre = Arc::new(WorldPre::new(&self.linker, &component, hook)?);
        pres.insert(key, Arc::downgrade(&pre));
        Ok((pre, Some(origin)))
    }
}
