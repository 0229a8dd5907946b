//! A component's typed pre-instance for its hook's world, and the requests and answers of the
//! four worlds' exports.

use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use crate::bindings::{self, PluginError, PluginInfo};
use crate::bindings::{
    PodDecision, RestartRequest, RouteRequest, RouteResponse, StateDecision, StateRequest,
    TriggerRequest, TriggerVote,
};
use crate::sandbox::Sandbox;
use crate::spec::Hook;

/// The typed pre-instance of a component for its hook's world.
pub(crate) enum WorldPre {
    Router(bindings::router::RouterPre<Sandbox>),
    Scaler(bindings::scaler::ScalerPre<Sandbox>),
    Restart(bindings::restart::RestartPredicatePre<Sandbox>),
    Dr(bindings::dr::StateCheckerPre<Sandbox>),
}

impl WorldPre {
    /// # Errors
    /// What is wrong, and whether it is the world (`true`) rather than the imports.
    pub(crate) fn new(
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
    pub(crate) fn typed(
        pre: wasmtime::component::InstancePre<Sandbox>,
        hook: Hook,
    ) -> wasmtime::Result<Self> {
        Ok(match hook {
            Hook::Routing => Self::Router(bindings::router::RouterPre::new(pre)?),
            Hook::Scaling => Self::Scaler(bindings::scaler::ScalerPre::new(pre)?),
            Hook::Restart => Self::Restart(bindings::restart::RestartPredicatePre::new(pre)?),
            Hook::Dr => Self::Dr(bindings::dr::StateCheckerPre::new(pre)?),
        })
    }

    /// Instantiates the component in `store` and makes `request`'s call.
    pub(crate) async fn invoke(
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
pub(crate) enum Request {
    Info,
    ValidateSettings(String),
    Route(String, RouteRequest),
    Vote(String, TriggerRequest),
    Evaluate(String, RestartRequest),
    Check(String, StateRequest),
}

/// What a [`Request`] returned.
pub(crate) enum Response {
    Info(PluginInfo),
    Accepted,
    Route(RouteResponse),
    Vote(TriggerVote),
    Decisions(Vec<PodDecision>),
    State(StateDecision),
}

impl Response {
    /// Bytes of the strings the guest returned, for `limits.maxOutputKiB`.
    pub(crate) fn output_size(&self) -> usize {
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
