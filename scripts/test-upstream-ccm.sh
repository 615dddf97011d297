#!/usr/bin/env bash
# Checks ccm-upstream (fakecloud's provider for upstream's CCM framework): gofmt, go vet, its unit tests, and
# that the committed generated client is what oapi-codegen makes of the committed api/openapi.json (which
# emulator/tests/it/openapi_snapshot.rs keeps equal to what the emulator serves).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root/ccm-upstream"

log() { printf '[test-upstream-ccm] %s\n' "$*" >&2; }
die() { printf '[test-upstream-ccm] error: %s\n' "$*" >&2; exit 1; }

# shellcheck source=scripts/go-toolchain.sh
source "$repo_root/scripts/go-toolchain.sh"
require_go "$repo_root/ccm-upstream" "and check ccm-upstream"

unformatted=$(gofmt -l .)
[[ -z "$unformatted" ]] || die "not gofmt-formatted: $unformatted"

log "checking that fakecloudapi/client.gen.go is generated from api/openapi.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The config names the output file (and -o does not override it): generate with a copy that writes to $tmp.
sed "s|^output:.*|output: $tmp/client.gen.go|" fakecloudapi/oapi-codegen.yaml >"$tmp/oapi-codegen.yaml"
(cd fakecloudapi && go tool oapi-codegen -config "$tmp/oapi-codegen.yaml" ../../api/openapi.json)
cmp -s "$tmp/client.gen.go" fakecloudapi/client.gen.go ||
	die "fakecloudapi/client.gen.go is stale: run 'go generate ./...' in ccm-upstream and commit it"

log "go vet"
go vet ./...
log "go test"
go test ./...
