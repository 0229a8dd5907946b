//! The plugin runtime: the wasmtime engine, linker, compile cache, call permits, epoch ticker
//! and HTTP pool that every plugin of a process shares.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::Semaphore;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine};

use crate::bindings;
use crate::cache::{CompileCache, Origin, sha256_hex};
use crate::data_root::DataRoot;
use crate::epoch;
use crate::error::LoadError;
use crate::http_pool;
use crate::metrics;
use crate::sandbox::Sandbox;
use crate::spec::{Hook, PluginSpec};
use crate::world::WorldPre;

/// The engine, linker, compile cache and call permits shared by all plugins.
pub struct PluginRuntime {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<Sandbox>,
    pub(crate) cache: CompileCache,
    pub(crate) permits: CallPermits,
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
    /// One compile at a time: compiling a large component takes hundreds of MiB (a 12 MiB
    /// JavaScript component about 450 MiB), and wasmtime already spreads one compile over every
    /// CPU. A load that needs no compile (its component shared or cached) does not take it
    /// ([`PluginRuntime::compiled`]).
    pub(crate) compiles: Arc<Semaphore>,
    /// Calls, memory and loads ([`metrics`]).
    pub(crate) metrics: metrics::PluginMetrics,
    /// Where `grants.readOnlyDir` must resolve ([`PluginRuntime::set_plugin_data_root`]).
    pub(crate) data_root: std::sync::RwLock<DataRoot>,
    /// [`PluginRuntime::set_compile_limits`].
    pub(crate) compile_limits: std::sync::RwLock<CompileLimits>,
}

/// Permits each hook has for its calls alone, besides the shared
/// [`RuntimeOptions::max_concurrent_calls`]: no other hook's calls can take them, so a flood of
/// one hook's calls (routing, for many DynamicEnvs whose router runs to its deadline) never
/// holds back another's (a DR tick).
pub const OWN_PERMITS_PER_HOOK: usize = 1;

/// `info` and `validate-settings` calls of loads that run at once (a reload loads up to
/// [`CONCURRENT_LOADS`](crate::registry::CONCURRENT_LOADS) entries at a time; their calls take
/// milliseconds). They have permits of their own, so a reload never waits behind the hooks'
/// calls, and the instance pool is sized for them.
pub const LOAD_CALLS: usize = 2;

/// The permits a call takes before it instantiates its plugin: one of its hook's own
/// ([`OWN_PERMITS_PER_HOOK`]) if one is free, else one of the shared ones
/// ([`RuntimeOptions::max_concurrent_calls`]), whichever comes first; loads take one of
/// [`LOAD_CALLS`]. Every instance in flight holds one, so the pooling allocator, sized to
/// their sum ([`instance_slots`]), always has a slot for it.
pub(crate) struct CallPermits {
    shared: Semaphore,
    /// By `Hook as usize`.
    own: [Semaphore; 4],
    loads: Semaphore,
}

impl CallPermits {
    fn new(max_concurrent_calls: usize) -> Self {
        Self {
            shared: Semaphore::new(max_concurrent_calls.max(1)),
            own: std::array::from_fn(|_| Semaphore::new(OWN_PERMITS_PER_HOOK)),
            loads: Semaphore::new(LOAD_CALLS),
        }
    }

    /// A permit for a call of `hook`: its own if free, else a shared one, else the first of
    /// them to come free.
    pub(crate) async fn call(&self, hook: Hook) -> tokio::sync::SemaphorePermit<'_> {
        let own = &self.own[hook as usize];
        if let Ok(permit) = own.try_acquire() {
            return permit;
        }
        if let Ok(permit) = self.shared.try_acquire() {
            return permit;
        }
        // A waiter queues on both; the one it does not get is dropped, and a permit that
        // semaphore handed it meanwhile goes back (tokio's `Acquire` returns it on drop).
        tokio::select! {
            biased;
            permit = own.acquire() => permit,
            permit = self.shared.acquire() => permit,
        }
        .expect("the call semaphores are never closed")
    }

    /// A permit for a load's `info` or `validate-settings` call.
    pub(crate) async fn load(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.loads
            .acquire()
            .await
            .expect("the load semaphore is never closed")
    }
}

/// Largest component accepted from a `file://` or `https://` source, in bytes (a
/// `configmap://` one holds at most 1 MiB), and compiled at all ([`CompileLimits`]).
pub const MAX_COMPONENT_BYTES: usize = 256 << 20;

