//! Test helpers shared by the controllers' unit tests.

use std::sync::Arc;

use clap::Parser;

use super::{Context, RunOptions};
use crate::plugins::registry::Registry;
use crate::plugins::{PluginRuntime, RuntimeOptions};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunOptions,
}

/// A context whose client points at a closed port (any request it sends fails), with an empty
/// registry and the `wasmop run` options parsed from `args` (e.g. `["--identity", "solo"]`).
/// The gate starts closed (passive).
pub(crate) fn unreachable_context(args: &[&str]) -> Arc<Context> {
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
    context_with(kube::Client::try_from(config).expect("a client"), args)
}

/// As [`unreachable_context`], with `client` as the API server.
pub(crate) fn context_with(client: kube::Client, args: &[&str]) -> Arc<Context> {
    let runtime = PluginRuntime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 1,
        pooling: false,
        extra_ca_pem: None,
    })
    .expect("a plugin runtime");
    let options = Cli::parse_from(std::iter::once("wasmop").chain(args.iter().copied())).run;
    Context::new(client, Registry::new(runtime), options)
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
