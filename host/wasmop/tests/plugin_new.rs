//! `wasmop plugin new`: the plugin it writes, for every hook in every language, builds with the
//! toolchains of scripts/setup.sh by its own `build.sh`, passes its own native tests, and passes
//! `wasmop plugin check` and `wasmop plugin test` (the hook's conformance suite and the
//! plugin's `fixtures/`, which pin what it decides) as written; the dr plugin of each language,
//! pushed to the OCI registry on loopback and named by `oci://` in an operator's registry on the
//! local control plane, decides there. Also what `plugin new` refuses.
//!
//! The plugins are written under `<target>/plugin-new/<lang>-<hook>` (afresh each run); the Rust
//! ones share one cargo target directory there, and every component is compiled into the cache
//! of the operators the tests start, so a run after the first recompiles only what changed. Each language runs its four hooks
//! in one test, one after the other; the languages' tests run in parallel. Each test appends a
//! line per plugin to `<target>/plugin-new/report.tsv` (component size, build, check and test
//! times), the numbers of docs/plugins.md's table.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use wasmop_tests::{repo_root, target_dir};

const HOOKS: [&str; 4] = ["routing", "scaling", "restart", "dr"];

fn work() -> PathBuf {
    target_dir().join("plugin-new")
}

/// `cmd`'s output, failing the test with it when the command fails.
fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        text(&out)
    );
    out
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `wasmop` under test, compiling into the cache of the operators the tests start, so that
/// the end-to-end test's operator loads what `plugin check` compiled. The Python and JavaScript
/// components (12 to 18 MiB) change with every build, so each run compiles them; this debug
/// build, on cores the other tests share, can take longer than the production compile timeout
/// (60 s) for that.
fn wasmop() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmop"));
    cmd.env("WASMOP_CACHE_DIR", wasmop_tests::operator_cache_dir())
        .env("WASMOP_COMPILE_TIMEOUT", "10m");
    cmd
}

/// `cmd` without the variables of the cargo that runs this test
/// ([`wasmop_tests::without_cargo_env`]).
fn clean(mut cmd: Command) -> Command {
    wasmop_tests::without_cargo_env(&mut cmd);
    cmd
}

/// What one plugin took, and its component.
struct Measured {
    wasm: PathBuf,
    bytes: u64,
    build: Duration,
    check: Duration,
    test: Duration,
}

/// `plugin new --hook HOOK --lang LANG` into a fresh `<target>/plugin-new/LANG-HOOK`, then its
/// build, its native tests, `plugin check` and `plugin test --fixtures fixtures`.
fn new_build_check_test(lang: &str, hook: &str) -> Measured {
    let name = format!("{lang}-{hook}");
    let dir = work().join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    let out = run(wasmop()
        .args(["plugin", "new", "--hook", hook, "--lang", lang])
        .arg(&dir));
    assert!(
        text(&out).contains(&format!("wrote a {hook} plugin in {lang}, {name}")),
        "{}",
        text(&out)
    );

    let started = Instant::now();
    let mut build = clean(Command::new(dir.join("build.sh")));
    match lang {
        // The four Rust plugins share their dependencies' build.
        "rust" => {
            build
                .env("CARGO_TARGET_DIR", work().join("rust-target"))
                .env("CARGO_NET_OFFLINE", "true");
        }
        "c" => {
            build.env("CFLAGS", "-Werror");
        }
        _ => {}
    }
    run(&mut build);
    let built = started.elapsed();
    let wasm = dir.join(format!("{name}.wasm"));
    let bytes = std::fs::metadata(&wasm)
        .unwrap_or_else(|e| panic!("{}: {e}", wasm.display()))
        .len();

    native_tests(lang, &dir);

    let started = Instant::now();
    let check = run(wasmop()
        .args(["plugin", "check"])
        .arg(&wasm)
        .args(["--hook", hook]));
    let checked = started.elapsed();
    assert!(
        text(&check).contains(&format!("is a {hook} plugin ({name} 0.1.0)")),
        "{}",
        text(&check)
    );

    let started = Instant::now();
    let test = run(wasmop()
        .args(["plugin", "test"])
        .arg(&wasm)
        .args(["--hook", hook, "--fixtures"])
        .arg(dir.join("fixtures")));
    let tested = started.elapsed();
    let report = text(&test);
    assert!(!report.contains("FAIL"), "{report}");
    let fixtures = std::fs::read_dir(dir.join("fixtures")).unwrap().count();
    assert!(
        fixtures >= 2 && report.matches("ok: fixture ").count() == fixtures,
        "every fixture of {name} ran and passed:\n{report}"
    );
    assert!(report.contains("passed: "), "{report}");
    Measured {
        wasm,
        bytes,
        build: built,
        check: checked,
        test: tested,
    }
}

