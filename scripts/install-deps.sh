#!/usr/bin/env bash
# Install what building and testing fakecloud needs on a fresh Debian machine: a C compiler (SQLite is compiled
# into the emulator), pkg-config, wrk (for `make bench`), PostgreSQL (for the store's tests) and rustfmt/clippy.
# Safe to run again; does nothing when all is there.
set -euo pipefail

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# objcopy: the kind path's images carry their binaries without debug info (`fakecloud-kind images`, kind/src/images.rs).
command -v objcopy >/dev/null 2>&1 || need_apt+=(binutils)
command -v shellcheck >/dev/null 2>&1 || need_apt+=(shellcheck)
# The console's browser tests (make test-console): Node with npm, and Debian's Chromium for playwright-core.
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
# PostgreSQL's server binaries: the store's tests start a real one (issue #28). Debian keeps them off PATH, in
# /usr/lib/postgresql/<version>/bin, where the tests look too.
command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need_apt+=(postgresql)
# The load generator of `make bench`'s comparison with moto.
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)
if ((${#need_apt[@]})); then
  echo "==> installing Debian packages: ${need_apt[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo is not installed; install Rust (https://rustup.rs) and run make again" >&2
  exit 1
fi
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || { echo "==> adding rustup component $c"; rustup component add "$c"; }
  done
fi
