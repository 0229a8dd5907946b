//! The plugin-author CLI: `wasmop plugin check` gives a verdict and an exit code;
//! `wasmop plugin run` makes one call and prints its result as JSON.

use std::path::PathBuf;
use std::process::{Command, Output};

fn wasmop(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wasmop"))
        .args(args)
        .env(
            "WASMOP_CACHE_DIR",
            std::env::temp_dir().join(format!("wasmop-cli-test-{}", std::process::id())),
        )
        .output()
        .unwrap()
}

fn component(file: &str) -> String {
    PathBuf::from(env!("WASMOP_COMPONENTS_DIR"))
        .join(file)
        .display()
        .to_string()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn check_finds_the_world_and_validates_settings() {
    let ok = wasmop(&["plugin", "check", &component("routing_istio.wasm")]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(
        text(&ok).contains("is a routing plugin (routing-istio"),
        "{}",
        text(&ok)
    );

    let wrong = wasmop(&[
        "plugin",
        "check",
        &component("dr_lease.wasm"),
        "--hook",
        "routing",
    ]);
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
    assert!(
        text(&wrong).contains("does not export the router world"),
        "{}",
        text(&wrong)
    );

    let bad = wasmop(&[
        "plugin",
        "check",
        &component("routing_istio.wasm"),
        "--settings",
        r#"{"colour":"red"}"#,
    ]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(text(&bad).contains("settings rejected"), "{}", text(&bad));
}

#[test]
fn run_prints_the_decision_as_json() {
    let dir = std::env::temp_dir().join(format!("wasmop-cli-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("tick.json");
    std::fs::write(
        &input,
        r#"{"identity":"me","now":100000,"lease":{"owner":"other","updated_time":0,"notes":""},
            "wait_time_seconds":1,"failure_threshold":3,"started_at":0,"warmup_seconds":0}"#,
    )
    .unwrap();
    let out = wasmop(&[
        "plugin",
        "run",
        "--hook",
        "dr",
        "--plugin",
        "builtin://dr-lease",
        "--input",
        input.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["action"], "Takeover", "{v}");
    assert_eq!(v["state"], "Active", "{v}");

    let missing = wasmop(&[
        "plugin",
        "run",
        "--hook",
        "routing",
        "--plugin",
        &component("wasmop_hostile_fixture.wasm"),
        "--input",
        "/nonexistent.json",
    ]);
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("/nonexistent.json"),
        "{}",
        text(&missing)
    );
}
