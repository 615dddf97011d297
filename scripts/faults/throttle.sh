#!/usr/bin/env bash
# Throttle writes: a token bucket of CAPACITY (default 5) refilled at RATE/s (default 1) for DURATION seconds
# (default 60); empty means 429 with Retry-After. Usage: throttle.sh [CAPACITY] [RATE] [DURATION]
capacity=${1:-5}
rate=${2:-1}
duration=${3:-60}
# shellcheck source=scripts/faults/common.sh
. "$(dirname "$0")/common.sh"
restore() { "$FC" ratelimit clear throttle-writes >/dev/null; }
say "write bucket: $capacity calls, refilled at $rate/s, for ${duration}s (429 + Retry-After when empty)"
"$FC" ratelimit set throttle-writes --scope writes --capacity "$capacity" --refill "$rate" >/dev/null
hold "$duration"
