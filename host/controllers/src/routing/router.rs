//! The router behind the plan: a small trait so that the controller, `wasmop plan`, the tests
//! and the benchmark can plan with the wasm component (a loaded [`Plugin`]), the same logic as
//! a native library (the tests' and benchmarks' own), or a stand-in that always fails. A
//! router may refine the answer of another ([`Refining`], a registry entry's `after:`): the
//! plan calls each router of the chain ([`stages`]) in turn.

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

    /// What makes this router's answers reusable: routers with the same identity give the same
    /// answer to the same request (a component's sha256 and its settings), so the plan keeps
    /// an answer and does not call again for a request it has seen ([`Answers`]). `None` (the
    /// default): every request is a call.
    fn identity(&self) -> Option<String> {
        None
    }

    /// The router whose answer this one refines (a registry entry's `after:`): the plan calls
    /// it first and gives this one the VirtualService with its answer applied. `None` (the
    /// default): this router answers alone.
    fn after(&self) -> Option<&dyn Router> {
        None
    }
}

/// A router that refines the answer of another: `router` gets the VirtualService as `after`
/// (itself possibly [`Refining`]) left it. Its name, failure policy, identity and answers are
/// `router`'s.
pub struct Refining {
    /// The router called first.
    pub after: Arc<dyn Router>,
    /// The router that refines its answer.
    pub router: Arc<dyn Router>,
}

#[async_trait::async_trait]
impl Router for Refining {
    fn name(&self) -> &str {
        self.router.name()
    }

    fn failure_policy(&self) -> FailurePolicy {
        self.router.failure_policy()
    }

    async fn route(&self, request: RouteRequest) -> Result<Vec<Value>, String> {
        self.router.route(request).await
    }

    fn identity(&self) -> Option<String> {
        self.router.identity()
    }

    fn after(&self) -> Option<&dyn Router> {
        Some(self.after.as_ref())
    }
}

/// The routers a call of `router` goes through, in call order: those it builds on
/// ([`Router::after`], followed back), then `router`.
pub fn stages(router: &dyn Router) -> Vec<&dyn Router> {
    let mut out = vec![router];
    while let Some(after) = out.last().and_then(|r| r.after()) {
        out.push(after);
    }
    out.reverse();
    out
}

/// What makes the answers of the chain `stages` reusable ([`Answers`]): every router's
/// [`Router::identity`], in order, so that a change of any of them (a new component, other
/// settings, another `after:`) is another key. `None` when a router has none.
pub fn chain_identity(stages: &[&dyn Router]) -> Option<String> {
    let mut out = String::new();
    for stage in stages {
        // Each prefixed with its length, so that no two chains give the same text.
        let identity = stage.identity()?;
        out.push_str(&format!("{}:{identity}", identity.len()));
    }
    Some(out)
}

/// The router of a chain of loaded plugins, the earliest first ([`Registry::resolve_chain`]):
/// each [`WasmRouter`] refines the answer of the ones before it. `None` for an empty chain.
///
/// [`Registry::resolve_chain`]: wasmop_plugin_host::registry::Registry::resolve_chain
pub fn wasm_chain(plugins: impl IntoIterator<Item = Arc<Plugin>>) -> Option<Arc<dyn Router>> {
    plugins.into_iter().fold(None, |after, plugin| {
        let router: Arc<dyn Router> = Arc::new(WasmRouter(plugin));
        Some(match after {
            None => router,
            Some(after) => Arc::new(Refining { after, router }),
        })
    })
}

/// Router answers by request, so that a reconcile whose calls get the same input again (the
/// clone's status changed, a retry, a resync) does not run the plugin again: with a
/// VirtualService of a thousand routes a call costs tens of milliseconds, and a DynamicEnv is
/// reconciled many times while its clone starts.
///
/// An answer is kept as the routes named with the request's route prefix, each with the number
/// of the input's routes before it: the host's checks guarantee that every other route of an
/// accepted answer is the input's, in order, so the answer is the input with these spliced in.
/// Only the newest answer of each VirtualService and route prefix (one DynamicEnv's copies in
/// one VirtualService) is kept ([`AnswerKey::slot`]): an answer to an older version of the
/// VirtualService is not asked for again once another DynamicEnv changed it, so keeping it
/// would hold memory for nothing. At most [`Answers::CAPACITY`] answers are kept; when full,
/// all are dropped.
#[derive(Default)]
pub struct Answers {
    kept: std::sync::Mutex<std::collections::HashMap<u64, (u64, Arc<OwnedRoutes>)>>,
}

