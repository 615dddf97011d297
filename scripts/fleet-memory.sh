#!/usr/bin/env bash
# The measurement behind `make up`'s memory estimate (controlplane/src/stack/up.rs, BENCHMARKS.md "A fleet of
# 5,000 on kwok"): `make up NODES=N PROFILE=release`, the resident memory of each of the stack's processes sampled
# every 5 s until `up` returns and for 30 s after, the peaks printed (MiB), then `make down`.
# Usage: scripts/fleet-memory.sh N
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=${1:?usage: scripts/fleet-memory.sh NODES}
samples=$(mktemp)
trap 'rm -f "$samples"' EXIT

# One line per process: "<name> <MiB>", all instances of it summed. The control plane's binaries by their
# process name (their command lines name each other: the API server's has --etcd-servers), the project's by the
# first words of their command lines, which say what they are.
sample() {
	local name kib
	for name in etcd kube-apiserver kube-controller kwok fakecloud-ccm; do
		# (ps and pgrep fail when nothing matches: a process not started yet counts 0.)
		kib=$({ ps -C "$name" -o rss= || true; } | awk '{s += $1} END {print s + 0}')
		echo "$name $((kib / 1024))"
	done
	for name in "fakecloud serve" "fakecloud-controlplane kubelets" "fakecloud-controlplane stack"; do
		kib=$({ pgrep -f -- "$name" || true; } | xargs -r ps -o rss= -p | awk '{s += $1} END {print s + 0}')
		echo "${name// /_} $((kib / 1024))"
	done
}

make up NODES="$nodes" PROFILE=release &
up=$!
while kill -0 "$up" 2>/dev/null; do
	sample >>"$samples"
	sleep 5
done
wait "$up"
for _ in 1 2 3 4 5 6; do
	sample >>"$samples"
	sleep 5
done
echo "peak resident memory with $nodes Nodes (MiB):"
awk '{ if ($2 > peak[$1]) peak[$1] = $2 } END { for (k in peak) { printf "  %-32s %6d\n", k, peak[k]; total += peak[k] } printf "  %-32s %6d\n", "all together", total }' "$samples"
make down
