#!/usr/bin/env bash
# Usage: sa-kubeconfig.sh NAMESPACE SERVICEACCOUNT OUTFILE
# Writes a kubeconfig for the local control plane that authenticates as the ServiceAccount
# (a bound token from the TokenRequest API), so a process run with it has exactly that RBAC.
set -euo pipefail
ns=$1 sa=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
eval "$("$here/cluster.sh" env)"
server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
if [ -z "$ca" ]; then
  ca_file=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')
  ca=$(base64 -w0 <"$ca_file")
fi
token=$(kubectl create token "$sa" -n "$ns" --duration=24h)
umask 077
# Written aside and renamed: a process may be reading the previous file at this path.
tmp="$out.tmp.$$"
cat >"$tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority-data: "$ca"}
users:
- name: $ns-$sa
  user: {token: "$token"}
contexts:
- name: $ns-$sa
  context: {cluster: local, user: $ns-$sa, namespace: $ns}
current-context: $ns-$sa
KC
mv -f "$tmp" "$out"
echo "$out"
