#!/usr/bin/env bash
# Deletes what `make kind-up` created: the kind cluster and the emulator container.
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=${KIND_CLUSTER_NAME:-fakecloud}
run_root=${FAKECLOUD_RUN_DIR:-$repo_root/.run}
log() { printf '[kind-down] %s\n' "$*" >&2; }
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
	log "no Docker engine answers here, so there is no kind cluster to delete"
	exit 0
fi
PATH="$repo_root/.run/bin:$PATH"
if command -v kind >/dev/null 2>&1; then
	kind delete cluster --name "$cluster"
fi
docker rm -f fakecloud-emulator >/dev/null 2>&1 || true
rm -f "$run_root/kind.kubeconfig" "$run_root/kind.credentials"
log "deleted kind cluster $cluster and the emulator container"
