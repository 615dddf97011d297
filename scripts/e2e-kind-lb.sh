#!/usr/bin/env bash
# `make e2e-kind-lb`: Kubernetes' own `[sig-network] LoadBalancers` specs (upstream's e2e.test, both Describes:
# "LoadBalancers" and "LoadBalancers ExternalTrafficPolicy: Local") against the kind cluster of `make kind-up`
# (made first when missing), so the CCM and the emulator's load balancers are judged by upstream's tests too.
#
#   e2e.test    built from k8s.io/kubernetes at the cluster's release (scripts/kind/build-e2e-test.sh, cached)
#   images      the specs run agnhost only (the service jig, exec pods, netexec); upstream's names are
#               registry.k8s.io/e2e-test-images/agnhost:<tag in test/utils/image/manifest.go>. No registry is
#               reachable here, so e2e's KUBE_TEST_REPO_LIST maps the e2e-test-images registry to
#               fakecloud.local/e2e-test-images (no registry behind that name either, as for the node image's
#               kubeadm images), and fakecloud/agnhost:dev (`fakecloud-kind images`, upstream's tools included)
#               is tagged with the mapped name and `kind load`ed onto every node. The pods ask IfNotPresent.
#   hostnames   cloud-provider-aws (FAKECLOUD_KIND_CCM=aws) gives a Service its load balancer's DNS name, not an
#               address, and e2e.test resolves it as any program here does, through /etc/resolv.conf. It runs in a
#               mount namespace of its own where that file names the emulator's DNS (FAKECLOUD_DNS of the cluster's
#               kind.credentials), which answers the cloud's zones: the host's own file is not touched.
#   provider    --provider=skeleton: in 1.37 no LoadBalancers spec asks for a provider (no WithProvider, no
#               SkipUnlessProviderIs in test/e2e/network/loadbalancer.go), and aws, which cloud-provider-kind's
#               CI passes, is the same NullProvider; feature.LoadBalancer is a label, not a skip.
#
# Settings (environment):
#   E2E_LB_FOCUS     ginkgo focus regex (default both Describes: '\[sig-network\] LoadBalancers')
#   E2E_LB_SKIP      a ginkgo skip regex added to the skip list below
#   E2E_LB_TIMEOUT   the whole run's ginkgo timeout (default 3h: one spec may wait 15 min for its load balancer,
#                    and ginkgo's own default of 1h ends a serial run of all 17 specs)
#   E2E_LB_PROCS     specs at once (default 1: one at a time, e2e.test alone). N > 1 runs `ginkgo --procs=N
#                    e2e.test`, the ginkgo CLI (built beside e2e.test at its ginkgo version) starting N e2e.test
#                    processes and merging their reports, as upstream's hack/ginkgo-e2e.sh does: e2e.test has no
#                    --procs of its own. The specs mostly wait on load balancers, so this shortens a run.
#   E2E_LB_ARGS      more e2e.test flags, word-split (e.g. '--ginkgo.fail-fast'; with E2E_LB_PROCS > 1 they
#                    go to e2e.test after ginkgo's `--`, so no --ginkgo.* there)
# Reports in target/e2e-kind-lb/<cluster>/: junit.xml (ginkgo's --junit-report), e2e.log (the whole output), summary.md.
set -euo pipefail
kind_script=e2e-kind-lb
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind/common.sh"
repo_root=$kind_repo_root
cluster=$kind_cluster
run_root=$kind_run_root
report_dir="$repo_root/target/e2e-kind-lb/$cluster" # one per cluster: make test-kind runs both at once

focus=${E2E_LB_FOCUS:-'\[sig-network\] LoadBalancers'}
# Specs not run, each with why (the book lists them too, docs/book/src/kind.md); everything else must pass or skip itself. None
# for fakecloud's CCMs: "without NodePort and change it", skipped before, runs on a passthrough load balancer.
skips=()
if [[ $(<"$kind_ccm_file") == aws ]]; then
	# cloud-provider-aws (v1.37.1, pkg/providers/v1/aws.go) gives a Service a classic ELB (the specs set no annotation
	# that would make an NLB), which cannot do what these ask, on AWS as here:
	# - session affinity: EnsureLoadBalancer returns "unsupported load balancer affinity: ClientIP" (L2378: "ELB
	#   supports sticky sessions, but only when configured for HTTP/HTTPS");
	# - UDP: checkProtocol's "Protocol UDP not supported by LoadBalancer" (L3741: "elb only supports tcp");
	# - without NodePort: a port without one is ignored (L2409), so the ELB would have no listener, and
	#   CreateLoadBalancer requires one (ValidationError);
	# - the TCP service's type and ports: the spec moves the port from 80 to 81, and a classic ELB listens on 25,
	#   80, 443, 465, 587 or 1024-65535 only (CreateLoadBalancerListeners: ValidationError).
	skips+=('session affinity' 'UDP' 'without NodePort' 'change the type and ports of a TCP service')
