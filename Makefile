# A newcomer's two commands: `make demo` (the main job) and `make test` (every test, as CI runs
# it). The other targets run one tier each; CONTRIBUTING.md says what each covers.
.PHONY: demo test setup lint unit e2e bench bench-scale cluster-up cluster-down

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh all

setup:
	./scripts/setup.sh

# fmt, clippy, rustdoc links, cargo deny (licenses, bans, sources).
lint:
	./scripts/test.sh lint

# Tests that need nothing but cargo: `cargo test` in a fresh clone.
unit:
	./scripts/test.sh unit

# Tests that need the local control plane, moto, Prometheus, the OCI registry, helm or the plugin
# toolchains (the `#[ignore]`d ones); starts the control plane if it is not running.
e2e:
	./scripts/test.sh e2e

# Every benchmark, side by side ratios printed at the end of each (docs/performance.md).
bench:
	./scripts/bench.sh

# The scale benchmark side by side with KubeElasti (about two hours; not part of `make bench`).
bench-scale:
	./scripts/bench.sh scale

cluster-up:
	./deploy/dev/cluster.sh up

cluster-down:
	./deploy/dev/cluster.sh down
