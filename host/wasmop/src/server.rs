//! The operator's HTTP server.
//!
//! | path | answer |
//! |---|---|
//! | `/healthz` | 200 while the process serves (liveness; never depends on the DR state) |
//! | `/readyz` | 200 once the plugin registry is loaded, else 503 |
//! | `/health/ready` | Admiral's health check (docs/dr.md): 200; with `?checkifreadonly=true`, 502 while passive and 200 while active; an unparseable value gives 400 |
//! | `/metrics` | Prometheus text format (`wasmop_kernel::metrics`, with the plugin host's and the controllers' metrics) |
//! | `/plugins` | the registry's entries and their readiness, as JSON |
//! | `/dr` | the DR loop's view: state, identity, backend, holder, hold left, last error (JSON) |

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Json};
use axum::routing::get;

use wasmop_controllers::Context;
use wasmop_controllers::dr::machine::Status;
use wasmop_kernel::gate::WriteGate;

/// The router of the operator's server; `dr` is the DR loop's status (`/dr`).
pub(crate) fn router(ctx: Arc<Context>, dr: Arc<Status>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route(
            "/metrics",
            get(|| async { wasmop_kernel::metrics::encode() }),
        )
        .route("/plugins", get(plugins))
        .with_state(ctx.clone())
        .merge(health_router(ctx.kernel.gate().clone()))
        .merge(wasmop_controllers::dr::router(dr))
}

/// `/health/ready` alone, over a gate (the DR part of the server).
pub(crate) fn health_router(gate: Arc<WriteGate>) -> Router {
    Router::new()
        .route("/health/ready", get(health_ready))
        .with_state(gate)
}

async fn readyz(State(ctx): State<Arc<Context>>) -> impl IntoResponse {
    if ctx.plugins.loaded() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "loading plugins")
    }
}

async fn plugins(State(ctx): State<Arc<Context>>) -> impl IntoResponse {
    let (plugins, config_error) = ctx.plugins.statuses();
    Json(serde_json::json!({
        "plugins": plugins,
        "configError": config_error,
        "active": ctx.kernel.gate().is_active(),
    }))
}

/// Go's `strconv.ParseBool`, which Admiral applies after removing spaces.
fn parse_bool(value: &str) -> Option<bool> {
    match value.replace(' ', "").as_str() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

async fn health_ready(
    State(gate): State<Arc<WriteGate>>,
    Query(query): Query<HashMap<String, String>>,
    method: Method,
    uri: Uri,
) -> (StatusCode, String) {
    let check = match query.get("checkifreadonly").map(String::as_str) {
        None | Some("") => false,
        Some(v) => match parse_bool(v) {
            Some(b) => b,
            None => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!(
                        "Health check method called with bad query param value {v} for checkifreadonly\n"
                    ),
                );
            }
        },
    };
    if check && !gate.is_active() {
        return (
            StatusCode::BAD_GATEWAY,
            "this instance is passive (read-only)\n".into(),
        );
    }
    (
        StatusCode::OK,
        format!("Health check method called, URI: {uri}, Method: {method}\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn status(gate: &Arc<WriteGate>, uri: &str) -> (u16, String) {
        let response = health_router(gate.clone())
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let code = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn checkifreadonly_follows_the_seed_contract() {
        let gate = WriteGate::new(false);
        assert_eq!(status(&gate, "/health/ready").await.0, 200);
        assert_eq!(status(&gate, "/health/ready?checkifreadonly=").await.0, 200);
        assert_eq!(
            status(&gate, "/health/ready?checkifreadonly=true").await.0,
            502
        );
        assert_eq!(
            status(&gate, "/health/ready?checkifreadonly=%20T%20")
                .await
                .0,
            502,
            "spaces are stripped"
        );
        assert_eq!(
            status(&gate, "/health/ready?checkifreadonly=false").await.0,
            200
        );
        let (code, body) = status(&gate, "/health/ready?checkifreadonly=maybe").await;
        assert_eq!(code, 400);
        assert_eq!(
            body,
            "Health check method called with bad query param value maybe for checkifreadonly\n"
        );
        gate.set_active(true);
        assert_eq!(
            status(&gate, "/health/ready?checkifreadonly=true").await.0,
            200
        );
        assert_eq!(
            status(&gate, "/health/ready?checkifreadonly=1").await.0,
            200
        );
    }
}
