# Shared by the fault scripts: find the CLI, check the emulator answers, and run the restore hook on exit.
# Sourced, not run.
# shellcheck shell=bash
set -euo pipefail

FC=${FAKECLOUD:-fakecloud}
if ! command -v "$FC" >/dev/null 2>&1; then
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  for candidate in "$root/target/debug/fakecloud" "$root/target/release/fakecloud"; do
    [ -x "$candidate" ] && FC=$candidate && break
  done
fi
command -v "$FC" >/dev/null 2>&1 || { echo "error: fakecloud CLI not found; run 'cargo build --bin fakecloud' or set FAKECLOUD" >&2; exit 1; }

say() { printf '==> %s\n' "$*"; }

# Wait SECONDS in a way a signal interrupts at once (bash runs traps only after a foreground command ends).
hold() {
  sleep "$1" &
  wait $!
}

# restore: each script redefines it once it has changed something; it runs on normal exit, error and Ctrl-C.
restore() { :; }
on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  jobs -p | xargs -r kill 2>/dev/null || true
  say "restoring what this script changed"
  restore || true
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

"$FC" quota get >/dev/null || { echo "error: cannot reach the emulator at ${FAKECLOUD_ENDPOINT:-http://127.0.0.1:8787}; start it or set FAKECLOUD_ENDPOINT and the tokens" >&2; exit 1; }
