//! The plugin host: every policy decision of wasmop is a call into a WebAssembly component.
//! It knows nothing of Kubernetes controllers; they call it through [`Plugin`]'s typed methods.
//!
//! - [`PluginRuntime`] owns the wasmtime engine (component model only, epoch interruption with a
//!   10 ms ticker), the compile cache and the semaphore that bounds concurrent calls.
//! - [`Plugin`] is one loaded registry entry: its `InstancePre` for its world, settings,
//!   limits and grants. Each call gets a fresh `Store` (`sandbox::Sandbox`), runs in the
//!   calling task through wasmtime's async API and leaves the async executor once it has
//!   computed for a whole epoch tick (see [`Plugin`]'s `call_in_store`), and fails alone with a
//!   [`CallError`] that names the plugin, the hook and the cause.
//! - [`registry`] turns the `wasmop-plugins` ConfigMap into loaded plugins and swaps them in.
//!
//! The shape follows Kubewarden's policy-server and wasmtime's embedding guidance
//! (docs/architecture.md): compile once per digest, one pre-instance per digest, a fresh
//! instance per call, deny-all WASI.

pub mod bindings;
pub mod builtin;
pub mod cache;
mod epoch;
pub mod http_pool;
pub mod metrics;
pub mod registry;
pub mod sandbox;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, Store, Trap, UpdateDeadline};

use bindings::{PluginError, PluginInfo, WitHook};
pub use cache::{CompileCache, Origin, sha256_hex};
use sandbox::Sandbox;

/// Interval of the epoch ticker; time limits are rounded up to it.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The four extension points.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    /// DynamicEnv route generation, world `router`.
    Routing,
    /// ElasticService trigger votes, world `scaler`.
    Scaling,
    /// ProxyRestartPolicy pod decisions, world `restart-predicate`.
    Restart,
    /// Active/passive state checks, world `state-checker`.
    Dr,
}

impl Hook {
    /// Every hook, in a stable order.
    pub const ALL: [Hook; 4] = [Hook::Routing, Hook::Scaling, Hook::Restart, Hook::Dr];

    /// The hook's name as written in `plugins.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Routing => "routing",
            Hook::Scaling => "scaling",
            Hook::Restart => "restart",
            Hook::Dr => "dr",
        }
    }

    /// The WIT world a plugin for this hook must target.
    pub fn world(self) -> &'static str {
        match self {
            Hook::Routing => "router",
            Hook::Scaling => "scaler",
            Hook::Restart => "restart-predicate",
            Hook::Dr => "state-checker",
        }
    }

    fn from_wit(h: WitHook) -> Self {
        match h {
            WitHook::Routing => Hook::Routing,
            WitHook::Scaling => Hook::Scaling,
            WitHook::Restart => Hook::Restart,
            WitHook::Dr => Hook::Dr,
        }
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-plugin resource limits (`limits:` in `plugins.yaml`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Limits {
    /// Linear memory cap in MiB (default 64).
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u32,
    /// Wall-clock cap per call in milliseconds (default 250): an epoch deadline while the
    /// guest runs, and the whole call (host I/O and sleeps included) dropped one epoch tick
    /// after it.
    pub timeout_ms: u32,
    /// Cap on a call's output (route JSON, reasons, messages) in KiB (default 1024).
    #[serde(rename = "maxOutputKiB")]
    pub max_output_kib: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mib: 64,
            timeout_ms: 250,
            max_output_kib: 1024,
        }
    }
}

impl Limits {
    /// The memory cap in bytes.
    pub(crate) fn memory_bytes(&self) -> usize {
        (self.memory_mib as usize) << 20
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(u64::from(self.timeout_ms))
    }

    fn deadline_ticks(&self) -> u64 {
        u64::from(self.timeout_ms)
            .div_ceil(EPOCH_TICK.as_millis() as u64)
            .max(1)
    }
}

