#!/usr/bin/env bash
# `make test-console` (and `make test`): the web console tested as a person uses it — headless Debian Chromium,
# driven by playwright-core (pinned in console-tests/package-lock.json), against a real emulator the test starts.
# Screenshots of each view go to target/console-screenshots/ (left in the clone CI ran in).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

echo "==> building the emulator"
# Not `-p fakecloud-cli`: cargo would unify features over that package alone and rebuild the workspace's crates
# that `make test` has just built with the workspace's.
nice -n 10 "$cargo" build --locked --bin fakecloud
echo "==> installing the console tests' packages (npm ci)"
(cd console-tests && npm ci --no-audit --no-fund --loglevel=error)
echo "==> the console in headless Chromium"
(cd console-tests && npm test)
echo "screenshots: ${CARGO_TARGET_DIR:-target}/console-screenshots/"
