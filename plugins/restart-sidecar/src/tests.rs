use super::*;
use serde_json::json;

const OLD: &str = "docker.io/istio/proxyv2:1.0";
const NEW: &str = "docker.io/istio/proxyv2:1.1";
const CREATED: &str = "2026-08-21T10:00:00Z";

/// A pod builder: an app container plus an up-to-date `istio-proxy`.
struct PodBuilder(Value);

impl PodBuilder {
    fn new() -> Self {
        Self(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "app-1",
                "namespace": "shop",
                "creationTimestamp": CREATED,
                "annotations": { "sidecar.istio.io/status": "{}" }
            },
            "spec": {
                "containers": [
                    { "name": "app", "image": "shop/app:3" },
                    {
                        "name": "istio-proxy",
                        "image": NEW,
                        "resources": {
                            "requests": { "cpu": "100m", "memory": "128Mi" },
                            "limits": { "cpu": "2", "memory": "1Gi" }
                        }
                    }
                ]
            }
        }))
    }

    fn annotate(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["annotations"][key] = json!(value);
        self
    }

    fn namespace(mut self, ns: &str) -> Self {
        self.0["metadata"]["namespace"] = json!(ns);
        self
    }

    fn created(mut self, at: &str) -> Self {
        self.0["metadata"]["creationTimestamp"] = json!(at);
        self
    }

    fn proxy_image(mut self, image: &str) -> Self {
        self.0["spec"]["containers"][1]["image"] = json!(image);
        self
    }

    fn proxy_resources(mut self, resources: Value) -> Self {
        self.0["spec"]["containers"][1]["resources"] = resources;
        self
    }

    fn init_container(mut self, name: &str, image: &str) -> Self {
        let spec = self.0["spec"].as_object_mut().unwrap();
        let list = spec.entry("initContainers").or_insert_with(|| json!([]));
        list.as_array_mut()
            .unwrap()
            .push(json!({ "name": name, "image": image }));
        self
    }

    fn build(self) -> Value {
        self.0
    }
}

fn pod() -> PodBuilder {
    PodBuilder::new()
}

fn desired(json: Value) -> DesiredProxy {
    DesiredProxy::from_json(&json.to_string()).unwrap_or_else(|e| panic!("{e}"))
}

/// The desired state the default pod matches.
fn matching() -> Value {
    json!({
        "image": NEW,
        "resources": {
            "requests": { "cpu": "100m", "memory": "128Mi" },
            "limits": { "cpu": "2", "memory": "1Gi" }
        }
    })
}

fn judge(desired: &DesiredProxy, applied: Option<&DesiredProxy>, pod: Value) -> Decision {
    let mut decisions = evaluate(desired, applied, &[pod]);
    assert_eq!(decisions.len(), 1);
    decisions.remove(0)
}

fn restarts(d: &Decision, why: &str) {
    assert!(
        d.restart,
        "expected a restart because of {why:?}, got {d:?}"
    );
    assert!(
        d.reason.contains(why),
        "reason {:?} should contain {why:?}",
        d.reason
    );
}

fn stays(d: &Decision) {
    assert!(!d.restart, "expected no restart, got {d:?}");
}

// --- general ---

#[test]
fn matching_pod_stays() {
    let d = judge(&desired(matching()), None, pod().build());
    stays(&d);
    assert_eq!(d.reason, "sidecar matches the desired state");
}

#[test]
fn empty_desired_restarts_nothing() {
    stays(&judge(
        &DesiredProxy::default(),
        None,
        pod().proxy_image(OLD).build(),
    ));
}

#[test]
fn one_decision_per_pod_in_order() {
    let pods = [
        pod().build(),
        pod().proxy_image(OLD).build(),
        json!({"kind": "Pod"}),
        pod().build(),
    ];
    let got: Vec<bool> = evaluate(&desired(matching()), None, &pods)
        .iter()
        .map(|d| d.restart)
        .collect();
    assert_eq!(got, [false, true, false, false]);
}

#[test]
fn every_true_predicate_is_named() {
    let want = desired(json!({ "image": NEW, "cni": true, "restartAfter": CREATED }));
    let d = judge(
        &want,
        None,
        pod()
            .proxy_image(OLD)
            .init_container("istio-init", OLD)
            .build(),
    );
    assert_eq!(
        d.reason,
        format!(
            "istio-proxy image {OLD} differs from desired {NEW}; \
             CNI is enabled but the pod has init container istio-init; \
             pod created at {CREATED}, not after restartAfter {CREATED}"
        )
    );
}