/// The plugin's own tests, natively: what its README says to run.
fn native_tests(lang: &str, dir: &Path) {
    match lang {
        "rust" => {
            run(clean(Command::new("cargo"))
                .current_dir(dir)
                .args(["test", "--quiet"])
                .env("CARGO_TARGET_DIR", work().join("rust-target-native"))
                .env("CARGO_NET_OFFLINE", "true"));
        }
        "go" => {
            run(Command::new("go")
                .current_dir(dir)
                .args(["test", "./..."])
                .env("GOFLAGS", "-mod=mod"));
        }
        "python" => {
            run(Command::new("python3")
                .current_dir(dir)
                .args(["-m", "unittest", "--quiet"])
                .env("PYTHONPATH", repo_root().join("plugins/sdk-python"))
                .env("PYTHONDONTWRITEBYTECODE", "1"));
        }
        "js" => {
            run(Command::new("node").current_dir(dir).arg("--test"));
        }
        _ => {} // the C plugin has none
    }
}

const LANGS: [&str; 5] = ["rust", "python", "js", "go", "c"];

/// [`new_build_check_test`] of `lang` and `hook`, once per test process: the end-to-end test
/// below takes the dr plugins the languages' tests build (or builds them first, and they wait).
fn plugin(lang: &str, hook: &str) -> &'static Measured {
    use std::sync::OnceLock;
    static BUILT: [[OnceLock<Measured>; HOOKS.len()]; LANGS.len()] =
        [const { [const { OnceLock::new() }; HOOKS.len()] }; LANGS.len()];
    let l = LANGS.iter().position(|l| *l == lang).expect("a language");
    let h = HOOKS.iter().position(|h| *h == hook).expect("a hook");
    BUILT[l][h].get_or_init(|| new_build_check_test(lang, hook))
}

/// Every hook in `lang`, one after the other; a line per plugin in the report.
fn every_hook(lang: &str) {
    use std::io::Write as _;
    let mut lines = String::new();
    for hook in HOOKS {
        let m = plugin(lang, hook);
        lines.push_str(&format!(
            "{lang}\t{hook}\t{}\t{:.1}\t{:.2}\t{:.2}\n",
            m.bytes,
            m.build.as_secs_f64(),
            m.check.as_secs_f64(),
            m.test.as_secs_f64()
        ));
    }
    eprint!("language\thook\tbytes\tbuild s\tcheck s\ttest s\n{lines}");
    let mut report = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(work().join("report.tsv"))
        .unwrap();
    report.write_all(lines.as_bytes()).unwrap();
}

#[test]
#[ignore = "builds plugins with the toolchains of scripts/setup.sh: run with make test"]
fn rust_plugins_build_and_pass_check_and_test() {
    every_hook("rust");
}

#[test]
#[ignore = "builds plugins with the toolchains of scripts/setup.sh: run with make test"]
fn python_plugins_build_and_pass_check_and_test() {
    every_hook("python");
}

#[test]
#[ignore = "builds plugins with the toolchains of scripts/setup.sh: run with make test"]
fn js_plugins_build_and_pass_check_and_test() {
    every_hook("js");
}

#[test]
#[ignore = "builds plugins with the toolchains of scripts/setup.sh: run with make test"]
fn go_plugins_build_and_pass_check_and_test() {
    every_hook("go");
}

#[test]
#[ignore = "builds plugins with the toolchains of scripts/setup.sh: run with make test"]
fn c_plugins_build_and_pass_check_and_test() {
    every_hook("c");
}

