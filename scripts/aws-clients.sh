#!/usr/bin/env bash
# aws-clients.sh: the AWS clients the project drives its AWS face with (issue #49) — boto3, the AWS CLI, moto's
# server, pytest and dnspython, pinned — in a venv in the cache, installed once. Prints the venv's path on the last
# line of stdout; progress goes to stderr. `make up CCM=aws` tags the cluster's subnets with its `aws`;
# scripts/test-aws-face.sh runs the face's tests with them.
set -euo pipefail

boto3_version=1.44.5
# The AWS CLI (v1, the one on PyPI) pins the botocore that boto3 runs on too.
awscli_version=1.46.3
moto_version=5.2.6
# moto's server with only the services the face answers (its `server` extra brings every service's, ~350 MB more).
flask_version=3.1.3
flask_cors_version=6.0.5
pytest_version=9.2.0
# The resolver the data-plane test asks the cloud's DNS with.
dnspython_version=2.9.2
clients=boto3-$boto3_version-awscli-$awscli_version-moto-$moto_version-pytest-$pytest_version-dnspython-$dnspython_version
venv=${FAKECLOUD_CACHE:-$HOME/.cache/fakecloud}/aws-clients/$clients

# A venv cannot be moved once made, so it is made in place; the marker says the install finished.
if [[ ! -f $venv/.installed ]]; then
	echo >&2 "==> installing boto3 $boto3_version, the AWS CLI $awscli_version, moto $moto_version, pytest" \
		"$pytest_version and dnspython $dnspython_version into $venv (once, about a minute)"
	rm -rf "$venv"
	python3 -m venv "$venv"
	nice -n 10 "$venv/bin/pip" install --quiet --disable-pip-version-check "boto3==$boto3_version" \
		"awscli==$awscli_version" "moto[ec2,elb,elbv2]==$moto_version" "flask==$flask_version" \
		"flask-cors==$flask_cors_version" "pytest==$pytest_version" \
		"dnspython==$dnspython_version"
	touch "$venv/.installed"
fi
printf '%s\n' "$venv"
