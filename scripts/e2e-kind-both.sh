#!/usr/bin/env bash
# `make e2e-kind-both`: `make e2e-kind` against both CCMs at once, on two kind clusters sharing one engine:
#
#   cluster             CCM                                   emulator container (host port)      run directory
#   fakecloud           fakecloud-ccm                         fakecloud-emulator (8787)           .run/
#   fakecloud-upstream  upstream's CCM with the Go provider   fakecloud-upstream-emulator (8788)  .run/fakecloud-upstream/
#
# Each cluster has its own kind network, cloud and load balancer addresses, so the two suites cannot see each
# other. A suite spends most of its time waiting on its cluster (grace periods, the CCM's periods), so the two
# overlap in about the time of one on 2 cores. A missing cluster is made by its suite (e2e-kind.sh), the two
# kind-ups side by side after the engine and the images are made once (`fakecloud-kind up --prepare`). Every line of a
# run is prefixed with its cluster's name; reports in target/nextest/kind-fakecloud/ and kind-upstream/. Fails if either run fails; the
# clusters stay up (make kind-down deletes both).
set -euo pipefail
kind_script=e2e-kind-both
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind/common.sh"
repo_root=$kind_repo_root
# The names of each cluster derive from KIND_CLUSTER_NAME alone (kind/src/settings.rs).
unset FAKECLOUD_RUN_DIR KIND_EXPERIMENTAL_DOCKER_NETWORK

# CLUSTER CCM PORT COMMAND...: the command with that cluster's settings, its lines prefixed with the cluster.
on() {
	local cluster=$1 ccm=$2 port=$3
	shift 3
	KIND_CLUSTER_NAME=$cluster FAKECLOUD_KIND_CCM=$ccm FAKECLOUD_PORT=$port "$@" 2>&1 |
		sed -u "s/^/[$cluster] /"
	return "${PIPESTATUS[0]}"
}

if ! kind_cluster_exists fakecloud || ! kind_cluster_exists "$kind_upstream_cluster"; then
	# The engine and the images once (a private engine if none answers), so the kind-ups of the suites below run
	# side by side, each finding everything built.
	on fakecloud fakecloud 8787 "$kind_tool" up --prepare
	kind_env
fi

log "the conformance suite on kind cluster fakecloud (fakecloud-ccm) and on fakecloud-upstream (upstream's CCM), at once"
on fakecloud fakecloud 8787 bash "$repo_root/scripts/e2e-kind.sh" "$@" &
first=$!
on "$kind_upstream_cluster" upstream 8788 bash "$repo_root/scripts/e2e-kind.sh" "$@" &
second=$!
rc_first=0 rc_second=0
wait "$first" || rc_first=$?
wait "$second" || rc_second=$?

for ccm in fakecloud upstream; do
	summary="$repo_root/target/nextest/kind-$ccm/summary.md"
	if [[ -f "$summary" ]]; then
		echo
		echo "== $ccm CCM =="
		cat "$summary"
	fi
done
log "fakecloud-ccm: $( ((rc_first == 0)) && echo passed || echo "FAILED (exit $rc_first)"); upstream's CCM: $( ((rc_second == 0)) && echo passed || echo "FAILED (exit $rc_second)")"
((rc_first == 0 && rc_second == 0))
