//! Golden tests of the routing plan (`wasmop_controllers::routing::plan`) on the YAML fixtures of
//! `tests/fixtures/routing/<case>/input/`, planned with the builtin `routing-istio` component,
//! or, for a case with a `plugins.yaml`, with that registry's routing default and the entries
//! it builds on (`after:`); the expected IR, objects and status are
//! `tests/fixtures/routing/<case>/plan.yaml`.
//! `WASMOP_BLESS=1 cargo test -p wasmop --test routing_plan` rewrites them; otherwise any
//! difference fails with a diff.
//!
//! Beyond the golden files: the native library and the component plan the same; `wasmop plan`
//! prints exactly the golden file; every plan, once applied, converges (planning again writes
//! nothing); deleting a DynamicEnv restores every VirtualService exactly; and each
//! better-than-upstream point has its own assertions.

#[path = "common/native_router.rs"]
mod native_router;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use serde_json::{Value, json};
use wasmop_api::dynamicenv::DynamicEnvStatus;
use wasmop_controllers::routing::istio::{DestinationRule, VirtualService};
use wasmop_controllers::routing::plan::{Plan, Write, removal_snapshot};
use wasmop_controllers::routing::{
    OutputFormat, PlanConfig, Refining, Router, Snapshot, WasmRouter, names, plan, wasm_chain,
};
use wasmop_plugin_host::registry::{LocalFetch, Registry, RegistryConfig};
use wasmop_plugin_host::{
    FailurePolicy, Hook, PluginRuntime, PluginSpec, RouteRequest, RuntimeOptions,
};

fn fixtures() -> PathBuf {
    wasmop_tests::repo_root().join("tests/fixtures/routing")
}

fn cases() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .expect("tests/fixtures/routing")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("input").is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 13, "the fixture cases are there");
    cases
}

/// The builtin routing component, loaded as the operator loads it.
async fn wasm() -> Arc<dyn Router> {
    let runtime = PluginRuntime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 2,
        pooling: false,
        extra_ca_pem: None,
    })
    .unwrap();
    let registry = Registry::new(runtime);
    let report = registry
        .apply(RegistryConfig::default(), &LocalFetch::default())
        .await;
    assert!(report.failed.is_empty(), "{report:?}");
    Arc::new(WasmRouter(registry.resolve(Hook::Routing, None).unwrap()))
}

/// The same logic as a native library.
fn native() -> Arc<dyn Router> {
    Arc::new(native_router::Native::default())
}

/// The registry of `case`, if it has one (`plugins.yaml`), made loadable here: `COMPONENTS`
/// replaced by the directory of the built test components and `COMPONENT_SHA256` by the
/// sha256 of the component file named.
fn registry_of(case: &Path) -> Option<String> {
    let text = std::fs::read_to_string(case.join("plugins.yaml")).ok()?;
    let dir = wasmop_tests::components_dir();
    let text = text.replace("COMPONENTS", &dir.display().to_string());
    let file = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("source: file://"))
        .expect("a file:// source");
    let digest = wasmop_plugin_host::sha256_hex(&std::fs::read(file).unwrap());
    Some(text.replace("COMPONENT_SHA256", &digest))
}

/// The routing chain the registry of `case` (see [`registry_of`]) gives its routing default.
async fn chain_of(case: &Path) -> Option<Vec<Arc<wasmop_plugin_host::Plugin>>> {
    let doc = registry_of(case)?;
    let runtime = PluginRuntime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 2,
        pooling: false,
        extra_ca_pem: None,
    })
    .unwrap();
    let registry = Registry::new(runtime);
    let report = registry
        .apply(RegistryConfig::parse(&doc).unwrap(), &LocalFetch::default())
        .await;
    assert!(report.failed.is_empty(), "{report:?}");
    Some(registry.resolve_chain(Hook::Routing, None).unwrap())
}

/// The component router of `case`: the builtin's, or its registry's chain.
async fn wasm_of(case: &Path) -> Arc<dyn Router> {
    match chain_of(case).await {
        Some(chain) => wasm_chain(chain).unwrap(),
        None => wasm().await,
    }
}

/// The native router of `case`: [`native`], refined by the components of its registry's
/// chain after the builtin (which the chain must start with).
async fn native_of(case: &Path) -> Arc<dyn Router> {
    let Some(chain) = chain_of(case).await else {
        return native();
    };
    assert_eq!(
        chain[0].spec().name,
        "routing-istio",
        "the chain starts with the builtin"
    );
    chain.into_iter().skip(1).fold(native(), |after, plugin| {
        Arc::new(Refining {
            after,
            router: Arc::new(WasmRouter(plugin)),
        })
    })
}

fn read(case: &Path) -> Snapshot {
    Snapshot::read_dir(&case.join("input")).unwrap().0
}