/// Capabilities granted to a plugin (`grants:` in `plugins.yaml`); nothing unless listed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Grants {
    /// `host:port` or `host` entries the plugin may reach over `wasi:http`.
    pub allowed_hosts: Vec<String>,
    /// A host directory visible read-only at `/data` in the guest.
    pub read_only_dir: Option<String>,
}

/// What a reconcile does when the plugin call fails (`failurePolicy:` in `plugins.yaml`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FailurePolicy {
    /// The reconcile reports the error (condition, Event) and retries with backoff.
    #[default]
    Fail,
    /// The host's built-in default decision is used and the failure is logged and counted.
    Ignore,
}

/// Why a call failed.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// The call ran past `limits.timeoutMs`.
    Timeout {
        /// The limit in milliseconds.
        limit_ms: u32,
    },
    /// Memory growth past `limits.memoryMiB` was refused.
    OutOfMemory {
        /// The limit in MiB.
        limit_mib: u32,
    },
    /// The guest trapped (panic, unreachable, bounds...).
    Trap(String),
    /// The output is larger than `limits.maxOutputKiB`.
    OutputTooLarge {
        /// Output size in KiB.
        size_kib: usize,
        /// The limit in KiB.
        limit_kib: u32,
    },
    /// The output does not have the documented shape.
    InvalidOutput(String),
    /// The plugin tried to reach hosts it was not granted.
    DeniedHost(Vec<String>),
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
                "out of memory: exceeded {limit_mib} MiB (limits.memoryMiB)"
            ),
            Failure::Trap(m) => write!(f, "trapped: {m}"),
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
            Failure::DeniedHost(hosts) => {
                write!(
                    f,
                    "denied outbound request to {} (not in grants.allowedHosts)",
                    hosts.join(", ")
                )
            }
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
            Failure::OutputTooLarge { .. } => "output_too_large",
            Failure::InvalidOutput(_) => "invalid_output",
            Failure::DeniedHost(_) => "denied_host",
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