/// The routes an answer added, each with the number of input routes before it.
type OwnedRoutes = Vec<(usize, Value)>;

/// Where an answer is kept and what it answers ([`Answers::key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerKey {
    /// The VirtualService and route prefix: one answer per slot is kept.
    pub slot: u64,
    /// The request, with the identity of the routers that answer it.
    pub request: u64,
}

impl Answers {
    /// How many answers are kept at most.
    pub const CAPACITY: usize = 4096;

    /// The key of `request` about VirtualService `vs` (namespace, name) to a router of
    /// identity `identity`.
    pub fn key(identity: &str, vs: (&str, &str), request: &RouteRequest) -> AnswerKey {
        use std::hash::{Hash, Hasher};
        struct Sink(std::collections::hash_map::DefaultHasher);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.write(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut slot = std::collections::hash_map::DefaultHasher::new();
        (vs, request.route_prefix.as_str()).hash(&mut slot);
        let mut sink = Sink(std::collections::hash_map::DefaultHasher::new());
        sink.0.write(identity.as_bytes());
        sink.0.write_u8(0xff);
        serde_json::to_writer(&mut sink, request).expect("a request serializes");
        AnswerKey {
            slot: slot.finish(),
            request: sink.0.finish(),
        }
    }

    /// The answer kept under `key`, rebuilt on `input` (the routes the request was made with),
    /// if any: the input's routes that `owned` says are the router's earlier output are
    /// replaced, as the router replaces them.
    pub fn get(
        &self,
        key: AnswerKey,
        input: &[Value],
        owned: impl Fn(&Value) -> bool,
    ) -> Option<Vec<Value>> {
        let added = self
            .kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key.slot)
            .filter(|(request, _)| *request == key.request)
            .map(|(_, added)| added.clone())?;
        let mut out = Vec::with_capacity(input.len() + added.len());
        let mut next = added.iter().peekable();
        for (i, route) in input.iter().filter(|r| !owned(r)).enumerate() {
            while let Some((_, r)) = next.next_if(|(before, _)| *before == i) {
                out.push(r.clone());
            }
            out.push(route.clone());
        }
        out.extend(next.map(|(_, r)| r.clone()));
        Some(out)
    }

    /// Keeps `answer`, an accepted answer whose own routes are those `owned` says, in place of
    /// the answer its slot held.
    pub fn put(&self, key: AnswerKey, answer: &[Value], owned: impl Fn(&Value) -> bool) {
        let mut kept = Vec::new();
        let mut others = 0;
        for route in answer {
            if owned(route) {
                kept.push((others, route.clone()));
            } else {
                others += 1;
            }
        }
        let mut map = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= Self::CAPACITY && !map.contains_key(&key.slot) {
            map.clear();
        }
        map.insert(key.slot, (key.request, Arc::new(kept)));
    }