#[tokio::test]
async fn plans_match_the_golden_files() {
    let bless = std::env::var_os("WASMOP_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for case in cases() {
        let router = wasm_of(&case).await;
        let out = wasmop_controllers::routing::plan_dir(
            &case.join("input"),
            &router,
            &PlanConfig::default(),
            OutputFormat::Yaml,
        )
        .await
        .unwrap();
        let golden = case.join("plan.yaml");
        if bless {
            std::fs::write(&golden, &out).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        if want != out {
            let name = case.file_name().unwrap().to_string_lossy().into_owned();
            let diff: Vec<String> = diff_lines(&want, &out);
            stale.push(format!("{name}:\n{}", diff.join("\n")));
        }
    }
    assert!(
        stale.is_empty(),
        "plans differ from the golden files (WASMOP_BLESS=1 rewrites them):\n{}",
        stale.join("\n\n")
    );
}

/// The first differing lines of two texts, `-` expected and `+` got.
fn diff_lines(want: &str, got: &str) -> Vec<String> {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let first = w
        .iter()
        .zip(&g)
        .position(|(a, b)| a != b)
        .unwrap_or(w.len().min(g.len()));
    let mut out = vec![format!("first difference at line {}", first + 1)];
    out.extend(w.iter().skip(first).take(8).map(|l| format!("-{l}")));
    out.extend(g.iter().skip(first).take(8).map(|l| format!("+{l}")));
    out
}

#[tokio::test]
async fn the_native_library_and_the_component_plan_the_same() {
    for case in cases() {
        let cfg = PlanConfig::default();
        let dir = case.join("input");
        let (router, native) = (wasm_of(&case).await, native_of(&case).await);
        let a = wasmop_controllers::routing::plan_dir(&dir, &router, &cfg, OutputFormat::Json)
            .await
            .unwrap();
        let b = wasmop_controllers::routing::plan_dir(&dir, &native, &cfg, OutputFormat::Json)
            .await
            .unwrap();
        assert_eq!(a, b, "{}", case.display());
    }
}

#[test]
fn wasmop_plan_prints_the_golden_file() {
    for case in ["delegates", "add-remove-subsets", "refined-after"] {
        let dir = fixtures().join(case);
        let mut plan = std::process::Command::new(env!("CARGO_BIN_EXE_wasmop"));
        plan.args(["plan", "-f"]).arg(dir.join("input"));
        // A case with a registry: `--registry` with it, as the operator would read it.
        let registry = registry_of(&dir).map(|doc| {
            let file = std::env::temp_dir().join(format!(
                "wasmop-routing-plan-{case}-{}.yaml",
                std::process::id()
            ));
            std::fs::write(&file, doc).unwrap();
            plan.arg("--registry").arg(&file);
            file
        });
        let out = plan.env("WASMOP_LOG", "warn").output().unwrap();
        if let Some(file) = &registry {
            std::fs::remove_file(file).unwrap();
        }
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = std::fs::read_to_string(dir.join("plan.yaml")).unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{case}");
        if registry.is_some() {
            continue;
        }
        let json = std::process::Command::new(env!("CARGO_BIN_EXE_wasmop"))
            .args(["plan", "-o", "json", "-f"])
            .arg(dir.join("input"))
            .output()
            .unwrap();
        let a: Value = serde_json::from_slice(&json.stdout).unwrap();
        let b: Value = serde_yaml::from_str(&want).unwrap();
        assert_eq!(a, b, "-o json prints the same plan");
    }
}

/// Makes the writes of `plan` on `snapshot`, as the API server would (clones roll out at
/// once), and records the planned status on the DynamicEnvs.
fn apply(snapshot: &mut Snapshot, plan: &Plan) {
    for w in &plan.writes {
        match w {
            Write::Apply { object, .. } => {
                let name = object["metadata"]["name"].as_str().unwrap().to_owned();
                let ns = object["metadata"]["namespace"].as_str().unwrap().to_owned();
                if object["kind"] == "Deployment" {
                    let mut o = object.clone();
                    o["metadata"]["generation"] = json!(1);
                    o["status"] = json!({"observedGeneration": 1, "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "lastUpdateTime": "2026-01-01T00:00:00Z"}]});
                    let d: Deployment = serde_json::from_value(o).unwrap();
                    snapshot.deployments.retain(|x| {
                        !(x.name_any() == name && x.namespace().as_deref() == Some(&ns))
                    });
                    snapshot.deployments.push(Arc::new(d));
                } else {
                    let d: DestinationRule = serde_json::from_value(object.clone()).unwrap();
                    snapshot.destination_rules.retain(|x| {
                        !(x.name_any() == name && x.namespace().as_deref() == Some(&ns))
                    });
                    snapshot.destination_rules.push(Arc::new(d));
                }
            }
            Write::Routes {
                namespace,
                name,
                http,
                ..
            } => {
                for vs in &mut snapshot.virtual_services {
                    if vs.name_any() == *name && vs.namespace().as_deref() == Some(namespace) {
                        let mut v = VirtualService::clone(vs);
                        v.spec.http = Some(http.clone());
                        *vs = Arc::new(v);
                    }
                }
            }
            Write::Delete {
                kind,
                namespace,
                name,
                ..
            } => {
                let gone =
                    |n: String, ns: Option<String>| n == *name && ns.as_ref() == Some(namespace);
                if kind == "Deployment" {
                    snapshot
                        .deployments
                        .retain(|x| !gone(x.name_any(), x.namespace()));
                } else {
                    snapshot
                        .destination_rules
                        .retain(|x| !gone(x.name_any(), x.namespace()));
                }
            }
        }
    }
    for de in &mut snapshot.dynamic_envs {
        let key = format!("{}/{}", de.namespace().unwrap(), de.name_any());
        let mut d = wasmop_api::dynamicenv::DynamicEnv::clone(de);
        d.status = plan.status.get(&key).cloned();
        *de = Arc::new(d);
    }
}

#[tokio::test]
async fn an_applied_plan_converges() {
    let cfg = PlanConfig::default();
    for case in cases() {
        let router = native_of(&case).await;
        let mut s = read(&case);
        let first = plan(&s, &router, &cfg).await;
        apply(&mut s, &first);
        let second = plan(&s, &router, &cfg).await;
        // Removed subsets take one more round (their objects are gone now).
        apply(&mut s, &second);
        let third = plan(&s, &router, &cfg).await;
        assert!(
            third.writes.is_empty(),
            "{}: planning again still writes {:#?}",
            case.display(),
            third.writes
        );
    }
}

/// The VirtualServices of a snapshot as (namespace/name, spec.http).
fn routes(s: &Snapshot) -> Vec<(String, Value)> {
    s.virtual_services
        .iter()
        .map(|v| {
            (
                format!("{}/{}", v.namespace().unwrap(), v.name_any()),
                json!(v.spec.http),
            )
        })
        .collect()
}

#[tokio::test]
async fn deleting_a_dynamic_env_restores_every_virtual_service_exactly() {
    let cfg = PlanConfig::default();
    for case in cases() {
        let router = native_of(&case).await;
        let original = read(&case);
        let mut s = original.clone();
        let made = plan(&s, &router, &cfg).await;
        apply(&mut s, &made);
        for de in original.dynamic_envs.clone() {
            let removal = plan(&removal_snapshot(&s, &de), &router, &cfg).await;
            assert!(
                !removal
                    .writes
                    .iter()
                    .any(|w| matches!(w, Write::Apply { .. })),
                "removal applies nothing"
            );
            apply(&mut s, &removal);
        }
        // Every VirtualService is as it was before any DynamicEnv, less the routes the
        // fixture's earlier state had made.
        let strip = |list: Vec<(String, Value)>| -> Vec<(String, Value)> {
            list.into_iter()
                .map(|(k, http)| {
                    let kept: Vec<Value> = http
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|r| !r["name"].as_str().is_some_and(names::is_dynamic_env_route))
                        .cloned()
                        .collect();
                    (
                        k,
                        if http.is_null() {
                            Value::Null
                        } else {
                            json!(kept)
                        },
                    )
                })
                .collect()
        };
        assert_eq!(routes(&s), strip(routes(&original)), "{}", case.display());
        let owned = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            wasmop_controllers::routing::clone::owner(meta).is_some()
        };
        assert!(
            !s.deployments.iter().any(|d| owned(&d.metadata))
                && !s.destination_rules.iter().any(|d| owned(&d.metadata)),
            "{}: nothing made by a DynamicEnv is left",
            case.display()
        );
    }
}

#[tokio::test]
async fn dynamic_envs_whose_names_prefix_each_other_never_touch_each_others_routes() {
    let router = native();
    let cfg = PlanConfig::default();
    let original = read(&fixtures().join("names-prefixing-each-other"));
    let mut s = original.clone();
    let made = plan(&s, &router, &cfg).await;
    apply(&mut s, &made);
    let http = |s: &Snapshot| s.virtual_services[0].spec.http.clone().unwrap();
    let both = http(&s);
    let token = |name: &str| names::route_token("bookinfo", name);
    let of = |list: &[Value], name: &str| -> Vec<Value> {
        list.iter()
            .filter(|r| r["name"].as_str().unwrap().starts_with(&token(name)))
            .cloned()
            .collect()
    };
    assert_eq!(of(&both, "sample").len(), 1);
    assert_eq!(of(&both, "sample-2").len(), 1);
    // Reconciling `sample` again leaves sample-2's route as it is, and the other way round.
    for (i, name) in ["sample", "sample-2"].iter().enumerate() {
        let mut one = s.clone();
        one.dynamic_envs = vec![s.dynamic_envs[i].clone()];
        let again = plan(&one, &router, &cfg).await;
        assert!(again.writes.is_empty(), "{name}: {:?}", again.writes);
    }
    // Deleting `sample` strips its route only.
    let sample = s.dynamic_envs[0].clone();
    assert_eq!(sample.name_any(), "sample");
    let removal = plan(&removal_snapshot(&s, &sample), &router, &cfg).await;
    apply(&mut s, &removal);
    let left = http(&s);
    assert!(of(&left, "sample").is_empty());
    assert_eq!(of(&left, "sample-2"), of(&both, "sample-2"));
    assert_eq!(left.len(), 2, "sample-2's copy and the default route");
}

fn status_of(plan: &Plan, de: &str) -> DynamicEnvStatus {
    plan.status[de].clone()
}

#[tokio::test]
async fn routes_and_clones_are_resynced_and_fixed_errors_leave_the_status() {
    let s = read(&fixtures().join("resync-and-errors-cleared"));
    let p = plan(&s, &native(), &PlanConfig::default()).await;
    let status = status_of(&p, "bookinfo/jason");
    let entry = &status.subsets_status["bookinfo/reviews"];
    assert!(
        entry.subset_errors.is_none(),
        "the old error is gone: {entry:?}"
    );
    assert_eq!(entry.deployment.status, "updating", "the base changed");
    let clone = p
        .writes
        .iter()
        .find_map(|w| match w {
            Write::Apply { object, .. } if object["kind"] == "Deployment" => Some(object),
            _ => None,
        })
        .expect("the clone is applied again");
    assert_eq!(
        clone["spec"]["template"]["spec"]["containers"][0]["env"][0]["name"],
        "ADDED_TO_THE_BASE"
    );
    let http = p
        .writes
        .iter()
        .find_map(|w| match w {
            Write::Routes { http, .. } => Some(http),
            _ => None,
        })
        .expect("the routes are rewritten");
    let copy = &http[0];
    assert!(names::is_dynamic_env_route(copy["name"].as_str().unwrap()));
    assert_eq!(
        copy["timeout"], "10s",
        "the copy follows the new default route"
    );
    assert_eq!(
        copy["route"][0]["destination"]["host"],
        "reviews.bookinfo.svc.cluster.local"
    );
}

#[tokio::test]
async fn destination_rule_traffic_policies_are_kept() {
    let p = plan(
        &read(&fixtures().join("simple")),
        &native(),
        &PlanConfig::default(),
    )
    .await;
    let dr = p
        .writes
        .iter()
        .find_map(|w| match w {
            Write::Apply { object, .. } if object["kind"] == "DestinationRule" => Some(object),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        dr["spec"]["trafficPolicy"],
        json!({"tls": {"mode": "ISTIO_MUTUAL"}})
    );
    assert_eq!(
        dr["spec"]["subsets"][0]["trafficPolicy"],
        json!({"loadBalancer": {"simple": "LEAST_REQUEST"}})
    );
}

#[tokio::test]
async fn a_service_with_an_empty_selector_matches_nothing() {
    let p = plan(
        &read(&fixtures().join("empty-selector-and-missing-base")),
        &native(),
        &PlanConfig::default(),
    )
    .await;
    let status = status_of(&p, "bookinfo/jason");
    let reviews = &status.subsets_status["bookinfo/reviews"];
    let hosts: Vec<&str> = reviews
        .destination_rules
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(hosts, ["reviews-bookinfo-jason-reviews"]);
    assert!(
        !p.writes.iter().any(|w| w.key().contains("everything")),
        "nothing is written for the Service with the empty selector"
    );
    let ratings = &status.subsets_status["bookinfo/ratings"];
    assert_eq!(
        ratings.subset_errors.as_ref().unwrap().deployment[0].error,
        "couldn't find the deployment we need to override (name: ratings, ns: bookinfo), Deployment.apps \"ratings\" not found"
    );
}

#[tokio::test]
async fn every_generated_name_is_valid_for_its_kind() {
    let mut s = read(&fixtures().join("simple"));
    // A DynamicEnv name of 253 characters in a namespace of 63.
    let long_ns = "n".repeat(63);
    let text = serde_yaml::to_string(&*s.dynamic_envs[0]).unwrap();
    let mut de: Value = serde_yaml::from_str(&text).unwrap();
    de["metadata"]["name"] = json!("d".repeat(253));
    de["metadata"]["namespace"] = json!(long_ns);
    s.dynamic_envs = vec![Arc::new(serde_json::from_value(de).unwrap())];
    let p = plan(&s, &native(), &PlanConfig::default()).await;
    let mut names_seen = BTreeSet::new();
    for w in &p.writes {
        if let Write::Apply { object, .. } = w {
            let name = object["metadata"]["name"].as_str().unwrap();
            // A Deployment a DNS label, a DestinationRule (a custom resource) a DNS subdomain.
            if object["kind"] == "Deployment" {
                assert!(names::is_dns_label(name), "{name}");
            } else {
                assert!(names::is_dns_subdomain(name), "{name}");
            }
            names_seen.insert(name.to_owned());
            let version = object["metadata"]["labels"]["version"].as_str().unwrap();
            assert!(version.len() <= 63, "label value {version}");
        }
    }
    assert_eq!(names_seen.len(), 2, "a clone and a DestinationRule");
}

/// The plan of the `simple` fixture with its DynamicEnv (as JSON) changed by `change`: the
/// DynamicEnv's key and the plan.
async fn plan_simple_with(change: impl FnOnce(&mut Value)) -> (String, Plan) {
    let mut s = read(&fixtures().join("simple"));
    let mut de = serde_json::to_value(&*s.dynamic_envs[0]).unwrap();
    change(&mut de);
    s.dynamic_envs = vec![Arc::new(serde_json::from_value(de).unwrap())];
    let key = format!(
        "{}/{}",
        s.dynamic_envs[0].namespace().unwrap(),
        s.dynamic_envs[0].name_any()
    );
    (key, plan(&s, &native(), &PlanConfig::default()).await)
}

#[tokio::test]
async fn pod_labels_that_leave_the_services_selector_are_a_subset_error_and_get_no_route() {
    let (key, p) = plan_simple_with(|de| {
        de["spec"]["subsets"][0]["podLabels"] = json!({"app": "reviews-canary"});
    })
    .await;
    let status = status_of(&p, &key);
    let entry = status.subsets_status.values().next().unwrap();
    let errors = &entry.subset_errors.as_ref().unwrap().subset;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0]
            .error
            .contains("leave the selector of Service bookinfo/reviews (app=reviews (the clone's pods have app=reviews-canary))"),
        "{}",
        errors[0].error
    );
    assert_eq!(status.state.as_deref(), Some("degraded"));
    assert!(
        !p.writes
            .iter()
            .any(|w| matches!(w, Write::Routes { .. }) || w.key().starts_with("DestinationRule/")),
        "no route and no DestinationRule for a subset without endpoints: {:#?}",
        p.writes
    );
}

