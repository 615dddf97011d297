#!/usr/bin/env bash
# `make test-postgres` (and `make test`, after the workspace's tests): the emulator's API tests, each emulator on a
# database of its own on a real PostgreSQL server (started by the tests), where the rate limits' buckets are rows
# that replicas share, so their shapes are tested on both stores.
#
# It runs the emulator's `it` binary that `cargo test --workspace` builds (scripts/test-executables.py says why
# not `cargo test -p`), with FAKECLOUD_TEST_STORE=postgres.
#
# Skipped: what only a SQLite file has (persistence::: a file's mode, snapshots, a file that is not a database;
# and a file edited by hand), and what starts a PostgreSQL of its own whatever the store (postgres::, replicas::,
# fail_safe::), which the SQLite run has run already.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
# shellcheck disable=SC2086 # CARGO_FLAGS is several flags, word-split on purpose
it=$("$cargo" test ${CARGO_FLAGS:---locked} --workspace --no-run --message-format=json-render-diagnostics |
	python3 scripts/test-executables.py fakecloud-emulator it)
# As cargo test runs it: from the package's directory.
cd emulator
FAKECLOUD_TEST_STORE=postgres "$it" --skip persistence:: --skip network::destinations_stored_as_written \
	--skip postgres:: --skip replicas:: --skip fail_safe:: "$@"
