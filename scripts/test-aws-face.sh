#!/usr/bin/env bash
# `make test` runs this after schemathesis (`make test-aws` alone): clients nobody here wrote against the AWS face
# (issue #49): boto3, the AWS CLI, and moto's server, which the differential test compares the face with. Installs
# them and pytest (pinned) into a venv in the cache once, builds `fakecloud`, serves a throwaway cloud that writes
# its credentials file, makes instances with the CLI, and runs emulator/tests/aws/ with the AWS variables set as a
# user sets them (`source` the credentials file). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

boto3_version=1.44.5
# The AWS CLI (v1, the one on PyPI) pins the botocore that boto3 runs on too.
awscli_version=1.46.3
moto_version=5.2.6
# moto's server with only the services the face answers (its `server` extra brings every service's, ~350 MB more).
flask_version=3.1.3
flask_cors_version=6.0.5
pytest_version=9.2.0
clients=boto3-$boto3_version-awscli-$awscli_version-moto-$moto_version-pytest-$pytest_version
venv=${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/aws-clients/$clients

# A venv cannot be moved once made, so it is made in place; the marker says the install finished.
if [[ ! -f $venv/.installed ]]; then
	echo "==> installing boto3 $boto3_version, the AWS CLI $awscli_version, moto $moto_version and pytest" \
		"$pytest_version into $venv (once, about a minute)"
	rm -rf "$venv"
	python3 -m venv "$venv"
	nice -n 10 "$venv/bin/pip" install --quiet --disable-pip-version-check "boto3==$boto3_version" \
		"awscli==$awscli_version" "moto[ec2,elb,elbv2]==$moto_version" "flask==$flask_version" \
		"flask-cors==$flask_cors_version" "pytest==$pytest_version"
	touch "$venv/.installed"
fi

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

echo "==> boto3 $boto3_version and the AWS CLI $awscli_version against $url, moto $moto_version beside it"
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
