# fakecloud — every target installs what it needs. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
CARGO_FLAGS ?= --locked

.PHONY: help up down check docs kwok aws-ccm aws-clients test-aws-ccm test test-aws test-postgres chaos test-console test-kind e2e e2e-aws e2e-kind e2e-kind-both e2e-kind-lb e2e-kind-upstream e2e-kind-aws e2e-upstream lint fmt bench build deps control-plane upstream-ccm kind-up kind-down farm-kind farm-kind-down

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

deps: ## Install what the build needs (Debian packages, rustup components)
	@bash scripts/install-deps.sh

control-plane: ## Build upstream kube-apiserver, kube-controller-manager and etcd into the cache (once per version)
	@bash scripts/build-control-plane.sh

kwok: ## Build kwok (the fake-node simulator, pinned in controlplane/kwok/go.mod) and its stages into the cache
	@bash scripts/build-go-tool.sh controlplane/kwok

aws-ccm: ## Build cloud-provider-aws's aws-cloud-controller-manager (the release pinned in ccm-aws/go.mod, unmodified) into the cache
	@bash scripts/build-go-tool.sh ccm-aws

test-aws-ccm: deps control-plane kwok aws-ccm aws-clients ## The real cloud-provider-aws on the local stack (`stack up --ccm aws`): Nodes initialized and routed, a classic ELB and an NLB (not in CI: README)
	$(CARGO) build $(CARGO_FLAGS) --bin fakecloud --bin fakecloud-ccm --bin fakecloud-controlplane
	FAKECLOUD_AWS_CCM="$$(bash scripts/build-go-tool.sh ccm-aws 2>/dev/null | tail -n 1)" \
	FAKECLOUD_AWS_CLI="$$(bash scripts/aws-clients.sh 2>/dev/null | tail -n 1)/bin/aws" \
	$(CARGO) test $(CARGO_FLAGS) --workspace --test it stack::up_with_cloud_provider_aws -- --nocapture

aws-clients: ## Install the AWS clients the project drives its AWS face with (boto3, the AWS CLI, moto, pytest; pinned) into a venv in the cache
	@bash scripts/aws-clients.sh

upstream-ccm: ## Build upstream's cloud-controller-manager with fakecloud's Go provider (ccm-upstream/) into the cache
	@bash scripts/build-upstream-ccm.sh

build: deps ## Build every binary (debug)
	$(CARGO) build $(CARGO_FLAGS) --workspace --bins

# `make up PROFILE=release` runs optimized builds: a large fleet (NODES=1000 and up) initializes several times
# faster (the book, docs/book/src/getting-started.md, "A larger fleet").
PROFILE ?= debug
ifneq ($(filter-out debug release,$(PROFILE)),)
$(error PROFILE=$(PROFILE): debug (the default) or release)
endif
# The launcher finds fakecloud and fakecloud-ccm beside itself, and the control plane in the cache `control-plane` fills.
LAUNCHER = $${CARGO_TARGET_DIR:-target}/$(PROFILE)/fakecloud-controlplane

# `make up CCM=aws`: cloud-provider-aws, unmodified, on the emulator's AWS face (issue #50), instead of fakecloud-ccm.
CCM ?= fakecloud
ifneq ($(filter-out fakecloud aws,$(CCM)),)
$(error CCM=$(CCM): fakecloud (the default) or aws)
endif
AWS_STACK_FLAGS = --ccm aws --aws-ccm "$$(bash scripts/build-go-tool.sh ccm-aws 2>/dev/null | tail -n 1)" \
	--aws-cli "$$(bash scripts/aws-clients.sh 2>/dev/null | tail -n 1)/bin/aws" \
	$(if $(AWS_CLOUD_CONFIG),--aws-cloud-config "$(AWS_CLOUD_CONFIG)")

up: deps control-plane kwok $(if $(filter aws,$(CCM)),aws-ccm aws-clients) ## Start a local cluster (control plane, emulator, CCM, simulated nodes; NODES=N for N of them, default 3; PROFILE=release for a large fleet; CCM=aws for cloud-provider-aws, AWS_CLOUD_CONFIG=FILE for your own cloud config of it) and say how to use it
	$(CARGO) build $(CARGO_FLAGS) $(if $(filter release,$(PROFILE)),--release) --bin fakecloud --bin fakecloud-ccm --bin fakecloud-controlplane
	@$(LAUNCHER) stack up $(if $(NODES),--nodes $(NODES)) $(if $(filter aws,$(CCM)),$(AWS_STACK_FLAGS))

