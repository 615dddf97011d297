# fakecloud — every target installs what it needs. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
CARGO_FLAGS ?= --locked

.PHONY: help up down test lint fmt bench build deps

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

deps: ## Install the toolchain pieces the build needs (Debian packages)
	@bash scripts/install-deps.sh

build: deps ## Build every binary (debug)
	$(CARGO) build $(CARGO_FLAGS) --workspace --bins

test: deps ## Run the whole test suite
	$(CARGO) test $(CARGO_FLAGS) --workspace --no-fail-fast

lint: ## rustfmt check and clippy with warnings as errors
	$(CARGO) fmt --all --check
	$(CARGO) clippy $(CARGO_FLAGS) --workspace --all-targets -- -D warnings

fmt: ## Format the code
	$(CARGO) fmt --all