/// The `/plugins` entry of `name` of the operator at `addr`.
fn plugin_entry(addr: &str, name: &str) -> Option<serde_json::Value> {
    let (status, body) = wasmop_tests::http_get(addr, "/plugins")?;
    let v: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    v["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
}

/// The end of the author's path, for every language: the dr plugin `plugin new` writes, built
/// and passing `plugin test` (above), pushed with `plugin push` to the OCI registry on loopback
/// (scripts/setup.d/78-oci-registry.sh) and named by its `oci://` reference in the registry of
/// an operator on the local control plane. Each language's plugin in turn is the `dr` default,
/// with a Lease of its own (`leaseName`), and decides: it creates that Lease and renews it, and
/// `/dr` shows the instance active on it with the plugin's reason.
#[tokio::test]
#[ignore = "needs the local control plane (deploy/dev/cluster.sh), the OCI registry and the plugin toolchains: run with make test or make e2e"]
async fn a_new_dr_plugin_of_every_language_decides_from_an_oci_registry() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::{Patch, PatchParams};
    use wasmop_tests::{Operator, eventually, with_temp_ns};

    let built: Vec<(&str, PathBuf)> = LANGS
        .iter()
        .map(|lang| (*lang, plugin(lang, "dr").wasm.clone()))
        .collect();
    with_temp_ns("plugin-new", |client, ns| async move {
        let registry = wasmop_tests::oci::OciRegistry::start(&format!("e2e-{ns}"), false).await;
        let mut entries = Vec::new();
        for (lang, wasm) in &built {
            let reference = format!("oci://{}/plugin-new/{lang}-dr:v1", registry.addr);
            let out = run(wasmop()
                .args(["plugin", "push"])
                .arg(wasm)
                .args([reference.as_str(), "--insecure"])
                .env_remove("DOCKER_CONFIG")
                .env("HOME", wasmop_tests::dump_dir()));
            let (sha, source) = wasmop_tests::oci::pushed(&text(&out));
            entries.push((format!("{lang}-dr"), source, sha));
        }
        // The first `n` entries; `default` is the dr plugin.
        let document = |n: usize, default: &str| {
            let mut doc = String::from("plugins:\n");
            for (name, source, sha) in &entries[..n] {
                doc.push_str(&format!(
                    "  - name: {name}\n    hook: dr\n    source: {source}\n    sha256: \"{sha}\"\n    \
                     insecure: true\n    settings: {{leaseName: {name}, waitTimeInSeconds: 1, failureThreshold: 3}}\n"
                ));
            }
            doc.push_str(&format!("defaults: {{dr: {default}}}\n"));
            doc
        };
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let apply = async |doc: String| {
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "wasmop-plugins", "namespace": ns},
                "data": {"plugins.yaml": doc}
            }))
            .unwrap();
            configmaps
                .patch("wasmop-plugins", &PatchParams::apply("wasmop-e2e").force(), &Patch::Apply(&cm))
                .await
                .unwrap();
        };
        // The operator is ready once its registry has loaded: it starts with the Rust plugin
        // alone, and the others (the Python and JavaScript ones compile for a while in this
        // debug build on shared cores) come with the first switch.
        apply(document(1, &entries[0].0)).await;
        let mut operator =
            Operator::start(env!("CARGO_BIN_EXE_wasmop"), &ns, &["--compile-timeout", "10m"]).await;
        let identity = format!("wasmop-{ns}");
        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let timeout = Duration::from_secs(180);
        for (name, _, sha) in &entries {
            apply(document(entries.len(), name)).await;
            let addr = operator.addr.clone();
            eventually(&format!("{name} serving the pushed component"), timeout, async || {
                assert!(operator.process.alive(), "the operator exited:\n{}", operator.process.log());
                plugin_entry(&addr, name).filter(|p| p["ready"] == true && p["servingDigest"] == sha.as_str())
            })
            .await;
            let status = eventually(&format!("{name} to create and renew Lease {name}"), timeout, async || {
                let lease = leases.get(name).await.ok()?;
                let holder = lease.spec?.holder_identity?;
                let status = wasmop_tests::dr::dr_status(&addr)?;
                (holder == identity
                    && status["state"] == "active"
                    && status["backend"].as_str()?.contains(name.as_str())
                    && status["reason"].as_str()?.contains("holding the lease: renewing it"))
                .then_some(status)
            })
            .await;
            assert!(status["error"].is_null(), "{status}");
        }
        drop(registry);
    })
    .await;
}

