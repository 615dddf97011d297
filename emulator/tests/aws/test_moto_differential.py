"""The differential test (issue #49): one scripted session of boto3 calls (EC2, then classic ELB's and ELBv2's,
named `ELB …` and `ELBv2 …`) against moto's server and against a fresh fakecloud, the answers compared shape by
shape: every field's path and type (IDs, names, addresses and times are values, not compared) and every
refusal's error code. moto is a reference nobody here wrote; where fakecloud
differs on purpose (moto is wrong against AWS's documentation, or fakecloud models what moto does not), the README
says so in its table of intended differences, which this test reads: a difference not in the table fails it, and
so does a row of the table that no longer differs.
"""

import os
import re

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from servers import fresh_cloud, moto

ONCE = Config(retries={"total_max_attempts": 1, "mode": "standard"})
README = os.path.join(os.path.dirname(__file__), "..", "..", "..", "README.md")


def client(service, url, region, key_id, secret):
    return boto3.client(
        service,
        endpoint_url=url,
        region_name=region,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=ONCE,
    )


def answer(call, **kwargs):
    """A call's answer, or its refusal as the error code it carries."""
    try:
        return call(**kwargs)
    except ClientError as e:
        return {"Error": {"Code": e.response["Error"]["Code"]}}


def ec2_session(ec2, instance_type):
    """What a user's tests and cloud-provider-aws do on EC2, in order: (action, answer) pairs."""
    zones = answer(ec2.describe_availability_zones)
    yield "DescribeAvailabilityZones", zones
    zone = zones["AvailabilityZones"][0]["ZoneName"]
    vpcs = answer(ec2.describe_vpcs)
    yield "DescribeVpcs", vpcs
    vpc = vpcs["Vpcs"][0]["VpcId"]
    subnets = answer(ec2.describe_subnets, Filters=[{"Name": "vpc-id", "Values": [vpc]}])
    yield "DescribeSubnets", subnets
    subnet = next(s["SubnetId"] for s in subnets["Subnets"] if s["AvailabilityZone"] == zone)
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "KubernetesCluster", "Value": "diff"}]}]
    run = answer(
        ec2.run_instances,
        ImageId="ami-0123456789abcdef0",
        InstanceType=instance_type,
        MinCount=2,
        MaxCount=2,
        SubnetId=subnet,
        TagSpecifications=tags,
    )
    yield "RunInstances", run
    ids = [i["InstanceId"] for i in run["Instances"]]
    dns = run["Instances"][0]["PrivateDnsName"]
    yield "DescribeInstances", answer(ec2.describe_instances, Filters=[{"Name": "private-dns-name", "Values": [dns]}])
    yield "DescribeInstances", answer(ec2.describe_instances, InstanceIds=ids)
    yield "DescribeInstances", answer(ec2.describe_instances, InstanceIds=["i-0123456789abcdef0"])
    yield "CreateTags", answer(ec2.create_tags, Resources=ids, Tags=[{"Key": "role", "Value": "node"}])
    yield "DescribeTags", answer(ec2.describe_tags, Filters=[{"Name": "resource-id", "Values": ids[:1]}])
    yield "DeleteTags", answer(ec2.delete_tags, Resources=ids, Tags=[{"Key": "role"}])
    check = {"Value": False}
    yield "ModifyInstanceAttribute", answer(ec2.modify_instance_attribute, InstanceId=ids[0], SourceDestCheck=check)
    tables = answer(ec2.describe_route_tables, Filters=[{"Name": "vpc-id", "Values": [vpc]}])
    yield "DescribeRouteTables", tables
    table = tables["RouteTables"][0]["RouteTableId"]
    route = dict(RouteTableId=table, DestinationCidrBlock="10.244.1.0/24")
    yield "CreateRoute", answer(ec2.create_route, InstanceId=ids[0], **route)
    yield "CreateRoute", answer(ec2.create_route, InstanceId=ids[1], **route)
    yield "DescribeRouteTables", answer(ec2.describe_route_tables, RouteTableIds=[table])
    yield "DeleteRoute", answer(ec2.delete_route, **route)
    yield "DeleteRoute", answer(ec2.delete_route, **route)
    # A subnet made private, as a user's VPC has its nodes' subnets: a table of its own, without the internet's.
    spec = [{"ResourceType": "route-table", "Tags": [{"Key": "Name", "Value": "private"}]}]
    made = answer(ec2.create_route_table, VpcId=vpc, TagSpecifications=spec)
    yield "CreateRouteTable", made
    private = made["RouteTable"]["RouteTableId"]
    associated = answer(ec2.associate_route_table, RouteTableId=private, SubnetId=subnet)
    yield "AssociateRouteTable", associated
    yield "AssociateRouteTable", answer(ec2.associate_route_table, RouteTableId=table, SubnetId=subnet)
    by_subnet = [{"Name": "association.subnet-id", "Values": [subnet]}]
    yield "DescribeRouteTables", answer(ec2.describe_route_tables, Filters=by_subnet)
    yield "DeleteRouteTable", answer(ec2.delete_route_table, RouteTableId=private)
    association = associated["AssociationId"]
    yield "DisassociateRouteTable", answer(ec2.disassociate_route_table, AssociationId=association)
    yield "DisassociateRouteTable", answer(ec2.disassociate_route_table, AssociationId=association)
    yield "DeleteRouteTable", answer(ec2.delete_route_table, RouteTableId=private)
    yield "DeleteRouteTable", answer(ec2.delete_route_table, RouteTableId=private)
    yield "StopInstances", answer(ec2.stop_instances, InstanceIds=ids[:1])
    yield "StartInstances", answer(ec2.start_instances, InstanceIds=ids[:1])
    yield "TerminateInstances", answer(ec2.terminate_instances, InstanceIds=ids)


