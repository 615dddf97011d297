#!/usr/bin/env bash
# `make test-kind`: the kind path's tests, as CI runs them beside `make test` (.ci/run):
#  1. make e2e-kind-both: the conformance suite against fakecloud-ccm and upstream's CCM at once, on two kind
#     clusters (made here; every case must run);
#  2. upstream's [sig-network] LoadBalancers e2e specs (make e2e-kind-lb) on both clusters at once, several
#     specs at a time on each (they mostly wait on load balancers and rolling updates); their e2e.test is built
#     beside step 1;
#  3. kind-up refuses a node image of another Kubernetes version up front, creating nothing;
#  4. the testcontainers modules (Rust and Go) against the emulator's image on that engine: kind-up built it, so
#     their tests may not skip. No registry serves testcontainers-go's reaper image, so the Go test runs without
#     it; -count=1, as a cached pass would not have started a container;
#  5. make kind-down: both clusters (the private engine stops with the last one);
#  6. the private engine's own tests (scripts/kind/test-engine.sh: the egress guard, nothing left after stop),
#     which stop and restart it, so they come last, with no cluster on it.
# Every step runs even when an earlier one failed; the exit status is non-zero if any did.
set -uo pipefail
kind_script=test-kind
# shellcheck source=scripts/kind/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind/common.sh"
cd "$kind_repo_root" || exit 1
cargo=${CARGO:-cargo}

failed=()
run() {
	local what=$1 start=$SECONDS rc=0
	shift
	log "$what ..."
	"$@" || rc=$?
	if ((rc == 0)); then
		log "$what: passed in $((SECONDS - start))s"
	else
		log "$what: FAILED (exit $rc) after $((SECONDS - start))s"
		failed+=("$what")
	fi
}
# The test binaries `cargo test --workspace` built (scripts/test-executables.py says why not `-p`: 3.5 minutes of
# a cold CI run went to compiling the dependencies again), from the package's directory as cargo runs them.
testcontainers_rust() (
	local executables executable rc=0
	executables=$("$cargo" test --locked --workspace --no-run --message-format=json-render-diagnostics |
		python3 scripts/test-executables.py fakecloud-testcontainers) || return
	kind_env && cd testcontainers || return
	while read -r executable; do
		FAKECLOUD_TESTCONTAINERS=1 "$executable" || rc=1
	done <<<"$executables"
	return "$rc"
)
testcontainers_go() (
	kind_env && cd ccm-upstream &&
		FAKECLOUD_TESTCONTAINERS=1 TESTCONTAINERS_RYUK_DISABLED=true go test -count=1 ./testcontainers/...
)

# The engine and the images first (e2e-kind-both.sh then finds them made), so that e2e.test, which only step 2
# needs, can be built beside the conformance suites rather than after them: ~5 min on a machine without it, of
# a Go build that shares the node binaries' compiled packages. Niced, it takes what the suites leave idle (they
# mostly wait on their clusters); its output goes to a log of its own, shown if it fails.
mkdir -p .run
e2e_test_log=.run/build-e2e-test.log
e2e_test_build=
if KIND_CLUSTER_NAME=fakecloud FAKECLOUD_KIND_CCM=fakecloud FAKECLOUD_PORT=8787 "$kind_tool" up --prepare; then
	nice -n 19 bash scripts/kind/build-e2e-test.sh >"$e2e_test_log" 2>&1 &
	e2e_test_build=$!
fi
# cargo-nextest, which the suites run, is installed (on a machine without it: ~5 min of CPU on a busy one) while
# the clusters are made, which mostly waits; the suites wait for it (its lock) if it is not done.
nextest_log=.run/install-nextest.log
bash scripts/install-nextest.sh >"$nextest_log" 2>&1 &
nextest_install=$!
run "the conformance suite against both CCMs on kind" bash scripts/e2e-kind-both.sh
wait "$nextest_install" || { cat "$nextest_log" && failed+=("installing cargo-nextest"); }
# e2e.test as built above (or now, if preparing failed), then both clusters' runs, each line prefixed with its
# cluster as e2e-kind-both does.
lb_specs_both() {
	if [[ -n "$e2e_test_build" ]] && ! wait "$e2e_test_build"; then
		cat "$e2e_test_log"
		return 1
	fi
	bash scripts/kind/build-e2e-test.sh >/dev/null || return 1
	local rc_first=0 rc_second=0 first second
	KIND_CLUSTER_NAME=fakecloud FAKECLOUD_KIND_CCM=fakecloud FAKECLOUD_PORT=8787 E2E_LB_PROCS=$lb_procs \
		bash scripts/e2e-kind-lb.sh 2>&1 | sed -u 's/^/[fakecloud] /' &
	first=$!
	KIND_CLUSTER_NAME=$kind_upstream_cluster FAKECLOUD_KIND_CCM=upstream FAKECLOUD_PORT=8788 E2E_LB_PROCS=$lb_procs \
		bash scripts/e2e-kind-lb.sh 2>&1 | sed -u "s/^/[$kind_upstream_cluster] /" &
	second=$!
	wait "$first" || rc_first=$?
	wait "$second" || rc_second=$?
	((rc_first == 0 && rc_second == 0))
}
# Three specs at once per cluster: the two rolling-update specs (~10.5 min each) and source ranges (~8 min)
# set the length of a run; more processes only add load on 2 cores.
lb_procs=${FAKECLOUD_E2E_LB_PROCS:-3}
run "upstream's LoadBalancers e2e specs on both clusters" lb_specs_both
# A copy of the node image that says it is another Kubernetes version (built offline from the image itself).
refuses_other_version() (
	local image=fakecloud/kind-node:other-version out
	kind_env
	printf 'FROM %s\nRUN printf v1.0.0 >/kind/version\n' "$kind_node_image" |
		docker build --quiet --network none -t "$image" - >/dev/null || return 1
	out=$(KIND_CLUSTER_NAME=fakecloud-refused KIND_NODE_IMAGE=$image FAKECLOUD_PORT=8789 "$kind_tool" up 2>&1)
	local rc=$?
	docker image rm "$image" >/dev/null 2>&1
	rmdir .run/fakecloud-refused 2>/dev/null
	((rc != 0)) && grep -q "is Kubernetes v1.0.0, and this checkout's is $k8s_version" <<<"$out" &&
		! PATH="$kind_bin_dir:$PATH" kind get clusters 2>/dev/null | grep -qx fakecloud-refused
)

run "kind-up refuses a node image of another Kubernetes version" refuses_other_version
run "the Rust testcontainers module's tests" testcontainers_rust
run "the Go testcontainers module's tests" testcontainers_go
run "deleting both kind clusters" "$kind_tool" down
run "the private engine's tests" bash scripts/kind/test-engine.sh

if ((${#failed[@]})); then
	log "FAILED: $(printf '%s; ' "${failed[@]}")"
	exit 1
fi
log "the kind path's tests passed"
