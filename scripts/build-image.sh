#!/usr/bin/env bash
# Builds a container image as an OCI image layout tar, without Docker, a registry or the network
# (scripts/oci-image.py packs it); `ctr -n k8s.io images import TAR` loads it into a containerd,
# as deploy/dev/cluster.sh does for its real node.
#
# Usage: scripts/build-image.sh wasmop  --out TAR [--tag TAG] [--binary FILE]
#        scripts/build-image.sh backend --out TAR [--tag TAG]
#   wasmop   what the Dockerfile builds: the static release binary (scripts/build-release.sh
#            builds it unless --binary names one) as /wasmop, entrypoint /wasmop, cmd run, user
#            65532:65532, WASMOP_CACHE_DIR, ports 8080 8012 8013; /etc/passwd and /etc/group
#            name the user nonroot, and the machine's CA bundle is /etc/ssl/certs, as on distroless.
#   backend  the e2e tests' HTTP backend (tests/backend, static Go): answers 200 with its pod's
#            name and $BACKEND_MESSAGE on port 8080, as user 65532.
# The image is named docker.io/library/wasmop:TAG or docker.io/library/wasmop-test-backend:TAG
# (TAG defaults to dev), which pods name as wasmop:TAG and wasmop-test-backend:TAG.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

kind=${1:-}
shift || true
out="" tag=dev binary=""
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    *) kind="" && break ;;
  esac
done
if [ -z "$out" ] || { [ "$kind" != wasmop ] && [ "$kind" != backend ]; }; then
  echo "usage: $0 wasmop|backend --out TAR [--tag TAG] [--binary FILE]" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$work/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$work/group"
base=(--file "$work/passwd:/etc/passwd" --file "$work/group:/etc/group" --dir /tmp:1777
  --user 65532:65532)
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] && base+=(--file "$ca:$ca")

case $kind in
  wasmop)
    if [ -z "$binary" ]; then
      "$root/scripts/build-release.sh" --out "$work/dist"
      binary=$work/dist/wasmop
    fi
    exec_args=(--name "docker.io/library/wasmop:$tag" --file "$binary:/wasmop"
      --entrypoint /wasmop --cmd run
      --env WASMOP_CACHE_DIR=/var/cache/wasmop/components
      --port 8080 --port 8012 --port 8013)
    ;;
  backend)
    (cd "$root/tests/backend" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/backend" .)
    exec_args=(--name "docker.io/library/wasmop-test-backend:$tag" --file "$work/backend:/backend"
      --entrypoint /backend --port 8080)
    ;;
esac
python3 "$root/scripts/oci-image.py" --out "$out" "${base[@]}" "${exec_args[@]}" \
  --label "org.opencontainers.image.version=$tag"
