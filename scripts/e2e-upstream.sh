#!/usr/bin/env bash
# `make e2e-upstream`: the conformance cases on the local backend against upstream's cloud-controller-manager with
# fakecloud's Go provider (ccm-upstream/), built and cached by build-upstream-ccm.sh — the differential half of
# issue #14: the same cases `make e2e` runs against fakecloud-ccm. Extra arguments go to `cargo nextest run`.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(bash scripts/build-upstream-ccm.sh | tail -n 1)
export FAKECLOUD_E2E_CCM=upstream FAKECLOUD_E2E_UPSTREAM_CCM=$binary
echo "==> the conformance cases against $binary"
# Joined to the caller's -E with `and` (e2e.sh): `-E 'test(/conformance_presets/)'` narrows, never widens.
export FAKECLOUD_E2E_ONLY='test(/^conformance_/)'
exec bash scripts/e2e.sh "$@"