#[tokio::test]
async fn a_match_istio_would_refuse_is_left_out_and_every_subset_says_why() {
    let (key, p) = plan_simple_with(|de| {
        let good = de["spec"]["istioMatches"][0].clone();
        de["spec"]["istioMatches"] = json!([
            {"headers": {"end user": {"exact": "jason"}}},
            {"sourceLabels": {"app": "product page!"}},
            good,
        ]);
    })
    .await;
    let status = status_of(&p, &key);
    let entry = status.subsets_status.values().next().unwrap();
    let errors: Vec<&str> = entry
        .subset_errors
        .as_ref()
        .unwrap()
        .subset
        .iter()
        .map(|e| e.error.as_str())
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("istioMatches[0]: header name \"end user\" is not an HTTP token"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("istioMatches[1]: source label app=\"product page!\""),
        "{errors:?}"
    );
    // The valid match still routes: one copy per route, each matching on it alone.
    let routes: Vec<&Value> = p
        .writes
        .iter()
        .filter_map(|w| match w {
            Write::Routes { http, .. } => Some(http),
            _ => None,
        })
        .flatten()
        .filter(|r| r["name"].as_str().is_some_and(names::is_dynamic_env_route))
        .collect();
    assert!(!routes.is_empty());
    for r in routes {
        let text = r["match"].to_string();
        assert!(
            !text.contains("end user") && !text.contains("product page"),
            "{text}"
        );
    }
}