/// A directory of its own under the system's temporary directory, for the tests that build
/// nothing (they run in the unit tier, where the target directory may be read-only).
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmop-plugin-new-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn new(args: &[&str], dir: &Path) -> Output {
    wasmop()
        .args(["plugin", "new"])
        .args(args)
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn writes_the_plugin_with_the_sdk_of_its_checkout() {
    let root = scratch("writes");
    let dir = root.join("lease-follower");
    let out = new(&["--hook", "dr", "--lang", "go"], &dir);
    assert!(out.status.success(), "{}", text(&out));
    let sdk = std::fs::canonicalize(repo_root()).unwrap();
    let go_mod = std::fs::read_to_string(dir.join("go.mod")).unwrap();
    assert!(
        go_mod.contains(&format!(
            "replace example.com/wasmop/sdk => {}/plugins/sdk-go",
            sdk.display()
        )),
        "{go_mod}"
    );
    let plugin = std::fs::read_to_string(dir.join("plugin.go")).unwrap();
    assert!(plugin.contains("Name: \"lease-follower\""), "{plugin}");
    assert!(plugin.contains("\"example.com/wasmop/sdk/dr\""), "{plugin}");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for line in [
        "./build.sh",
        "wasmop plugin check lease-follower.wasm --hook dr",
        "defaults: {dr: lease-follower}",
    ] {
        assert!(readme.contains(line), "{line:?} in\n{readme}");
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.join("build.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "build.sh is executable");
    assert!(dir.join(".gitignore").is_file() && dir.join("fixtures").is_dir());

    // --name and --sdk; a JS plugin gets the SDK's helper module beside its sources.
    let js = root.join("js");
    let out = new(
        &[
            "--hook",
            "restart",
            "--lang",
            "js",
            "--name",
            "keep-pods",
            "--sdk",
            &sdk.display().to_string(),
        ],
        &js,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(js.join("wasmop-plugin.js")).unwrap(),
        std::fs::read_to_string(sdk.join("plugins/sdk-js/wasmop-plugin.js")).unwrap()
    );
    assert!(
        std::fs::read_to_string(js.join("plugin.js"))
            .unwrap()
            .contains("name: 'keep-pods'")
    );
    let _ = std::fs::remove_dir_all(root);
}

#[test]
fn refuses_a_directory_that_is_not_empty_and_overwrites_nothing() {
    let dir = scratch("not-empty");
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let out = new(&["--hook", "scaling", "--lang", "rust"], &dir);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("exists and is not empty: choose a new directory"),
        "{}",
        text(&out)
    );
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1, "only notes.txt");
    // An empty directory is fine.
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = new(&["--hook", "scaling", "--lang", "c"], &empty);
    assert!(out.status.success(), "{}", text(&out));
    assert!(empty.join("plugin.c").is_file());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_unknown_hook_or_language_gives_the_list() {
    let dir = scratch("unknown");
    let hook = new(&["--hook", "billing", "--lang", "go"], &dir.join("p"));
    assert_eq!(hook.status.code(), Some(2), "{}", text(&hook));
    assert!(
        text(&hook).contains("[possible values: routing, scaling, restart, dr]"),
        "{}",
        text(&hook)
    );
    let lang = new(&["--hook", "dr", "--lang", "cobol"], &dir.join("p"));
    assert_eq!(lang.status.code(), Some(2), "{}", text(&lang));
    assert!(
        text(&lang).contains("[possible values: rust, python, js, go, c]"),
        "{}",
        text(&lang)
    );
    assert!(!dir.join("p").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn refuses_a_name_or_checkout_it_cannot_use() {
    let dir = scratch("refuses");
    let out = new(&["--hook", "dr", "--lang", "c"], &dir.join("My Plugin"));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("the plugin name \"My Plugin\" (the last component of"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("pass --name NAME"), "{}", text(&out));

    let out = new(
        &["--hook", "dr", "--lang", "rust", "--sdk", "/"],
        &dir.join("p"),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(
            "/ (--sdk) is not a wasmop checkout with the rust SDK: it has no plugins/sdk/wit/plugin.wit"
        ),
        "{}",
        text(&out)
    );
    assert!(!dir.join("p").exists(), "nothing written");
    let _ = std::fs::remove_dir_all(dir);
}
