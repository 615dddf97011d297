#!/usr/bin/env bash
# `make e2e-aws`: the conformance cases on the local backend against cloud-provider-aws (issue #50), unmodified,
# on the emulator's AWS face: each case's cluster has its network tagged with the pinned AWS CLI and its Nodes
# named as kubelets on EC2 name them. Cases that do not yet state what cloud-provider-aws does where it differs
# are skipped, saying so (the README's table lists which run). Extra arguments go to `cargo nextest run`.
set -euo pipefail
cd "$(dirname "$0")/.."
ccm=$(bash scripts/build-go-tool.sh ccm-aws | tail -n 1)
venv=$(bash scripts/aws-clients.sh | tail -n 1)
export FAKECLOUD_E2E_CCM=aws FAKECLOUD_AWS_CCM=$ccm FAKECLOUD_AWS_CLI=$venv/bin/aws
echo "==> the conformance cases against $ccm"
# Joined to the caller's -E with `and` (e2e.sh): `-E 'test(/conformance_routes/)'` narrows, never widens.
export FAKECLOUD_E2E_ONLY='test(/^conformance_/)'
exec bash scripts/e2e.sh "$@"
