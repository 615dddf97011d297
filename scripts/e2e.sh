#!/usr/bin/env bash
# `make e2e`: the end-to-end suite on the local backend (the upstream control plane, the emulator and the CCM as
# processes), one case at a time through cargo-nextest, with a JUnit report and a summary table for CI systems.
# Installs cargo-nextest once if it is missing. Exits non-zero if a case failed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

if ! "$cargo" nextest --version >/dev/null 2>&1; then
	echo "==> installing cargo-nextest (once; a few minutes on 2 cores)"
	"$cargo" install --locked cargo-nextest
fi

out=target/nextest/e2e
rc=0
"$cargo" nextest run --locked -p fakecloud-e2e --profile e2e --no-fail-fast "$@" || rc=$?
if [[ -f "$out/junit.xml" ]]; then
	python3 scripts/e2e-summary.py "$out/junit.xml" | tee "$out/summary.md"
	echo
	echo "reports: $out/junit.xml (JUnit XML), $out/summary.md (summary table)"
else
	echo "no report was written (the build failed?)" >&2
fi
exit "$rc"