#[tokio::test]
#[ignore = "needs tests/istio-validate (scripts/setup.sh); run by `make test`"]
async fn istio_accepts_every_object_every_golden_plan_writes() {
    let mut docs = Vec::new();
    for case in cases() {
        let router = wasm_of(&case).await;
        let mut s = read(&case);
        let p = plan(&s, &router, &PlanConfig::default()).await;
        apply(&mut s, &p);
        for w in &p.writes {
            match w {
                Write::Apply { object, .. } if object["kind"] == "DestinationRule" => {
                    docs.push(object.clone());
                }
                Write::Routes {
                    namespace, name, ..
                } => {
                    let vs = s
                        .virtual_services
                        .iter()
                        .find(|v| {
                            v.name_any() == *name && v.namespace().as_deref() == Some(namespace)
                        })
                        .unwrap();
                    let mut vs = serde_json::to_value(vs.as_ref()).unwrap();
                    vs["apiVersion"] = json!("networking.istio.io/v1");
                    vs["kind"] = json!("VirtualService");
                    docs.push(vs);
                }
                _ => {}
            }
        }
    }
    assert!(docs.len() >= 20, "{} objects", docs.len());
    let yaml: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect();
    let (ok, report) = wasmop_tests::istio_validate(&yaml.join("\n---\n"));
    assert!(
        ok,
        "Istio refuses or warns about what a plan writes:\n{report}"
    );
    assert_eq!(report.matches(": valid").count(), docs.len(), "{report}");
}

