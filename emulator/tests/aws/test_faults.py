"""Faults on the AWS face as boto3 meets them (issue #49): botocore's standard retryer takes the emulator's
throttling for EC2's, retries it and gives up after its attempts; a hang is cut by the client's own timeout.

Faults are the admin's, set through the native API (FAKECLOUD_ENDPOINT, FAKECLOUD_ADMIN_TOKEN from the credentials
file); every attempt the SDK made is counted in the audit log, by the fault that shaped it.
"""

import json
import os
import time
import urllib.request

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError


def admin(method, path, body=None):
    """A native API call with the admin token; its JSON answer."""
    request = urllib.request.Request(
        os.environ["FAKECLOUD_ENDPOINT"] + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["FAKECLOUD_ADMIN_TOKEN"],
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


@pytest.fixture(autouse=True)
def no_faults_after():
    yield
    admin("DELETE", "/v1/faults")


def attempts(operation, fault):
    """The audit log's statuses of the calls to `operation` that `fault` shaped, oldest first."""
    entries = admin("GET", f"/v1/audit?operation={operation}")["items"]
    return [e["status"] for e in sorted(entries, key=lambda e: e["seq"]) if e.get("fault") == fault]


def ec2(**config):
    return boto3.client("ec2", config=Config(**config))


def test_the_standard_retryer_retries_request_limit_exceeded_until_it_passes():
    # Two throttled answers (a native 429, which the face answers as EC2's RequestLimitExceeded 503), then none.
    rule = {
        "match": {"operations": ["DescribeAvailabilityZones"]},
        "action": {"type": "error", "status": 429, "code": "TooManyRequests"},
        "trigger": {"times": 2},
    }
    fault = admin("POST", "/v1/faults", rule)["id"]
    answer = ec2(retries={"total_max_attempts": 3, "mode": "standard"}).describe_availability_zones()
    assert answer["ResponseMetadata"]["RetryAttempts"] == 2
    assert len(answer["AvailabilityZones"]) == 3
    assert attempts("DescribeAvailabilityZones", fault) == [503, 503]


def test_the_standard_retryer_gives_up_after_its_attempts_with_request_limit_exceeded():
    # One call, then the bucket is empty for good (refilled once in 1,000 s): every retry is throttled too.
    limit = {
        "scope": "operation",
        "operation": "DescribeSubnets",
        "capacity": 1,
        "refill_per_second": 0.001,
        "status": 429,
    }
    admin("PUT", "/v1/rate-limits/boto3-subnets", limit)
    client = ec2(retries={"total_max_attempts": 3, "mode": "standard"})
    client.describe_subnets()
    with pytest.raises(ClientError) as e:
        client.describe_subnets()
    assert e.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert e.value.response["ResponseMetadata"]["RetryAttempts"] == 2
    assert attempts("DescribeSubnets", "boto3-subnets") == [503, 503, 503]


def test_a_hang_is_cut_by_the_clients_read_timeout():
    # Held far longer than the client waits, so only the client's own timeout can end the call.
    rule = {
        "match": {"operations": ["DescribeVpcs"]},
        "action": {"type": "no-response", "mode": "hang", "hang_seconds": 600},
    }
    admin("POST", "/v1/faults", rule)
    client = ec2(read_timeout=1, retries={"total_max_attempts": 1, "mode": "standard"})
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        client.describe_vpcs()
    assert time.monotonic() - started < 60