down: ## Stop everything `make up` started
	@$(CARGO) build $(CARGO_FLAGS) $(if $(filter release,$(PROFILE)),--release) --quiet --bin fakecloud-controlplane
	@$(LAUNCHER) stack down

# kind/: the kind path's steps (engine, images, cluster up and down), always a debug build (it mostly waits on
# the tools it runs).
KIND_TOOL = $${CARGO_TARGET_DIR:-target}/debug/fakecloud-kind

kind-up: deps control-plane ## A kind cluster (offline-built; a private Docker engine if none answers), the emulator beside it, the CCM in it (FAKECLOUD_KIND_CCM=fakecloud|upstream|aws)
	$(CARGO) build $(CARGO_FLAGS) --quiet --bin fakecloud-kind
	@$(KIND_TOOL) up

kind-down: ## Delete what kind-up created (cluster, emulator container, the private engine); every cluster made from this checkout
	@$(CARGO) build $(CARGO_FLAGS) --quiet --bin fakecloud-kind
	@$(KIND_TOOL) down

check: deps ## The Rust inner loop, in minutes: rustfmt, clippy, unit and integration tests (no Go build, no browser, no e2e cases; control-plane tests skip until make control-plane has run)
	$(CARGO) fmt --all --check
	$(CARGO) clippy $(CARGO_FLAGS) --workspace --all-targets -- -D warnings
	$(CARGO) test $(CARGO_FLAGS) --workspace --exclude fakecloud-e2e
	$(CARGO) test $(CARGO_FLAGS) -p fakecloud-e2e --lib

test: deps control-plane kwok ## Run the whole test suite: the workspace's tests (the emulator's on PostgreSQL too), ccm-upstream's checks, schemathesis against the emulator's OpenAPI document, boto3 and the AWS CLI against its AWS face, the console's browser tests, and the end-to-end cases on the local backend beside them (scripts/test.sh)
	@# make up's binaries: the controlplane crate's test of `stack up|down` runs them (cargo test builds a
	@# package's binaries only for its own tests).
	$(CARGO) build $(CARGO_FLAGS) --bin fakecloud --bin fakecloud-ccm --bin fakecloud-controlplane
	@bash scripts/test.sh

test-aws: ## boto3 (the AWS SDK for Python, pinned, installed once into the cache) against the emulator's AWS face (part of make test)
	@bash scripts/test-aws-face.sh

test-postgres: deps ## The emulator's API tests on PostgreSQL instead of SQLite files, with the test binary of the workspace's build (part of make test)
	@bash scripts/test-postgres.sh

chaos: deps ## The farm's chaos test with five rounds of faults (a replica paused, one killed, PostgreSQL restarted); make test runs one
	FAKECLOUD_CHAOS_ROUNDS=5 $(CARGO) test $(CARGO_FLAGS) -p fakecloud-emulator --test it -- fail_safe::the_farm --nocapture

test-console: deps ## The web console in headless Chromium against a real emulator; screenshots in target/console-screenshots/
	@bash scripts/console-tests.sh

e2e: deps control-plane kwok ## The e2e suite, one case at a time, JUnit XML + summary (FAKECLOUD_E2E_BACKEND=existing: elsewhere)
	@bash scripts/e2e.sh

e2e-upstream: deps control-plane kwok ## The conformance cases on the local backend against upstream's CCM with fakecloud's Go provider
	@bash scripts/e2e-upstream.sh

e2e-aws: deps control-plane kwok aws-ccm aws-clients ## The conformance cases on the local backend against cloud-provider-aws (those stated for it: README)
	@bash scripts/e2e-aws.sh

e2e-kind: deps control-plane kwok ## The conformance suite against the kind cluster of kind-up (made first if missing), no case skipped
	@bash scripts/e2e-kind.sh

e2e-kind-both: deps control-plane kwok ## make e2e-kind against both CCMs at once: kind clusters fakecloud and fakecloud-upstream on one engine
	@bash scripts/e2e-kind-both.sh

