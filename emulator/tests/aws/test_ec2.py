"""boto3 against fakecloud's AWS face (issue #49), as a user of the AWS SDK meets it.

scripts/test-aws-face.sh starts `fakecloud serve`, makes instances with the `fakecloud` CLI (their JSON in the
file FAKECLOUD_AWS_MADE names), and sets what boto3 reads: AWS_ENDPOINT_URL, AWS_DEFAULT_REGION and the keys from
the credentials file the emulator wrote.
"""

import json
import os
import urllib.request

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

# One try: a refusal is the answer under test, not something to retry.
ONCE = Config(retries={"total_max_attempts": 1, "mode": "standard"})


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


# The writes come last: the reads above count exactly the instances the CLI made.


def set_quota(name, limit):
    """A quota set as an operator sets it: the native API's admin call (the AWS face is a user's)."""
    req = urllib.request.Request(
        f"{os.environ['FAKECLOUD_ENDPOINT']}/v1/quotas/{name}",
        data=json.dumps({"limit": limit}).encode(),
        method="PUT",
        headers={"Authorization": f"Bearer {os.environ['FAKECLOUD_ADMIN_TOKEN']}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 200


def native(path):
    req = urllib.request.Request(
        f"{os.environ['FAKECLOUD_ENDPOINT']}{path}",
        headers={"Authorization": f"Bearer {os.environ['FAKECLOUD_USER_TOKEN']}"},
    )
    with urllib.request.urlopen(req) as resp:
        return json.load(resp)


def state_changes(response, key):
    return [(c["InstanceId"], c["PreviousState"]["Name"], c["CurrentState"]["Name"]) for c in response[key]]


def test_run_instances_launches_tagged_instances_the_native_api_sees(ec2):
    region = os.environ["AWS_DEFAULT_REGION"]
    launch = dict(
        ImageId="ami-0123456789abcdef0",
        InstanceType="fc.medium",
        MinCount=2,
        MaxCount=2,
        Placement={"AvailabilityZone": f"{region}b"},
        ClientToken="boto3-launch-1",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": "boto3"}]}],
    )
    launched = ec2.run_instances(**launch)
    new = [i["InstanceId"] for i in launched["Instances"]]
    assert len(new) == 2 and all(i.startswith("i-") for i in new)
    for i in launched["Instances"]:
        assert i["Placement"]["AvailabilityZone"] == f"{region}b"
        assert i["InstanceType"] == "fc.medium"
        assert i["Tags"] == [{"Key": "Name", "Value": "boto3"}]
        assert native(f"/v1/instances/{i['InstanceId']}")["tags"] == {"Name": "boto3"}
    # A retry with the client token is the same launch.
    again = ec2.run_instances(**launch)
    assert [i["InstanceId"] for i in again["Instances"]] == new
    assert sorted(described(ec2, Filters=[{"Name": "tag:Name", "Values": ["boto3"]}])) == sorted(new)
    with pytest.raises(ClientError) as e:
        ec2.run_instances(ImageId="ami-1", MinCount=1, MaxCount=1, ClientToken="boto3-launch-1")
    assert error_code(e) == "IdempotentParameterMismatch"

    ec2.get_waiter("instance_running").wait(InstanceIds=new, WaiterConfig={"Delay": 1, "MaxAttempts": 10})
    stopped = ec2.stop_instances(InstanceIds=new)
    assert state_changes(stopped, "StoppingInstances") == [(i, "running", "stopped") for i in new]
    started = ec2.start_instances(InstanceIds=new[:1])
    assert state_changes(started, "StartingInstances") == [(new[0], "stopped", "running")]
    terminated = ec2.terminate_instances(InstanceIds=new)
    assert state_changes(terminated, "TerminatingInstances") == [
        (new[0], "running", "terminated"),
        (new[1], "stopped", "terminated"),
    ]
    assert terminated["TerminatingInstances"][0]["CurrentState"]["Code"] == 48
    with pytest.raises(ClientError) as e:
        ec2.start_instances(InstanceIds=new)
    assert error_code(e) == "IncorrectInstanceState"


def test_the_instance_quota_refuses_as_ec2_does(ec2):
    live = len(described(ec2, Filters=[{"Name": "instance-state-name", "Values": ["pending", "running", "stopped"]}]))
    set_quota("instances", live + 1)
    try:
        with pytest.raises(ClientError) as e:
            ec2.run_instances(ImageId="ami-1", MinCount=2, MaxCount=2)
        assert error_code(e) == "InstanceLimitExceeded"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert len(ec2.run_instances(ImageId="ami-1", MinCount=1, MaxCount=3)["Instances"]) == 1
    finally:
        set_quota("instances", 1000)


def test_routes_are_the_clouds_route_table(ec2, made):
    pages = ec2.get_paginator("describe_route_tables").paginate(
        Filters=[{"Name": "association.main", "Values": ["true"]}], PaginationConfig={"PageSize": 5}
    )
    tables = [t for p in pages for t in p["RouteTables"]]
    assert len(tables) == 1
    main = tables[0]
    vpc = ec2.describe_vpcs()["Vpcs"][0]
    assert main["VpcId"] == vpc["VpcId"]
    assert main["Routes"][0] == {
        "DestinationCidrBlock": vpc["CidrBlock"],
        "GatewayId": "local",
        "State": "active",
        "Origin": "CreateRouteTable",
    }
    assert main["Routes"][1]["DestinationCidrBlock"] == "0.0.0.0/0" and main["Routes"][1]["GatewayId"].startswith("igw-")
    subnets = {s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]}
    assert {a["SubnetId"] for a in main["Associations"] if not a["Main"]} == subnets

    # What cloud-provider-aws does: find the cluster's table by its tag, turn the check off, route a pod CIDR.
    rtb = main["RouteTableId"]
    ec2.create_tags(Resources=[rtb], Tags=[{"Key": "kubernetes.io/cluster/boto3", "Value": "owned"}])
    node = made["web-1"]["id"]
    ec2.modify_instance_attribute(InstanceId=node, SourceDestCheck={"Value": False})
    ec2.create_route(RouteTableId=rtb, DestinationCidrBlock="10.244.7.0/24", InstanceId=node)
    found = ec2.describe_route_tables(Filters=[{"Name": "tag-key", "Values": ["kubernetes.io/cluster/boto3"]}])
    routes = found["RouteTables"][0]["Routes"]
    assert {"DestinationCidrBlock": "10.244.7.0/24", "InstanceId": node, "State": "active"}.items() <= routes[-1].items()
    assert [(r["destination"], r["target_instance"]) for r in native("/v1/route-tables/main/routes")["items"]] == [
        ("10.244.7.0/24", node)
    ]
    with pytest.raises(ClientError) as e:
        ec2.create_route(RouteTableId=rtb, DestinationCidrBlock="10.244.7.0/24", InstanceId=node)
    assert error_code(e) == "RouteAlreadyExists"

    set_quota("routes-per-route-table", 1)
    try:
        with pytest.raises(ClientError) as e:
            ec2.create_route(RouteTableId=rtb, DestinationCidrBlock="10.244.8.0/24", InstanceId=node)
        assert error_code(e) == "RouteLimitExceeded"
    finally:
        set_quota("routes-per-route-table", 50)

    ec2.delete_route(RouteTableId=rtb, DestinationCidrBlock="10.244.7.0/24")
    assert native("/v1/route-tables/main/routes")["items"] == []
    with pytest.raises(ClientError) as e:
        ec2.delete_route(RouteTableId=rtb, DestinationCidrBlock="10.244.7.0/24")
    assert error_code(e) == "InvalidRoute.NotFound"
    with pytest.raises(ClientError) as e:
        ec2.describe_route_tables(RouteTableIds=["rtb-0123456789abcdef0"])
    assert error_code(e) == "InvalidRouteTableID.NotFound"


def test_a_subnet_made_private_with_a_table_of_its_own(ec2):
    """What an AWS user does to put nodes in a private subnet, and what cloud-provider-aws then reads: the
    subnet's table has no internet gateway route (its `isSubnetPublic`)."""
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    spec = [{"ResourceType": "route-table", "Tags": [{"Key": "Name", "Value": "private"}]}]
    made = ec2.create_route_table(VpcId=vpc, TagSpecifications=spec)["RouteTable"]
    private = made["RouteTableId"]
    assert [r.get("GatewayId") for r in made["Routes"]] == ["local"] and made["Associations"] == []
    assert made["Tags"] == [{"Key": "Name", "Value": "private"}]

    def table_of(subnet):
        found = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [subnet]}])
        return [t["RouteTableId"] for t in found["RouteTables"]]

    main = table_of(subnet)
    association = ec2.associate_route_table(RouteTableId=private, SubnetId=subnet)
    assert association["AssociationState"] == {"State": "associated"}
    assert table_of(subnet) == [private]
    assert [t["zones"] for t in native("/v1/route-tables")["items"] if t["id"] == private] == [
        [ec2.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["AvailabilityZone"]]
    ]
    for call, kwargs, code in [
        (ec2.associate_route_table, {"RouteTableId": main[0], "SubnetId": subnet}, "Resource.AlreadyAssociated"),
        (ec2.delete_route_table, {"RouteTableId": private}, "DependencyViolation"),
        (ec2.delete_route_table, {"RouteTableId": main[0]}, "DependencyViolation"),
        (ec2.create_route_table, {"VpcId": "vpc-0123456789abcdef0"}, "InvalidVpcID.NotFound"),
        (ec2.associate_route_table, {"RouteTableId": private, "SubnetId": "subnet-0123456789abcdef0"},
         "InvalidSubnetID.NotFound"),
    ]:
        with pytest.raises(ClientError) as e:
            call(**kwargs)
        assert error_code(e) == code, kwargs

    ec2.disassociate_route_table(AssociationId=association["AssociationId"])
    assert table_of(subnet) == main
    associations = ec2.describe_route_tables(RouteTableIds=main)["RouteTables"][0]["Associations"]
    main_own = next(a["RouteTableAssociationId"] for a in associations if a["Main"])
    for association_id, code in [
        (association["AssociationId"], "InvalidAssociationID.NotFound"),
        (main_own, "InvalidParameterValue"),
    ]:
        with pytest.raises(ClientError) as e:
            ec2.disassociate_route_table(AssociationId=association_id)
        assert error_code(e) == code
    ec2.delete_route_table(RouteTableId=private)
    with pytest.raises(ClientError) as e:
        ec2.describe_route_tables(RouteTableIds=[private])
    assert error_code(e) == "InvalidRouteTableID.NotFound"


