#!/usr/bin/env bash
# `make e2e-kind`: the conformance suite, unchanged, against the kind cluster of `make kind-up` (which this runs
# first when the cluster is not there): the cluster's real kubelets and controller manager, the emulator in its
# container, the CCM as its two-replica Deployment (fakecloud-ccm, upstream's with FAKECLOUD_KIND_CCM=upstream, or
# cloud-provider-aws with FAKECLOUD_KIND_CCM=aws: the one kind-up deployed), the VPC router as the pod network. The
# suite adds simulated machines of its own and kills the CCM's leader pod and the emulator container where a case
# needs it. Every case must run: a skipped case fails this target, but for the cases that do not yet state what
# cloud-provider-aws does, skipped against it saying so (issue #50; the README's table lists which run), and those
# about cloud-provider-aws alone, skipped against the other CCMs (`Setup::only_for_aws`). Reports as
# `make e2e`'s, in target/nextest/kind-<ccm>/.
set -euo pipefail
kind_script=e2e-kind
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind/common.sh"
repo_root=$kind_repo_root
cluster=$kind_cluster
run_root=$kind_run_root

PATH="$kind_bin_dir:$PATH"
kind_cluster_ensure
for f in kind.kubeconfig kind.credentials kind.ccm; do
	[[ -f "$run_root/$f" ]] || die "$run_root/$f is missing (the cluster was not made by 'make kind-up'?): 'make kind-down && make kind-up'"
done
# The suite judges the CCM the cluster runs; asking for the other one is a mistake, not a redeploy.
deployed=$(<"$kind_ccm_file")
[[ -z "${FAKECLOUD_KIND_CCM:-}" || "$FAKECLOUD_KIND_CCM" == "$deployed" ]] ||
	die "FAKECLOUD_KIND_CCM=$FAKECLOUD_KIND_CCM, but kind cluster $cluster runs the $deployed CCM: 'make kind-down' first"
FAKECLOUD_KIND_CCM=$deployed kind_env

# shellcheck source=/dev/null
source "$run_root/kind.credentials" # FAKECLOUD_ENDPOINT, FAKECLOUD_ADMIN_TOKEN
export FAKECLOUD_E2E_BACKEND=existing
export FAKECLOUD_E2E_KUBECONFIG=$run_root/kind.kubeconfig
export FAKECLOUD_E2E_EMULATOR=$FAKECLOUD_ENDPOINT
export FAKECLOUD_E2E_EMULATOR_KILL="docker kill --signal=KILL $kind_emulator"
export FAKECLOUD_E2E_EMULATOR_START="docker start $kind_emulator"
# Which CCM the cases judge (and whose pods are its leader and logs).
export FAKECLOUD_E2E_CCM=$kind_ccm FAKECLOUD_E2E_CCM_PODS=app.kubernetes.io/name=$kind_ccm_deployment
if [[ $kind_ccm == aws ]]; then
	# The cases read what cloud-provider-aws made with the AWS CLI, with the account's key pair and region (from
	# kind.credentials, sourced above); its --cluster-name is the ID its cloud config and tags name.
	venv=$(bash "$repo_root/scripts/aws-clients.sh" | tail -n 1)
	export FAKECLOUD_AWS_CLI=$venv/bin/aws FAKECLOUD_E2E_CLUSTER_NAME=fakecloud
fi
# The cases' patience for a lost node follows the cluster's controller manager: its --node-monitor-grace-period
# (kind-config/ sets 30s; another KIND_CONFIG may set none, and then it is upstream's 50s). The CCM's periods
# are the Deployment's, upstream's defaults.
if [[ -z "${FAKECLOUD_E2E_NODE_GRACE:-}" ]]; then
	kubectl=$(bash "$repo_root/scripts/build-control-plane.sh" | tail -n 1)/kubectl
	kcm_flags=$("$kubectl" --kubeconfig "$run_root/kind.kubeconfig" -n kube-system get pods \
		-l component=kube-controller-manager -o jsonpath='{.items[0].spec.containers[0].command}') ||
		die "cannot read kube-controller-manager's flags from kind cluster $cluster"
	grace=$(grep -o -- '--node-monitor-grace-period=[0-9a-z.]*' <<<"$kcm_flags" | cut -d= -f2) || true
	export FAKECLOUD_E2E_NODE_GRACE=${grace:-50s}
fi
log "kube-controller-manager's --node-monitor-grace-period: $FAKECLOUD_E2E_NODE_GRACE"
# A report directory per CCM (target/nextest/kind-<ccm>/): make e2e-kind-both runs the two at once.
export FAKECLOUD_E2E_PROFILE=kind-$kind_ccm
log "running the conformance suite against kind cluster $cluster ($kind_ccm_deployment, emulator $FAKECLOUD_ENDPOINT)"
rc=0
bash "$repo_root/scripts/e2e.sh" "$@" || rc=$?
junit="$repo_root/target/nextest/$FAKECLOUD_E2E_PROFILE/junit.xml"
if [[ ! -f "$junit" ]]; then
	log "error: no report at $junit, so whether every case ran cannot be checked"
	rc=1
elif grep -o '<skipped[^>]*>' "$junit" | grep -v -e 'issue #50' -e 'about cloud-provider-aws alone' | grep -q .; then
	log "error: cases were skipped on kind, where every case must run: $(grep -o 'name="[^"]*"><skipped' "$junit" | cut -d'"' -f2 | tr '\n' ' ')"
	rc=1
fi
exit "$rc"
