#!/usr/bin/env bash
# Reclaim spot instances with a notice: by name (repeat -n NAME) or every spot instance with a tag
# (-t KEY=VALUE). Notice NOTICE (default 30s). Reclamation cannot be undone; nothing to restore.
# Usage: spot-reclaim.sh [-n NAME]... [-t KEY=VALUE] [-N NOTICE]
args=()
notice=30s
while getopts "n:t:N:" opt; do
  case "$opt" in
    n) args+=(--name "$OPTARG") ;;
    t) args+=(--tag "$OPTARG") ;;
    N) notice=$OPTARG ;;
    *) echo "usage: $0 [-n NAME]... [-t KEY=VALUE] [-N NOTICE]" >&2; exit 2 ;;
  esac
done
# shellcheck source=scripts/faults/common.sh
. "$(dirname "$0")/common.sh"
restore() { :; }
[ ${#args[@]} -gt 0 ] || { echo "name instances with -n NAME or -t KEY=VALUE" >&2; exit 2; }
say "reclaiming spot instances (${args[*]}) with ${notice} notice"
"$FC" spot reclaim "${args[@]}" --notice "$notice"
