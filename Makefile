# drakit — the two commands: `make run` (demo on this machine) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: install run test test-fast test-floor lint proto proto-check bench bench-scale clean k8s-bin docs wheel \
        chaos

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*; touch $(STAMP)

install: $(STAMP)

DOCS_STAMP := $(VENV)/.docs-$(shell sha1sum pyproject.toml | cut -c1-12)

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,docs]'
	rm -f $(VENV)/.docs-*; touch $(DOCS_STAMP)

## docs: the documentation site (docs/, mkdocs.yml) into site/; any warning fails the build
docs: $(DOCS_STAMP)
	$(VENV)/bin/mkdocs build --strict

## wheel: drakit's wheel into $(DIST) (dist/drakit-<version>-py3-none-any.whl), built with the
## venv's setuptools and no package index; `pip install 'dist/drakit-<version>-py3-none-any.whl[explain]'`
## installs it elsewhere (docs/index.md "Install")
DIST ?= dist
wheel: install
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w $(DIST) .

## run: embedded API server + drakit run (net, pci discovery on this machine's /sys) + fake kubelet
run: install
	$(VENV)/bin/drakit demo

## test: the whole suite (root-only and podman tests skip with a reason where unavailable).
## With Go installed, the real Kubernetes binaries of the real-server tier (tests/real) are
## built once by scripts/build-k8s.sh (~30 min cold on 2 cores, progress on stderr; cached under
## ~/.cache/drakit); without Go that tier skips and says why.
## The version matrix (tests/versions) runs there for the release it builds (K8S_VERSION, the
## default of scripts/build-k8s.sh); `make test-versions` runs every release of the matrix.
K8S_COMPONENTS ?= kube-apiserver etcd kubectl kube-scheduler kube-controller-manager helm \
                  kubelet containerd cni
K8S_VERSION ?= 1.37.2
DRAKIT_VERSIONS ?= $(K8S_VERSION)
test: install $(DOCS_STAMP) k8s-bin
	DRAKIT_VERSIONS="$(DRAKIT_VERSIONS)" $(PY) -m pytest -q -ra

## test-fast: the suite without the real tiers (tests/real, tests/realnode, tests/versions: real
## Kubernetes binaries, minutes each) and without the podman tests: the quick loop while working
FAST_IGNORE := --ignore=tests/real --ignore=tests/realnode --ignore=tests/versions
test-fast: install $(DOCS_STAMP)
	$(PY) -m pytest -q -ra -m "not podman" $(FAST_IGNORE)

k8s-bin:
	@if [ -n "$$DRAKIT_K8S_BIN" ]; then :; \
	elif command -v go >/dev/null 2>&1; then K8S_VERSION=$(K8S_VERSION) scripts/build-k8s.sh $(K8S_COMPONENTS) >/dev/null \
	  || echo "make test: building the Kubernetes binaries failed; the real-server tier will skip"; \
	else echo "make test: go not found; the real-server tier (tests/real) will skip"; fi

## test-versions: the version matrix (tests/versions: drakit on the real kube-apiserver, etcd and
## kube-scheduler of every release of MATRIX_VERSIONS, and on a real node with the kubelet and
## kube-controller-manager of each release of KUBELET_VERSIONS), each release built into the
## cache first by scripts/build-k8s.sh (cold ~4-7 min per release on 2 cores, ~14 min for 1.37's
## whole node; a cached one is not rebuilt), then docs/compatibility.md written from what the
## run measured (scripts/gen_compatibility.py)
MATRIX_VERSIONS ?= 1.32.13 1.33.13 1.34.4 1.35.4 1.36.3 1.37.2 1.38.0-beta.0
KUBELET_VERSIONS ?= 1.32.13 1.37.2 1.38.0-beta.0
test-versions: install k8s-bin
	rm -rf .matrix
	@for v in $(MATRIX_VERSIONS); do \
	  K8S_VERSION=$$v scripts/build-k8s.sh kube-apiserver etcd kube-scheduler >/dev/null || exit 1; \
	done
	@for v in $(KUBELET_VERSIONS); do \
	  K8S_VERSION=$$v scripts/build-k8s.sh kube-controller-manager kubelet >/dev/null || exit 1; \
	done
	DRAKIT_VERSIONS="$$(echo $(MATRIX_VERSIONS) | tr ' ' ',')" $(PY) -m pytest -q -ra tests/versions
	$(PY) scripts/gen_compatibility.py

## test-floor: the gRPC, node, integration and README tests on protobuf 5.29 + grpcio 1.66
## (own venv .venv-floor, see scripts/test-floor.sh)
test-floor:
	bash scripts/test-floor.sh

lint: install
	$(VENV)/bin/ruff check plugin discovery cdi allocator tests scripts bench examples
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

## chaos: the chaos run on a real node (tests/chaos/driver.py; root): CHAOS_DURATION seconds of
## faults (default 180; the long run is 1800), seed CHAOS_SEED (default: from the clock; printed
## first). A failure prints the seed, the nemesis' schedule and each broken invariant, and keeps
## the component logs in CHAOS_ARTIFACTS; CHAOS_LOG also appends the run's lines to a file.
CHAOS_DURATION ?= 180
CHAOS_SEED ?=
CHAOS_ARTIFACTS ?= /tmp/drakit-chaos-artifacts
CHAOS_LOG ?=
chaos: install k8s-bin
	PYTHONPATH=tests $(PY) -m chaos.driver --duration $(CHAOS_DURATION) \
	  $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) $(if $(CHAOS_LOG),--log $(CHAOS_LOG)) \
	  --artifacts $(CHAOS_ARTIFACTS)

clean:
	rm -rf $(VENV) .venv-floor .venv-bench .pytest_cache .mypy_cache .ruff_cache site dist build