/// The engine, linker, compile cache and call semaphore shared by all plugins.
pub struct PluginRuntime {
    engine: Engine,
    linker: Linker<Sandbox>,
    cache: CompileCache,
    permits: Arc<Semaphore>,
    /// Keep-alive connections of plugins' granted `http://` and `https://` requests.
    http_pool: http_pool::HttpPool,
    /// [`RuntimeOptions::extra_ca_pem`].
    extra_ca_pem: Option<Vec<u8>>,
    epoch: epoch::EpochTicker,
    /// Whether the engine allocates instances from the pool (linear memory capped at
    /// [`POOLING_MAX_MEMORY`]).
    pooled: bool,
    /// One pre-instance per (digest, hook), shared by every entry using that component.
    pres: std::sync::Mutex<std::collections::HashMap<(String, Hook), std::sync::Weak<WorldPre>>>,
    /// One compile (or cache load) at a time: compiling a large component takes hundreds of MiB
    /// (a 12 MiB JavaScript component about 450 MiB), and wasmtime already spreads one compile
    /// over every CPU.
    compiles: Arc<Semaphore>,
    /// Calls, memory and loads ([`metrics`]).
    metrics: metrics::PluginMetrics,
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
    /// every [`EPOCH_TICK`] while a call is in flight and parks while none is.
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
        }))
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
    /// they are `min_age` old ([`cache::CompileCache::prune`]); blocking file I/O. Returns the
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

    /// Epoch ticks since the runtime started, one per [`EPOCH_TICK`] of a call in flight.
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
    fn pre_for(
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

    /// Compiles (or loads from the cache) `bytes`, checks it targets `spec.hook`'s world, calls
    /// `info` (whose hook must match) and `validate-settings`. The digest and the compilation
    /// run on tokio's blocking pool; the two calls as any call does.
    ///
    /// # Errors
    /// A [`LoadError`] naming the plugin: a memory limit over what a pooled instance can
    /// have, sha256 mismatch, not a component, wrong world or version, failed `info` or
    /// rejected settings.
    pub async fn load(
        self: &Arc<Self>,
        spec: &PluginSpec,
        bytes: &[u8],
    ) -> Result<Arc<Plugin>, LoadError> {
        let err = |message: String| LoadError::new(&spec.name, message);
        let most = POOLING_MAX_MEMORY >> 20;
        if self.pooled && spec.limits.memory_bytes() > POOLING_MAX_MEMORY {
            return Err(err(format!(
                "limits.memoryMiB {} is over the {most} MiB an instance of the pooling allocator \
                 can have: give at most {most}, or turn pooling off (`wasmop run \
                 --pooling=false`, Helm value `operator.pooling: false`)",
                spec.limits.memory_mib
            )));
        }
        let started = Instant::now();
        let (this, name, hook, want, bytes) = (
            self.clone(),
            spec.name.clone(),
            spec.hook,
            spec.sha256.clone(),
            bytes.to_vec(),
        );
        let compiling = self
            .compiles
            .clone()
            .acquire_owned()
            .await
            .expect("the compile semaphore is never closed");
        let (digest, pre, origin) = tokio::task::spawn_blocking(move || {
            // Held until the compile ends, even if the load is dropped meanwhile.
            let _compiling = compiling;
            let digest = sha256_hex(&bytes);
            if let Some(want) = want.as_deref().filter(|s| !s.is_empty())
                && !want.eq_ignore_ascii_case(&digest)
            {
                let message =
                    format!("sha256 mismatch: the registry says {want}, the component is {digest}");
                return Err(LoadError {
                    at_source: true,
                    ..LoadError::new(&name, message)
                });
            }
            let (pre, origin) =
                this.pre_for(&digest, hook, &bytes)
                    .map_err(|(message, wrong_world)| LoadError {
                        wrong_world,
                        ..LoadError::new(&name, message)
                    })?;
            Ok((digest, pre, origin))
        })
        .await
        .map_err(|e| err(format!("load task failed: {e}")))??;
        let mut plugin = Plugin {
            runtime: self.clone(),
            spec: spec.clone(),
            settings_json: spec.settings_json(),
            digest,
            info: PluginInfo {
                name: String::new(),
                version: String::new(),
                hook: WitHook::Routing,
            },
            pre,
        };
        let Response::Info(info) = plugin
            .call_in_store(Request::Info)
            .await
            .map_err(|e| err(format!("info() failed: {}", e.failure)))?
        else {
            unreachable!("an info call answers with info")
        };
        let found = Hook::from_wit(info.hook);
        if found != spec.hook {
            return Err(err(format!(
                "info() says hook {found}, but the registry loads it for {}",
                spec.hook
            )));
        }
        plugin
            .call_in_store(Request::ValidateSettings(plugin.settings_json.clone()))
            .await
            .map_err(|e| err(format!("settings rejected: {}", e.failure)))?;
        tracing::info!(
            plugin = %spec.name, hook = %spec.hook, digest = %plugin.digest, name = %info.name, version = %info.version,
            origin = origin.map_or("shared", |o| if o == Origin::Cached { "cache" } else { "compiled" }), elapsed_ms = started.elapsed().as_millis() as u64, "plugin loaded"
        );
        plugin.info = info;
        Ok(Arc::new(plugin))
    }
}

/// A registry entry (one item of `plugins:` in `plugins.yaml`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSpec {
    /// Name referenced by `defaults` and by a CR's `spec.plugin`.
    pub name: String,
    /// The hook it implements.
    pub hook: Hook,
    /// `builtin://NAME`, `configmap://NAME/KEY`, `file:///path` or `https://…`.
    pub source: String,
    /// Lowercase hex sha256 of the component; required for every source but `builtin://`.
    #[serde(default)]
    pub sha256: Option<String>,
    /// JSON passed to `validate-settings` and to every call.
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
    /// Resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// Granted capabilities.
    #[serde(default)]
    pub grants: Grants,
    /// What a failed call does to the reconcile.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
}