fi
[[ -z "${E2E_LB_SKIP:-}" ]] || skips+=("$E2E_LB_SKIP")
skip_regex=$(
	IFS='|'
	printf '%s' "${skips[*]}"
)

PATH="$kind_bin_dir:$PATH"
kind_cluster_ensure
kubeconfig="$run_root/kind.kubeconfig"
[[ -f "$kubeconfig" ]] || die "$kubeconfig is missing (the cluster was not made by 'make kind-up'?): 'make kind-down && make kind-up'"

e2e_test=$(bash "$repo_root/scripts/kind/build-e2e-test.sh" | tail -n 1) # and ginkgo beside it
kubectl=$(bash "$repo_root/scripts/build-control-plane.sh" | tail -n 1)/kubectl
[[ -x "$e2e_test" && -x "$kubectl" ]] || die "e2e.test ($e2e_test) or kubectl ($kubectl) was not built"

# --- the images, before anything runs ------------------------------------------------------------------------
# The agnhost tag e2e.test asks for: its own manifest (test/utils/image/manifest.go), read from the source it was
# built from, then checked against what the binary lists with the mapping in place.
k8s_src=$(cd "$k8s_module_dir" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
agnhost_tag=$(sed -n 's/^[[:space:]]*configs\[Agnhost\] = Config{list.PromoterE2eRegistry, "agnhost", "\([^"]*\)"}.*/\1/p' \
	"$k8s_src/test/utils/image/manifest.go")
[[ -n "$agnhost_tag" ]] || die "could not read agnhost's tag from $k8s_src/test/utils/image/manifest.go (did e2e rename it?)"
mkdir -p "$report_dir"
repo_list="$report_dir/repo-list.yaml"
printf 'promoterE2eRegistry: %s/e2e-test-images\n' "$kind_image_repository" >"$repo_list"
export KUBE_TEST_REPO_LIST=$repo_list
agnhost_image="$kind_image_repository/e2e-test-images/agnhost:$agnhost_tag"
images=$("$e2e_test" --list-images 2>/dev/null) || die "$e2e_test --list-images failed"
grep -qxF "$agnhost_image" <<<"$images" ||
	die "e2e.test --list-images (with KUBE_TEST_REPO_LIST=$repo_list) does not list $agnhost_image; the mapping or the tag read from manifest.go is wrong"

local_agnhost=fakecloud/agnhost:${FAKECLOUD_IMAGE_TAG:-dev}
docker image inspect "$local_agnhost" >/dev/null 2>&1 ||
	die "$local_agnhost is not in the engine (${DOCKER_HOST:-default}): build it with fakecloud-kind images (make kind-up does)"
# The specs exec these in agnhost pods; an image of the binary alone (before the image build gave it upstream's tools)
# fails them all with 'not found', far from the cause.
docker run --rm --network none --entrypoint /bin/sh "$local_agnhost" -c 'command -v curl && command -v wget && command -v nc' >/dev/null 2>&1 ||
	die "$local_agnhost lacks curl, wget or nc, which the LoadBalancers specs exec in agnhost pods: rebuild it with fakecloud-kind images and load it (make kind-down && make kind-up)"
docker tag "$local_agnhost" "$agnhost_image"
step "load $agnhost_image ($local_agnhost) onto the nodes of $cluster" \
	kind load docker-image --name "$cluster" "$agnhost_image"

# --- the run ------------------------------------------------------------------------------------------------
workers=$("$kubectl" --kubeconfig "$kubeconfig" get nodes -l '!node-role.kubernetes.io/control-plane' -o name | wc -l)
((workers >= 2)) || log "warning: $workers worker node(s); several specs need two and skip themselves"

junit="$report_dir/junit.xml"
e2e_log="$report_dir/e2e.log"
rm -f "$junit" "$e2e_log" "$report_dir/summary.md"
procs=${E2E_LB_PROCS:-1}
[[ "$procs" =~ ^[1-9][0-9]*$ ]] || die "E2E_LB_PROCS must be a positive number, not '$procs'"
# The same ginkgo settings either way: as e2e.test's --ginkgo.* flags, or as the ginkgo CLI's own.
ginkgo_flags=(--focus="$focus" --timeout="${E2E_LB_TIMEOUT:-3h}" --v --no-color)
[[ -z "$skip_regex" ]] || ginkgo_flags+=(--skip="$skip_regex")
# --num-nodes: e2e counts the schedulable nodes on the first ginkgo process only; the others keep -1, and a spec
# there skips itself with "Requires at least 2 nodes (not -1)" (upstream's hack/ginkgo-e2e.sh passes it too).
e2e_args=(--kubeconfig="$kubeconfig" --kubectl-path="$kubectl" --provider=skeleton --num-nodes="$workers")
# shellcheck disable=SC2206 # E2E_LB_ARGS is word-split on purpose: several flags in one variable
[[ -z "${E2E_LB_ARGS:-}" ]] || e2e_args+=($E2E_LB_ARGS)
if ((procs == 1)); then
	cmd=("$e2e_test" "${e2e_args[@]}" "${ginkgo_flags[@]/#--/--ginkgo.}" --ginkgo.junit-report="$junit")
else
	# The CLI merges the processes' reports into --output-dir/<--junit-report> (a relative name: an absolute one
	# is put below --output-dir too, under a name made of the binary's path).
	cmd=("$kind_bin_dir/ginkgo" --procs="$procs" --output-dir="$report_dir" --junit-report="${junit##*/}"
		"${ginkgo_flags[@]}" "$e2e_test" -- "${e2e_args[@]}")
fi
if [[ $(<"$kind_ccm_file") == aws ]]; then
	# shellcheck source=/dev/null
	source "$run_root/kind.credentials" # FAKECLOUD_DNS
	resolv="$report_dir/resolv.conf"
	printf 'nameserver %s\n' "${FAKECLOUD_DNS%:53}" >"$resolv"
	own_mounts=(unshare --mount --propagation private)
	((EUID == 0)) || own_mounts=(unshare --map-root-user --mount --propagation private)
	# shellcheck disable=SC2016 # expanded by the inner sh
	cmd=("${own_mounts[@]}" sh -c 'mount --bind "$0" /etc/resolv.conf && exec "$@"' "$resolv" "${cmd[@]}")
	log "e2e.test resolves the load balancers' names at the emulator's DNS, ${FAKECLOUD_DNS%:53} (its own /etc/resolv.conf)"
fi
skipping=""
[[ -z "$skip_regex" ]] || skipping=", skip '$skip_regex'"
log "running e2e.test ($e2e_test, $procs at once) against kind cluster $cluster: focus '$focus'$skipping; output in $e2e_log"
start=$SECONDS
rc=0
# e2e.test writes into its working directory only with --report-dir (unset): run it from the report directory.
(cd "$report_dir" && "${cmd[@]}") 2>&1 | tee "$e2e_log" || rc=$?
log "e2e.test exited $rc after $((SECONDS - start))s"
# A spec that timed out on a host too loaded for its cluster shows here: the control plane's pods restarted.
restarts=$("$kubectl" --kubeconfig "$kubeconfig" -n kube-system get pods --no-headers \
	-o custom-columns='NAME:.metadata.name,RESTARTS:.status.containerStatuses[*].restartCount' |
	awk '{n = 0; split($2, r, ","); for (i in r) n += r[i]} n > 0 {printf " %s (%d)", $1, n}') || restarts=" (kubectl failed)"
log "kube-system pods that restarted since the cluster was made:${restarts:- none}"

[[ -f "$junit" ]] || die "no JUnit report at $junit (e2e.test exited $rc before writing it; see $e2e_log)"
python3 "$repo_root/scripts/e2e-lb-summary.py" "$junit" "$focus" "$skip_regex" "$report_dir/summary.md" || rc=$?
exit "$rc"
