#!/usr/bin/env bash
# Reproduce "LoadBalancer stuck in <pending>": the load-balancing API is down (default) or the LB quota is 0,
# for DURATION seconds (default 60). Usage: pending-lb.sh [outage|quota] [DURATION]
mode=${1:-outage}
duration=${2:-60}
# shellcheck source=scripts/faults/common.sh
. "$(dirname "$0")/common.sh"

case "$mode" in
  outage)
    say "load-balancing API outage for ${duration}s: LB calls get 503 ServiceUnavailable"
    outage_id=$("$FC" -o json outage start --service load-balancing --for "${duration}s" | sed -n 's/.*"id": "\(outage-[0-9]*\)".*/\1/p' | head -1)
    restore() { [ -n "${outage_id:-}" ] && "$FC" outage stop "$outage_id" >/dev/null; }
    ;;
  quota)
    old=$("$FC" -o json quota get load-balancers | sed -n 's/.*"limit": \([0-9]*\).*/\1/p' | head -1)
    say "load-balancers quota 0 (was $old) for ${duration}s: creates get 422 LoadBalancerLimitExceeded"
    restore() { "$FC" quota set load-balancers "$old" >/dev/null; }
    "$FC" quota set load-balancers 0 >/dev/null
    ;;
  *) echo "usage: $0 [outage|quota] [DURATION]" >&2; exit 2 ;;
esac
hold "$duration"