def launched(ec2, instance_type, zone):
    """Two running instances in `zone`, for the load balancers' sessions (their launch is EC2's session's)."""
    subnet = next(
        s["SubnetId"] for s in ec2.describe_subnets()["Subnets"] if s["AvailabilityZone"] == zone
    )
    run = ec2.run_instances(
        ImageId="ami-0123456789abcdef0", InstanceType=instance_type, MinCount=2, MaxCount=2, SubnetId=subnet
    )
    return subnet, [i["InstanceId"] for i in run["Instances"]]


def elb_session(ec2, elb, instance_type):
    """What cloud-provider-aws does on classic ELB for a Service, and a test's reads beside it."""
    zone = ec2.describe_availability_zones()["AvailabilityZones"][0]["ZoneName"]
    subnet, ids = launched(ec2, instance_type, zone)
    name = "a0123456789abcdef0123456789abcd"
    listener = {"Protocol": "TCP", "LoadBalancerPort": 80, "InstanceProtocol": "TCP", "InstancePort": 30080}
    service = [{"Key": "kubernetes.io/service-name", "Value": "default/web"}]
    yield "ELB CreateLoadBalancer", answer(
        elb.create_load_balancer, LoadBalancerName=name, Listeners=[listener], Subnets=[subnet], Tags=service
    )
    yield "ELB DescribeLoadBalancers", answer(elb.describe_load_balancers, LoadBalancerNames=[name])
    yield "ELB DescribeLoadBalancers", answer(elb.describe_load_balancers, LoadBalancerNames=["nope"])
    check = {"Target": "TCP:30080", "Interval": 10, "Timeout": 5, "UnhealthyThreshold": 6, "HealthyThreshold": 2}
    yield "ELB ConfigureHealthCheck", answer(elb.configure_health_check, LoadBalancerName=name, HealthCheck=check)
    instances = [{"InstanceId": i} for i in ids]
    yield "ELB RegisterInstancesWithLoadBalancer", answer(
        elb.register_instances_with_load_balancer, LoadBalancerName=name, Instances=instances
    )
    yield "ELB DescribeInstanceHealth", answer(elb.describe_instance_health, LoadBalancerName=name)
    cross_zone = {"CrossZoneLoadBalancing": {"Enabled": True}}
    yield "ELB ModifyLoadBalancerAttributes", answer(
        elb.modify_load_balancer_attributes, LoadBalancerName=name, LoadBalancerAttributes=cross_zone
    )
    yield "ELB DescribeLoadBalancerAttributes", answer(elb.describe_load_balancer_attributes, LoadBalancerName=name)
    proxy = [{"AttributeName": "ProxyProtocol", "AttributeValue": "true"}]
    yield "ELB CreateLoadBalancerPolicy", answer(
        elb.create_load_balancer_policy,
        LoadBalancerName=name,
        PolicyName="k8s-proxyprotocol-enabled",
        PolicyTypeName="ProxyProtocolPolicyType",
        PolicyAttributes=proxy,
    )
    yield "ELB DescribeLoadBalancerPolicies", answer(elb.describe_load_balancer_policies, LoadBalancerName=name)
    yield "ELB AddTags", answer(elb.add_tags, LoadBalancerNames=[name], Tags=[{"Key": "team", "Value": "web"}])
    yield "ELB DescribeTags", answer(elb.describe_tags, LoadBalancerNames=[name])
    yield "ELB DeregisterInstancesFromLoadBalancer", answer(
        elb.deregister_instances_from_load_balancer, LoadBalancerName=name, Instances=instances[:1]
    )
    yield "ELB DeleteLoadBalancer", answer(elb.delete_load_balancer, LoadBalancerName=name)
    ec2.terminate_instances(InstanceIds=ids)