def test_tags_on_instances_subnets_and_the_vpc(ec2, made):
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    node = made["db-1"]["id"]
    ec2.create_tags(Resources=[vpc, subnet, node], Tags=[{"Key": "kubernetes.io/cluster/tags", "Value": "shared"}])
    ec2.create_tags(Resources=[subnet], Tags=[{"Key": "kubernetes.io/role/elb", "Value": "1"}])
    elb = ec2.describe_subnets(Filters=[{"Name": "tag-key", "Values": ["kubernetes.io/role/elb"]}])["Subnets"]
    assert [s["SubnetId"] for s in elb] == [subnet]
    assert {"Key": "kubernetes.io/role/elb", "Value": "1"} in elb[0]["Tags"]
    assert native(f"/v1/instances/{node}")["tags"]["kubernetes.io/cluster/tags"] == "shared"

    pages = ec2.get_paginator("describe_tags").paginate(
        Filters=[{"Name": "key", "Values": ["kubernetes.io/cluster/tags"]}], PaginationConfig={"PageSize": 5}
    )
    described_tags = [t for p in pages for t in p["Tags"]]
    assert sorted((t["ResourceId"], t["ResourceType"]) for t in described_tags) == sorted(
        [(vpc, "vpc"), (subnet, "subnet"), (node, "instance")]
    )
    every = [t for p in ec2.get_paginator("describe_tags").paginate(PaginationConfig={"PageSize": 5}) for t in p["Tags"]]
    assert len(every) > 5 and len({(t["ResourceId"], t["Key"]) for t in every}) == len(every)

    with pytest.raises(ClientError) as e:
        ec2.create_tags(Resources=[node], Tags=[{"Key": f"k{i}", "Value": ""} for i in range(50)])
    assert error_code(e) == "TagLimitExceeded"
    with pytest.raises(ClientError) as e:
        ec2.create_tags(Resources=[node], Tags=[{"Key": "aws:reserved", "Value": "x"}])
    assert error_code(e) == "InvalidParameterValue"
    with pytest.raises(ClientError) as e:
        ec2.create_tags(Resources=[node], Tags=[{"Key": "k", "Value": "v"}], DryRun=True)
    assert error_code(e) == "DryRunOperation"
    assert "k" not in native(f"/v1/instances/{node}")["tags"]

    ec2.delete_tags(Resources=[vpc, node], Tags=[{"Key": "kubernetes.io/cluster/tags"}])
    assert ec2.describe_vpcs()["Vpcs"][0]["Tags"] == []
    assert native(f"/v1/instances/{node}")["tags"] == made["db-1"]["tags"]