impl PluginSpec {
    /// A spec with defaults for the given name, hook and source.
    pub fn new(name: &str, hook: Hook, source: &str) -> Self {
        Self {
            name: name.into(),
            hook,
            source: source.into(),
            sha256: None,
            settings: None,
            limits: Limits::default(),
            grants: Grants::default(),
            failure_policy: FailurePolicy::Fail,
        }
    }

    /// The settings as the JSON string plugins receive (`{}` when unset).
    pub(crate) fn settings_json(&self) -> String {
        self.settings
            .as_ref()
            .map_or_else(|| "{}".to_owned(), |v| v.to_string())
    }
}

/// The typed pre-instance of a component for its hook's world.
enum WorldPre {
    Router(bindings::router::RouterPre<Sandbox>),
    Scaler(bindings::scaler::ScalerPre<Sandbox>),
    Restart(bindings::restart::RestartPredicatePre<Sandbox>),
    Dr(bindings::dr::StateCheckerPre<Sandbox>),
}

impl WorldPre {
    /// # Errors
    /// What is wrong, and whether it is the world (`true`) rather than the imports.
    fn new(
        linker: &Linker<Sandbox>,
        component: &Component,
        hook: Hook,
    ) -> Result<Self, (String, bool)> {
        let world = hook.world();
        let pre = linker.instantiate_pre(component).map_err(|e| {
            let imports = format!(
                "imports do not match what the host provides (wasmop:plugin/log and WASI p2): {e:#}"
            );
            (imports, false)
        })?;
        Self::typed(pre.clone(), hook).map_err(|e| {
            // Name the world it does export, if it is another of ours.
            let message = match Hook::ALL
                .into_iter()
                .find(|&h| h != hook && Self::typed(pre.clone(), h).is_ok())
            {
                Some(found) => format!(
                    "does not export the {world} world of wasmop:plugin@0.1.0: it exports {}, \
                     the world of a {found} plugin",
                    found.world()
                ),
                None => format!(
                    "does not export the {world} world of wasmop:plugin@0.1.0 (wrong world or version?): {e:#}"
                ),
            };
            (message, true)
        })
    }

    /// `pre` typed for `hook`'s world; fails when the component does not export it.
    fn typed(pre: wasmtime::component::InstancePre<Sandbox>, hook: Hook) -> wasmtime::Result<Self> {
        Ok(match hook {
            Hook::Routing => Self::Router(bindings::router::RouterPre::new(pre)?),
            Hook::Scaling => Self::Scaler(bindings::scaler::ScalerPre::new(pre)?),
            Hook::Restart => Self::Restart(bindings::restart::RestartPredicatePre::new(pre)?),
            Hook::Dr => Self::Dr(bindings::dr::StateCheckerPre::new(pre)?),
        })
    }

    /// Instantiates the component in `store` and makes `request`'s call.
    async fn invoke(
        &self,
        store: &mut Store<Sandbox>,
        request: Request,
    ) -> wasmtime::Result<Result<Response, PluginError>> {
        macro_rules! run {
            ($pre:expr, $hook:ident, $call:ident, $answer:path) => {{
                let instance = $pre.instantiate_async(&mut *store).await?;
                match request {
                    Request::Info => Ok(Ok(Response::Info(instance.call_info(&mut *store).await?))),
                    Request::ValidateSettings(settings) => Ok(instance
                        .call_validate_settings(&mut *store, &settings)
                        .await?
                        .map(|()| Response::Accepted)),
                    Request::$hook(settings, request) => Ok(instance
                        .$call(&mut *store, &settings, &request)
                        .await?
                        .map($answer)),
                    _ => unreachable!("the hook is checked before a hook call"),
                }
            }};
        }
        match self {
            Self::Router(p) => run!(p, Route, call_route, Response::Route),
            Self::Scaler(p) => run!(p, Vote, call_vote, Response::Vote),
            Self::Restart(p) => run!(p, Evaluate, call_evaluate, Response::Decisions),
            Self::Dr(p) => run!(p, Check, call_check, Response::State),
        }
    }
}