e2e-kind-lb: deps control-plane ## Upstream's [sig-network] LoadBalancers e2e specs (e2e.test, built once per version) against the kind cluster of kind-up; report in target/e2e-kind-lb/<cluster>/
	@bash scripts/e2e-kind-lb.sh

e2e-kind-upstream: deps control-plane kwok ## make e2e-kind against upstream's CCM with the Go provider (a kind-up with FAKECLOUD_KIND_CCM=upstream)
	@FAKECLOUD_KIND_CCM=upstream bash scripts/e2e-kind.sh

e2e-kind-aws: deps control-plane kwok aws-clients ## make e2e-kind against cloud-provider-aws (a kind-up with FAKECLOUD_KIND_CCM=aws); the cases stated for it (not in CI: README)
	@FAKECLOUD_KIND_CCM=aws bash scripts/e2e-kind.sh

test-kind: deps control-plane kwok ## The kind path's tests: make e2e-kind-both, upstream's LoadBalancers e2e specs on both clusters, the testcontainers modules (Rust and Go) on that engine, kind-down, the private engine's egress guard (CI runs it beside make test)
	@bash scripts/test-kind.sh

# The book's tools, pinned and built once into the cache by version, as the other heavy builds are.
MDBOOK_VERSION = 0.4.52
MDBOOK_LINKCHECK_VERSION = 0.7.7
TOOLS = $${FAKECLOUD_CACHE:-$$HOME/.cache/fakecloud}/tools

docs: ## The book (docs/book/, mdBook) into target/book/html/, failing on a broken link
	@for tool in mdbook@$(MDBOOK_VERSION) mdbook-linkcheck@$(MDBOOK_LINKCHECK_VERSION); do \
		name=$${tool%@*} version=$${tool#*@}; root=$(TOOLS)/$$name-$$version; \
		test -x $$root/bin/$$name || { echo "[docs] building $$name $$version into $$root (once)"; \
			CARGO_TARGET_DIR=$$root/build $(CARGO) install --locked --quiet $$name --version $$version --root $$root \
			&& rm -rf $$root/build; } || exit 1; \
	done
	PATH=$(TOOLS)/mdbook-linkcheck-$(MDBOOK_LINKCHECK_VERSION)/bin:$$PATH $(TOOLS)/mdbook-$(MDBOOK_VERSION)/bin/mdbook build docs/book
	@# The README is outside the book: its links into the repository checked here.
	@for link in $$(grep -oE '\]\([^)#]+' README.md | cut -c3- | grep -vE '^https?:'); do \
		test -e "$$link" || { echo "README.md links to $$link, which does not exist"; exit 1; }; \
	done

lint: deps docs ## rustfmt check, clippy with warnings as errors, shellcheck, the farm's and the Go CCMs' manifests render, no circle among a crate's modules and none importing up its layers (ARCHITECTURE.md), the book builds with no broken link
	$(CARGO) fmt --all --check
	shellcheck -x scripts/*.sh scripts/kind/*.sh docker/*.sh kind/src/node_image/*.sh
	kubectl kustomize deploy/farm/base >/dev/null && kubectl kustomize deploy/farm/kind >/dev/null
	for overlay in ccm-upstream/deploy ccm-aws/deploy; do kubectl kustomize --load-restrictor=LoadRestrictionsNone $$overlay >/dev/null || exit 1; done
	cd ccm-upstream && test -z "$$(gofmt -l .)" && go vet ./...
	$(CARGO) clippy $(CARGO_FLAGS) --workspace --all-targets -- -D warnings
	for crate in emulator api cli ccm controlplane e2e kind vpc-router; do python3 scripts/import-graph.py $$crate/src --layers ARCHITECTURE.md || exit 1; done
	python3 scripts/import-graph.py testcontainers/src

farm-kind: ## The shared fake cloud (deploy/farm: 3 emulator replicas on PostgreSQL) on make kind-up's cluster, checked replica by replica
	@bash scripts/farm-kind.sh

farm-kind-down: ## Remove what farm-kind put on the kind cluster (the cluster stays)
	@bash scripts/farm-kind.sh down

fmt: ## Format the code
	$(CARGO) fmt --all

bench: deps control-plane kwok ## Benchmarks (release build; also runs moto's server for comparison) — see BENCHMARKS.md
	@bash scripts/bench.sh