def elbv2_session(ec2, elbv2, instance_type):
    """What cloud-provider-aws does on ELBv2 for a Service of `aws-load-balancer-type: nlb`."""
    zone = ec2.describe_availability_zones()["AvailabilityZones"][0]["ZoneName"]
    subnet, ids = launched(ec2, instance_type, zone)
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    made = answer(elbv2.create_load_balancer, Name="k8s-nlb", Type="network", Subnets=[subnet], Scheme="internal")
    yield "ELBv2 CreateLoadBalancer", made
    lb = made["LoadBalancers"][0]["LoadBalancerArn"]
    yield "ELBv2 DescribeLoadBalancers", answer(elbv2.describe_load_balancers, Names=["k8s-nlb"])
    group = answer(
        elbv2.create_target_group,
        Name="k8s-tg-30080",
        Protocol="TCP",
        Port=30080,
        VpcId=vpc,
        TargetType="instance",
        HealthCheckProtocol="TCP",
    )
    yield "ELBv2 CreateTargetGroup", group
    tg = group["TargetGroups"][0]["TargetGroupArn"]
    targets = [{"Id": i, "Port": 30080} for i in ids]
    yield "ELBv2 RegisterTargets", answer(elbv2.register_targets, TargetGroupArn=tg, Targets=targets)
    forward = [{"Type": "forward", "TargetGroupArn": tg}]
    yield "ELBv2 CreateListener", answer(
        elbv2.create_listener, LoadBalancerArn=lb, Protocol="TCP", Port=80, DefaultActions=forward
    )
    yield "ELBv2 DescribeListeners", answer(elbv2.describe_listeners, LoadBalancerArn=lb)
    yield "ELBv2 DescribeTargetGroups", answer(elbv2.describe_target_groups, LoadBalancerArn=lb)
    yield "ELBv2 DescribeTargetGroups", answer(elbv2.describe_target_groups, Names=["nope"])
    yield "ELBv2 DescribeTargetHealth", answer(elbv2.describe_target_health, TargetGroupArn=tg)
    delay = [{"Key": "deregistration_delay.timeout_seconds", "Value": "30"}]
    yield "ELBv2 ModifyTargetGroupAttributes", answer(
        elbv2.modify_target_group_attributes, TargetGroupArn=tg, Attributes=delay
    )
    yield "ELBv2 DescribeLoadBalancerAttributes", answer(elbv2.describe_load_balancer_attributes, LoadBalancerArn=lb)
    yield "ELBv2 AddTags", answer(elbv2.add_tags, ResourceArns=[lb, tg], Tags=[{"Key": "team", "Value": "web"}])
    yield "ELBv2 DescribeTags", answer(elbv2.describe_tags, ResourceArns=[lb, tg])
    yield "ELBv2 DeleteLoadBalancer", answer(elbv2.delete_load_balancer, LoadBalancerArn=lb)
    yield "ELBv2 DeleteTargetGroup", answer(elbv2.delete_target_group, TargetGroupArn=tg)
    ec2.terminate_instances(InstanceIds=ids)


