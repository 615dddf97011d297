#!/usr/bin/env bash
# `make e2e`: the end-to-end suite, one case at a time through cargo-nextest, with a JUnit report and a summary
# table for CI systems. Installs cargo-nextest once if it is missing. Exits non-zero if a case failed.
#
# FAKECLOUD_E2E_BACKEND=local (the default): every case, each on its own local control plane, emulator and CCM.
# FAKECLOUD_E2E_BACKEND=existing: the conformance cases (tests/it/conformance_*.rs) against the cluster, emulator
# and CCM the FAKECLOUD_E2E_* variables name (see e2e/src/backend.rs; `make e2e-kind` sets them for kind). The
# tests of the fakecloud-ccm binary itself (tests/it/ccm_*.rs) need a local cluster and are left out there.
# Its nextest profile is FAKECLOUD_E2E_PROFILE (default e2e-existing; make e2e-kind: kind-<ccm>).
# Extra arguments go to `cargo nextest run` (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

# FAKECLOUD_E2E_ONLY: a filter expression the cases must also match (e2e-upstream.sh: the conformance cases).
only=${FAKECLOUD_E2E_ONLY:-}
case ${FAKECLOUD_E2E_BACKEND:-local} in
local) profile=e2e ;;
existing) profile=${FAKECLOUD_E2E_PROFILE:-e2e-existing} only=${only:-'test(/^conformance_/)'} ;;
*)
	echo "FAKECLOUD_E2E_BACKEND=$FAKECLOUD_E2E_BACKEND: use local (the default) or existing" >&2
	exit 2
	;;
esac

# nextest runs the union of several -E, so the caller's `-E EXPR` is joined to `only` with `and` here: passed
# apart, `-E 'test(/conformance_presets/)'` would add every other conformance case instead of narrowing.
args=() wanted=()
while (($#)); do
	case $1 in
	-E | --filterset | --filter-expr)
		wanted+=("(${2:?$1 needs an expression})")
		shift 2
		;;
	*)
		args+=("$1")
		shift
		;;
	esac
done
# The e2e package's cases, built as part of the whole workspace's tests: those are the artifacts `make test`
# builds (cargo unifies features over what it builds, and `-p fakecloud-e2e` alone would rebuild every workspace
# crate with a set of its own), so a run after `make test` compiles nothing, and CI's waits for make test's build
# instead of doing another.
filter="package(fakecloud-e2e)${only:+ and ($only)}"
if ((${#wanted[@]})); then
	joined=$(printf ' or %s' "${wanted[@]}")
	filter+=" and (${joined# or })"
fi

bash scripts/install-nextest.sh

# nextest keeps its reports under the workspace (its store dir), wherever CARGO_TARGET_DIR puts the build.
out=target/nextest/$profile
rm -f "$out/junit.xml"
rc=0
"$cargo" nextest run --locked --workspace --profile "$profile" --no-fail-fast -E "$filter" "${args[@]}" || rc=$?
if [[ -f "$out/junit.xml" ]]; then
	python3 scripts/e2e-summary.py "$out/junit.xml" | tee "$out/summary.md"
	echo
	echo "reports: $out/junit.xml (JUnit XML), $out/summary.md (summary table)"
else
	echo "no report was written (the build failed?)" >&2
fi
exit "$rc"
