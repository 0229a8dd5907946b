//! The `wasmop-plugin` binary: the plugin authors' tools without the operator, the commands of
//! `wasmop plugin …` (host/wasmop/tests/cli.rs tests them in depth).

use std::path::PathBuf;
use std::process::{Command, Output};

/// Where the build script of `wasmop-plugin-host` leaves the default plugins' components:
/// `<target>/plugins/wasm32-wasip2/plugin`, beside `<target>/<profile>/deps/<this test>`.
fn component(file: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap();
    target
        .join("plugins/wasm32-wasip2/plugin")
        .join(file)
        .display()
        .to_string()
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("wasmop-plugin-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn wasmop_plugin(args: &[&str]) -> Output {
    let cache =
        std::env::temp_dir().join(format!("wasmop-plugin-test-cache-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_wasmop-plugin"))
        .args(args)
        .env("WASMOP_CACHE_DIR", cache)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn check_gives_a_verdict_and_an_exit_code() {
    let ok = wasmop_plugin(&["check", &component("dr_none.wasm")]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(
        text(&ok).starts_with("ok: ") && text(&ok).contains("is a dr plugin (none "),
        "{}",
        text(&ok)
    );

    let wrong = wasmop_plugin(&["check", &component("dr_none.wasm"), "--hook", "routing"]);
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong));
    assert!(text(&wrong).starts_with("FAIL: "), "{}", text(&wrong));
}

#[test]
fn test_runs_the_conformance_suite() {
    let o = wasmop_plugin(&[
        "test",
        &component("restart_sidecar.wasm"),
        "--hook",
        "restart",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("ok: loads: restart-sidecar ") && text(&o).contains("passed: "),
        "{}",
        text(&o)
    );
    // An author's fixture that expects another decision fails the run: `none` is always active.
    let scaffold = wasmop_plugin(&["scaffold", "request", "--hook", "dr"]);
    assert!(scaffold.status.success(), "{}", text(&scaffold));
    let request: serde_json::Value = serde_json::from_slice(&scaffold.stdout).unwrap();
    let fixtures = scratch("fixtures");
    std::fs::create_dir_all(&fixtures).unwrap();
    let fixture = serde_json::json!({"request": request, "expect": {"state": "passive"}});
    std::fs::write(fixtures.join("passive.json"), fixture.to_string()).unwrap();
    let o = wasmop_plugin(&[
        "test",
        &component("dr_none.wasm"),
        "--hook",
        "dr",
        "--fixtures",
        fixtures.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("FAIL: fixture passive: "), "{}", text(&o));
}

#[test]
fn new_writes_a_plugin_from_the_embedded_templates() {
    let dir = scratch("new").join("my-router");
    let o = wasmop_plugin(&[
        "new",
        "--hook",
        "routing",
        "--lang",
        "c",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for file in [
        "build.sh",
        "README.md",
        "plugin.c",
        "fixtures/other-routes-stay.json",
    ] {
        assert!(dir.join(file).is_file(), "{file}: {}", text(&o));
    }
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn scaffold_prints_a_request_and_completion_a_script() {
    let o = wasmop_plugin(&["scaffold", "request", "--hook", "scaling"]);
    assert!(o.status.success(), "{}", text(&o));
    let request: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(request.get("metadata").is_some(), "{request}");

    let o = wasmop_plugin(&["completion", "bash"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("wasmop-plugin"), "{}", text(&o));
}

#[test]
fn new_names_the_command_it_was_run_as() {
    let dir = scratch("new").join("lease-follower");
    let out = wasmop_plugin(&["new", "--hook", "dr", "--lang", "c", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("wasmop-plugin check "),
        "the next steps name wasmop-plugin: {}",
        text(&out)
    );
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(
        readme.contains("wasmop-plugin check lease-follower.wasm --hook dr"),
        "{readme}"
    );
    assert!(!readme.contains("wasmop plugin "), "{readme}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}