#[test]
fn values_that_are_not_pods() {
    let want = desired(matching());
    let d = judge(&want, None, json!({ "spec": {} }));
    stays(&d);
    assert!(d.reason.starts_with("not a pod: "), "{}", d.reason);
    let d = judge(&want, None, json!("app-1"));
    stays(&d);
    assert_eq!(d.reason, "not a pod: expected a JSON object, got a string");
    let d = judge(&want, None, json!({ "metadata": null }));
    assert!(d.reason.starts_with("not a pod: "));
}

#[test]
fn ignored_namespaces_never_restart() {
    let settings = validate_settings(r#"{"ignoreNamespaces": ["kube-system", "legacy"]}"#).unwrap();
    let want = desired(json!({ "image": NEW }));
    let pods = [
        pod().namespace("legacy").proxy_image(OLD).build(),
        pod().proxy_image(OLD).build(),
    ];
    let d = evaluate_with(&settings, &want, None, &pods);
    stays(&d[0]);
    assert_eq!(
        d[0].reason,
        "namespace legacy is ignored (settings.ignoreNamespaces)"
    );
    restarts(&d[1], "differs from desired");
}

// --- image ---

#[test]
fn different_image_restarts() {
    let d = judge(&desired(matching()), None, pod().proxy_image(OLD).build());
    assert_eq!(
        d,
        Decision {
            restart: true,
            reason: format!("istio-proxy image {OLD} differs from desired {NEW}")
        }
    );
}

#[test]
fn image_compare_is_exact() {
    let d = judge(
        &desired(json!({ "image": NEW })),
        None,
        pod().proxy_image("istio/proxyv2:1.1").build(),
    );
    restarts(&d, "istio-proxy image istio/proxyv2:1.1 differs");
}

#[test]
fn native_sidecar_init_container_image_is_checked() {
    let want = desired(json!({ "image": NEW }));
    let d = judge(
        &want,
        None,
        pod().init_container("istio-proxy", OLD).build(),
    );
    restarts(
        &d,
        &format!("istio-proxy init container image {OLD} differs from desired {NEW}"),
    );
    stays(&judge(
        &want,
        None,
        pod().init_container("istio-proxy", NEW).build(),
    ));
}

#[test]
fn other_containers_images_are_ignored() {
    let want = desired(json!({ "image": NEW }));
    stays(&judge(
        &want,
        None,
        pod().init_container("migrate", OLD).build(),
    ));
}

#[test]
fn image_not_compared_without_desired_image() {
    stays(&judge(
        &desired(json!({ "cni": true })),
        None,
        pod().proxy_image(OLD).build(),
    ));
}

#[test]
fn custom_image_annotation_skips_image_and_resources() {
    let p = pod()
        .annotate(CUSTOM_IMAGE_ANNOTATION, "my/proxy:dev")
        .proxy_image("my/proxy:dev")
        .proxy_resources(json!({ "requests": { "cpu": "5" } }))
        .build();
    stays(&judge(&desired(matching()), None, p.clone()));
    // ...but not the other predicates.
    restarts(
        &judge(
            &desired(json!({ "image": NEW, "restartAfter": CREATED })),
            None,
            p,
        ),
        "restartAfter",
    );
}

// --- resources ---

#[test]
fn resources_compare_as_quantities() {
    let p = pod()
        .proxy_resources(json!({
            "requests": { "cpu": "0.1", "memory": "134217728" },
            "limits": { "cpu": "2000m", "memory": "1024Mi" }
        }))
        .build();
    stays(&judge(&desired(matching()), None, p));
    let want = desired(json!({ "resources": { "requests": { "memory": "123Mi" } } }));
    let p = pod()
        .proxy_resources(json!({ "requests": { "memory": "128974848" } }))
        .build();
    stays(&judge(&want, None, p));
}

#[test]
fn different_resources_restart() {
    let p = pod()
        .proxy_resources(json!({
            "requests": { "cpu": "200m", "memory": "128Mi" },
            "limits": { "cpu": "2", "memory": "1G" }
        }))
        .build();
    let d = judge(&desired(matching()), None, p);
    assert_eq!(
        d.reason,
        "istio-proxy cpu request 200m differs from desired 100m; \
         istio-proxy memory limit 1G differs from desired 1Gi"
    );
}

#[test]
fn value_missing_from_the_container_counts_as_zero() {
    let p = pod()
        .proxy_resources(json!({ "requests": { "cpu": "100m", "memory": "128Mi" } }))
        .build();
    restarts(
        &judge(&desired(matching()), None, p),
        "istio-proxy cpu limit (none) differs from desired 2",
    );
    let want = desired(json!({ "resources": { "limits": { "cpu": "0" } } }));
    stays(&judge(
        &want,
        None,
        pod().proxy_resources(json!({})).build(),
    ));
}

#[test]
fn values_absent_from_desired_are_not_compared() {
    let want = desired(json!({ "resources": { "requests": { "cpu": "100m" } } }));
    let p = pod()
        .proxy_resources(
            json!({ "requests": { "cpu": "100m", "memory": "3Gi" }, "limits": { "cpu": "9" } }),
        )
        .build();
    stays(&judge(&want, None, p));
}

#[test]
fn native_sidecar_resources_are_checked() {
    let mut p = pod().build();
    let proxy = p["spec"]["containers"].as_array_mut().unwrap().remove(1);
    p["spec"]["initContainers"] = json!([proxy]);
    stays(&judge(&desired(matching()), None, p.clone()));
    p["spec"]["initContainers"][0]["resources"]["requests"]["cpu"] = json!("1");
    restarts(
        &judge(&desired(matching()), None, p),
        "istio-proxy init container cpu request 1 differs from desired 100m",
    );
}

#[test]
fn annotations_replace_the_expected_resources() {
    // Istio injects only what the annotations say: no desired value applies to this pod.
    let p = pod()
        .annotate("sidecar.istio.io/proxyCPU", "300m")
        .proxy_resources(json!({ "requests": { "cpu": "0.3" } }))
        .build();
    stays(&judge(&desired(matching()), None, p));
    let p = pod()
        .annotate("sidecar.istio.io/proxyCPU", "300m")
        .annotate("sidecar.istio.io/proxyMemoryLimit", "2Gi")
        .proxy_resources(json!({ "requests": { "cpu": "100m", "memory": "2Gi" }, "limits": { "memory": "2Gi" } }))
        .build();
    let d = judge(&desired(matching()), None, p);
    assert_eq!(
        d.reason,
        "istio-proxy cpu request 100m differs from sidecar.istio.io/proxyCPU 300m"
    );
}

#[test]
fn limit_annotation_sets_the_request() {
    let p = pod()
        .annotate("sidecar.istio.io/proxyCPULimit", "1")
        .annotate("sidecar.istio.io/proxyMemoryLimit", "512Mi")
        .proxy_resources(json!({
            "requests": { "cpu": "1", "memory": "512Mi" },
            "limits": { "cpu": "1000m", "memory": "0.5Gi" }
        }))
        .build();
    stays(&judge(&desired(matching()), None, p));
    let p = pod()
        .annotate("sidecar.istio.io/proxyCPULimit", "1")
        .proxy_resources(json!({ "requests": { "cpu": "100m" }, "limits": { "cpu": "1" } }))
        .build();
    restarts(
        &judge(&desired(matching()), None, p),
        "istio-proxy cpu request 100m differs from sidecar.istio.io/proxyCPULimit 1",
    );
    // An explicit request annotation wins over the limit.
    let p = pod()
        .annotate("sidecar.istio.io/proxyCPU", "100m")
        .annotate("sidecar.istio.io/proxyCPULimit", "1")
        .proxy_resources(json!({ "requests": { "cpu": "100m" }, "limits": { "cpu": "1" } }))
        .build();
    stays(&judge(&desired(matching()), None, p));
}

#[test]
fn unparseable_resource_annotation_means_no_restart() {
    let p = pod()
        .annotate("sidecar.istio.io/proxyMemory", "lots")
        .proxy_resources(json!({ "requests": { "cpu": "7" } }))
        .build();
    let d = judge(&desired(matching()), None, p);
    stays(&d);
    assert!(
        d.reason
            .contains("note: resources not compared: annotation sidecar.istio.io/proxyMemory"),
        "{}",
        d.reason
    );
    // The image is still compared.
    let p = pod()
        .annotate("sidecar.istio.io/proxyMemory", "lots")
        .proxy_image(OLD)
        .build();
    restarts(&judge(&desired(matching()), None, p), "istio-proxy image");
}

#[test]
fn numeric_quantities_are_accepted() {
    let want = desired(
        json!({ "resources": { "requests": { "cpu": 0.1 }, "limits": { "memory": 1073741824 } } }),
    );
    assert_eq!(
        want.resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()
            .cpu
            .as_deref(),
        Some("0.1")
    );
    let p = pod()
        .proxy_resources(json!({ "requests": { "cpu": 0.1 }, "limits": { "memory": "1Gi" } }))
        .build();
    stays(&judge(&want, None, p));
}

// --- CNI ---

#[test]
fn cni_enabled_restarts_pods_with_istio_init() {
    let want = desired(json!({ "cni": true }));
    restarts(
        &judge(&want, None, pod().init_container("istio-init", NEW).build()),
        "CNI is enabled but the pod has init container istio-init",
    );
    stays(&judge(
        &want,
        None,
        pod().init_container("istio-validation", NEW).build(),
    ));
}

#[test]
fn cni_disabled_restarts_pods_with_istio_validation() {
    let want = desired(json!({ "cni": false }));
    restarts(
        &judge(
            &want,
            None,
            pod().init_container("istio-validation", NEW).build(),
        ),
        "CNI is disabled but the pod has init container istio-validation",
    );
    stays(&judge(
        &want,
        None,
        pod().init_container("istio-init", NEW).build(),
    ));
}

#[test]
fn cni_unset_restarts_nothing() {
    let want = desired(json!({}));
    stays(&judge(
        &want,
        None,
        pod().init_container("istio-init", NEW).build(),
    ));
    stays(&judge(
        &want,
        None,
        pod().init_container("istio-validation", NEW).build(),
    ));
}

#[test]
fn cni_only_looks_at_init_containers() {
    let mut p = pod().build();
    p["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "name": "istio-init", "image": NEW }));
    stays(&judge(&desired(json!({ "cni": true })), None, p));
}

// --- DNS proxying ---

#[test]
fn dns_proxying_change_restarts_every_pod() {
    let applied = desired(json!({ "dnsProxying": true }));
    let d = judge(
        &desired(json!({ "dnsProxying": false })),
        Some(&applied),
        pod().build(),
    );
    assert_eq!(
        d,
        Decision {
            restart: true,
            reason: "dnsProxying changed from true to false".into()
        }
    );
}

#[test]
fn dns_proxying_unset_differs_from_false() {
    let d = judge(
        &desired(json!({ "dnsProxying": false })),
        Some(&desired(json!({}))),
        pod().build(),
    );
    restarts(&d, "dnsProxying changed from unset to false");
    let d = judge(
        &desired(json!({ "dnsProxying": null })),
        Some(&desired(json!({ "dnsProxying": false }))),
        pod().build(),
    );
    restarts(&d, "dnsProxying changed from false to unset");
    stays(&judge(
        &desired(json!({ "dnsProxying": null })),
        Some(&desired(json!({}))),
        pod().build(),
    ));
    stays(&judge(
        &desired(json!({ "dnsProxying": true })),
        Some(&desired(json!({ "dnsProxying": true }))),
        pod().build(),
    ));
}

#[test]
fn first_run_restarts_nothing_for_dns_or_stats() {
    let want =
        desired(json!({ "dnsProxying": true, "statsMatcher": { "inclusionRegexps": ["a"] } }));
    stays(&judge(&want, None, pod().build()));
}

// --- stats matcher ---

#[test]
fn stats_matcher_change_restarts_every_pod() {
    let applied = desired(json!({ "statsMatcher": { "inclusionRegexps": ["a"] } }));
    let want = desired(json!({ "statsMatcher": { "inclusionRegexps": ["b", "a"] } }));
    let d = judge(&want, Some(&applied), pod().build());
    assert_eq!(
        d.reason,
        r#"statsMatcher.inclusionRegexps changed from ["a"] to ["a", "b"]"#
    );
}

#[test]
fn stats_matcher_nil_equals_empty() {
    let empty = [
        json!({}),
        json!({ "statsMatcher": null }),
        json!({ "statsMatcher": {} }),
        json!({ "statsMatcher": { "inclusionRegexps": [] } }),
    ];
    for a in &empty {
        for b in &empty {
            stays(&judge(
                &desired(a.clone()),
                Some(&desired(b.clone())),
                pod().build(),
            ));
        }
    }
}

#[test]
fn stats_matcher_order_does_not_matter() {
    let applied = desired(json!({ "statsMatcher": { "inclusionRegexps": ["x.*", "a.*", "m"] } }));
    let want = desired(json!({ "statsMatcher": { "inclusionRegexps": ["m", "x.*", "a.*", "m"] } }));
    stays(&judge(&want, Some(&applied), pod().build()));
}

// --- Prometheus merge ---

#[test]
fn prometheus_merge_on_restarts_pods_without_merged_annotations() {
    let want = desired(json!({ "prometheusMerge": true }));
    let merged = pod()
        .annotate("prometheus.io/path", "/stats/prometheus")
        .annotate("prometheus.io/port", "15020");
    stays(&judge(&want, None, merged.build()));
    let d = judge(
        &want,
        None,
        pod()
            .annotate("prometheus.io/path", "/stats/prometheus")
            .build(),
    );
    assert_eq!(
        d.reason,
        r#"prometheusMerge is on but annotation prometheus.io/port is unset, want "15020""#
    );
    let d = judge(
        &want,
        None,
        pod()
            .annotate("prometheus.io/path", "/metrics")
            .annotate("prometheus.io/port", "15020")
            .build(),
    );
    restarts(
        &d,
        r#"annotation prometheus.io/path is "/metrics", want "/stats/prometheus""#,
    );
}

#[test]
fn prometheus_merge_uses_the_status_port() {
    let want = desired(json!({ "prometheusMerge": true, "statusPort": 15090 }));
    let p = pod()
        .annotate("prometheus.io/path", "/stats/prometheus")
        .annotate("prometheus.io/port", "15020");
    restarts(&judge(&want, None, p.build()), r#"want "15090""#);
}

#[test]
fn prometheus_merge_off_restarts_pods_with_either_annotation() {
    let want = desired(json!({ "prometheusMerge": false }));
    stays(&judge(&want, None, pod().build()));
    stays(&judge(
        &want,
        None,
        pod()
            .annotate("prometheus.io/path", "/metrics")
            .annotate("prometheus.io/port", "8080")
            .build(),
    ));
    restarts(
        &judge(
            &want,
            None,
            pod().annotate("prometheus.io/port", "15020").build(),
        ),
        r#"prometheusMerge is off but annotation prometheus.io/port is "15020""#,
    );
    restarts(
        &judge(
            &want,
            None,
            pod()
                .annotate("prometheus.io/path", "/stats/prometheus")
                .build(),
        ),
        "prometheus.io/path",
    );
}

#[test]
fn prometheus_merge_unset_is_not_managed() {
    let want = desired(json!({ "prometheusMerge": null }));
    stays(&judge(&want, None, pod().build()));
    stays(&judge(
        &want,
        None,
        pod().annotate("prometheus.io/port", "15020").build(),
    ));
}

// --- restartAfter ---

#[test]
fn restart_after_boundary_is_inclusive() {
    let want = desired(json!({ "restartAfter": "2026-08-21T10:00:00Z" }));
    restarts(
        &judge(&want, None, pod().created("2026-08-21T10:00:00Z").build()),
        "not after restartAfter",
    );
    restarts(
        &judge(&want, None, pod().created("2026-08-21T09:59:59Z").build()),
        "not after restartAfter",
    );
    stays(&judge(
        &want,
        None,
        pod().created("2026-08-21T10:00:01Z").build(),
    ));
}

#[test]
fn restart_after_compares_instants_not_strings() {
    let want = desired(json!({ "restartAfter": "2026-08-21T12:00:00.000+02:00" }));
    restarts(
        &judge(&want, None, pod().created("2026-08-21T10:00:00Z").build()),
        "restartAfter",
    );
    let want = desired(json!({ "restartAfter": "2026-08-21T09:59:59.999Z" }));
    stays(&judge(
        &want,
        None,
        pod().created("2026-08-21T10:00:00Z").build(),
    ));
}

#[test]
fn restart_after_needs_a_creation_timestamp() {
    let want = desired(json!({ "restartAfter": CREATED }));
    let mut p = pod().build();
    p["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("creationTimestamp");
    let d = judge(&want, None, p);
    stays(&d);
    assert!(
        d.reason
            .contains("note: restartAfter not applied: the pod has no creationTimestamp")
    );
}

#[test]
fn restart_after_reads_rfc3339_with_an_offset() {
    // The same instant as CREATED, written the ways RFC 3339 allows.
    for at in [
        "2026-08-21T12:00:00+02:00",
        "2026-08-21T07:30:00-02:30",
        "2026-08-21T10:00:00.000000000Z",
        "2026-08-21t10:00:00z",
        "2026-08-21 10:00:00+00:00",
    ] {
        let want = desired(json!({ "restartAfter": at }));
        restarts(&judge(&want, None, pod().build()), "not after restartAfter");
        let before = desired(json!({ "restartAfter": "2026-08-21T09:59:59.999999999Z" }));
        stays(&judge(&before, None, pod().created(at).build()));
    }
    for at in [
        "",
        "yesterday",
        "2026-08-21",
        "2026-08-21T10:00:00",
        "2026-13-01T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-08-21T24:00:00Z",
        "2026-08-21T10:60:00Z",
        "2026-0a-21T10:00:00Z",
        "2026-08-21X10:00:00Z",
        "2026-08-21T10:00:00.Z",
        "2026/08/21T10:00:00Z",
        "2026-08-21T10:00:00ZZ",
    ] {
        let e = DesiredProxy::from_json(&json!({ "restartAfter": at }).to_string()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("desired.restartAfter"), "{at:?}");
        assert!(
            e.message
                .starts_with(&format!("{at:?} is not an RFC 3339 timestamp: ")),
            "{e}"
        );
    }
    let want = desired(json!({ "restartAfter": CREATED }));
    let d = judge(&want, None, pod().created("last week").build());
    stays(&d);
    assert!(
        d.reason.contains(
            r#"note: restartAfter not applied: creationTimestamp "last week" is not an RFC 3339 timestamp: "#
        ),
        "{}",
        d.reason
    );
}

// --- parsing the request ---

#[test]
fn desired_shape_round_trips_in_camel_case() {
    let text = json!({
        "image": NEW,
        "resources": { "requests": { "cpu": "100m", "memory": "128Mi" }, "limits": { "cpu": "2", "memory": "1Gi" } },
        "cni": true,
        "dnsProxying": null,
        "statsMatcher": { "inclusionRegexps": ["a"] },
        "prometheusMerge": false,
        "statusPort": 15021,
        "restartAfter": CREATED
    });
    let parsed = desired(text.clone());
    assert_eq!(parsed.dns_proxying, None);
    assert_eq!(parsed.status_port, 15021);
    assert_eq!(serde_json::to_value(&parsed).unwrap(), text);
}

#[test]
fn desired_defaults() {
    let d = DesiredProxy::from_json("{}").unwrap();
    assert_eq!(d, DesiredProxy::default());
    assert_eq!(d.status_port, DEFAULT_STATUS_PORT);
    assert_eq!(
        DesiredProxy::from_json(r#"{"statusPort": null}"#)
            .unwrap()
            .status_port,
        15020
    );
    assert!(
        DesiredProxy::from_json(r#"{"futureField": 1}"#).is_ok(),
        "unknown fields are ignored"
    );
}

#[test]
fn bad_desired_names_the_field() {
    let field = |json: &str| DesiredProxy::from_json(json).unwrap_err().field.unwrap();
    assert_eq!(
        field(r#"{"resources": {"limits": {"cpu": "two"}}}"#),
        "desired.resources.limits.cpu"
    );
    assert_eq!(
        field(r#"{"resources": {"requests": {"memory": true}}}"#),
        "desired"
    );
    assert_eq!(
        field(r#"{"restartAfter": "yesterday"}"#),
        "desired.restartAfter"
    );
    assert_eq!(field(r#"{"statusPort": 0}"#), "desired.statusPort");
    assert_eq!(field(r#"{"statusPort": 70000}"#), "desired");
    assert_eq!(field("[]"), "desired");
    assert_eq!(field("null"), "desired");
    let e = DesiredProxy::from_json(r#"{"resources": {"limits": {"cpu": "two"}}}"#).unwrap_err();
    assert!(
        e.message.contains("\"two\" is not a Kubernetes quantity"),
        "{e}"
    );
}

#[test]
fn applied_null_is_the_first_run() {
    assert_eq!(DesiredProxy::applied_from_json("null").unwrap(), None);
    assert_eq!(DesiredProxy::applied_from_json(" null ").unwrap(), None);
    let applied =
        DesiredProxy::applied_from_json(r#"{"dnsProxying": true, "restartAfter": "garbage"}"#)
            .unwrap()
            .unwrap();
    assert_eq!(applied.dns_proxying, Some(true));
    assert_eq!(
        DesiredProxy::applied_from_json("[1]")
            .unwrap_err()
            .field
            .as_deref(),
        Some("applied")
    );
}

#[test]
fn unchecked_desired_values_become_notes() {
    let want = DesiredProxy {
        restart_after: Some("soon".into()),
        resources: Some(ProxyResources {
            requests: Some(ResourceValues {
                cpu: Some("fast".into()),
                memory: None,
            }),
            limits: None,
        }),
        ..DesiredProxy::default()
    };
    let d = judge(&want, None, pod().build());
    stays(&d);
    assert!(
        d.reason.contains("note: desired cpu request not compared"),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("note: restartAfter not applied"),
        "{}",
        d.reason
    );
}

#[test]
fn evaluate_request_end_to_end() {
    let pods = json!([pod().proxy_image(OLD).build(), pod().build()]).to_string();
    let desired = json!({ "image": NEW }).to_string();
    let got = evaluate_request("{}", &desired, "null", &pods).unwrap();
    assert_eq!(
        got.iter().map(|d| d.restart).collect::<Vec<_>>(),
        [true, false]
    );

    let field = |s: &str, d: &str, a: &str, p: &str| {
        evaluate_request(s, d, a, p).unwrap_err().field.unwrap()
    };
    assert_eq!(field("{}", &desired, "null", "{}"), "pods");
    assert_eq!(field("{}", &desired, "null", "[oops"), "pods");
    assert_eq!(field("{}", "{", "null", &pods), "desired");
    assert_eq!(field("{}", &desired, "7", &pods), "applied");
    assert_eq!(field(r#"{"x": 1}"#, &desired, "null", &pods), "settings.x");
    assert!(
        evaluate_request("{}", &desired, "null", "[]")
            .unwrap()
            .is_empty()
    );
}

// --- settings ---

#[test]
fn settings_accept_an_object_with_known_keys() {
    assert_eq!(validate_settings("{}").unwrap(), Settings::default());
    assert_eq!(
        validate_settings(r#"{"ignoreNamespaces": null}"#).unwrap(),
        Settings::default()
    );
    assert_eq!(
        validate_settings(r#"{"ignoreNamespaces": ["a", "b"]}"#)
            .unwrap()
            .ignore_namespaces,
        ["a", "b"]
    );
}

#[test]
fn settings_reject_unknown_keys_by_name() {
    let e = validate_settings(r#"{"ignoreNamespace": [], "dryRun": true}"#).unwrap_err();
    assert_eq!(
        e.message,
        "unknown settings key(s): dryRun, ignoreNamespace (known: ignoreNamespaces)"
    );
    assert_eq!(e.field.as_deref(), Some("settings.dryRun"));
}

#[test]
fn settings_reject_bad_shapes() {
    let e = |s: &str| validate_settings(s).unwrap_err();
    assert!(e("[]").message.contains("JSON object"));
    assert!(e("{").message.contains("not valid JSON"));
    assert_eq!(
        e(r#"{"ignoreNamespaces": "kube-system"}"#).field.as_deref(),
        Some("settings.ignoreNamespaces")
    );
    assert_eq!(
        e(r#"{"ignoreNamespaces": ["a", 3]}"#).field.as_deref(),
        Some("settings.ignoreNamespaces[1]")
    );
}

#[test]
fn error_display_names_the_field() {
    assert_eq!(Error::at("pods", "bad").to_string(), "pods: bad");
    assert_eq!(
        Error {
            message: "bad".into(),
            field: None
        }
        .to_string(),
        "bad"
    );
}

#[test]
fn pods_are_read_for_what_the_predicates_look_at() {
    let page = json!([
        {"metadata": {"name": "p", "namespace": "ns", "annotations": {"a": "b"},
                      "labels": {"app": "p"}, "ownerReferences": []},
         "spec": {"volumes": [{"name": "v"}],
                  "containers": [{"name": "istio-proxy", "image": OLD, "env": [{"name": "X"}],
                                  "resources": {"requests": {"cpu": "1"}}}],
                  "initContainers": [{"name": "istio-init", "image": OLD}]},
         "status": {"phase": "Running"}},
        "app-1",
        {"metadata": {"name": "q"}, "spec": 5},
        {"metadata": {"name": "r"}, "spec": {"containers": ["x"]}}
    ])
    .to_string();
    let pods = parse_pods(&page).unwrap();
    assert_eq!(pods.len(), 4, "every entry is kept, whatever its shape");
    let p = view::PodView::of(&pods[0]).unwrap();
    assert_eq!(p.namespace, Some("ns"));
    assert_eq!(p.annotation("a"), Some("b"));
    assert_eq!(p.containers.len(), 1);
    assert_eq!(p.containers[0].image, Some(OLD));
    assert_eq!(p.containers[0].resources[0].as_deref(), Some("1"));
    assert_eq!(p.init_containers[0].name, Some("istio-init"));
    assert_eq!(
        view::PodView::of(&pods[1]).unwrap_err(),
        "not a pod: expected a JSON object, got a string"
    );
    assert!(
        view::PodView::of(&pods[2]).unwrap().containers.is_empty(),
        "spec 5 has no containers"
    );
    assert!(
        view::PodView::of(&pods[3]).unwrap().containers.is_empty(),
        "a container that is not an object is skipped"
    );
}

#[test]
fn values_of_another_type_read_as_absent() {
    // Odd types where the predicates look, repeated keys (the last counts), escapes, numbers as
    // quantities.
    let page = r#"[
        {"metadata": {"namespace": "a\u0062", "annotations": {"sidecar.istio.io/proxyCPU": 1,
                      "prometheus.io/path": "/stats/prometheus", "prometheus.io/port": "150\u0032\u0030",
                      "sidecar.istio.io/proxyMemory": "64Mi"}, "creationTimestamp": 5},
         "spec": {"containers": [{"name": "istio-proxy", "image": 7,
                                  "resources": {"requests": {"cpu": 0.5, "memory": [1]}, "limits": "x"}},
                                 {"name": "istio-proxy", "image": "old", "image": "new",
                                  "resources": {"limits": {"cpu": 2, "memory": "1Gi"}}}],
                  "initContainers": {"name": "istio-init"}}},
        {"metadata": {"annotations": [], "namespace": null},
         "spec": {"initContainers": [null, {"name": "istio-init"}, {"name": ["istio-init"]}]}},
        {"metadata": 3, "spec": {}},
        {"metadata": {}, "metadata": null},
        {"metadata": null, "metadata": {"namespace": "x"}},
        [1, {"metadata": {}}], 2.5, true, null
    ]"#;
    let pods = parse_pods(page).unwrap();
    let views: Vec<_> = pods.iter().map(view::PodView::of).collect();

    let p = views[0].as_ref().unwrap();
    assert_eq!(p.namespace, Some("ab"));
    assert_eq!(p.creation_timestamp, None);
    assert_eq!(p.annotation("sidecar.istio.io/proxyCPU"), None);
    assert_eq!(p.annotation("prometheus.io/port"), Some("15020"));
    assert_eq!(p.containers.len(), 2);
    assert_eq!(p.containers[0].image, None);
    assert_eq!(
        p.containers[0].resources,
        [Some("0.5".into()), None, None, None]
    );
    assert_eq!(p.containers[1].image, Some("new"));
    assert_eq!(
        p.containers[1].resources,
        [None, None, Some("2".into()), Some("1Gi".into())]
    );
    assert!(p.init_containers.is_empty(), "initContainers is an object");

    let p = views[1].as_ref().unwrap();
    assert_eq!(
        (p.namespace, p.annotation("prometheus.io/path")),
        (None, None)
    );
    let names: Vec<_> = p.init_containers.iter().map(|c| c.name).collect();
    assert_eq!(names, [Some("istio-init"), None]);

    let no_metadata = Err("not a pod: it has no metadata object".to_owned());
    assert_eq!(views[2], no_metadata);
    assert_eq!(views[3], no_metadata);
    assert_eq!(views[4].as_ref().unwrap().namespace, Some("x"));
    let not_objects: Vec<_> = views[5..].iter().map(|v| v.clone().unwrap_err()).collect();
    assert_eq!(
        not_objects,
        ["an array", "a number", "a boolean", "null"]
            .map(|kind| format!("not a pod: expected a JSON object, got {kind}"))
    );

    let want = json!({"image": "new", "cni": true, "prometheusMerge": true,
                      "restartAfter": "2026-01-01T00:00:00Z"});
    let d = evaluate_request("{}", &want.to_string(), "null", page).unwrap();
    assert_eq!(d.len(), 9);
    restarts(&d[0], "istio-proxy image (none) differs from desired new");
    restarts(
        &d[0],
        "istio-proxy memory request (none) differs from sidecar.istio.io/proxyMemory 64Mi",
    );
    assert!(!d[0].reason.contains("CNI"), "{}", d[0].reason);
    restarts(
        &d[1],
        "CNI is enabled but the pod has init container istio-init",
    );
    restarts(
        &d[4],
        "prometheusMerge is on but annotation prometheus.io/path is unset",
    );
    for i in [2, 3, 5, 6, 7, 8] {
        stays(&d[i]);
        assert!(d[i].reason.starts_with("not a pod: "), "{}", d[i].reason);
    }
}