/// What one compile may take ([`PluginRuntime::set_compile_limits`]). wasmtime cannot cap the
/// memory of a compile, so the sizes of what it is handed are capped instead: a compile's peak
/// memory grows with them (about 50 to 70 times the code of the examples, docs/plugins.md
/// "Memory to compile"). The defaults admit the example plugins with room to spare (the
/// largest, JavaScript's, has 12,706 functions, 8.8 MiB of code and a largest function of
/// 168 KiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileLimits {
    /// Wall clock a compile may take (default 60 s): past it the load fails; the compile goes
    /// on in the background until it ends, its result dropped, and the next compile waits for
    /// it.
    pub timeout: std::time::Duration,
    /// Bytes of the whole component (default [`MAX_COMPONENT_BYTES`]).
    pub max_component_bytes: usize,
    /// Bytes of code (the code sections of its core modules together; default 12 MiB).
    pub max_code_bytes: usize,
    /// Functions its core modules define, together (default 100,000).
    pub max_functions: usize,
    /// Bytes of its largest function body (default 1 MiB).
    pub max_function_bytes: usize,
}

impl Default for CompileLimits {
    fn default() -> Self {
        Self {
            timeout: std::time::Duration::from_secs(60),
            max_component_bytes: MAX_COMPONENT_BYTES,
            max_code_bytes: 12 << 20,
            max_functions: 100_000,
            max_function_bytes: 1 << 20,
        }
    }
}

/// Options for [`PluginRuntime::new`].
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Directory for compiled artifacts; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    /// Plugin calls of all hooks that run at once on the shared permits (default: the number
    /// of CPUs; `wasmop run --max-concurrent-calls`). Each hook has [`OWN_PERMITS_PER_HOOK`]
    /// more of its own, so at most `max_concurrent_calls + 4` calls run at once, and a call
    /// beyond them waits for a permit. 0 counts as 1.
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

/// WebAssembly stack one call may use, in bytes (1 MiB): deeper recursion fails the call with
/// a stack overflow. The host's fiber stack for the call is wasmtime's default of 2 MiB, so
/// the guest reaches this limit first.
pub const MAX_WASM_STACK: usize = 1 << 20;

/// Linear memories one core module may define under the pooling allocator (wasmtime's default
/// is 1): a module with several memories runs within its `limits.memoryMiB` as any other.
const POOLING_MEMORIES_PER_MODULE: u32 = 4;

/// Bytes at the start of each pooled linear memory and table that are reset in place after a
/// call instead of being handed back to the kernel. With Linux's `PAGEMAP_SCAN` (6.7 and
/// later, used when present) only the pages the call wrote are reset, so the next call in that
/// slot takes no page faults on them: a fresh instance of a default plugin costs about 9 µs
/// instead of about 38 µs (`cargo bench -p wasmop-plugin-host --bench plugins`). Older kernels reset the whole
/// prefix with `memset`. Each memory slot of the pool keeps at most this much resident; the
/// default plugins write a few hundred KiB per call.
pub(crate) const POOLING_KEEP_RESIDENT: usize = 4 << 20;

/// Component instances that can be in flight at once for `max_concurrent_calls`
/// ([`RuntimeOptions::max_concurrent_calls`]): one per call permit, the shared ones,
/// [`OWN_PERMITS_PER_HOOK`] for each of the four hooks and the [`LOAD_CALLS`].
pub fn instance_slots(max_concurrent_calls: usize) -> usize {
    max_concurrent_calls.max(1) + Hook::ALL.len() * OWN_PERMITS_PER_HOOK + LOAD_CALLS
}