/// A DynamicEnv of `reviews` in namespace `bookinfo`, made at second `age`.
fn dynamic_env(ns: &str, name: &str, age: u32) -> Arc<wasmop_api::dynamicenv::DynamicEnv> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "wasmop.dev/v1alpha1",
            "kind": "DynamicEnv",
            "metadata": {"namespace": ns, "name": name,
                "creationTimestamp": format!("2026-01-01T00:00:{age:02}Z")},
            "spec": {
                "istioMatches": [{"headers": {"end-user": {"exact": name}}}],
                "subsets": [{"namespace": "bookinfo", "name": "reviews"}],
            },
        }))
        .unwrap(),
    )
}

/// The clone a plan wants for `de`: its name and its version label.
fn clone_of(p: &Plan, de: &str) -> (String, String) {
    let name = p.status[de].subsets_status["bookinfo/reviews"]
        .deployment
        .name
        .clone();
    let version = p
        .writes
        .iter()
        .find_map(|w| match w {
            Write::Apply { object, .. } if object["metadata"]["name"] == name.as_str() => {
                object["metadata"]["labels"]["version"]
                    .as_str()
                    .map(str::to_owned)
            }
            _ => None,
        })
        .unwrap_or_default();
    (name, version)
}

#[tokio::test]
async fn names_are_upstreams_unless_taken_and_objects_keep_the_names_they_have() {
    let mut s = read(&fixtures().join("names-prefixing-each-other"));
    // Upstream's version `<ns>-<name>` is `bookinfo-x-y` for both; the older keeps it.
    let older = dynamic_env("bookinfo-x", "y", 1);
    let newer = dynamic_env("bookinfo", "x-y", 2);
    // Its upstream clone name is held by a Deployment nobody made.
    let squatted = dynamic_env("bookinfo", "own", 3);
    // Made by an earlier release: its clone has the digest form.
    let earlier = dynamic_env("bookinfo", "old", 4);
    s.dynamic_envs = vec![newer, older, squatted, earlier];
    s.claims = names::Claims::new(s.dynamic_envs.iter().map(AsRef::as_ref));
    let deployment = |name: &str, annotations: Value, version: &str| -> Arc<Deployment> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"namespace": "bookinfo", "name": name, "annotations": annotations,
                    "labels": {"app": "reviews", "version": version}},
                "spec": {"selector": {"matchLabels": {"app": "reviews", "version": version}},
                    "template": {"metadata": {"labels": {"app": "reviews", "version": version}}}},
            }))
            .unwrap(),
        )
    };
    s.deployments
        .push(deployment("reviews-bookinfo-own", json!({}), "mine"));
    let old_clone = names::digest_clone_name("bookinfo", "old", "bookinfo", "reviews");
    let old_version = names::digest_version("bookinfo", "old");
    s.deployments.push(deployment(
        &old_clone,
        json!({"wasmop.dev/dynamicenv": "bookinfo/old", "wasmop.dev/subset": "bookinfo/reviews"}),
        &old_version,
    ));

    let p = plan(&s, &native(), &PlanConfig::default()).await;
    assert_eq!(
        clone_of(&p, "bookinfo-x/y"),
        ("reviews-bookinfo-x-y".into(), "bookinfo-x-y".into())
    );
    let v = names::digest_version("bookinfo", "x-y");
    assert_eq!(clone_of(&p, "bookinfo/x-y"), (format!("reviews-{v}"), v));
    assert_eq!(
        clone_of(&p, "bookinfo/own"),
        (
            names::digest_clone_name("bookinfo", "own", "bookinfo", "reviews"),
            "bookinfo-own".into()
        )
    );
    assert_eq!(
        clone_of(&p, "bookinfo/old"),
        (old_clone.clone(), old_version)
    );
    for w in &p.writes {
        assert!(
            !matches!(w, Write::Delete { .. }),
            "nothing is renamed or taken over: {w:?}"
        );
        if let Write::Apply { object, .. } = w {
            assert_ne!(object["metadata"]["name"], "reviews-bookinfo-own");
        }
    }
    let dr = &p.status["bookinfo/old"].subsets_status["bookinfo/reviews"].destination_rules;
    assert_eq!(dr[0].name, format!("{old_clone}-reviews"));

    // Once applied, the plan converges: nothing is renamed on the next passes.
    let router = native();
    apply(&mut s, &p);
    let second = plan(&s, &router, &PlanConfig::default()).await;
    apply(&mut s, &second);
    let third = plan(&s, &router, &PlanConfig::default()).await;
    assert!(third.writes.is_empty(), "{:#?}", third.writes);
    // The older one gone, the newer keeps the names its objects have.
    s.dynamic_envs.retain(|d| d.name_any() != "y");
    s.claims = names::Claims::new(s.dynamic_envs.iter().map(AsRef::as_ref));
    let after = plan(&s, &router, &PlanConfig::default()).await;
    assert_eq!(
        after.status["bookinfo/x-y"].subsets_status["bookinfo/reviews"]
            .deployment
            .name,
        format!("reviews-{}", names::digest_version("bookinfo", "x-y"))
    );
}

/// A router that fails every call.
struct Failing(FailurePolicy);

#[async_trait::async_trait]
impl Router for Failing {
    fn name(&self) -> &str {
        "broken"
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.0
    }
    async fn route(&self, _: RouteRequest) -> Result<Vec<Value>, String> {
        Err("plugin \"broken\" (routing): trapped: unreachable".into())
    }
}

/// A router that also renames a route it does not own.
struct Meddling;

#[async_trait::async_trait]
impl Router for Meddling {
    fn name(&self) -> &str {
        "meddling"
    }
    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Fail
    }
    async fn route(&self, r: RouteRequest) -> Result<Vec<Value>, String> {
        let mut out = native_router::Native::default().route(r).await?;
        for route in &mut out {
            if route["name"] == "default" {
                route["name"] = json!("renamed");
            }
        }
        Ok(out)
    }
}

