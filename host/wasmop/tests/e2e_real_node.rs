//! E2E on the real node of the local control plane (`wasmop-node`, deploy/dev/node.sh): pods
//! run in containers there. `helm install` of the chart with the image of
//! `scripts/build-image.sh wasmop`, imported into the node's containerd: the operator (two
//! replicas, one active through the DR lease) and the resolver become Ready under the kubelet's
//! probes, as user 65532 on a read-only root filesystem (read from the running processes);
//! deleting the active replica with `--grace-period=0` hands over to the other within the DR
//! bound; `helm upgrade` with a changed value rolls both Deployments; `helm uninstall` leaves no
//! object of the release but the CRDs.
//!
//! A DynamicEnv whose base Deployment runs on the real node: the in-cluster operator's clone
//! runs there too, with the overridden image and env, and answers with them.
//!
//! Scale from zero with real traffic: a Deployment of the test backend (tests/backend) behind
//! an ElasticService, scaled to zero; a request to the Service's ClusterIP, sent from the real
//! node's network namespace through kube-proxy's rules, is held by the chart's resolver pod,
//! whose demand has the in-cluster operator scale the Deployment up; the new pod answers it.
//!
//! The image tar is `$WASMOP_E2E_IMAGE`, else `<target>/e2e-image/wasmop.tar`, which
//! scripts/test.sh builds before the e2e tier.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use wasmop_tests::{dump_dir, eventually, http_get, install_crds, kubectl_ok, with_temp_ns};

const NODE: &str = "wasmop-node";
const RELEASE: &str = "wasmop-node-e2e";
const IMAGE_TAG: &str = "e2e";
const TIMEOUT: Duration = Duration::from_secs(240);

/// The cluster's state directory (deploy/dev/cluster.sh).
fn cluster_dir() -> PathBuf {
    std::env::var_os("WASMOP_DEV_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/wasmop/dev-cluster")
        })
}

fn cluster_sh() -> Command {
    Command::new(wasmop_tests::repo_root().join("deploy/dev/cluster.sh"))
}