    /// How many answers are kept.
    pub fn len(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no answer is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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

    fn identity(&self) -> Option<String> {
        let settings = self.0.spec().settings.as_ref().map(Value::to_string);
        Some(format!(
            "{}\0{}",
            self.0.digest(),
            settings.unwrap_or_default()
        ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A router with a name and an identity, for the chain's shape.
    struct Named(&'static str, Option<&'static str>);

    #[async_trait::async_trait]
    impl Router for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn failure_policy(&self) -> FailurePolicy {
            FailurePolicy::Fail
        }
        fn identity(&self) -> Option<String> {
            self.1.map(str::to_owned)
        }
        async fn route(&self, _: RouteRequest) -> Result<Vec<Value>, String> {
            Ok(Vec::new())
        }
    }

    fn refining(after: Arc<dyn Router>, router: Named) -> Arc<dyn Router> {
        Arc::new(Refining {
            after,
            router: Arc::new(router),
        })
    }

    #[test]
    fn a_chain_is_called_from_its_first_router_and_keyed_by_all() {
        let base: Arc<dyn Router> = Arc::new(Named("base", Some("b")));
        let chain = refining(
            refining(base.clone(), Named("middle", Some("m"))),
            Named("last", Some("l")),
        );
        let names: Vec<&str> = stages(chain.as_ref()).iter().map(|r| r.name()).collect();
        assert_eq!(names, ["base", "middle", "last"]);
        assert_eq!(chain.name(), "last");
        assert_eq!(stages(base.as_ref()).len(), 1);

        let id = |r: &Arc<dyn Router>| chain_identity(&stages(r.as_ref()));
        assert_eq!(id(&chain).as_deref(), Some("1:b1:m1:l"));
        // Identities that would read alike when put together are other keys.
        let ab = refining(Arc::new(Named("x", Some("a"))), Named("y", Some("b1:c")));
        let abc = refining(Arc::new(Named("x", Some("ab1:"))), Named("y", Some("c")));
        assert_ne!(id(&ab), id(&abc));
        // A router without identity: the chain's answers are not reused.
        let opaque = refining(base, Named("opaque", None));
        assert_eq!(id(&opaque), None);
    }

    #[test]
    fn a_kept_answer_is_the_input_with_the_owned_routes_spliced_back() {
        let input = vec![
            json!({"name": "a"}),
            json!({"name": "b"}),
            json!({"name": "c"}),
        ];
        let answer = vec![
            json!({"name": "p-0"}),
            json!({"name": "a"}),
            json!({"name": "b"}),
            json!({"name": "p-1"}),
            json!({"name": "p-2"}),
            json!({"name": "c"}),
            json!({"name": "p-3"}),
        ];
        let answers = Answers::default();
        let request = RouteRequest {
            dynamic_env: "ns/de".into(),
            unique_name: "u".into(),
            subset: "s".into(),
            host: "h".into(),
            namespace: "ns".into(),
            default_version: "shared".into(),
            matches: vec![],
            route_prefix: "p-".into(),
            virtual_service: "{}".into(),
        };
        let owned = |r: &Value| r["name"].as_str().unwrap().starts_with("p-");
        let vs = ("ns", "reviews");
        let key = Answers::key("digest", vs, &request);
        assert_eq!(answers.get(key, &input, owned), None);
        answers.put(key, &answer, owned);
        assert_eq!(answers.get(key, &input, owned), Some(answer.clone()));
        // Earlier output of the same router in the input is replaced, not kept beside.
        let mut again = input.clone();
        again.insert(1, json!({"name": "p-old"}));
        assert_eq!(answers.get(key, &again, owned), Some(answer.clone()));
        // Another identity or another request is another key.
        assert_ne!(Answers::key("other", vs, &request), key);
        let mut moved = request.clone();
        moved.virtual_service = "{\"spec\":{}}".into();
        let newer = Answers::key("digest", vs, &moved);
        assert_ne!(newer, key);
        // ... in the same slot: the newer answer replaces the older one.
        assert_eq!(newer.slot, key.slot);
        answers.put(newer, &answer, owned);
        assert_eq!(answers.len(), 1);
        assert_eq!(answers.get(key, &input, owned), None);
        assert!(answers.get(newer, &input, owned).is_some());
        // Another VirtualService or another DynamicEnv's prefix is another slot.
        let other_vs = Answers::key("digest", ("ns", "details"), &request);
        let mut other_de = request.clone();
        other_de.route_prefix = "q-".into();
        let other_de = Answers::key("digest", vs, &other_de);
        assert_ne!(other_vs.slot, key.slot);
        assert_ne!(other_de.slot, key.slot);
        answers.put(other_vs, &answer, owned);
        answers.put(other_de, &answer, owned);
        assert_eq!(answers.len(), 3);
        assert!(answers.get(newer, &input, owned).is_some());
    }
}