/// One call into a plugin: `info`, `validate-settings` or its hook's function, with the
/// settings JSON and the request.
enum Request {
    Info,
    ValidateSettings(String),
    Route(String, RouteRequest),
    Vote(String, TriggerRequest),
    Evaluate(String, RestartRequest),
    Check(String, StateRequest),
}

/// What a [`Request`] returned.
enum Response {
    Info(PluginInfo),
    Accepted,
    Route(RouteResponse),
    Vote(TriggerVote),
    Decisions(Vec<PodDecision>),
    State(StateDecision),
}

impl Response {
    /// Bytes of the strings the guest returned, for `limits.maxOutputKiB`.
    fn output_size(&self) -> usize {
        match self {
            Self::Info(info) => info.name.len() + info.version.len(),
            Self::Accepted => 0,
            Self::Route(r) => r.http.len(),
            Self::Vote(v) => v.reason.len(),
            Self::Decisions(d) => d.iter().map(|d| d.reason.len() + 1).sum(),
            Self::State(d) => d.reason.len(),
        }
    }
}

/// A loaded plugin: one registry entry bound to its compiled component.
pub struct Plugin {
    runtime: Arc<PluginRuntime>,
    spec: PluginSpec,
    settings_json: String,
    digest: String,
    info: PluginInfo,
    pre: Arc<WorldPre>,
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.spec.name)
            .field("hook", &self.spec.hook)
            .field("digest", &self.digest)
            .finish()
    }
}

impl Plugin {
    /// The registry entry it was loaded from.
    pub fn spec(&self) -> &PluginSpec {
        &self.spec
    }

    /// The sha256 of the component.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Whether `other` runs on the same compiled component and pre-instance as this plugin.
    pub fn shares_code_with(&self, other: &Plugin) -> bool {
        Arc::ptr_eq(&self.pre, &other.pre)
    }

    /// What the plugin's `info` returned: (name, version).
    pub fn info(&self) -> (&str, &str) {
        (&self.info.name, &self.info.version)
    }

    fn fail(&self, failure: Failure) -> CallError {
        CallError {
            plugin: self.spec.name.clone(),
            hook: self.spec.hook,
            failure,
        }
    }

