#!/usr/bin/env bash
# `make e2e-kind`: the conformance suite, unchanged, against the kind cluster of `make kind-up` (which this runs
# first when the cluster is not there): the cluster's real kubelets and controller manager, the emulator in its
# container, fakecloud-ccm as its two-replica Deployment. The suite adds simulated machines of its own and kills
# the CCM's leader pod and the emulator container where a case needs it. Reports as `make e2e`'s, in
# target/nextest/e2e-existing/. Needs a Docker (or Podman) engine; stops at once, saying so, where none answers.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=${KIND_CLUSTER_NAME:-fakecloud}
run_root=${FAKECLOUD_RUN_DIR:-$repo_root/.run}

log() { printf '[e2e-kind] %s\n' "$*" >&2; }
die() { printf '[e2e-kind] error: %s\n' "$*" >&2; exit 1; }

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
	die "the kind backend needs a running Docker engine, and none answers here. Run the same suite on the local backend instead: 'make e2e'."
fi
PATH="$repo_root/.run/bin:$PATH"
if ! command -v kind >/dev/null 2>&1 || ! kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	log "no kind cluster $cluster yet: make kind-up first"
	bash "$repo_root/scripts/kind-up.sh"
fi
for f in kind.kubeconfig kind.credentials; do
	[[ -f "$run_root/$f" ]] || die "$run_root/$f is missing (the cluster was not made by 'make kind-up'?): 'make kind-down && make kind-up'"
done

# shellcheck source=/dev/null
source "$run_root/kind.credentials" # FAKECLOUD_ENDPOINT, FAKECLOUD_ADMIN_TOKEN
export FAKECLOUD_E2E_BACKEND=existing
export FAKECLOUD_E2E_KUBECONFIG=$run_root/kind.kubeconfig
export FAKECLOUD_E2E_EMULATOR=$FAKECLOUD_ENDPOINT
export FAKECLOUD_E2E_EMULATOR_KILL='docker kill --signal=KILL fakecloud-emulator'
export FAKECLOUD_E2E_EMULATOR_START='docker start fakecloud-emulator'
# kind's kube-controller-manager and the Deployment's fakecloud-ccm run with the upstream defaults.
export FAKECLOUD_E2E_NODE_GRACE=${FAKECLOUD_E2E_NODE_GRACE:-50s}
log "running the conformance suite against kind cluster $cluster (emulator $FAKECLOUD_ENDPOINT)"
exec bash "$repo_root/scripts/e2e.sh" "$@"
