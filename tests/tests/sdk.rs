//! The plugin SDKs as an author outside this repository uses them: the Rust SDK packaged by
//! `cargo package` and depended on by version from a crate of its own (built for
//! wasm32-wasip2, its fixtures run by its `cargo test`), and the Go SDK (plugins/sdk-go) and the
//! Go example on it through `go test`.

use std::path::{Path, PathBuf};
use std::process::Command;

use wasmop_tests::{repo_root, target_dir};

/// Runs `cmd`, failing the test with its output when it fails.
fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A cargo command without the variables of the cargo that runs this test
/// ([`wasmop_tests::without_cargo_env`]).
fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    wasmop_tests::without_cargo_env(&mut cmd);
    cmd
}

/// `cargo package` of wasmop-plugin-sdk, unpacked under `dir`: the crate's directory.
fn package_sdk(dir: &Path) -> PathBuf {
    let target = dir.join("package-target");
    run(cargo()
        .current_dir(repo_root())
        .args([
            "package",
            "-p",
            "wasmop-plugin-sdk",
            "--allow-dirty",
            "--no-verify",
            "--offline",
            "--quiet",
            "--target-dir",
        ])
        .arg(&target));
    let version = env!("CARGO_PKG_VERSION");
    let unpacked = dir.join("registry");
    let _ = std::fs::remove_dir_all(&unpacked);
    std::fs::create_dir_all(&unpacked).unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(target.join(format!("package/wasmop-plugin-sdk-{version}.crate")))
        .arg("-C")
        .arg(&unpacked));
    unpacked.join(format!("wasmop-plugin-sdk-{version}"))
}

const AUTHOR_LIB: &str = r#"//! A DR plugin as an author writes it: active while this instance holds the lease.
use wasmop_plugin_sdk::state_checker::wasmop::plugin::dr::{Action, State};
use wasmop_plugin_sdk::state_checker::{Guest, StateDecision, StateRequest};
use wasmop_plugin_sdk::{Hook, PluginError, PluginInfo};

pub struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("author-dr", "0.1.0", Hook::Dr)
    }

    fn validate_settings(settings: String) -> Result<(), PluginError> {
        match settings.trim() {
            "{}" => Ok(()),
            _ => Err(PluginError::at("settings", "this plugin takes no settings")),
        }
    }

    fn check(settings: String, r: StateRequest) -> Result<StateDecision, PluginError> {
        Self::validate_settings(settings)?;
        let held = r.lease.as_ref().is_some_and(|l| l.owner == r.identity);
        wasmop_plugin_sdk::log!(Debug, "{} holds the lease: {held}", r.identity);
        Ok(StateDecision {
            state: if held { State::Active } else { State::Passive },
            action: if held { Action::Renew } else { Action::None },
            reason: format!("held: {held}"),
        })
    }
}

#[cfg(target_arch = "wasm32")]
wasmop_plugin_sdk::state_checker::export_state_checker!(Plugin);

#[test]
fn fixtures() {
    let n = wasmop_plugin_sdk::fixtures::check_dir(
        concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures"),
        Plugin::check,
    );
    assert_eq!(n, 2);
}
"#;

/// Writes the author's crate under `dir`, depending on the SDK by version (the packaged crate
/// standing in for crates.io through `[patch.crates-io]`).
fn author_crate(dir: &Path, sdk: &Path) {
    let version = env!("CARGO_PKG_VERSION");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("fixtures")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            r#"[package]
name = "author-dr"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
wasmop-plugin-sdk = "{version}"

[patch.crates-io]
wasmop-plugin-sdk = {{ path = "{}" }}

[workspace]
"#,
            sdk.display()
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), AUTHOR_LIB).unwrap();
    let request = |owner: &str| {
        serde_json::json!({
            "identity": "a", "now": 1000, "wait-time-seconds": 10, "failure-threshold": 3,
            "started-at": 0, "warmup-seconds": 0,
            "lease": {"owner": owner, "updated-time": 990, "notes": ""}
        })
    };
    let fixtures = [
        (
            "held.json",
            serde_json::json!({"request": request("a"),
                               "expect": {"state": "active", "action": "renew"}}),
        ),
        (
            "settings.json",
            serde_json::json!({"settings": {"x": 1}, "request": request("b"),
                               "expect-error": {"field": "settings"}}),
        ),
    ];
    for (name, fixture) in fixtures {
        std::fs::write(dir.join("fixtures").join(name), fixture.to_string()).unwrap();
    }
}

#[test]
#[ignore = "packages the SDK and builds a crate on it for wasm32-wasip2 (a minute or two): run with make test"]
fn the_packaged_rust_sdk_builds_a_plugin_outside_the_repository() {
    let dir = target_dir().join("sdk-author");
    let sdk = package_sdk(&dir);
    assert!(
        sdk.join("wit/plugin.wit").is_file(),
        "the packaged crate carries its WIT"
    );
    let author = dir.join("author-dr");
    author_crate(&author, &sdk);
    let target = dir.join("author-target");
    run(cargo()
        .current_dir(&author)
        .args([
            "build",
            "--offline",
            "--quiet",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target));
    let component = std::fs::read(target.join("wasm32-wasip2/release/author_dr.wasm")).unwrap();
    // A component's preamble: the magic, then version 0x0d and layer 1 (a core module has 1, 0).
    assert_eq!(&component[..8], b"\0asm\x0d\x00\x01\x00");
    // Its fixtures through the SDK's harness, natively, from its own `cargo test`.
    run(cargo()
        .current_dir(&author)
        .args(["test", "--offline", "--quiet", "--target-dir"])
        .arg(&target));
}

/// `go test ./...` in `dir` (relative to the repository root), natively.
fn go_test(dir: &str) {
    run(Command::new("go")
        .current_dir(repo_root().join(dir))
        .args(["test", "-count=1", "./..."]));
}

#[test]
#[ignore = "needs Go (scripts/setup.sh checks it): run with make test"]
fn the_go_sdk_lays_values_out_as_the_canonical_abi_says() {
    go_test("plugins/sdk-go");
}

#[test]
#[ignore = "needs Go (scripts/setup.sh checks it): run with make test"]
fn the_go_example_policy_passes_its_tests_on_the_go_sdk() {
    go_test("examples/plugins/go-max-age-restart");
}

#[test]
#[ignore = "needs Node.js (scripts/setup.sh installs the JS toolchain with npm): run with make test"]
fn the_js_helper_module_passes_its_node_tests() {
    run(Command::new("node")
        .current_dir(repo_root().join("plugins/sdk-js"))
        .arg("--test"));
}

#[test]
#[ignore = "needs Python 3 (scripts/setup.sh needs it for componentize-py): run with make test"]
fn the_python_helper_module_passes_its_unit_tests() {
    run(Command::new("python3")
        .current_dir(repo_root().join("plugins/sdk-python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(["-m", "unittest", "-v"]));
}