    /// One call in a fresh store under this plugin's limits, polled by the calling task
    /// (wasmtime's async API: the guest runs on a fiber, host I/O is awaited on the executor).
    ///
    /// The epoch deadline is one tick ([`EPOCH_TICK`]) at a time: at each tick the call yields
    /// to the executor, and at `limits.timeoutMs` (in ticks, rounded up) it traps. From its
    /// second tick on, a call has computed for a whole tick, and on a multi-thread runtime each
    /// later poll of it runs in `block_in_place`: a long call computes off the executor, while
    /// the usual call of tens of microseconds never hands the worker's core to another thread
    /// (handing every routing call off this way took it from 66 to 87 µs at the median and
    /// from 107 to 140 µs at p99, `cargo bench -p wasmop-plugin-host --bench plugins`). The whole call, host I/O
    /// included (`wasi:http`, which epochs cannot interrupt), is capped at `limits.timeoutMs`
    /// plus one tick of wall clock too; past it the call fails as [`Failure::Timeout`].
    async fn call_in_store(&self, request: Request) -> Result<Response, CallError> {
        let limits = &self.spec.limits;
        let sandbox = Sandbox::new(
            &self.spec.name,
            limits,
            &self.spec.grants,
            &self.runtime.http_pool,
        )
        .map_err(|e| self.fail(Failure::Instantiate(format!("{e:#}"))))?;
        let mut store = Store::new(&self.runtime.engine, sandbox);
        store.limiter(|s| s.limiter());
        let long = Arc::new(AtomicBool::new(false));
        let (deadline, mut ticks, ticked) = (limits.deadline_ticks(), 0, long.clone());
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            ticks += 1;
            if ticks >= deadline {
                return Ok(UpdateDeadline::Interrupt);
            }
            // The first tick may come a moment after the call started; from the second on,
            // the call has computed for a whole tick.
            if ticks >= 2 {
                ticked.store(true, Ordering::Relaxed);
            }
            // tokio's own yield: the executor's other tasks and its I/O and timer driver run
            // before the call resumes (wasmtime's plain `Yield` wakes the task at once, and a
            // task that wakes itself runs again first).
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        });
        let in_place = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let call = OffExecutorWhenLong {
            call: Box::pin(self.pre.invoke(&mut store, request)),
            long,
            in_place,
        };
        let wall_clock = limits.timeout() + EPOCH_TICK;
        let in_flight = self.runtime.epoch.in_flight();
        let result = tokio::time::timeout(wall_clock, call).await.ok();
        drop(in_flight);
        let sandbox = store.data();
        self.runtime
            .metrics
            .memory(&self.spec, sandbox.memory_use());
        if sandbox.wrote_stderr() {
            tracing::debug!(plugin = %self.spec.name, "plugin stderr (its tail): {}", sandbox.stderr_tail());
        }
        let Some(result) = result else {
            return Err(self.fail(Failure::Timeout {
                limit_ms: limits.timeout_ms,
            }));
        };
        match result {
            Ok(Ok(value)) => {
                let size = value.output_size();
                if size > (limits.max_output_kib as usize) << 10 {
                    return Err(self.fail(Failure::OutputTooLarge {
                        size_kib: size >> 10,
                        limit_kib: limits.max_output_kib,
                    }));
                }
                Ok(value)
            }
            Ok(Err(e)) if !sandbox.denied_hosts().is_empty() => {
                tracing::debug!(plugin = %self.spec.name, "plugin error after a denied request: {}", e.message);
                Err(self.fail(Failure::DeniedHost(sandbox.denied_hosts().to_vec())))
            }
            Ok(Err(e)) => {
                if e.message.len() > (limits.max_output_kib as usize) << 10 {
                    return Err(self.fail(Failure::OutputTooLarge {
                        size_kib: e.message.len() >> 10,
                        limit_kib: limits.max_output_kib,
                    }));
                }
                Err(self.fail(Failure::Plugin {
                    message: e.message,
                    field: e.field,
                }))
            }
            Err(e) => Err(self.fail(classify(&e, sandbox, limits))),
        }
    }

    /// Makes `request`'s call behind the runtime's semaphore (see `call_in_store` for where it
    /// runs) and records its metrics. A panic of the host while serving the call fails that
    /// call only.
    async fn call(self: &Arc<Self>, request: Request) -> Result<Response, CallError> {
        use futures::FutureExt as _;
        let _permit = self
            .runtime
            .permits
            .acquire()
            .await
            .expect("semaphore is never closed");
        let started = Instant::now();
        let result = std::panic::AssertUnwindSafe(self.call_in_store(request))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                Err(self.fail(Failure::Trap(format!(
                    "host task failed: {}",
                    panic_message(&*panic)
                ))))
            });
        self.runtime.metrics.call(
            &self.spec,
            started.elapsed(),
            result.as_ref().err().map(|e| e.failure.label()),
        );
        result
    }

    /// Calls `validate-settings` with `settings` (JSON).
    ///
    /// # Errors
    /// [`CallError`] with the plugin's rejection or the sandbox failure.
    pub async fn validate_settings(self: &Arc<Self>, settings: String) -> Result<(), CallError> {
        self.call(Request::ValidateSettings(settings))
            .await
            .map(drop)
    }

    fn expect_hook(&self, hook: Hook) -> Result<(), CallError> {
        if self.spec.hook == hook {
            Ok(())
        } else {
            Err(self.fail(Failure::Instantiate(format!(
                "is a {} plugin, not {hook}",
                self.spec.hook
            ))))
        }
    }

    /// Routing hook: the complete new `spec.http` for `request.virtual-service`.
    ///
    /// # Errors
    /// [`CallError`]; the response's `http` must be a JSON array of objects.
    pub async fn route(
        self: &Arc<Self>,
        request: RouteRequest,
    ) -> Result<RouteResponse, CallError> {
        let response = self.route_unchecked(request).await?;
        // One validating pass without building the routes (the controller builds them in
        // `route_parsed`, which needs them): each route is kept as its JSON text.
        match serde_json::from_str::<Vec<&serde_json::value::RawValue>>(&response.http) {
            Ok(routes) if routes.iter().all(|r| r.get().starts_with('{')) => Ok(response),
            _ => Err(self.fail(routes_failure(&response.http))),
        }
    }

    /// As [`Plugin::route`], with the routes parsed once (the routing controller's path).
    ///
    /// # Errors
    /// [`CallError`]; the response's `http` must be a JSON array of objects.
    pub async fn route_parsed(
        self: &Arc<Self>,
        request: RouteRequest,
    ) -> Result<(RouteResponse, Vec<serde_json::Value>), CallError> {
        let response = self.route_unchecked(request).await?;
        match serde_json::from_str::<serde_json::Value>(&response.http) {
            Ok(serde_json::Value::Array(items))
                if items.iter().all(serde_json::Value::is_object) =>
            {
                Ok((response, items))
            }
            _ => Err(self.fail(routes_failure(&response.http))),
        }
    }

    /// The routing call itself, its output not checked yet.
    async fn route_unchecked(
        self: &Arc<Self>,
        request: RouteRequest,
    ) -> Result<RouteResponse, CallError> {
        self.expect_hook(Hook::Routing)?;
        match self
            .call(Request::Route(self.settings_json.clone(), request))
            .await?
        {
            Response::Route(response) => Ok(response),
            _ => unreachable!("a route call answers with routes"),
        }
    }

    /// Scaling hook: the vote of one trigger.
    ///
    /// # Errors
    /// [`CallError`].
    pub async fn vote(self: &Arc<Self>, request: TriggerRequest) -> Result<TriggerVote, CallError> {
        self.expect_hook(Hook::Scaling)?;
        match self
            .call(Request::Vote(self.settings_json.clone(), request))
            .await?
        {
            Response::Vote(vote) => Ok(vote),
            _ => unreachable!("a vote call answers with a vote"),
        }
    }

    /// Restart hook: one decision per pod of the page, in page order.
    ///
    /// # Errors
    /// [`CallError`]; the number of decisions must equal the number of pods in the page.
    pub async fn evaluate(
        self: &Arc<Self>,
        request: RestartRequest,
        pods: usize,
    ) -> Result<Vec<PodDecision>, CallError> {
        self.expect_hook(Hook::Restart)?;
        let Response::Decisions(decisions) = self
            .call(Request::Evaluate(self.settings_json.clone(), request))
            .await?
        else {
            unreachable!("an evaluate call answers with decisions")
        };
        if decisions.len() != pods {
            return Err(self.fail(Failure::InvalidOutput(format!(
                "evaluate returned {} decisions for a page of {pods} pods",
                decisions.len()
            ))));
        }
        Ok(decisions)
    }

    /// DR hook: this instance's state and lease write for one tick.
    ///
    /// # Errors
    /// [`CallError`].
    pub async fn check(
        self: &Arc<Self>,
        request: StateRequest,
    ) -> Result<StateDecision, CallError> {
        self.expect_hook(Hook::Dr)?;
        match self
            .call(Request::Check(self.settings_json.clone(), request))
            .await?
        {
            Response::State(decision) => Ok(decision),
            _ => unreachable!("a check call answers with a decision"),
        }
    }
}

