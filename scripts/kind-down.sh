#!/usr/bin/env bash
# `make kind-down`: deletes what `make kind-up` created — the kind cluster, the emulator container and its
# volume, the kind network — and stops the private engine if one runs and nothing else is left in it (a user's
# own engine is left running).
# Afterwards no process, iptables rule, bridge or sysctl change of ours is left; it says so, or says what is.
set -euo pipefail
kind_script=kind-down
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind/common.sh"
cluster=$kind_cluster
run_root=$kind_run_root
engine="$kind_repo_root/scripts/kind/engine.sh"
# Without a cluster named, every other cluster kind-up made from this checkout goes too (make e2e-kind-both's
# second, make test-kind's four), each with a run directory of its own; the default one goes last, as the private
# engine stops with the last.
if [[ -z "${KIND_CLUSTER_NAME:-}" ]]; then
	for config in "$kind_repo_root"/.run/*/kind-config.yaml; do
		[[ -f "$config" ]] || continue
		KIND_CLUSTER_NAME=$(basename "$(dirname "$config")") bash "${BASH_SOURCE[0]}"
	done
fi

eval "$(bash "$engine" env)"
if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
	PATH="$kind_bin_dir:$PATH"
	if command -v kind >/dev/null 2>&1 && kind get clusters 2>/dev/null | grep -qx "$cluster"; then
		step "deleting kind cluster $cluster" kind delete cluster --name "$cluster"
	fi
	docker rm -f "$kind_emulator" >/dev/null 2>&1 || true
	docker volume rm "$kind_emulator-data" >/dev/null 2>&1 || true
	# kind leaves its network behind; with no cluster left on it, it goes too.
	if [[ -z "$(docker ps -aq --filter "network=$kind_network")" ]]; then
		docker network rm "$kind_network" >/dev/null 2>&1 || true
	fi
else
	log "no container engine answers: there is no cluster or emulator container to delete"
fi
# The private engine may carry another cluster still (make e2e-kind-both): it stops with the last container.
others=$( (DOCKER_HOST="unix://$engine_socket" timeout 10 docker ps -aq 2>/dev/null || true) | wc -l)
if ((others == 0)); then
	bash "$engine" stop
	engine_state="the private engine is stopped"
else
	engine_state="the private engine keeps running for the $others container(s) left in it (another kind cluster?)"
fi
rm -f "$run_root/kind.kubeconfig" "$run_root/kind.credentials" "$run_root/kind-config.yaml" "$kind_ccm_file"
if [[ "$cluster" != fakecloud ]]; then rmdir "$run_root" 2>/dev/null || true; fi
log "done: kind cluster $cluster and its emulator container are gone; $engine_state"
