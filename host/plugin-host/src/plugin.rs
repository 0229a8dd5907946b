//! A loaded plugin and its calls: a fresh sandboxed instance per call, in the calling task,
//! with its limits, its answer checked and its metrics recorded.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use wasmtime::{Trap, UpdateDeadline};

use crate::bindings::{PluginInfo, WitHook};
use crate::bindings::{
    PodDecision, RestartRequest, RouteRequest, RouteResponse, StateDecision, StateRequest,
    TriggerRequest, TriggerVote,
};
use crate::cache::Origin;
use crate::epoch::EPOCH_TICK;
use crate::error::{CallError, Failure, LoadError};
use crate::runtime::{POOLING_MAX_MEMORY, PluginRuntime};
use crate::sandbox::Sandbox;
use crate::spec::{Hook, Limits, PluginSpec};
use crate::world::{Request, Response, WorldPre};

impl PluginRuntime {
    /// Compiles (or loads from the cache, or shares with a plugin of the same component)
    /// `bytes`, checks it targets `spec.hook`'s world, calls `info` (whose hook must match) and
    /// `validate-settings`. The digest and the compilation run on tokio's blocking pool, a
    /// compile within [`CompileLimits`](crate::CompileLimits) and behind the one compile permit
    /// (see `PluginRuntime::compiled`); the two calls as any call does.
    ///
    /// # Errors
    /// A [`LoadError`] naming the plugin: a `grants.readOnlyDir` that does not resolve under the
    /// plugin data root ([`PluginRuntime::set_plugin_data_root`]), a memory limit over what a
    /// pooled instance can have, sha256 mismatch, a compile limit exceeded or a compile that
    /// ended the last process, not a component, wrong world or version, failed `info` or
    /// rejected settings.
    pub async fn load(
        self: &Arc<Self>,
        spec: &PluginSpec,
        bytes: &[u8],
    ) -> Result<Arc<Plugin>, LoadError> {
        let err = |message: String| LoadError::new(&spec.name, message);
        // Its calls read the directory's real path, found under the plugin data root.
        let resolved = self.resolve_grants(spec).await.map_err(err)?;
        let spec = &*resolved;
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
        let (digest, pre, origin) = self
            .compiled(
                &spec.name,
                spec.hook,
                spec.sha256.as_deref(),
                bytes.to_vec(),
            )
            .await?;
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
            memory_peak: AtomicUsize::new(0),
        };
        // The load's calls take permits of their own (`CallPermits::load`): a reload never
        // waits behind the hooks' calls, and every instance in flight has a pool slot.
        let permit = self.permits.load().await;
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
        drop(permit);
        tracing::info!(
            plugin = %spec.name, hook = %spec.hook, digest = %plugin.digest, name = %info.name, version = %info.version,
            origin = origin.map_or("shared", |o| if o == Origin::Cached { "cache" } else { "compiled" }), elapsed_ms = started.elapsed().as_millis() as u64, "plugin loaded"
        );
        plugin.info = info;
        // The peak counts the hook's calls only.
        plugin.memory_peak = AtomicUsize::new(0);
        Ok(Arc::new(plugin))
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
    /// The largest [`Plugin::memory_peak_bytes`] of its calls so far.
    memory_peak: AtomicUsize,
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

    /// The largest linear memory (with tables, as counted against `limits.memoryMiB`) any call
    /// of this plugin has reached so far, in bytes; 0 before the first call. `load`'s calls of
    /// `info` and `validate-settings` do not count; [`Plugin::validate_settings`]' do. For
    /// `wasmop plugin run --repeat`.
    pub fn memory_peak_bytes(&self) -> usize {
        self.memory_peak.load(Ordering::Relaxed)
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
        let mut store = sandbox.into_store(&self.runtime.engine);
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
        let memory = sandbox.memory_use();
        self.runtime.metrics.memory(&self.spec, memory);
        self.memory_peak.fetch_max(memory.peak, Ordering::Relaxed);
        if sandbox.wrote_stderr() {
            tracing::debug!(plugin = %self.spec.name, "plugin stderr (its tail): {}", sandbox.stderr_tail());
        }
        let Some(result) = result else {
            return Err(self.fail(Failure::Timeout {
                limit_ms: limits.timeout_ms,
            }));
        };
        let too_large = |size: usize| {
            (size > limits.max_output_bytes()).then(|| {
                self.fail(Failure::OutputTooLarge {
                    size_kib: size >> 10,
                    limit_kib: limits.max_output_kib,
                })
            })
        };
        match result {
            Ok(Ok(value)) => match too_large(value.output_size()) {
                Some(e) => Err(e),
                None => Ok(value),
            },
            Ok(Err(e)) => {
                // Every string the plugin hands back counts, the field as much as the message.
                let size = e.message.len() + e.field.as_ref().map_or(0, String::len);
                if let Some(e) = too_large(size) {
                    return Err(e);
                }
                let (hosts, more) = sandbox.denied_hosts();
                if !hosts.is_empty() {
                    tracing::debug!(plugin = %self.spec.name, "plugin error after a denied request: {}", crate::sandbox::one_line(&e.message, 1024));
                    return Err(self.fail(Failure::DeniedHost {
                        hosts: hosts.to_vec(),
                        more,
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

    /// Makes `request`'s call with a permit of its hook (its own, or a shared one; see
    /// `CallPermits`; `call_in_store` for where it runs) and records its metrics. A panic of
    /// the host while serving the call fails that call only.
    async fn call(self: &Arc<Self>, request: Request) -> Result<Response, CallError> {
        use futures::FutureExt as _;
        let _permit = self.runtime.permits.call(self.spec.hook).await;
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

/// wasmtime's words when a guest hands the host more than its hostcall fuel (the error type
/// is private); `a_plugin_handing_the_host_more_than_its_fuel_fails` pins them.
const HOSTCALL_FUEL_EXHAUSTED: &str = "fuel allocated for hostcalls has been exhausted";

/// Maps a wasmtime error to the cause a user can act on.
fn classify(e: &wasmtime::Error, sandbox: &Sandbox, limits: &Limits) -> Failure {
    if sandbox.memory_exceeded().is_some() {
        return Failure::OutOfMemory {
            limit_mib: limits.memory_mib,
        };
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => {
            return Failure::Timeout {
                limit_ms: limits.timeout_ms,
            };
        }
        Some(Trap::StackOverflow) => {
            return Failure::Trap(format!(
                "stack overflow: the call used more than {} KiB of WebAssembly stack (endless or \
                 too deep recursion)",
                crate::runtime::MAX_WASM_STACK >> 10
            ));
        }
        _ => {}
    }
    if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return Failure::Exited { status: exit.0 };
    }
    if let Some(full) = e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
        return Failure::Instantiate(format!(
            "no free slot in the instance pool ({full}): the call was not run. The pool holds \
             what --max-concurrent-calls calls need when each has at most the average number of \
             core instances, memories and tables; raise --max-concurrent-calls or run with \
             --pooling=false"
        ));
    }
    if e.chain()
        .any(|c| c.to_string().contains(HOSTCALL_FUEL_EXHAUSTED))
    {
        return Failure::TransferTooLarge {
            limit_kib: sandbox.hostcall_fuel() >> 10,
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
    use std::time::Duration;

    use super::*;
    use crate::builtin;
    use crate::runtime::RuntimeOptions;

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
