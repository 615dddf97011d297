#!/usr/bin/env bash
# build-go-tool.sh MODULE_DIR: builds, unmodified, the upstream command a project Go module pins with its `tool`
# line, at the release its go.mod requires (go.sum checks every module), into a cache outside the clone, once:
#   ${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/<module dir's name>/<release>/<command>
# controlplane/kwok: kwok, with the pod stages it runs with beside it in pod-stages/ (kwok's own defaults; a kwok
# binary has none; no node stage: controlplane/src/kubelets says why). ccm-aws: cloud-provider-aws (issue #50).
# Prints the binary's path on the last line of stdout; progress goes to stderr.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module_dir="$repo_root/${1:?usage: build-go-tool.sh MODULE_DIR (controlplane/kwok, ccm-aws)}"
name=$(basename "$module_dir")
log() { printf '[build-go-tool %s] %s\n' "$name" "$*" >&2; }
die() { printf '[build-go-tool %s] error: %s\n' "$name" "$*" >&2; exit 1; }
[[ -f "$module_dir/go.mod" ]] || die "$module_dir/go.mod not found; run this script from a fakecloud clone"
tool=$(awk '$1 == "tool" { print $2; exit }' "$module_dir/go.mod")
[[ -n $tool ]] || die "$module_dir/go.mod has no tool line naming the command to build"
command=$(basename "$tool")
# The release is the one go.mod requires of the tool's module (the longest required path the tool is under).
version=$(awk -v tool="$tool" '{ m = $1; v = $2 } m == "require" { m = $2; v = $3 }
	m != "module" && index(tool "/", m "/") == 1 && length(m) > best { best = length(m); found = v } END { print found }' \
	"$module_dir/go.mod")
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "could not read the release of $tool from $module_dir/go.mod (got '$version')"
cache_dir="${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/$name/$version"
binary="$cache_dir/$command"
stages=() && [[ $name == kwok ]] && stages=(pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete)
if [[ -x "$binary" && (${#stages[@]} -eq 0 || -f "$cache_dir/pod-stages/pod-delete.yaml") ]]; then
	log "$version already built: $binary"
	printf '%s\n' "$binary"
	exit 0
fi

# shellcheck source=scripts/go-toolchain.sh
source "$repo_root/scripts/go-toolchain.sh"
require_go "$module_dir" "$command $version"
mkdir -p "$cache_dir"
# Built aside and moved at the end: a failed or interrupted build never leaves a binary that looks finished.
tmp_dir=$(mktemp -d "$cache_dir/.build.XXXXXX")
trap 'rm -rf "$tmp_dir"' EXIT
cd "$module_dir"
log "building $command $version with $(go version | awk '{print $3}') (minutes cold on 2 cores)"
start=$SECONDS
CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$tmp_dir/$command" "$tool" ||
	die "go build failed (see the compiler output above); nothing was installed into $cache_dir"
if ((${#stages[@]})); then
	source_dir="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$version/kustomize/stage"
	mkdir -p "$tmp_dir/pod-stages"
	for stage in "${stages[@]}"; do
		cp "$source_dir/$stage.yaml" "$tmp_dir/pod-stages/" || die "kwok's stage $stage.yaml is not in $source_dir"
	done
	chmod -R u+w "$tmp_dir/pod-stages"
	rm -rf "$cache_dir/pod-stages"
	mv "$tmp_dir/pod-stages" "$cache_dir/pod-stages"
fi
mv -f "$tmp_dir/$command" "$binary"
log "built in $((SECONDS - start))s: $binary"
printf '%s\n' "$binary"
