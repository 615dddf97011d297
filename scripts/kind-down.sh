#!/usr/bin/env bash
# `make kind-down`: deletes what `make kind-up` created — the kind cluster, the emulator container and its
# volume, the kind network — and stops the private engine if one runs (a user's own engine is left running).
# Afterwards no process, iptables rule, bridge or sysctl change of ours is left; it says so, or says what is.
set -euo pipefail
kind_script=kind-down
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind/common.sh"
cluster=${KIND_CLUSTER_NAME:-fakecloud}
run_root=${FAKECLOUD_RUN_DIR:-$kind_repo_root/.run}
engine="$kind_repo_root/scripts/kind/engine.sh"

eval "$(bash "$engine" env)"
if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
	PATH="$kind_bin_dir:$PATH"
	if command -v kind >/dev/null 2>&1 && kind get clusters 2>/dev/null | grep -qx "$cluster"; then
		step "deleting kind cluster $cluster" kind delete cluster --name "$cluster"
	fi
	docker rm -f fakecloud-emulator >/dev/null 2>&1 || true
	docker volume rm fakecloud-emulator-data >/dev/null 2>&1 || true
	# kind leaves its network behind; with no cluster left on it, it goes too.
	if [[ -z "$(docker ps -aq --filter network=kind)" ]]; then docker network rm kind >/dev/null 2>&1 || true; fi
else
	log "no container engine answers: there is no cluster or emulator container to delete"
fi
bash "$engine" stop
rm -f "$run_root/kind.kubeconfig" "$run_root/kind.credentials" "$run_root/kind-config.yaml" "$kind_ccm_file"
log "done: kind cluster $cluster, the emulator container and the private engine are gone"
