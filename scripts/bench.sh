#!/usr/bin/env bash
# `make bench`: the emulator's API benchmark (Rust driver, release build), the data plane's (what it adds, and
# the API while it is flooded), then fakecloud against moto's server
# at saturation, both driven by wrk with the same script and concurrency (bench/moto_compare.py). Results go to
# stdout; BENCHMARKS.md records them.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}"
venv="$cache/bench-venv"
command -v wrk >/dev/null 2>&1 || bash scripts/install-deps.sh

echo "==> emulator API benchmark (cargo bench, release)"
cargo bench --locked -p fakecloud-emulator --bench api -- "$@"

echo "==> load balancer data plane: what it adds, and the API during a flood of it (cargo bench, release)"
cargo bench --locked -p fakecloud-emulator --bench api -- --dataplane

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
