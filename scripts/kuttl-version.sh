# kuttl, which runs upstream Dynamic Environment's e2e suite against wasmop
# (host/wasmop/tests/e2e_upstream_kuttl.rs), built from the Go module proxy by
# scripts/setup.d/70-kuttl.sh, with the yq the suite's scripts call beside it. Source it; it
# defines KUTTL_VERSION, YQ_VERSION, KUTTL and KUTTL_BIN (put it first on PATH for the suite).
KUTTL_VERSION=v0.22.0
YQ_VERSION=v4.54.3
KUTTL_BIN=${WASMOP_CACHE:-$HOME/.cache/wasmop}/kuttl-$KUTTL_VERSION-yq-$YQ_VERSION/bin
KUTTL=$KUTTL_BIN/kubectl-kuttl
