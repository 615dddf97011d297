# shellcheck shell=bash
# Sourced by the scripts that build or check Go code: `require_go MODULE_DIR WHAT` puts the Go toolchain on PATH
# or stops (with the caller's `die`) saying which Go to install for WHAT. Our machines ship Go in /usr/local/go,
# which a non-login shell may not have on PATH.
require_go() {
	if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
		PATH="/usr/local/go/bin:$PATH"
	fi
	command -v go >/dev/null 2>&1 || die "the Go toolchain is not on PATH, and it is needed to build $2.
Install Go $(awk '$1 == "go" { print $2; exit }' "$1/go.mod") or newer, put its bin directory on PATH, and run this script again."
}
