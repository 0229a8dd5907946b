//! Builds the default plugins (plugins/*) for wasm32-wasip2 and places the components in
//! OUT_DIR, where `src/builtin.rs` embeds them. A nested cargo with its own target
//! directory avoids waiting on the lock of the outer build. The test fixtures are built beside
//! them: the Rust ones by the same cargo, `hostile-memories` (several memories and a growable
//! table, which no guest toolchain makes) encoded here.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../tests/fixtures/hostile-memories/component.rs"]
mod hostile_memories;

const PLUGINS: &[&str] = &[
    "routing-istio",
    "scaling-prometheus",
    "restart-sidecar",
    "dr-lease",
    "dr-none",
];
/// Test-only components, built alongside into the same directory
/// (`<target>/plugins/wasm32-wasip2/plugin`, where the tests find them:
/// `wasmop_tests::components_dir`).
const FIXTURES: &[&str] = &[
    "wasmop-hostile-fixture",
    "wasmop-hostile-dr",
    "wasmop-hostile-restart",
    "wasmop-refine-fixture",
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    // host/plugin-host → the workspace root.
    let root = manifest
        .parent()
        .and_then(|p| p.parent())
        .unwrap()
        .to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    for dir in [
        "plugins",
        "tests/fixtures",
        "Cargo.lock",
        "Cargo.toml",
        ".cargo/config.toml",
    ] {
        // Relative to this package, so that cargo checks the files of the checkout being built:
        // clones sharing one target directory share this script's fingerprint, and absolute
        // paths would keep pointing at the clone that ran it last.
        println!("cargo:rerun-if-changed=../../{dir}");
    }
    // The components are built under the target directory: another one builds them again.
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    // Beside the outer build's artifacts (CARGO_TARGET_DIR when the caller set one).
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("plugins");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--target",
            "wasm32-wasip2",
            "--profile",
            "plugin",
            "--target-dir",
        ])
        .arg(&target_dir);
    for p in PLUGINS.iter().chain(FIXTURES) {
        cmd.args(["-p", p]);
    }
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .expect("cannot run cargo to build the default plugins");
    if !status.success() {
        panic!(
            "building the default plugins for wasm32-wasip2 failed; is the target installed? (scripts/setup.sh runs `rustup target add wasm32-wasip2`)"
        );
    }
    let components = target_dir.join("wasm32-wasip2").join("plugin");
    for p in PLUGINS {
        let file = format!("{}.wasm", p.replace('-', "_"));
        copy(&components.join(&file), &out.join(&file));
    }
    let memories = hostile_memories::component(&root.join("plugins/sdk/wit"));
    let file = components.join("wasmop_hostile_memories.wasm");
    std::fs::write(&file, memories).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copy {} -> {}: {e}", from.display(), to.display()));
}
