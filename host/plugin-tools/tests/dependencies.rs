//! The author tools build without the operator: no Kubernetes client, AWS SDK or operator crate
//! in the normal dependency tree of `wasmop-plugin-tools`.

use std::collections::BTreeSet;
use std::process::Command;

/// Crates the author tools must not depend on: by name, or by a name's start (`kube` is
/// kube, kube-client, kube-core, kube-runtime, …).
const FORBIDDEN: [&str; 8] = [
    "kube",
    "k8s-openapi",
    "aws-",
    "wasmop-api",
    "wasmop-controllers",
    "wasmop-kernel",
    "wasmop-resolver",
    "wasmop-tests",
];

/// The names of the crates in `package`'s normal dependency tree (itself included), from
/// `cargo tree` (for this platform: what a build here compiles).
fn tree(package: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("cargo tree prints UTF-8")
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The crates of `tree` that [`FORBIDDEN`] names.
fn forbidden(tree: &BTreeSet<String>) -> Vec<&str> {
    tree.iter()
        .map(String::as_str)
        .filter(|name| FORBIDDEN.iter().any(|f| name.starts_with(f)))
        .collect()
}

#[test]
fn the_author_tools_depend_on_no_kubernetes_aws_or_operator_crate() {
    let tree = tree("wasmop-plugin-tools");
    // The tree was read: the plugin host is in it.
    assert!(tree.contains("wasmop-plugin-host"), "{tree:?}");
    assert_eq!(
        forbidden(&tree),
        Vec::<&str>::new(),
        "wasmop-plugin-tools must build without the operator (host/plugin-tools/Cargo.toml)"
    );
}

#[test]
fn the_check_finds_them_in_the_operators_tree() {
    let tree = tree("wasmop");
    let found = forbidden(&tree);
    for name in [
        "kube",
        "k8s-openapi",
        "aws-sdk-dynamodb",
        "wasmop-controllers",
    ] {
        assert!(found.contains(&name), "{name} not in {found:?}");
    }
}