#[tokio::test]
async fn failure_policy_fail_reports_the_error_and_ignore_leaves_the_virtual_service() {
    let s = read(&fixtures().join("simple"));
    let cfg = PlanConfig::default();
    let fail = plan(
        &s,
        &(Arc::new(Failing(FailurePolicy::Fail)) as Arc<dyn Router>),
        &cfg,
    )
    .await;
    let status = status_of(&fail, "bookinfo/jason");
    assert_eq!(status.state.as_deref(), Some("degraded"));
    let entry = &status.subsets_status["bookinfo/reviews"];
    assert_eq!(entry.virtual_services[0].status, "failed");
    let errors = &entry.subset_errors.as_ref().unwrap().virtual_services;
    assert_eq!(
        errors[0].error,
        format!(
            "error updating virtual service bookinfo/reviews for subset ({}): plugin \"broken\" (routing): trapped: unreachable",
            names::clone_name("bookinfo", "jason", "bookinfo", "reviews")
        )
    );
    assert!(
        !fail
            .writes
            .iter()
            .any(|w| matches!(w, Write::Routes { .. }))
    );
    assert!(
        fail.writes.iter().any(|w| matches!(w, Write::Apply { .. })),
        "the clone and DestinationRule are still made"
    );

    let ignore = plan(
        &s,
        &(Arc::new(Failing(FailurePolicy::Ignore)) as Arc<dyn Router>),
        &cfg,
    )
    .await;
    let status = status_of(&ignore, "bookinfo/jason");
    assert_eq!(status.state.as_deref(), Some("processing"), "not degraded");
    let entry = &status.subsets_status["bookinfo/reviews"];
    assert!(entry.subset_errors.is_none());
    assert_eq!(entry.virtual_services[0].status, "failed");
    assert!(
        !ignore
            .writes
            .iter()
            .any(|w| matches!(w, Write::Routes { .. }))
    );

    let meddled = plan(&s, &(Arc::new(Meddling) as Arc<dyn Router>), &cfg).await;
    let status = status_of(&meddled, "bookinfo/jason");
    let e = &status.subsets_status["bookinfo/reviews"]
        .subset_errors
        .as_ref()
        .unwrap()
        .virtual_services[0]
        .error;
    assert!(
        e.contains("gave invalid output for VirtualService bookinfo/reviews")
            && e.contains("changed routes it does not own"),
        "{e}"
    );
    assert!(
        !meddled
            .writes
            .iter()
            .any(|w| matches!(w, Write::Routes { .. }))
    );
}

/// A hostile router component (tests/fixtures/hostile, settings `{"answer": KIND}`) answers
/// routes it may not write: one that catches every request, one that mirrors the DynamicEnv's
/// requests elsewhere, one that sends them to another service. Each is refused, whatever the
/// entry's failurePolicy: the VirtualService keeps its routes and the DynamicEnv is degraded
/// with the reason.
#[tokio::test]
async fn a_hostile_routers_answers_are_refused_and_the_virtual_service_is_left_as_it_was() {
    let s = read(&fixtures().join("simple"));
    let runtime = PluginRuntime::new(RuntimeOptions {
        cache_dir: None,
        max_concurrent_calls: 2,
        pooling: false,
        extra_ca_pem: None,
    })
    .unwrap();
    let file = wasmop_tests::components_dir().join("wasmop_hostile_fixture.wasm");
    let bytes = std::fs::read(&file).expect("the hostile fixture is built by plugin-host");
    for (kind, why) in [
        ("catch-all", "has no match"),
        ("mirror", "has a mirror"),
        ("other-service", "to host payments"),
    ] {
        let mut spec = PluginSpec::new("hostile", Hook::Routing, "file:///hostile.wasm");
        spec.settings = Some(json!({ "answer": kind }));
        spec.failure_policy = FailurePolicy::Ignore;
        let router: Arc<dyn Router> =
            Arc::new(WasmRouter(runtime.load(&spec, &bytes).await.unwrap()));
        let p = plan(&s, &router, &PlanConfig::default()).await;
        let status = status_of(&p, "bookinfo/jason");
        assert_eq!(status.state.as_deref(), Some("degraded"), "{kind}");
        let e = &status.subsets_status["bookinfo/reviews"]
            .subset_errors
            .as_ref()
            .unwrap_or_else(|| panic!("{kind}: no error"))
            .virtual_services[0]
            .error;
        assert!(
            e.contains("gave invalid output for VirtualService bookinfo/reviews")
                && e.contains(why),
            "{kind}: {e}"
        );
        assert!(
            !p.writes.iter().any(|w| matches!(w, Write::Routes { .. })),
            "{kind}: no route is written"
        );
        // Nor to a delegating root in another namespace (ingress/gateway delegates to
        // bookinfo/reviews-delegate).
        let delegates = read(&fixtures().join("delegates"));
        let p = plan(&delegates, &router, &PlanConfig::default()).await;
        let routes: Vec<_> = p
            .writes
            .iter()
            .filter(|w| matches!(w, Write::Routes { .. }))
            .collect();
        assert!(routes.is_empty(), "{kind}: {routes:?}");
        assert!(
            p.status
                .values()
                .all(|s| s.state.as_deref() == Some("degraded")),
            "{kind}"
        );
    }
}

/// What a [`Scripted`] router answers, from the request and the routes it was given.
type Answer = Box<dyn Fn(&RouteRequest, Vec<Value>) -> Result<Vec<Value>, String> + Send + Sync>;

/// A router of the chain tests: `answer` on the request and the VirtualService's routes.
struct Scripted(&'static str, Answer);

#[async_trait::async_trait]
impl Router for Scripted {
    fn name(&self) -> &str {
        self.0
    }
    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Fail
    }
    async fn route(&self, r: RouteRequest) -> Result<Vec<Value>, String> {
        let vs: Value = serde_json::from_str(&r.virtual_service).unwrap();
        let http = vs["spec"]["http"].as_array().cloned().unwrap_or_default();
        (self.1)(&r, http)
    }
}

/// `router` with a failure policy and an identity of its own, counting its calls.
struct Counted {
    router: Box<dyn Router>,
    policy: FailurePolicy,
    identity: Option<String>,
    calls: std::sync::atomic::AtomicUsize,
}