/// Pool sizes for `max_concurrent_calls`: a slot for every instance a permit lets run
/// ([`instance_slots`]), with room for components made of several core modules (a Rust
/// component has about five, Python 14) and for large function tables (interpreters compiled
/// to WebAssembly have tens of thousands). A component using more core instances, memories or
/// tables than a slot's share can still find the pool full while others run: its call then
/// fails alone, saying so, and is not run.
fn pooling_config(max_concurrent_calls: usize) -> wasmtime::PoolingAllocationConfig {
    let slots = u32::try_from(instance_slots(max_concurrent_calls)).unwrap_or(u32::MAX);
    let mut pool = wasmtime::PoolingAllocationConfig::default();
    pool.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(16))
        .total_memories(slots.saturating_mul(4))
        .total_tables(slots.saturating_mul(16))
        .max_memories_per_module(POOLING_MEMORIES_PER_MODULE)
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
/// (four memory slots of 4 GiB plus guard pages per [`instance_slots`]; nothing of it is
/// committed until used): 128 GiB with 2 shared permits.
pub fn pooling_reservation(max_concurrent_calls: usize) -> usize {
    instance_slots(max_concurrent_calls) * 4 * 4
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
            .max_wasm_stack(MAX_WASM_STACK);
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
            permits: CallPermits::new(opts.max_concurrent_calls),
            http_pool,
            extra_ca_pem: opts.extra_ca_pem,
            epoch,
            pooled,
            pres: Default::default(),
            compiles: Arc::new(Semaphore::new(1)),
            metrics: metrics::PluginMetrics::default(),
            data_root: std::sync::RwLock::new(DataRoot::default()),
            compile_limits: std::sync::RwLock::new(CompileLimits::default()),
        }))
    }

    /// Sets the directory under which every `grants.readOnlyDir` must resolve, for the loads
    /// that start from now on (`wasmop run --plugin-data-root`; by default
    /// [`DEFAULT_PLUGIN_DATA_ROOT`](crate::data_root::DEFAULT_PLUGIN_DATA_ROOT)). A plugin
    /// already loaded keeps the directory it was granted.
    pub fn set_plugin_data_root(&self, root: DataRoot) {
        *self.data_root.write().unwrap_or_else(|e| e.into_inner()) = root;
    }

    /// Sets what one compile may take, for the compiles that start from now on
    /// (`wasmop run --compile-timeout`; by default [`CompileLimits::default`]).
    pub fn set_compile_limits(&self, limits: CompileLimits) {
        *self
            .compile_limits
            .write()
            .unwrap_or_else(|e| e.into_inner()) = limits;
    }

    /// What one compile may take.
    pub fn compile_limits(&self) -> CompileLimits {
        *self
            .compile_limits
            .read()
            .unwrap_or_else(|e| e.into_inner())
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

    /// The shared pre-instance of component `digest` for `hook`, if a plugin holds it.
    fn shared_pre(&self, digest: &str, hook: Hook) -> Option<Arc<WorldPre>> {
        let mut pres = self.pres.lock().unwrap_or_else(|e| e.into_inner());
        pres.retain(|_, weak| weak.strong_count() > 0);
        pres.get(&(digest.to_owned(), hook))
            .and_then(std::sync::Weak::upgrade)
    }

    /// The pre-instance of `component` (whose sha256 is `digest`) for `hook`, checked against
    /// the hook's world and shared from now on (or the one shared meanwhile).
    ///
    /// # Errors
    /// What is wrong, and whether it is the world (`true`) rather than the imports.
    fn share_pre(
        &self,
        digest: &str,
        hook: Hook,
        component: &wasmtime::component::Component,
    ) -> Result<Arc<WorldPre>, (String, bool)> {
        let pre = Arc::new(WorldPre::new(&self.linker, component, hook)?);
        let mut pres = self.pres.lock().unwrap_or_else(|e| e.into_inner());
        let key = (digest.to_owned(), hook);
        if let Some(shared) = pres.get(&key).and_then(std::sync::Weak::upgrade) {
            return Ok(shared);
        }
        pres.insert(key, Arc::downgrade(&pre));
        Ok(pre)
    }

    /// The pre-instance of `bytes` for `hook` (entry `name`, whose `sha256`, when given, they
    /// must match), and how it was obtained: shared with a plugin that holds it (`None`),
    /// loaded from the compile cache, or compiled. Only compiling takes the compile permit:
    /// a load of a component already shared or cached (a settings change) never waits for
    /// another entry's compile. A compile is bounded by [`CompileLimits`]: the component's code
    /// is measured first, and a compile past the time limit fails the load while it finishes
    /// on its blocking thread, its result dropped and the permit held until then. A component
    /// whose compile ended the last process (its marker left in the cache directory,
    /// [`CompileCache::begin_compile`]) is not compiled. Hashing, reading the cache and
    /// compiling run on the blocking pool.
    ///
    /// # Errors
    /// A [`LoadError`] naming the entry: sha256 mismatch (`at_source`), over a compile limit,
    /// compiling ended the last process, the compile timed out, not a component, or not the
    /// hook's world (`wrong_world`).
    pub(crate) async fn compiled(
        self: &Arc<Self>,
        name: &str,
        hook: Hook,
        want: Option<&str>,
        bytes: Vec<u8>,
    ) -> Result<(String, Arc<WorldPre>, Option<Origin>), LoadError> {
        let err = |message: String| LoadError::new(name, message);
        let world = |(message, wrong_world): (String, bool)| LoadError {
            wrong_world,
            ..LoadError::new(name, message)
        };
        let task = |e: tokio::task::JoinError| err(format!("load task failed: {e}"));
        let limits = self.compile_limits();
        if bytes.len() > limits.max_component_bytes {
            return Err(err(format!(
                "the component is {} bytes, over the {} a component may have",
                bytes.len(),
                limits.max_component_bytes
            )));
        }
        let bytes: Arc<[u8]> = bytes.into();
        let hashed = bytes.clone();
        let digest = tokio::task::spawn_blocking(move || sha256_hex(&hashed))
            .await
            .map_err(task)?;
        if let Some(want) = want.filter(|s| !s.is_empty())
            && !want.eq_ignore_ascii_case(&digest)
        {
            let message =
                format!("sha256 mismatch: the registry says {want}, the component is {digest}");
            return Err(LoadError {
                at_source: true,
                ..err(message)
            });
        }
        if let Some(pre) = self.shared_pre(&digest, hook) {
            return Ok((digest, pre, None));
        }
        if let Some(component) = self.cached(&digest).await {
            let pre = self.share_pre(&digest, hook, &component).map_err(world)?;
            return Ok((digest, pre, Some(Origin::Cached)));
        }
        let measured = bytes.clone();
        tokio::task::spawn_blocking(move || check_code(&measured, &limits))
            .await
            .map_err(task)?
            .map_err(err)?;
        let permit = self
            .compiles
            .clone()
            .acquire_owned()
            .await
            .expect("the compile semaphore is never closed");
        // Another load may have compiled it while this one waited.
        if let Some(pre) = self.shared_pre(&digest, hook) {
            return Ok((digest, pre, None));
        }
        if let Some(component) = self.cached(&digest).await {
            let pre = self.share_pre(&digest, hook, &component).map_err(world)?;
            return Ok((digest, pre, Some(Origin::Cached)));
        }
        let marker = self.cache.begin_compile(&digest).map_err(err)?;
        let abandoned = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (this, key, given_up) = (self.clone(), digest.clone(), abandoned.clone());
        let compiling = tokio::task::spawn_blocking(move || {
            // Held until the compile ends, even if the load gave up or was dropped meanwhile.
            let (_permit, _marker) = (permit, marker);
            this.cache
                .compile(&this.engine, &key, &bytes, &given_up)
                .map_err(|e| not_a_component(&bytes, &e))
        });
        let component = match tokio::time::timeout(limits.timeout, compiling).await {
            Ok(compiled) => compiled.map_err(task)?.map_err(err)?,
            Err(_) => {
                abandoned.store(true, std::sync::atomic::Ordering::SeqCst);
                return Err(err(format!(
                    "compiling it took longer than {:?} (wasmop run --compile-timeout): it is too \
                     large or too complex to compile here; the compile finishes in the \
                     background and is dropped",
                    limits.timeout
                )));
            }
        };
        let pre = self.share_pre(&digest, hook, &component).map_err(world)?;
        Ok((digest, pre, Some(Origin::Compiled)))
    }

    /// The compile cache's artifact of `digest`, if a usable one is there (one that is not is
    /// logged; the caller compiles).
    async fn cached(&self, digest: &str) -> Option<wasmtime::component::Component> {
        let (cache, engine, key) = (self.cache.clone(), self.engine.clone(), digest.to_owned());
        let loaded = tokio::task::spawn_blocking(move || cache.load_cached(&engine, &key))
            .await
            .ok()?;
        loaded.unwrap_or_else(|e| {
            tracing::warn!(
                digest,
                "ignoring an unusable compiled artifact, recompiling: {e:#}"
            );
            None
        })
    }
}

