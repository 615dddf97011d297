#!/usr/bin/env bash
# Reproduce "nodes come up with NetworkUnavailable": the routes-per-route-table quota is N (default 2) for
# DURATION seconds (default 60), so only N nodes get routes. Usage: route-limit.sh [N] [DURATION]
limit=${1:-2}
duration=${2:-60}
# shellcheck source=scripts/faults/common.sh
. "$(dirname "$0")/common.sh"
old=$("$FC" -o json quota get routes-per-route-table | sed -n 's/.*"limit": \([0-9]*\).*/\1/p' | head -1)
restore() { "$FC" quota set routes-per-route-table "$old" >/dev/null; }
say "routes-per-route-table quota $limit (was $old) for ${duration}s: route creates past it get 422 RouteLimitExceeded"
"$FC" quota set routes-per-route-table "$limit" >/dev/null
hold "$duration"