impl Counted {
    fn new(
        router: impl Router + 'static,
        policy: FailurePolicy,
        identity: Option<&str>,
    ) -> Arc<Self> {
        Arc::new(Self {
            router: Box::new(router),
            policy,
            identity: identity.map(str::to_owned),
            calls: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait::async_trait]
impl Router for Counted {
    fn name(&self) -> &str {
        self.router.name()
    }
    fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }
    fn identity(&self) -> Option<String> {
        self.identity.clone()
    }
    async fn route(&self, r: RouteRequest) -> Result<Vec<Value>, String> {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.router.route(r).await
    }
}

/// `router` refining the answer of `after`.
fn refining(after: Arc<dyn Router>, router: Arc<dyn Router>) -> Arc<dyn Router> {
    Arc::new(Refining { after, router })
}

/// Whether `route` is one of the request's own (named with its route prefix).
fn own(r: &RouteRequest, route: &Value) -> bool {
    route["name"]
        .as_str()
        .is_some_and(|n| n.starts_with(&r.route_prefix))
}

/// A refining router that sets the response header `x-refined: VALUE` on the request's own
/// routes.
fn add_header(value: &'static str) -> Scripted {
    Scripted(
        "refiner",
        Box::new(move |r, mut http| {
            for route in http.iter_mut().filter(|route| own(r, route)) {
                route["headers"]["response"]["set"]["x-refined"] = json!(value);
            }
            Ok(http)
        }),
    )
}

/// A router whose every call fails.
fn failing(name: &'static str) -> Scripted {
    Scripted(
        name,
        Box::new(move |_, _| Err(format!("plugin {name:?} (routing): trapped: unreachable"))),
    )
}

/// The `spec.http` the plan writes to bookinfo/reviews, if it writes one.
fn written(p: &Plan) -> Option<&Vec<Value>> {
    p.writes.iter().find_map(|w| match w {
        Write::Routes { name, http, .. } if name == "reviews" => Some(http),
        _ => None,
    })
}

/// A refining router gets the VirtualService as the router before it answered, and the plan
/// writes its answer; the DynamicEnv's status and the IR name both as having decided.
#[tokio::test]
async fn a_refining_router_refines_the_answer_of_the_one_it_builds_on() {
    let s = read(&fixtures().join("simple"));
    let base = Counted::new(native_router::Native::default(), FailurePolicy::Fail, None);
    let refiner = Counted::new(add_header("yes"), FailurePolicy::Fail, None);
    let p = plan(
        &s,
        &refining(base.clone(), refiner.clone()),
        &PlanConfig::default(),
    )
    .await;
    assert_eq!((base.calls(), refiner.calls()), (1, 1));
    let http = written(&p).expect("routes are written");
    let before = s.virtual_services[0].spec.http.clone().unwrap();
    let (ours, others): (Vec<&Value>, Vec<&Value>) = http
        .iter()
        .partition(|r| r["name"].as_str().is_some_and(names::is_dynamic_env_route));
    assert_eq!(others.into_iter().cloned().collect::<Vec<_>>(), before);
    assert_eq!(ours.len(), 1, "{http:#?}");
    // routing-istio's copy, with the refinement on top.
    assert_eq!(ours[0]["headers"]["response"]["set"]["x-refined"], "yes");
    assert!(
        ours[0]["route"][0]["headers"]["response"]["add"]["x-dynamic-env"].is_string(),
        "{:#}",
        ours[0]
    );
    let status = status_of(&p, "bookinfo/jason");
    let vs = &status.subsets_status["bookinfo/reviews"].virtual_services[0];
    assert_eq!(vs.status, "running");
    assert_eq!(vs.decided_by, ["routing-istio", "refiner"]);
    let record = &p.ir.get("VirtualService/bookinfo/reviews").unwrap().routes[0];
    assert_eq!(record.decided_by, ["routing-istio", "refiner"]);
    assert_eq!(record.outcome, "routed: 1 routes");
    assert!(p.failures.is_empty(), "{:?}", p.failures);
}

/// A refining router's answer is checked as any router's, against the routes it was given:
/// one that changes a route it does not own, catches every request or sends the DynamicEnv's
/// requests elsewhere is refused, whatever its failurePolicy, and nothing is written.
#[tokio::test]
async fn a_refining_routers_answer_is_held_to_the_same_rules() {
    let s = read(&fixtures().join("simple"));
    let cases: [(Answer, &str); 3] = [
        (
            Box::new(|_, mut http| {
                for route in &mut http {
                    if route["name"] == "default" {
                        route["timeout"] = json!("1s");
                    }
                }
                Ok(http)
            }),
            "changed routes it does not own",
        ),
        (
            Box::new(|r, mut http| {
                for route in http.iter_mut().filter(|route| own(r, route)) {
                    route.as_object_mut().unwrap().remove("match");
                }
                Ok(http)
            }),
            "has no match",
        ),
        (
            Box::new(|r, mut http| {
                for route in http.iter_mut().filter(|route| own(r, route)) {
                    route["route"][0]["destination"]["host"] = json!("payments");
                }
                Ok(http)
            }),
            "to host payments",
        ),
    ];
    for (answer, why) in cases {
        let refiner = Counted::new(Scripted("refiner", answer), FailurePolicy::Ignore, None);
        let p = plan(&s, &refining(native(), refiner), &PlanConfig::default()).await;
        let status = status_of(&p, "bookinfo/jason");
        assert_eq!(status.state.as_deref(), Some("degraded"), "{why}");
        let entry = &status.subsets_status["bookinfo/reviews"];
        let e = &entry.subset_errors.as_ref().unwrap().virtual_services[0].error;
        assert!(
            e.contains(
                "plugin \"refiner\" gave invalid output for VirtualService bookinfo/reviews"
            ) && e.contains(why),
            "{why}: {e}"
        );
        assert_eq!(entry.virtual_services[0].status, "failed");
        assert!(entry.virtual_services[0].decided_by.is_empty());
        assert_eq!(written(&p), None, "{why}");
        assert_eq!(p.failures.len(), 1);
        assert_eq!(p.failures[0].plugin, "refiner");
        assert_eq!(
            p.failures[0].policy,
            FailurePolicy::Fail,
            "invalid output is never ignored"
        );
    }
}

/// Each router of a chain fails under its own failurePolicy: a failing earlier router fails
/// the call as a router alone would (the refining one is not called); a refining router that
/// fails under `Ignore` leaves the earlier answer as it is, under `Fail` fails the call.
#[tokio::test]
async fn each_router_of_a_chain_fails_under_its_own_policy() {
    let s = read(&fixtures().join("simple"));
    let cfg = PlanConfig::default();
    let vs_of = |p: &Plan| {
        status_of(p, "bookinfo/jason").subsets_status["bookinfo/reviews"].virtual_services[0]
            .clone()
    };

    for policy in [FailurePolicy::Fail, FailurePolicy::Ignore] {
        let base = Counted::new(failing("broken"), policy, None);
        let refiner = Counted::new(add_header("yes"), FailurePolicy::Fail, None);
        let p = plan(&s, &refining(base.clone(), refiner.clone()), &cfg).await;
        assert_eq!((base.calls(), refiner.calls()), (1, 0), "{policy:?}");
        assert_eq!(written(&p), None, "{policy:?}");
        assert_eq!(vs_of(&p).status, "failed");
        let status = status_of(&p, "bookinfo/jason");
        let degraded = status.state.as_deref() == Some("degraded");
        assert_eq!(degraded, policy == FailurePolicy::Fail, "{policy:?}");
        assert_eq!(
            (p.failures[0].plugin.as_str(), p.failures[0].policy),
            ("broken", policy)
        );
    }

    // The refining router fails under Ignore: the earlier answer is written unrefined.
    let refiner = Counted::new(failing("refiner"), FailurePolicy::Ignore, None);
    let p = plan(&s, &refining(native(), refiner), &cfg).await;
    let http = written(&p).expect("the earlier answer is written");
    let ours: Vec<&Value> = http
        .iter()
        .filter(|r| r["name"].as_str().is_some_and(names::is_dynamic_env_route))
        .collect();
    assert_eq!(ours.len(), 1);
    assert!(ours[0].get("headers").is_none(), "{:#}", ours[0]);
    let vs = vs_of(&p);
    assert_eq!(vs.status, "running");
    assert_eq!(vs.decided_by, ["routing-istio"]);
    let status = status_of(&p, "bookinfo/jason");
    assert_ne!(status.state.as_deref(), Some("degraded"));
    let record = &p.ir.get("VirtualService/bookinfo/reviews").unwrap().routes[0];
    assert_eq!(
        record.outcome,
        "routed: 1 routes; refiner failed: plugin \"refiner\" (routing): trapped: unreachable \
         (failurePolicy Ignore: the answer of routing-istio is used as it is)"
    );
    assert_eq!(
        (p.failures[0].plugin.as_str(), p.failures[0].policy),
        ("refiner", FailurePolicy::Ignore)
    );

    // Under Fail: the call fails, nothing is written, the error is the refining router's.
    let refiner = Counted::new(failing("refiner"), FailurePolicy::Fail, None);
    let p = plan(&s, &refining(native(), refiner), &cfg).await;
    assert_eq!(written(&p), None);
    let status = status_of(&p, "bookinfo/jason");
    assert_eq!(status.state.as_deref(), Some("degraded"));
    let e = &status.subsets_status["bookinfo/reviews"]
        .subset_errors
        .as_ref()
        .unwrap()
        .virtual_services[0]
        .error;
    assert!(
        e.ends_with("plugin \"refiner\" (routing): trapped: unreachable"),
        "{e}"
    );
}

/// An answer is reused only for the same request to the same chain: another refining router
/// (or another earlier one) is another key, so a reused answer is never one the chain would
/// no longer give; an answer a refining router failed to refine (under Ignore) is not kept.
#[tokio::test]
async fn a_reused_answer_is_one_of_the_whole_chain() {
    let s = read(&fixtures().join("simple"));
    let cfg = PlanConfig::default();
    // Identities of this test's own, as the answers are kept process-wide.
    let base = Counted::new(
        native_router::Native::default(),
        FailurePolicy::Fail,
        Some("reuse-test base v1"),
    );
    let yes = Counted::new(
        add_header("yes"),
        FailurePolicy::Fail,
        Some("reuse-test refiner yes"),
    );
    let first = plan(&s, &refining(base.clone(), yes.clone()), &cfg).await;
    let again = plan(&s, &refining(base.clone(), yes.clone()), &cfg).await;
    assert_eq!(
        (base.calls(), yes.calls()),
        (1, 1),
        "the second plan reuses the answer"
    );
    assert_eq!(written(&first), written(&again));
    assert_eq!(
        status_of(&again, "bookinfo/jason").subsets_status["bookinfo/reviews"].virtual_services[0]
            .decided_by,
        ["routing-istio", "refiner"]
    );

    // Another refining router: the whole chain is called again, and its answer written.
    let no = Counted::new(
        add_header("no"),
        FailurePolicy::Fail,
        Some("reuse-test refiner no"),
    );
    let other = plan(&s, &refining(base.clone(), no.clone()), &cfg).await;
    assert_eq!((base.calls(), no.calls()), (2, 1));
    let refined = |p: &Plan| -> Vec<Value> {
        written(p)
            .unwrap()
            .iter()
            .filter(|r| r["name"].as_str().is_some_and(names::is_dynamic_env_route))
            .map(|r| r["headers"]["response"]["set"]["x-refined"].clone())
            .collect()
    };
    assert_eq!(refined(&other), [json!("no")]);
    assert_eq!(refined(&first), [json!("yes")]);

    // Another earlier router under the same refining one: called again too.
    let base2 = Counted::new(
        native_router::Native::default(),
        FailurePolicy::Fail,
        Some("reuse-test base v2"),
    );
    plan(&s, &refining(base2.clone(), yes.clone()), &cfg).await;
    assert_eq!((base2.calls(), yes.calls()), (1, 2));

    // A refining router that fails under Ignore: the unrefined answer is not kept.
    let flaky = Counted::new(
        failing("refiner"),
        FailurePolicy::Ignore,
        Some("reuse-test flaky"),
    );
    for round in 1..=2 {
        plan(&s, &refining(base2.clone(), flaky.clone()), &cfg).await;
        assert_eq!((base2.calls(), flaky.calls()), (1 + round, round));
    }
}
