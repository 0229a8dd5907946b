# Two entry points for a newcomer: `make demo` (the main job) and `make test` (every test).
.PHONY: demo test setup cluster-up cluster-down

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh

setup:
	./scripts/setup.sh

cluster-up:
	./deploy/dev/cluster.sh up

cluster-down:
	./deploy/dev/cluster.sh down
