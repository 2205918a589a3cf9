# drakit — the two commands: `make run` (demo on this machine) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: install run test test-fast test-floor lint proto proto-check bench bench-scale clean k8s-bin

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP)

## run: embedded API server + drakit run (net, pci discovery on this machine's /sys) + fake kubelet
run: install
	$(VENV)/bin/drakit demo

## test: the whole suite (root-only and podman tests skip with a reason where unavailable).
## With Go installed, the real Kubernetes binaries of the real-server tier (tests/real) are
## built once by scripts/build-k8s.sh (~30 min cold on 2 cores, progress on stderr; cached under
## ~/.cache/drakit); without Go that tier skips and says why.
K8S_COMPONENTS ?= kube-apiserver etcd kubectl kube-scheduler kube-controller-manager \
                  kubelet containerd cni
test: install k8s-bin
	$(PY) -m pytest -q -ra

k8s-bin:
	@if [ -n "$$DRAKIT_K8S_BIN" ]; then :; \
	elif command -v go >/dev/null 2>&1; then scripts/build-k8s.sh $(K8S_COMPONENTS) >/dev/null \
	  || echo "make test: building the Kubernetes binaries failed; the real-server tier will skip"; \
	else echo "make test: go not found; the real-server tier (tests/real) will skip"; fi

## test-floor: the gRPC, node, integration and README tests on protobuf 5.29 + grpcio 1.66
## (own venv .venv-floor, see scripts/test-floor.sh)
test-floor:
	bash scripts/test-floor.sh

lint: install
	$(VENV)/bin/ruff check plugin discovery cdi tests scripts bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy bench

proto: install
	$(PY) scripts/gen_proto.py

proto-check: install
	$(PY) scripts/gen_proto.py --check

bench: install
	$(PY) -m bench.run

## bench-scale: ResourceSlice publishers of 1,000 simulated nodes against a real kube-apiserver
## + etcd (~15 min; bench/README.md "scale"); BENCH_SCALE_ARGS=--quick for a smoke run
bench-scale: install
	$(MAKE) k8s-bin K8S_COMPONENTS="kube-apiserver etcd"
	$(PY) -m bench.scale $(BENCH_SCALE_ARGS)

clean:
	rm -rf $(VENV) .venv-floor .venv-bench .pytest_cache .mypy_cache .ruff_cache