/// Imports the image tar `tar` into the real node's containerd.
fn import_image(tar: &std::path::Path) {
    let out = cluster_sh()
        .arg("import")
        .arg(tar)
        .output()
        .expect("run cluster.sh import");
    assert!(
        out.status.success(),
        "cluster.sh import {}: {}",
        tar.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The wasmop image tar, tagged `IMAGE_TAG` (scripts/build-image.sh wasmop --tag e2e).
fn wasmop_image() -> PathBuf {
    let tar = std::env::var_os("WASMOP_E2E_IMAGE")
        .map(PathBuf::from)
        .unwrap_or_else(|| wasmop_tests::target_dir().join("e2e-image/wasmop.tar"));
    assert!(
        tar.is_file(),
        "{} is missing: build it with `scripts/build-image.sh wasmop --tag {IMAGE_TAG} --out {}` \
         (scripts/test.sh does)",
        tar.display(),
        tar.display()
    );
    tar
}

/// Runs helm (deploy/helm/helm-version.sh) with `args`; panics unless it succeeds.
fn helm(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#". "$0/helm-version.sh" && exec "$HELM" "$@""#)
        .arg(wasmop_tests::repo_root().join("deploy/helm"))
        .args(args)
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A helm release of the chart, uninstalled on drop (also when the test fails: its
/// cluster-scoped objects would outlive the test's namespace).
struct Release {
    name: &'static str,
    ns: String,
}

impl Release {
    /// `helm install` of deploy/helm/wasmop as `name` in `ns` with [`values`] and `args`.
    fn install(name: &'static str, ns: &str, args: &[&str]) -> Self {
        let values = values(ns, name);
        let chart = wasmop_tests::repo_root().join("deploy/helm/wasmop");
        let mut all = vec![
            "install",
            name,
            chart.to_str().unwrap(),
            "-n",
            ns,
            "-f",
            values.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        helm(&all);
        Self {
            name,
            ns: ns.to_owned(),
        }
    }

    /// `helm upgrade` with the install's values and `args`.
    fn upgrade(&self, args: &[&str]) {
        let values = values(&self.ns, self.name);
        let chart = wasmop_tests::repo_root().join("deploy/helm/wasmop");
        let mut all = vec![
            "upgrade",
            self.name,
            chart.to_str().unwrap(),
            "-n",
            &self.ns,
            "-f",
            values.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        helm(&all);
    }

    /// `helm uninstall --wait`.
    fn uninstall(&self) {
        helm(&[
            "uninstall",
            self.name,
            "-n",
            &self.ns,
            "--wait",
            "--timeout",
            "180s",
        ]);
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg("-c")
            .arg(r#". "$0/helm-version.sh" && exec "$HELM" uninstall "$1" -n "$2" --ignore-not-found"#)
            .arg(wasmop_tests::repo_root().join("deploy/helm"))
            .arg(self.name)
            .arg(&self.ns)
            .output();
    }
}

/// Values that put the release's pods on the real node and keep it to the test's namespace:
/// the operator watches only there, and the cluster-wide admission policies and aggregated
/// user roles, which would judge other tests' objects, are left out, as are the CRDs, which
/// other tests share (`install_crds` applies them).
fn values(ns: &str, release: &str) -> PathBuf {
    let placement = format!(
        "nodeSelector: {{kubernetes.io/hostname: {NODE}}}\n  \
         tolerations: [{{key: wasmop.dev/real-node, operator: Exists, effect: NoSchedule}}]"
    );
    let text = format!(
        "image: {{repository: wasmop, tag: {IMAGE_TAG}, pullPolicy: Never}}\n\
         operator:\n  watchNamespace: {ns}\n  {placement}\n\
         resolver:\n  {placement}\n\
         crds: {{install: false}}\n\
         admissionPolicy: {{enabled: false}}\n\
         rbac: {{aggregateToDefaultRoles: false}}\n"
    );
    let file = dump_dir().join(format!("{ns}-{release}-values.yaml"));
    std::fs::write(&file, text).unwrap();
    file
}

/// The backend image tar (scripts/build-image.sh backend --tag TAG), built into the dump folder.
fn backend_image(ns: &str, tag: &str) -> PathBuf {
    let tar = dump_dir().join(format!("{ns}-backend-{tag}.tar"));
    let out = Command::new(wasmop_tests::repo_root().join("scripts/build-image.sh"))
        .args(["backend", "--tag", tag, "--out"])
        .arg(&tar)
        .output()
        .expect("run scripts/build-image.sh");
    assert!(
        out.status.success(),
        "scripts/build-image.sh backend: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    tar
}

/// `curl ARGS` run in the real node's network namespace, where kube-proxy's rules turn Service
/// addresses into pod addresses: (exit success, stdout).
fn curl_in_node(args: &[&str]) -> (bool, String) {
    let offset = std::env::var("WASMOP_DEV_PORT_OFFSET").unwrap_or_else(|_| "0".into());
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/wasmop-node-{offset}"))
        .args(["curl", "-sS"])
        .args(args)
        .output()
        .expect("run nsenter curl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The pid of the main process of container `id` (a `containerd://` id) on the real node.
fn container_pid(id: &str) -> u32 {
    let id = id.trim_start_matches("containerd://");
    let socket = cluster_dir().join("node/containerd/containerd.sock");
    let out = Command::new("ctr")
        .arg("--address")
        .arg(&socket)
        .args(["-n", "k8s.io", "tasks", "ls"])
        .output()
        .expect("run ctr");
    let list = String::from_utf8_lossy(&out.stdout);
    list.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(id)).then(|| f.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no task {id} in the node's containerd:\n{list}"))
}

/// The pods of the release's Deployment `name`, all Running and Ready on the real node, once
/// there are `want` of them and no other.
async fn ready_pods(pods: &Api<Pod>, selector: &str, want: usize) -> Vec<Pod> {
    eventually(
        &format!("{want} Ready pods of {selector} and no other"),
        TIMEOUT,
        async || {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .ok()?;
            let ready: Vec<Pod> = list
                .items
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().is_some_and(|s| {
                            s.conditions
                                .iter()
                                .flatten()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .cloned()
                .collect();
            (ready.len() == want && list.items.len() == want).then_some(ready)
        },
    )
    .await
}

/// Checks what the kubelet and runc made of the chart's security context: every container of
/// `pod` runs on the real node as user and group 65532, on a read-only root filesystem.
fn assert_runs_locked_down(pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap();
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(NODE),
        "{name} is not on the real node"
    );
    for status in pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .iter()
        .flatten()
    {
        let pid = container_pid(status.container_id.as_deref().expect("a started container"));
        let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        for key in ["Uid:", "Gid:"] {
            let line = proc_status.lines().find(|l| l.starts_with(key)).unwrap();
            assert!(
                line.split_whitespace().skip(1).all(|id| id == "65532"),
                "{name}/{}: {line}",
                status.name
            );
        }
        let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
        let root = mounts
            .lines()
            .find(|l| l.split_whitespace().nth(4) == Some("/"))
            .expect("a root mount");
        let options = root.split_whitespace().nth(5).unwrap();
        assert!(
            options.split(',').any(|o| o == "ro"),
            "{name}/{}: root filesystem mounted {options}",
            status.name
        );
        assert_eq!(status.restart_count, 0, "{name}/{} restarted", status.name);
    }
}

/// The operator pod among `pods` that answers `checkifreadonly` with 200 (active), once exactly
/// one does and the others answer 502 (passive).
async fn active_of(pods: &[String], ips: &[String]) -> String {
    eventually("exactly one active operator replica", TIMEOUT, async || {
        let mut active = None;
        for (pod, ip) in pods.iter().zip(ips) {
            match http_get(&format!("{ip}:8080"), "/health/ready?checkifreadonly=true")?.0 {
                200 if active.is_none() => active = Some(pod.clone()),
                502 => {}
                _ => return None,
            }
        }
        active
    })
    .await
}

fn names_and_ips(pods: &[Pod]) -> (Vec<String>, Vec<String>) {
    pods.iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                p.status
                    .as_ref()
                    .and_then(|s| s.pod_ip.clone())
                    .expect("a pod IP"),
            )
        })
        .unzip()
}

#[tokio::test]
#[ignore = "needs the local control plane's real node and the image tar: run with make test"]
async fn the_chart_installs_runs_fails_over_upgrades_and_uninstalls_on_the_real_node() {
    let image = wasmop_image();
    with_temp_ns("real-node-chart", |client, ns| async move {
        import_image(&image);
        install_crds();
        let started = Instant::now();
        let release = Release::install(RELEASE, &ns, &[]);

        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let operator_sel = format!("app.kubernetes.io/name=wasmop,app.kubernetes.io/instance={RELEASE}");
        let resolver_sel =
            format!("app.kubernetes.io/name=wasmop-resolver,app.kubernetes.io/instance={RELEASE}");
        let operators = ready_pods(&pods, &operator_sel, 2).await;
        let resolvers = ready_pods(&pods, &resolver_sel, 2).await;
        eprintln!("operator and resolver pods Ready {:?} after helm install", started.elapsed());
        for pod in operators.iter().chain(&resolvers) {
            assert_runs_locked_down(pod);
        }

        // Active/passive through the DR lease, which names the active pod.
        let (names, ips) = names_and_ips(&operators);
        let active = active_of(&names, &ips).await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let holder = eventually("the Lease naming the active replica", TIMEOUT, async || {
            let lease = leases.get_opt("wasmop").await.ok()??;
            lease.spec?.holder_identity
        })
        .await;
        assert_eq!(holder, active);

        // The active replica deleted at once: another takes over within the DR bound,
        // (failureThreshold + 1) × waitTimeInSeconds = 20 s with the chart's defaults, counted
        // from the deleted replica's last renewal of the Lease (the kubelet stops its container
        // some time after the delete, later on a busy machine; until then it stays active).
        // Either the surviving replica or the ReplicaSet's replacement may win the Lease: both
        // see it expire, and the first to write it holds it.
        let deleted = Instant::now();
        kubectl_ok(&["delete", "pod", &active, "-n", &ns, "--grace-period=0", "--force", "--wait=false"]);
        let mut last_renewal = None;
        let successor = eventually("another replica to hold the Lease and be active", TIMEOUT, async || {
            let spec = leases.get_opt("wasmop").await.ok()??.spec?;
            let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
            if holder == active {
                last_renewal = spec.renew_time.map(|t| t.0);
                return None;
            }
            let ip = pods.get_opt(&holder).await.ok()??.status?.pod_ip?;
            let (status, _) = http_get(&format!("{ip}:8080"), "/health/ready?checkifreadonly=true")?;
            (status == 200).then_some(holder)
        })
        .await;
        assert_ne!(successor, active);
        let lease = leases.get("wasmop").await.unwrap().spec.unwrap();
        let last_renewal = last_renewal.expect("a renewal of the deleted replica was seen");
        let acquired = lease.acquire_time.expect("the new holder's acquireTime").0;
        let handover = Duration::try_from(acquired.duration_since(last_renewal)).unwrap();
        eprintln!(
            "handover to {successor}: {handover:?} after the deleted replica's last renewal, \
             {:?} after the delete",
            deleted.elapsed()
        );
        assert!(handover <= Duration::from_secs(22), "handover took {handover:?}");
        // Once the replacement is Ready, exactly one of the two replicas is active: the holder.
        let operators = ready_pods(&pods, &operator_sel, 2).await;
        let (names, ips) = names_and_ips(&operators);
        assert_eq!(active_of(&names, &ips).await, successor);

        // A changed value rolls both Deployments: every pod is replaced and Ready again.
        let before: Vec<String> = operators
            .iter()
            .chain(&resolvers)
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        release.upgrade(&[
            "--set",
            "operator.logLevel=debug",
            "--set",
            "resolver.logLevel=debug",
        ]);
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        for name in [RELEASE.to_owned(), format!("{RELEASE}-resolver")] {
            eventually(&format!("{name} rolled out"), TIMEOUT, async || {
                let d = deployments.get(&name).await.ok()?;
                let status = d.status?;
                (status.observed_generation == d.metadata.generation
                    && status.updated_replicas == Some(2)
                    && status.ready_replicas == Some(2)
                    && status.replicas == Some(2))
                .then_some(())
            })
            .await;
        }
        let operators = ready_pods(&pods, &operator_sel, 2).await;
        let resolvers = ready_pods(&pods, &resolver_sel, 2).await;
        for pod in operators.iter().chain(&resolvers) {
            assert!(!before.contains(pod.metadata.name.as_ref().unwrap()));
            let env = &pod.spec.as_ref().unwrap().containers[0].env;
            assert!(
                env.iter().flatten().any(|e| e.value.as_deref() == Some("debug")),
                "{:?} kept the old log level",
                pod.metadata.name
            );
            assert_runs_locked_down(pod);
        }

        // Uninstall: nothing the chart made is left, in any namespace (its Role for Events in
        // `default` too) or cluster-wide, the DR Lease included (the release makes it, the
        // replicas only write it), and the pods are gone; the CRDs stay (helm keeps them).
        release.uninstall();
        let uninstalled = Instant::now();
        eventually("the release's pods to be gone", TIMEOUT, async || {
            let left = pods.list(&ListParams::default()).await.ok()?;
            left.items.is_empty().then_some(())
        })
        .await;
        eprintln!("pods gone {:?} after helm uninstall", uninstalled.elapsed());
        let selector = format!("app.kubernetes.io/instance={RELEASE}");
        let labelled = kubectl_ok(&[
            "get",
            "all,configmaps,serviceaccounts,roles,rolebindings,poddisruptionbudgets,leases",
            "--all-namespaces", "-l", &selector, "-o", "name",
        ]);
        let cluster_wide = kubectl_ok(&[
            "get",
            "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings",
            "-l", &selector, "-o", "name",
        ]);
        let named = kubectl_ok(&["get", "all,configmaps,serviceaccounts,leases", "-n", &ns, "-o", "name"]);
        let named: Vec<&str> = named.lines().filter(|l| l.contains("wasmop")).collect();
        assert_eq!(
            format!("{labelled}{cluster_wide}{}", named.join("\n")).trim(),
            "",
            "left behind by helm uninstall"
        );
        kubectl_ok(&["get", "crd", "dynamicenvs.wasmop.dev", "elasticservices.wasmop.dev"]);
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane's real node and the image tar: run with make test"]
async fn a_request_at_zero_through_the_cluster_ip_is_held_by_the_resolver_pod_and_answered() {
    const SCALE_RELEASE: &str = "wasmop-node-scale";
    let image = wasmop_image();
    with_temp_ns("real-node-scale", |client, ns| async move {
        import_image(&image);
        import_image(&backend_image(&ns, IMAGE_TAG));
        install_crds();
        let release = Release::install(
            SCALE_RELEASE,
            &ns,
            &["--set", "operator.replicas=1", "--set", "resolver.replicas=1"],
        );

        // The backend: a Deployment on the real node behind Service `web`, and its
        // ElasticService (no triggers: woken on demand only).
        let manifest = format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {NODE}}}
      tolerations: [{{key: wasmop.dev/real-node, operator: Exists, effect: NoSchedule}}]
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: wasmop-test-backend:{IMAGE_TAG}
        imagePullPolicy: Never
        env:
        - {{name: BACKEND_MESSAGE, value: cold-start}}
        - name: POD_NAME
          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
        ports: [{{name: http, containerPort: 8080}}]
        readinessProbe: {{httpGet: {{path: /, port: http}}, periodSeconds: 1}}
        securityContext: {{runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: http}}]
---
apiVersion: wasmop.dev/v1alpha1
kind: ElasticService
metadata: {{name: web, namespace: {ns}}}
spec:
  service: web
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}
  minTargetReplicas: 1
  probeResponse:
  - match: {{path: {{type: Exact, value: /probe}}, method: GET}}
    response: {{status: 200, body: resolver}}
"#
        );
        let file = dump_dir().join(format!("{ns}-web.yaml"));
        std::fs::write(&file, manifest).unwrap();
        kubectl_ok(&["apply", "-f", &file.to_string_lossy()]);

        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let resolver_sel = format!(
            "app.kubernetes.io/name=wasmop-resolver,app.kubernetes.io/instance={SCALE_RELEASE}"
        );
        ready_pods(&pods, &resolver_sel, 1).await;
        let operator_sel =
            format!("app.kubernetes.io/name=wasmop,app.kubernetes.io/instance={SCALE_RELEASE}");
        ready_pods(&pods, &operator_sel, 1).await;
        let warm = ready_pods(&pods, "app=web", 1).await;
        let warm = warm[0].metadata.name.clone().unwrap();

        let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns);
        let ip = services
            .get("web")
            .await
            .unwrap()
            .spec
            .and_then(|s| s.cluster_ip)
            .expect("a ClusterIP");
        let host = format!("Host: web.{ns}");
        let url = format!("http://{ip}/");

        // Warm: the backend answers through kube-proxy's rules.
        let answer = eventually("the backend to answer through the ClusterIP", TIMEOUT, async || {
            let (ok, body) = curl_in_node(&["--max-time", "5", "-H", &host, &url]);
            (ok && body.starts_with(&warm)).then_some(body)
        })
        .await;
        assert_eq!(answer.trim(), format!("{warm} cold-start"));

        // Zero: the Service's traffic goes to the resolver pod (its probe answer shows it).
        kubectl_ok(&["scale", "deployment", "web", "-n", &ns, "--replicas=0"]);
        eventually("no web pod left", TIMEOUT, async || {
            let list = pods.list(&ListParams::default().labels("app=web")).await.ok()?;
            list.items.is_empty().then_some(())
        })
        .await;
        let probe = format!("http://{ip}/probe");
        eventually("the resolver pod to answer the Service's traffic", TIMEOUT, async || {
            let (ok, body) = curl_in_node(&["--max-time", "5", "-H", &host, &probe]);
            (ok && body == "resolver").then_some(())
        })
        .await;

        // One request at zero: held, the Deployment scaled up by the operator, answered by
        // the new pod.
        let sent = Instant::now();
        let (ok, body) = curl_in_node(&["--max-time", "60", "-w", " %{http_code}", "-H", &host, &url]);
        let cold_start = sent.elapsed();
        eprintln!("cold start through the ClusterIP: {cold_start:?}");
        assert!(ok, "the held request failed: {body}");
        let (reply, code) = body.rsplit_once(' ').unwrap();
        assert_eq!(code, "200", "{body}");
        let (pod, message) = reply.trim().split_once(' ').expect("pod and message");
        assert_eq!(message, "cold-start");
        assert_ne!(pod, warm, "answered by the pod that was scaled away");
        let new = ready_pods(&pods, "app=web", 1).await;
        assert_eq!(new[0].metadata.name.as_deref(), Some(pod));
        assert_eq!(new[0].spec.as_ref().unwrap().node_name.as_deref(), Some(NODE));

        kubectl_ok(&["delete", "elasticservice", "web", "-n", &ns, "--wait=true"]);
        release.uninstall();
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane's real node and the image tar: run with make test"]
async fn a_dynamicenv_clone_runs_its_overrides_on_the_real_node() {
    const ROUTE_RELEASE: &str = "wasmop-node-route";
    const CLONE_TAG: &str = "e2e-clone";
    let image = wasmop_image();
    with_temp_ns("real-node-route", |client, ns| async move {
        import_image(&image);
        import_image(&backend_image(&ns, IMAGE_TAG));
        import_image(&backend_image(&ns, CLONE_TAG));
        install_crds();
        let release = Release::install(
            ROUTE_RELEASE,
            &ns,
            &[
                "--set",
                "operator.replicas=1",
                "--set",
                "resolver.enabled=false",
            ],
        );

        let manifest = format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}, labels: {{app: web}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web, version: shared}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {NODE}}}
      tolerations: [{{key: wasmop.dev/real-node, operator: Exists, effect: NoSchedule}}]
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: wasmop-test-backend:{IMAGE_TAG}
        imagePullPolicy: Never
        env:
        - {{name: BACKEND_MESSAGE, value: base}}
        - name: POD_NAME
          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
        ports: [{{name: http, containerPort: 8080}}]
        readinessProbe: {{httpGet: {{path: /, port: http}}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {ns}}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: http}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: web, namespace: {ns}}}
spec:
  host: web
  subsets: [{{name: shared, labels: {{version: shared}}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: {ns}}}
spec:
  hosts: [web]
  http: [{{name: default, route: [{{destination: {{host: web, subset: shared}}}}]}}]
---
apiVersion: wasmop.dev/v1alpha1
kind: DynamicEnv
metadata: {{name: jason, namespace: {ns}}}
spec:
  istioMatches: [{{headers: {{end-user: {{exact: jason}}}}}}]
  subsets:
  - name: web
    namespace: {ns}
    containers:
    - containerName: web
      image: wasmop-test-backend:{CLONE_TAG}
      env: [{{name: BACKEND_MESSAGE, value: clone}}]
"#
        );
        let file = dump_dir().join(format!("{ns}-dynamicenv.yaml"));
        std::fs::write(&file, manifest).unwrap();
        kubectl_ok(&["apply", "-f", &file.to_string_lossy()]);

        let des: Api<wasmop_api::dynamicenv::DynamicEnv> = Api::namespaced(client.clone(), &ns);
        eventually("DynamicEnv jason ready", TIMEOUT, async || {
            let de = des.get("jason").await.ok()?;
            let state = serde_json::to_value(de.status?).ok()?["state"]
                .as_str()?
                .to_owned();
            (state == "ready").then_some(())
        })
        .await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let clones = deployments
            .list(&ListParams::default().labels("dynamic-env=true"))
            .await
            .unwrap()
            .items;
        assert_eq!(clones.len(), 1, "one clone");
        let selector = clones[0]
            .spec
            .as_ref()
            .unwrap()
            .selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let clone = ready_pods(&pods, &selector, 1).await.remove(0);
        let name = clone.metadata.name.clone().unwrap();
        assert_eq!(
            clone.spec.as_ref().unwrap().node_name.as_deref(),
            Some(NODE)
        );
        let status = &clone
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0];
        assert_eq!(
            status.image,
            format!("docker.io/library/wasmop-test-backend:{CLONE_TAG}")
        );
        // The clone's process answers with the overridden env, from its pod address.
        let ip = clone
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap();
        let (code, body) = eventually("the clone to answer", TIMEOUT, async || {
            http_get(&format!("{ip}:8080"), "/")
        })
        .await;
        assert_eq!((code, body.trim()), (200, format!("{name} clone").as_str()));

        kubectl_ok(&["delete", "dynamicenv", "jason", "-n", &ns, "--wait=true"]);
        release.uninstall();
    })
    .await;
}
