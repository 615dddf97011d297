# fakecloud — every target installs what it needs. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
CARGO_FLAGS ?= --locked

.PHONY: help up down test e2e e2e-kind lint fmt bench build deps control-plane kind-up kind-down

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

deps: ## Install what the build needs (Debian packages, rustup components)
	@bash scripts/install-deps.sh

control-plane: ## Build upstream kube-apiserver, kube-controller-manager and etcd into the cache (once per version)
	@bash scripts/build-control-plane.sh

build: deps ## Build every binary (debug)
	$(CARGO) build $(CARGO_FLAGS) --workspace --bins

up: deps control-plane ## Start a local cluster (control plane, emulator, simulated nodes) and say how to use it
	@bash scripts/up.sh

down: ## Stop everything `make up` started
	@bash scripts/down.sh

kind-up: deps ## The kind path: a kind cluster, the emulator beside it, nodes adopted, the CCM deployed (needs Docker)
	@bash scripts/kind-up.sh

kind-down: ## Delete what kind-up created
	@bash scripts/kind-down.sh

test: deps control-plane ## Run the whole test suite
	$(CARGO) test $(CARGO_FLAGS) --workspace --no-fail-fast

e2e: deps control-plane ## The e2e suite, one case at a time, JUnit XML + summary (FAKECLOUD_E2E_BACKEND=k3s|existing: elsewhere)
	@bash scripts/e2e.sh

e2e-kind: deps ## The conformance suite against the kind cluster of kind-up (made first if missing; needs a Docker engine)
	@bash scripts/e2e-kind.sh

lint: deps ## rustfmt check, clippy with warnings as errors (also the e2e suite's opt-in k3s backend), shellcheck
	$(CARGO) fmt --all --check
	shellcheck -x scripts/*.sh scripts/faults/*.sh
	$(CARGO) clippy $(CARGO_FLAGS) --workspace --all-targets -- -D warnings
	$(CARGO) clippy $(CARGO_FLAGS) -p fakecloud-e2e --all-targets --features k3s -- -D warnings

fmt: ## Format the code
	$(CARGO) fmt --all

bench: deps ## Benchmarks (release build; also runs moto's server for comparison) — see BENCHMARKS.md
	@bash scripts/bench.sh
