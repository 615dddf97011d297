#!/usr/bin/env bash
# A seeded random mix for DURATION seconds (default 60): some calls fail with 500 or 503, some are slow, some
# writes lose their response, writes are lightly throttled. The draws come from the emulator's --seed, so the
# same seed and the same calls give the same faults. Usage: chaos.sh [DURATION]
duration=${1:-60}
# shellcheck source=scripts/faults/common.sh
. "$(dirname "$0")/common.sh"
restore() {
  for id in chaos-500 chaos-503 chaos-slow chaos-lost; do "$FC" fault delete "$id" >/dev/null 2>&1 || true; done
  "$FC" ratelimit clear chaos-writes >/dev/null 2>&1 || true
}
say "chaos for ${duration}s: 5% 500s, 5% 503s, 10% +300ms, 5% lost write responses, a write bucket of 20 at 10/s"
"$FC" fault add --id chaos-500 --error 500:InternalError --probability 0.05 --for "${duration}s" >/dev/null
"$FC" fault add --id chaos-503 --error 503:ServiceUnavailable --header Retry-After=2 --probability 0.05 --for "${duration}s" >/dev/null
"$FC" fault add --id chaos-lost --method POST --apply-then-fail 500:InternalError --probability 0.05 --for "${duration}s" >/dev/null
"$FC" fault add --id chaos-slow --latency 300ms --jitter 200ms --probability 0.1 --for "${duration}s" >/dev/null
"$FC" ratelimit set chaos-writes --scope writes --capacity 20 --refill 10 >/dev/null
hold "$duration"