/// A plugin call that runs its polls in `block_in_place` once it has run through an epoch
/// tick (`long`, set by the store's epoch callback), when `in_place` (a multi-thread runtime).
struct OffExecutorWhenLong<F> {
    call: std::pin::Pin<Box<F>>,
    long: Arc<AtomicBool>,
    in_place: bool,
}

impl<F: Future> Future for OffExecutorWhenLong<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        if self.in_place && self.long.load(Ordering::Relaxed) {
            tokio::task::block_in_place(|| self.call.as_mut().poll(cx))
        } else {
            self.call.as_mut().poll(cx)
        }
    }
}

/// The message of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_owned())
}

/// Maps a wasmtime error to the cause a user can act on.
fn classify(e: &wasmtime::Error, sandbox: &Sandbox, limits: &Limits) -> Failure {
    if sandbox.memory_exceeded().is_some() {
        return Failure::OutOfMemory {
            limit_mib: limits.memory_mib,
        };
    }
    if let Some(Trap::Interrupt) = e.downcast_ref::<Trap>() {
        return Failure::Timeout {
            limit_ms: limits.timeout_ms,
        };
    }
    // The causes without the wasm backtrace (a context layer of the error), whose frames are
    // unnamed in a stripped build; it goes to the debug log.
    let backtrace = e
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .map(ToString::to_string);
    let cause = e
        .chain()
        .map(ToString::to_string)
        .filter(|c| backtrace.as_ref() != Some(c))
        .collect::<Vec<_>>()
        .join(": ");
    if let Some(backtrace) = &backtrace {
        tracing::debug!(
            plugin = sandbox.plugin(),
            "plugin call failed: {cause}\n{backtrace}"
        );
    }
    let stderr = sandbox.stderr_tail();
    Failure::Trap(if stderr.is_empty() {
        cause
    } else {
        format!("{cause}; stderr: {stderr}")
    })
}

