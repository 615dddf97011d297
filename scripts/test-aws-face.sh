#!/usr/bin/env bash
# `make test` runs this after schemathesis (`make test-aws` alone): clients nobody here wrote against the AWS face
# (issue #49): boto3, the AWS CLI, and moto's server, which the differential test compares the face with. Installs
# them and pytest (pinned) into a venv in the cache once, builds `fakecloud`, serves a throwaway cloud that writes
# its credentials file, makes instances with the CLI, and runs emulator/tests/aws/ with the AWS variables set as a
# user sets them (`source` the credentials file). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

venv=$(bash scripts/aws-clients.sh | tail -n 1)

echo "==> building the emulator"
# Not `-p fakecloud-cli`: cargo would unify features over that package alone and rebuild the workspace's crates
# that `make test` has just built with the workspace's.
nice -n 10 "$cargo" build --locked --bin fakecloud
fakecloud=${CARGO_TARGET_DIR:-target}/debug/fakecloud

work=$(mktemp -d)
# No tokens given: the emulator generates them and writes the credentials file beside the database
# (fc.credentials), AWS keys included, as `fakecloud serve` does for a user.
# shellcheck source=scripts/serve-throwaway.sh
source scripts/serve-throwaway.sh
serve_throwaway "$work" "$fakecloud" --boot-delay 0s --stop-delay 0s --terminate-delay 0s

# What a user does: the credentials file sets the fakecloud tokens and the AWS keys.
# shellcheck disable=SC1091
source "$work/fc.credentials"
export FAKECLOUD_ENDPOINT=$url AWS_ENDPOINT_URL=$url AWS_DEFAULT_REGION=local-1
# Nothing of the user's own AWS setup may take part.
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_EC2 AWS_REGION

echo "==> making instances with the CLI on $url"
made=()
create() {
	"$fakecloud" instance create -o json "$@" >"$work/made-${#made[@]}.json"
	made+=("$work/made-${#made[@]}.json")
}
create web-1 --zone local-1a --tag role=web
create web-2 --zone local-1b --tag role=web
create db-1 --zone local-1c --tag role=db --tag team=data
create stopped-1
for i in 1 2 3 4; do
	create "batch-$i"
done
# `-o json` prints the API's list of instances: each file holds one.
stopped=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["id"])' "${made[3]}")
"$fakecloud" instance stop "$stopped" >/dev/null
python3 -c 'import json, sys; json.dump([i for f in sys.argv[1:] for i in json.load(open(f))], sys.stdout)' "${made[@]}" \
	>"$work/made.json"

echo "==> the AWS clients ($(basename "$venv")) against $url, moto's server beside it"
rc=0
# The venv's `aws` and moto's server before anything of the host's.
# FAKECLOUD_BIN serves the fresh clouds of the tests that need one of their own (the differential test).
PATH=$venv/bin:$PATH FAKECLOUD_AWS_MADE=$work/made.json FAKECLOUD_BIN=$fakecloud \
	"$venv/bin/python" -m pytest -p no:cacheprovider -q emulator/tests/aws "$@" || rc=$?
if grep -q 'panicked' "$work/serve.log"; then
	echo "the emulator panicked during the run:" >&2
	grep 'panicked' "$work/serve.log" >&2
	rc=1
fi
exit "$rc"
