//! Test helpers shared by the controllers' unit tests.

use std::sync::Arc;

use wasmop_kernel::{Kernel, Scope};
use wasmop_plugin_host::registry::Registry;
use wasmop_plugin_host::{PluginRuntime, RuntimeOptions};

use crate::Context;

/// A context whose client points at a closed port (any request it sends fails), with an empty
/// registry, identity `wasmop` and every namespace watched. The gate starts closed (passive).
pub(crate) fn unreachable_context() -> Arc<Context> {
    unreachable_context_as("wasmop")
}

/// As [`unreachable_context`], with instance identity `identity`.
pub(crate) fn unreachable_context_as(identity: &str) -> Arc<Context> {
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
    context_as(kube::Client::try_from(config).expect("a client"), identity)
}

/// As [`unreachable_context`], with `client` as the API server.
pub(crate) fn context_with(client: kube::Client) -> Arc<Context> {
    context_as(client, "wasmop")
}

fn context_as(client: kube::Client, identity: &str) -> Arc<Context> {
    let runtime = PluginRuntime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 1,
        pooling: false,
        extra_ca_pem: None,
    })
    .expect("a plugin runtime");
    let scope = Scope {
        namespace: "wasmop-system".into(),
        identity: identity.into(),
        watch_namespace: None,
        selector: None,
    };
    Context::new(Kernel::new(client, scope), Registry::new(runtime))
}

/// A client whose API server answers every request with HTTP `status` and a `Status` body
/// carrying that code, without a network.
pub(crate) fn client_answering(status: u16) -> kube::Client {
    let body = format!(
        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"answer {status}","reason":"NotFound","code":{status}}}"#
    );
    let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
        let body = body.clone();
        async move {
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                    .expect("a response"),
            )
        }
    });
    kube::Client::new(service, "default")
}
