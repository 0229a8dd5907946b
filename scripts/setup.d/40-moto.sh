#!/usr/bin/env bash
# moto in server mode (PyPI `moto[server]`, pinned), a local DynamoDB-compatible server for the
# DR tests, benchmark and demo: a venv at ${WASMOP_CACHE:-~/.cache/wasmop}/moto-<version>/.
# Tests find `moto_server` through $WASMOP_MOTO_SERVER, else the venv of this version. Silent
# when it is already there.
set -euo pipefail
version=5.2.5
cache=${WASMOP_CACHE:-$HOME/.cache/wasmop}
venv="$cache/moto-$version"
say() { printf 'setup: %s\n' "$*" >&2; }

if [ -x "$venv/bin/moto_server" ]; then
  exit 0
fi
python=$(command -v python3 || true)
[ -n "$python" ] || { say "python3 is missing: it is needed for moto (the DynamoDB test server)"; exit 1; }
say "installing moto[server]==$version from PyPI into $venv"
# A venv records its own path, so it is built in place; `moto_server` appears only at the end of
# a complete install, and a failed one is removed.
rm -rf "$venv"
"$python" -m venv "$venv"
if ! "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$version" >&2; then
  rm -rf "$venv"
  say "pip install moto[server]==$version failed"
  exit 1
fi
"$venv/bin/moto_server" --help >/dev/null
say "moto $version installed in $venv"