/// Checks that `bytes` are within `limits` before they are compiled: the functions its core
/// modules define, their code sections' bytes and its largest function body
/// (`wasmparser`, without validating; bytes that do not parse are left to the compiler, which
/// says what is wrong).
///
/// # Errors
/// Which limit is exceeded, by how much, and that the component cannot be compiled here.
fn check_code(bytes: &[u8], limits: &CompileLimits) -> Result<(), String> {
    use wasmparser::Payload;
    let (mut functions, mut code, mut largest) = (0usize, 0usize, 0usize);
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(Payload::CodeSectionStart { count, size, .. }) => {
                functions += count as usize;
                code += size as usize;
            }
            Ok(Payload::CodeSectionEntry(body)) => {
                largest = largest.max(body.range().len());
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let over = |what: &str, value: usize, limit: usize| {
        Err(format!(
            "the component has {value} {what}, over the {limit} a component may have to be \
             compiled (compiling needs memory in proportion, docs/plugins.md \"Memory to \
             compile\")"
        ))
    };
    if functions > limits.max_functions {
        return over("functions", functions, limits.max_functions);
    }
    if code > limits.max_code_bytes {
        return over("bytes of code", code, limits.max_code_bytes);
    }
    if largest > limits.max_function_bytes {
        return over("bytes in one function", largest, limits.max_function_bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// With every shared permit and routing's own taken, a further routing call waits, and a
    /// call of each other hook still gets its own permit at once.
    #[tokio::test]
    async fn each_hook_keeps_a_permit_of_its_own() {
        use futures::FutureExt as _;
        let permits = CallPermits::new(1);
        let _own = permits.call(Hook::Routing).await;
        let shared = permits.call(Hook::Routing).await;
        let mut waiting = Box::pin(permits.call(Hook::Routing));
        assert!((&mut waiting).now_or_never().is_none(), "routing waits");
        for hook in [Hook::Scaling, Hook::Restart, Hook::Dr] {
            let permit = permits.call(hook).now_or_never();
            assert!(permit.is_some(), "{hook} has a permit of its own");
        }
        drop(shared);
        assert!(
            waiting.now_or_never().is_some(),
            "a freed shared permit serves routing"
        );
        assert_eq!(instance_slots(1), 1 + 4 + LOAD_CALLS);
    }

    /// A compile past [`CompileLimits::timeout`] fails its load at once; the compile goes on in
    /// the background holding the compile permit and its marker until it ends, and its result
    /// is dropped (nothing cached): the next load compiles again.
    #[tokio::test]
    async fn a_compile_past_its_time_fails_the_load_and_keeps_the_permit_until_it_ends() {
        let dir = std::env::temp_dir().join(format!("wasmop-compile-time-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let runtime = PluginRuntime::new(RuntimeOptions {
            cache_dir: Some(dir.clone()),
            max_concurrent_calls: 1,
            pooling: false,
            extra_ca_pem: None,
        })
        .unwrap();
        runtime.set_compile_limits(CompileLimits {
            timeout: Duration::from_millis(1),
            ..CompileLimits::default()
        });
        let fixture = wasmop_tests::components_dir().join("wasmop_hostile_fixture.wasm");
        let bytes = std::fs::read(fixture).unwrap();
        let digest = sha256_hex(&bytes);
        let Err(e) = runtime
            .compiled("big", Hook::Routing, None, bytes.clone())
            .await
        else {
            panic!("the compile takes longer than 1 ms");
        };
        assert_eq!(
            e.message,
            "compiling it took longer than 1ms (wasmop run --compile-timeout): it is too large or \
             too complex to compile here; the compile finishes in the background and is dropped"
        );
        assert!(!e.at_source, "the same bytes take as long again");
        assert_eq!(
            runtime.compiles.available_permits(),
            0,
            "the compile goes on and keeps the permit"
        );
        let marker = dir.join(format!("{digest}.compiling"));
        assert!(marker.exists(), "and its marker");

        let waited = std::time::Instant::now();
        while runtime.compiles.available_permits() == 0 {
            assert!(
                waited.elapsed() < Duration::from_secs(120),
                "the compile never ends"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!marker.exists(), "unmarked once it ended");
        let cached = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&digest))
            .count();
        assert_eq!(cached, 0, "the abandoned compile's result is not cached");

        runtime.set_compile_limits(CompileLimits::default());
        let (_, _, origin) = runtime
            .compiled("big", Hook::Routing, None, bytes)
            .await
            .unwrap();
        assert_eq!(origin, Some(Origin::Compiled));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
