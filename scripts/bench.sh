#!/usr/bin/env bash
# `make bench`: the emulator's API benchmark (Rust driver, release build), the data plane's (what it adds, and
# the API while it is flooded), the CCMs side by side at scale, then fakecloud, natively and through its AWS face,
# against moto's server at saturation, all driven by wrk at the same concurrency (bench/moto_compare.py). Results go
# to stdout; BENCHMARKS.md records them.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null 2>&1 || bash scripts/install-deps.sh

echo "==> emulator API benchmark (cargo bench, release)"
cargo bench --locked -p fakecloud-emulator --bench api -- "$@"

echo "==> writes on each store: a SQLite file, PostgreSQL with 1 emulator and with 3 sharing it (cargo bench, release)"
cargo bench --locked -p fakecloud-emulator --bench api -- --stores

echo "==> a farm on PostgreSQL: connections per account, accounts per max_connections, answers with the database away (cargo bench, release)"
cargo bench --locked -p fakecloud-emulator --bench api -- --farm

echo "==> load balancer data plane: what it adds, and the API during a flood of it (cargo bench, release)"
cargo bench --locked -p fakecloud-emulator --bench api -- --dataplane

echo "==> the AWS face beside the native API: the same lookups and writes, signed as an SDK signs (cargo bench, release)"
cargo bench --locked -p fakecloud-emulator --bench api -- --aws-face

# The CCMs side by side at scale (issue #27): fakecloud-ccm, upstream's and cloud-provider-aws on the AWS face
# (issue #50; both built once and cached), each on a cluster of its own with a kwok fleet, from one run; the flags
# a large fleet runs with (`make up`'s). FAKECLOUD_CCM_BENCH_CCMS picks them (default fakecloud,upstream,aws).
# FAKECLOUD_SCALE_NODES picks the fleets (default 1000), FAKECLOUD_SCALE=0 skips them. 5,000 Nodes:
# FAKECLOUD_SCALE_NODES=5000 FAKECLOUD_BENCH_PARTS=routes,budget,backends (the services part makes a Service per
# Node, and its public pool holds 4,094; backends puts 1,000 Services on the whole fleet). At 5,000 the fleet
# initializes slower than the default route budget (half of N a minute), so add FAKECLOUD_BENCH_ROUTE_BUDGET=500
# for the budget to be met (BENCHMARKS.md, "At 5,000 Nodes"). The steady window is 5 minutes (e2e/src/bench.rs
# says why); FAKECLOUD_CCM_BENCH_STEADY=30 for a quicker, rougher look.
if [ "${FAKECLOUD_SCALE:-1}" != 0 ]; then
  scale_nodes=${FAKECLOUD_SCALE_NODES:-1000}
  export FAKECLOUD_CCM_BENCH_NODES=$scale_nodes
  export FAKECLOUD_CCM_BENCH_CCMS=${FAKECLOUD_CCM_BENCH_CCMS:-fakecloud,upstream,aws}
  echo "==> ${FAKECLOUD_CCM_BENCH_CCMS} at ${scale_nodes} Nodes: init, then services, routes and routes under a budget (cargo bench, release)"
  export FAKECLOUD_CCM_BENCH_ARGS=${FAKECLOUD_CCM_BENCH_ARGS:---kube-api-qps=200 --kube-api-burst=400 --concurrent-node-syncs=10 --concurrent-service-syncs=10}
  cargo bench --locked -p fakecloud-e2e --bench ccm_init
  cargo bench --locked -p fakecloud-e2e --bench ccm_services
fi

echo "==> fakecloud, natively and through its AWS face, against moto, server against server (wrk)"
# moto's server, and botocore to sign the face's calls with: the pinned clients the face's tests run.
venv=$(bash scripts/aws-clients.sh | tail -n 1)
cargo build --locked --release -p fakecloud-cli --bin fakecloud
"$venv/bin/python" bench/moto_compare.py "${CARGO_TARGET_DIR:-target}/release/fakecloud"
