#!/usr/bin/env bash
# cargo-nextest, installed once into cargo's bin directory if it is missing (the e2e suite's runner: make e2e,
# make e2e-kind, CI's kind half, which starts this while its clusters are made, before the suites need it).
#
# Two suites started at once (make e2e-kind-both, CI's two clusters) must not both install it: two `cargo
# install`s into one bin directory race, and one fails. The first takes the lock and installs; the others wait for
# it and find it installed. It builds in a directory of its own, so that it never holds the workspace's build
# lock (CARGO_TARGET_DIR) while `make test` needs it.
set -euo pipefail
cargo=${CARGO:-cargo}
"$cargo" nextest --version >/dev/null 2>&1 && exit 0
lock="${CARGO_HOME:-$HOME/.cargo}/fakecloud-nextest-install.lock"
mkdir -p "$(dirname "$lock")"
exec {install_lock}>"$lock"
echo "==> cargo-nextest is missing: installing it once (or waiting for the one installing it already)"
flock "$install_lock"
"$cargo" nextest --version >/dev/null 2>&1 && exit 0
echo "==> installing cargo-nextest (about 2 minutes on 2 idle cores)"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
# Without self-update, which is what pulls in a TLS stack (aws-lc) and most of the build time; and an
# unoptimised build without debug info: a runner's time goes to the cases it starts, not to its own code, and the
# build takes 120 s here instead of 341 s (2 idle cores, BENCHMARKS.md).
CARGO_PROFILE_DEV_DEBUG=0 "$cargo" install --locked --debug --target-dir "$build" cargo-nextest \
	--no-default-features --features default-no-update