pub use bindings::dr::wasmop::plugin::dr::{
    Action as LeaseAction, LeaseRecord, State as DrState, StateDecision, StateRequest,
};
pub use bindings::restart::wasmop::plugin::restart::{PodDecision, RestartRequest};
pub use bindings::router::wasmop::plugin::routing::{
    HeaderMatch, IstioMatch, Label, RouteRequest, RouteResponse, StringMatch,
};
pub use bindings::scaler::wasmop::plugin::scaling::{TriggerRequest, TriggerVote, Vote};

/// Why a routing plugin's `http` is not a JSON array of objects.
fn routes_failure(http: &str) -> Failure {
    match serde_json::from_str::<serde::de::IgnoredAny>(http) {
        Ok(_) => {
            Failure::InvalidOutput("route: `http` must be a JSON array of HTTPRoute objects".into())
        }
        Err(e) => Failure::InvalidOutput(format!("route: `http` is not JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A load compiles only with the runtime's one compile permit (a large component peaks at
    /// hundreds of MiB while compiling, docs/plugins.md "Memory to compile"): while another
    /// compile holds it, the load does not finish; released, it does.
    #[tokio::test]
    async fn a_load_waits_for_the_compile_permit() {
        let runtime = PluginRuntime::new(RuntimeOptions {
            cache_dir: None,
            max_concurrent_calls: 1,
            pooling: false,
            extra_ca_pem: None,
        })
        .unwrap();
        let b = builtin::find("none").unwrap();
        let spec = PluginSpec::new(b.name, b.hook, &format!("builtin://{}", b.name));
        let alone = Instant::now();
        runtime.load(&spec, b.wasm).await.expect("loads");
        let alone = alone.elapsed();

        let held = runtime.compiles.clone().acquire_owned().await.unwrap();
        let load = runtime.load(&spec, b.wasm);
        tokio::pin!(load);
        // Three times as long as the same load took with the permit free.
        let wait = (alone * 3).max(Duration::from_millis(500));
        assert!(
            tokio::time::timeout(wait, &mut load).await.is_err(),
            "the load finished within {wait:?} while another compile held the permit"
        );
        drop(held);
        load.await.expect("loads once the permit is free");
    }
}
