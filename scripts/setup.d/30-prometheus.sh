#!/usr/bin/env bash
# Prometheus for the scaling tests and demo: the Debian package's binary, unpacked (not
# installed, so no service is started) into ${WASMOP_CACHE:-~/.cache/wasmop}/prometheus-<version>/.
# Tests find it through $WASMOP_PROMETHEUS, else `prometheus` on PATH, else the newest unpacked
# copy in the cache. Silent when it is already there.
set -euo pipefail
cache=${WASMOP_CACHE:-$HOME/.cache/wasmop}
say() { printf 'setup: %s\n' "$*" >&2; }

if compgen -G "$cache/prometheus-*/usr/bin/prometheus" >/dev/null; then
  exit 0
fi
if command -v prometheus >/dev/null; then
  exit 0
fi
say "fetching the Debian package prometheus"
if ! apt-cache show prometheus >/dev/null 2>&1; then
  apt-get update -qq >&2
fi
version=$(apt-cache policy prometheus | awk '/Candidate:/ { print $2 }')
[ -n "$version" ] && [ "$version" != "(none)" ] || { say "no Debian package prometheus"; exit 1; }
work=$(mktemp -d)
chmod 755 "$work" # apt-get download drops privileges to _apt
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -qq "prometheus=$version" >&2)
dest="$cache/prometheus-${version//[^A-Za-z0-9.+-]/_}"
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
dpkg-deb -x "$work"/prometheus_*.deb "$dest.tmp"
"$dest.tmp/usr/bin/prometheus" --version >/dev/null
mv "$dest.tmp" "$dest"
say "prometheus $version unpacked in $dest"
