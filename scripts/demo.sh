#!/usr/bin/env bash
# The main job (README: `make demo`): sets up the machine, starts the local control plane,
# installs the CRDs, RBAC and plugin registry, runs the operator under its own ServiceAccount,
# and prints what it did. The control plane is left running (stop it: make cluster-down).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "setup (idempotent)"
./scripts/setup.sh
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${WASMOP_CACHE:-$HOME/.cache/wasmop}/cargo-target}
step "building wasmop"
cargo build -p wasmop --locked
step "starting the local control plane"
kubeconfig=$(./deploy/dev/cluster.sh up)
eval "$(./deploy/dev/cluster.sh env)"
echo "KUBECONFIG=$kubeconfig"
kubectl get nodes -o wide

step "installing CRDs, the chart (deploy/manifests) and the demo's plugin registry"
if compgen -G "crds/*.yaml" >/dev/null; then kubectl apply --server-side -f crds/; fi
# The chart's ServiceAccounts, RBAC and registry; its Deployments' pods only run on kwok's
# simulated nodes, the operator itself runs below as a local process under the chart's account.
kubectl apply --server-side --force-conflicts -f deploy/manifests/
kubectl apply --server-side --force-conflicts -f examples/plugins-configmap.yaml

step "running the operator as system:serviceaccount:wasmop-system:wasmop"
logs=$(./deploy/dev/cluster.sh logs)
sa_kubeconfig=$(./deploy/dev/sa-kubeconfig.sh wasmop-system wasmop "$logs/wasmop-sa.kubeconfig")
listen=127.0.0.1:18080
KUBECONFIG=$sa_kubeconfig "$CARGO_TARGET_DIR/debug/wasmop" run --namespace wasmop-system --listen "$listen" \
  >"$logs/wasmop.log" 2>&1 &
operator=$!
trap 'kill $operator 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  curl -fsS "http://$listen/readyz" >/dev/null 2>&1 && break
  kill -0 "$operator" 2>/dev/null || { cat "$logs/wasmop.log"; exit 1; }
  sleep 0.1
done
curl -fsS "http://$listen/readyz"; echo
step "plugin registry as the operator loaded it (GET /plugins)"
curl -fsS "http://$listen/plugins" | python3 -m json.tool

# One script per feature, in name order; each works in namespaces of its own and prints what
# it shows. They get the admin KUBECONFIG, the operator's address and the log folder.
export WASMOP_ADDR=$listen WASMOP_LOGS=$logs WASMOP_BIN=$CARGO_TARGET_DIR/debug/wasmop
for script in scripts/demo.d/*.sh; do
  [ -e "$script" ] || continue
  "$script"
done

step "operator log ($logs/wasmop.log)"
tail -n 20 "$logs/wasmop.log"
printf '\nThe control plane keeps running: export KUBECONFIG=%s; stop it with `make cluster-down`.\n' "$kubeconfig"
