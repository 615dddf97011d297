#!/usr/bin/env bash
# `make bench`: the emulator's API benchmark (Rust driver, release build), the data plane's (what it adds, and
# the API while it is flooded), the CCMs side by side at scale, then fakecloud against moto's server
# at saturation, both driven by wrk with the same script and concurrency (bench/moto_compare.py). Results go to
# stdout; BENCHMARKS.md records them.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}"
venv="$cache/bench-venv"
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

# The CCMs side by side at scale (issue #27): fakecloud-ccm and upstream's (built once and cached), each on a
# cluster of its own with a kwok fleet, from one run; the flags a large fleet runs with (`make up`'s).
# FAKECLOUD_SCALE_NODES picks the fleets (default 1000), FAKECLOUD_SCALE=0 skips them. 5,000 Nodes:
# FAKECLOUD_SCALE_NODES=5000 FAKECLOUD_BENCH_PARTS=routes,budget,backends (the services part makes a Service per
# Node, and its public pool holds 4,094; backends puts 1,000 Services on the whole fleet). At 5,000 the fleet
# initializes slower than the default route budget (half of N a minute), so add FAKECLOUD_BENCH_ROUTE_BUDGET=500
# for the budget to be met (BENCHMARKS.md, "At 5,000 Nodes"). The steady window is 5 minutes (e2e/src/bench.rs
# says why); FAKECLOUD_CCM_BENCH_STEADY=30 for a quicker, rougher look.
if [ "${FAKECLOUD_SCALE:-1}" != 0 ]; then
  scale_nodes=${FAKECLOUD_SCALE_NODES:-1000}
  echo "==> fakecloud-ccm and upstream's CCM at ${scale_nodes} Nodes: init, then services, routes and routes under a budget (cargo bench, release)"
  export FAKECLOUD_CCM_BENCH_NODES=$scale_nodes
  export FAKECLOUD_CCM_BENCH_ARGS=${FAKECLOUD_CCM_BENCH_ARGS:---kube-api-qps=200 --kube-api-burst=400 --concurrent-node-syncs=10 --concurrent-service-syncs=10}
  cargo bench --locked -p fakecloud-e2e --bench ccm_init
  cargo bench --locked -p fakecloud-e2e --bench ccm_services
fi

echo "==> fakecloud against moto, server against server (wrk)"
if [ ! -x "$venv/bin/python" ]; then
  echo "    creating $venv with moto[server] and requests (once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'moto[server]==5.2.5' requests
fi
cargo build --locked --release -p fakecloud-cli --bin fakecloud
db_dir=$(mktemp -d)
token="bench-token-$(date +%s%N)"
# A /12 VPC: a saturated create run makes more instances and load balancers than a /16's subnets hold.
FAKECLOUD_USER_TOKEN=$token FAKECLOUD_ADMIN_TOKEN=$token RUST_LOG=warn \
  "${CARGO_TARGET_DIR:-target}/release/fakecloud" serve --listen 127.0.0.1:0 --boot-delay 0s --lb-provision-delay 0s \
  --vpc-cidr 10.0.0.0/12 --db "$db_dir/fc.db" 2> "$db_dir/serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$db_dir"' EXIT
for _ in $(seq 100); do grep -q "serving" "$db_dir/serve.log" && break; sleep 0.1; done
url=$(sed -n 's/^fakecloud: serving \([^ ;]*\).*/\1/p' "$db_dir/serve.log" | head -1)
[ -n "$url" ] || { echo "emulator did not start:"; cat "$db_dir/serve.log"; exit 1; }
"$venv/bin/python" bench/moto_compare.py "$url" "$token" "$pid"
