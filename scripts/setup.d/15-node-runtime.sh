#!/usr/bin/env bash
# The container runtime of the local control plane's real node (deploy/dev/cluster.sh): Debian's
# containerd (with ctr), runc, the CNI plugins (bridge, host-local, loopback) and socat (relays
# the API server to the node). Installed with apt-get and never started as a service: cluster.sh
# runs a containerd of its own. Silent when they are there.
set -euo pipefail
packages=(containerd runc containernetworking-plugins socat)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup (node runtime): apt-get install ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
policy=/usr/sbin/policy-rc.d
cleanup() { rm -f "$log"; [ -z "${own_policy:-}" ] || rm -f "$policy"; }
trap cleanup EXIT
# A policy-rc.d that refuses every start keeps the package from starting its containerd.
if [ ! -e "$policy" ]; then
  own_policy=1
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
fi
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup (node runtime): apt-get install failed" >&2
  exit 1
fi
