//! The router behind the plan: a small trait so that the controller, `wasmop plan`, the tests
//! and the benchmark can plan with the wasm component (a loaded [`Plugin`]), the same logic as
//! a native library (the tests' and benchmarks' own), or a stand-in that always fails.

use std::sync::Arc;

use serde_json::Value;

use wasmop_plugin_host::{FailurePolicy, Plugin, RouteRequest};

/// Answers the routing hook's question: the complete new `spec.http` of
/// `request.virtual_service` (see `plugins/sdk/wit/plugin.wit`, `route`).
#[async_trait::async_trait]
pub trait Router: Send + Sync {
    /// The registry name of the plugin, for messages, Events and metrics.
    fn name(&self) -> &str;

    /// What a failed call does to the reconcile (`failurePolicy` of the registry entry).
    fn failure_policy(&self) -> FailurePolicy;

    /// The new route list (JSON `HTTPRoute` objects).
    ///
    /// # Errors
    /// A message naming the plugin and the cause (trap, timeout, plugin error, invalid output).
    async fn route(&self, request: RouteRequest) -> Result<Vec<Value>, String>;
}

/// A loaded `router` plugin: every call goes through the sandbox.
pub struct WasmRouter(pub Arc<Plugin>);

#[async_trait::async_trait]
impl Router for WasmRouter {
    fn name(&self) -> &str {
        &self.0.spec().name
    }

    fn failure_policy(&self) -> FailurePolicy {
        self.0.spec().failure_policy
    }

    async fn route(&self, request: RouteRequest) -> Result<Vec<Value>, String> {
        let (_, routes) = self
            .0
            .route_parsed(request)
            .await
            .map_err(|e| e.to_string())?;
        Ok(routes)
    }
}

/// A router that cannot be called (the plugin a DynamicEnv names is unknown or not loaded):
/// every call fails with the resolution error, under `failurePolicy: Fail`.
pub struct Unavailable {
    /// The name asked for.
    pub name: String,
    /// Why it cannot be used.
    pub reason: String,
}

#[async_trait::async_trait]
impl Router for Unavailable {
    fn name(&self) -> &str {
        &self.name
    }

    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Fail
    }

    async fn route(&self, _request: RouteRequest) -> Result<Vec<Value>, String> {
        Err(self.reason.clone())
    }
}
