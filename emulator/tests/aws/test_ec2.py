"""boto3 against fakecloud's AWS face (issue #49), as a user of the AWS SDK meets it.

scripts/test-aws-face.sh starts `fakecloud serve`, makes instances with the `fakecloud` CLI (their JSON in the
file FAKECLOUD_AWS_MADE names), and sets what boto3 reads: AWS_ENDPOINT_URL, AWS_DEFAULT_REGION and the keys from
the credentials file the emulator wrote.
"""

import json
import os

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

# One try: a refusal is the answer under test, not something to retry.
ONCE = Config(retries={"max_attempts": 1, "mode": "standard"})


@pytest.fixture(scope="module")
def ec2():
    return boto3.client("ec2", config=ONCE)


@pytest.fixture(scope="module")
def made():
    with open(os.environ["FAKECLOUD_AWS_MADE"]) as f:
        return {i["name"]: i for i in json.load(f)}


def ids(response):
    return [i["InstanceId"] for r in response["Reservations"] for i in r["Instances"]]


def described(ec2, **kwargs):
    return ids(ec2.describe_instances(**kwargs))


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]


def test_availability_zones_are_the_regions(ec2):
    region = os.environ["AWS_DEFAULT_REGION"]
    zones = ec2.describe_availability_zones()["AvailabilityZones"]
    assert [z["ZoneName"] for z in zones] == [f"{region}a", f"{region}b", f"{region}c"]
    assert {z["State"] for z in zones} == {"available"}
    assert {z["RegionName"] for z in zones} == {region}
    zone_ids = [z["ZoneId"] for z in zones]
    assert len(set(zone_ids)) == 3 and all("-az" in z for z in zone_ids)
    one = ec2.describe_availability_zones(ZoneNames=[f"{region}b"])["AvailabilityZones"]
    assert [z["ZoneId"] for z in one] == [zone_ids[1]]


def test_every_instance_is_described_as_ec2_does(ec2, made):
    response = ec2.describe_instances()
    assert sorted(ids(response)) == sorted(i["id"] for i in made.values())
    web = next(i for r in response["Reservations"] for i in r["Instances"] if i["InstanceId"] == made["web-1"]["id"])
    assert web["State"] == {"Code": 16, "Name": "running"}
    assert web["PrivateIpAddress"] == made["web-1"]["private_ip"]
    region = os.environ["AWS_DEFAULT_REGION"]
    dashed = made["web-1"]["private_ip"].replace(".", "-")
    assert web["PrivateDnsName"] == f"ip-{dashed}.{region}.compute.internal"
    assert web["Placement"]["AvailabilityZone"] == made["web-1"]["zone"]
    assert {t["Key"]: t["Value"] for t in web["Tags"]} == made["web-1"]["tags"]
    assert web["VpcId"].startswith("vpc-") and web["SubnetId"].startswith("subnet-")
    assert web["LaunchTime"].year >= 2024


@pytest.mark.parametrize(
    "name, values, expected",
    [
        ("instance-id", lambda m: [m["db-1"]["id"]], ["db-1"]),
        ("private-dns-name", lambda m: [f"ip-{m['web-2']['private_ip'].replace('.', '-')}.*"], ["web-2"]),
        ("instance-state-name", lambda m: ["stopped"], ["stopped-1"]),
        ("availability-zone", lambda m: [m["db-1"]["zone"]], ["db-1"]),
        ("tag:role", lambda m: ["web"], ["web-1", "web-2"]),
        ("tag-key", lambda m: ["team"], ["db-1"]),
    ],
)
def test_each_filter_selects_what_it_names(ec2, made, name, values, expected):
    got = described(ec2, Filters=[{"Name": name, "Values": values(made)}])
    assert sorted(got) == sorted(made[n]["id"] for n in expected)


def test_instance_ids_select_and_an_unknown_one_is_not_found(ec2, made):
    assert described(ec2, InstanceIds=[made["web-2"]["id"]]) == [made["web-2"]["id"]]
    with pytest.raises(ClientError) as e:
        ec2.describe_instances(InstanceIds=["i-0123456789abcdef0"])
    assert error_code(e) == "InvalidInstanceID.NotFound"


def test_the_paginator_pages_through_every_instance_once(ec2, made):
    pages = list(ec2.get_paginator("describe_instances").paginate(PaginationConfig={"PageSize": 5}))
    assert len(pages) == -(-len(made) // 5)
    seen = [i for p in pages for i in ids(p)]
    assert sorted(seen) == sorted(i["id"] for i in made.values())


def test_vpc_and_subnets_are_the_topologys(ec2):
    vpcs = ec2.describe_vpcs()["Vpcs"]
    assert len(vpcs) == 1 and vpcs[0]["State"] == "available"
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpcs[0]["VpcId"]]}])["Subnets"]
    assert len(subnets) == 3


def test_a_dry_run_would_have_succeeded(ec2):
    with pytest.raises(ClientError) as e:
        ec2.describe_instances(DryRun=True)
    assert error_code(e) == "DryRunOperation"


def test_a_wrong_secret_is_an_auth_failure():
    wrong = boto3.client(
        "ec2",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key="not-the-secret-" + "x" * 25,
        config=ONCE,
    )
    with pytest.raises(ClientError) as e:
        wrong.describe_instances()
    assert error_code(e) == "AuthFailure"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 401
