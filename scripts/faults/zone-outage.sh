#!/usr/bin/env bash
# Take a zone down for DURATION seconds (default 60): calls on its instances get 503 and its instances read as
# stopped (unreachable). Usage: zone-outage.sh [ZONE] [DURATION]
zone=${1:-local-1a}
duration=${2:-60}
# shellcheck source=scripts/faults/common.sh
. "$(dirname "$0")/common.sh"
say "zone $zone dark for ${duration}s"
outage_id=$("$FC" -o json outage start --zone "$zone" --for "${duration}s" | sed -n 's/.*"id": "\(outage-[0-9]*\)".*/\1/p' | head -1)
restore() { [ -n "${outage_id:-}" ] && "$FC" outage stop "$outage_id" >/dev/null; }
hold "$duration"