def shape(value, path=""):
    """Each field's path (a list's items under `list[]`, merged) and type; an error code is its value."""
    if isinstance(value, dict):
        fields = {}
        for key, item in value.items():
            if key != "ResponseMetadata":
                fields.update(shape(item, f"{path}.{key}" if path else key))
        return fields
    if isinstance(value, list):
        # The list itself, then its items' fields: an empty list and a list of some differ by the items.
        fields = {path: "list"}
        for item in value:
            fields.update(shape(item, f"{path}[]"))
        return fields
    if path == "Error.Code":
        return {path: f"error {value}"}
    return {path: type(value).__name__}


def differences(mine, theirs):
    """(action, path, what) for each place the two sessions' answers differ in shape, each once."""
    found = set()
    for (action, a), (also, b) in zip(mine, theirs, strict=True):
        assert action == also
        ours, reference = shape(a), shape(b)
        for path in ours.keys() | reference.keys():
            if path not in reference:
                found.add((action, path, "only fakecloud"))
            elif path not in ours:
                found.add((action, path, "only moto"))
            elif ours[path] != reference[path]:
                found.add((action, path, f"fakecloud {ours[path]}, moto {reference[path]}"))
    return found


def intended():
    """The README's table of intended differences: rows of (actions, fields, difference, why). A cell may name
    several actions or fields, comma-separated; a field is matched at the end of a path (`ImageId` is
    `Reservations[].Instances[].ImageId` too), and `Field.*` stands for the field and everything under it."""
    with open(README) as f:
        text = f.read()
    table = re.search(r"<!-- moto-differences -->\n(.*?)\n<!-- /moto-differences -->", text, re.S)
    assert table, "README.md has no table between <!-- moto-differences --> and <!-- /moto-differences -->"
    rows = []
    for line in table.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"a row of the README's table is not | actions | fields | difference | why |: {line}"
        actions, fields, what, _why = cells
        split = lambda cell: [c.strip().strip("`") for c in cell.split(",")]  # noqa: E731
        rows.append((tuple(split(actions)), tuple(split(fields)), what))
    return rows


def names(path, field):
    """Whether `field` names `path`: the path ends with it at a field's boundary; `X.*` is X and what is under it."""
    whole = field.removesuffix(".*")
    for start in [0] + [i + 1 for i, c in enumerate(path) if c == "."]:
        rest = path[start:]
        if rest == whole or (field.endswith(".*") and rest.startswith((whole + ".", whole + "[]"))):
            return True
    return False


def covers(row, found):
    actions, fields, what = row
    action, path, difference = found
    return action in actions and difference == what and any(names(path, f) for f in fields)


def session(url, region, key_id, secret, instance_type):
    """The whole scripted session against one server: EC2's, classic ELB's, then ELBv2's calls."""
    c = {name: client(name, url, region, key_id, secret) for name in ("ec2", "elb", "elbv2")}
    return [
        *ec2_session(c["ec2"], instance_type),
        *elb_session(c["ec2"], c["elb"], instance_type),
        *elbv2_session(c["ec2"], c["elbv2"], instance_type),
    ]


@pytest.fixture(scope="module")
def sessions():
    with fresh_cloud() as (url, keys, _), moto() as reference:
        ours = session(url, "local-1", keys["AWS_ACCESS_KEY_ID"], keys["AWS_SECRET_ACCESS_KEY"], "fc.medium")
        yield ours, session(reference, "us-east-1", "testing", "testing", "t3.medium")


def test_fakecloud_answers_as_moto_does_but_where_the_readme_says_why(sessions):
    found = differences(*sessions)
    rows = intended()
    unexplained = sorted(f for f in found if not any(covers(r, f) for r in rows))
    # Each action and field of a row must still differ: a row cannot outlive what it explains.
    pairs = [((action,), (field,), what) for actions, fields, what in rows for action in actions for field in fields]
    stale = sorted(p for p in pairs if not any(covers(p, f) for f in found))
    assert not unexplained, "differences from moto the README does not explain:\n" + "\n".join(
        f"| {a} | `{p}` | {w} | ? |" for a, p, w in unexplained
    )
    assert not stale, "the README's table explains differences there no longer are:\n" + "\n".join(
        f"{a[0]}: {f[0]} ({w})" for a, f, w in stale
    )
