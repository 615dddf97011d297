"""boto3's elbv2 client against fakecloud's AWS face: network load balancers as cloud-provider-aws makes them
(a load balancer, a target group per port, its targets, a listener forwarding to it), read back with botocore's
shapes, its waiter and paginator, and every refusal as a ClientError with ELB's code.

scripts/test-aws-face.sh serves the emulator without a data plane: target health here is what is known without
one (unused, draining, unavailable); emulator/tests/it/aws_elbv2.rs checks live traffic and health.
"""

import json
import os

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

ONCE = Config(retries={"total_max_attempts": 1, "mode": "standard"})


@pytest.fixture(scope="module")
def elbv2():
    return boto3.client("elbv2", config=ONCE)


@pytest.fixture(scope="module")
def ec2():
    return boto3.client("ec2", config=ONCE)


@pytest.fixture(scope="module")
def running():
    with open(os.environ["FAKECLOUD_AWS_MADE"]) as f:
        return [i["id"] for i in json.load(f) if i["name"] in ("web-1", "web-2")]


def code(excinfo):
    return excinfo.value.response["Error"]["Code"]


@pytest.fixture(scope="module")
def nlb(elbv2, ec2):
    subnets = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]]
    made = elbv2.create_load_balancer(
        Name="boto-nlb",
        Type="network",
        SubnetMappings=[{"SubnetId": s} for s in subnets],
        Tags=[{"Key": "kubernetes.io/service-name", "Value": "default/web"}],
    )["LoadBalancers"][0]
    yield made
    elbv2.delete_load_balancer(LoadBalancerArn=made["LoadBalancerArn"])


def test_an_nlb_is_made_and_becomes_active(elbv2, ec2, nlb):
    assert nlb["Type"] == "network" and nlb["Scheme"] == "internet-facing"
    assert nlb["State"]["Code"] in ("provisioning", "active")
    assert nlb["VpcId"] == ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    assert nlb["DNSName"], "shown from the start, as the CCM reads it"
    assert len(nlb["AvailabilityZones"]) == 3
    elbv2.get_waiter("load_balancer_available").wait(Names=["boto-nlb"], WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    described = elbv2.describe_load_balancers(LoadBalancerArns=[nlb["LoadBalancerArn"]])["LoadBalancers"]
    assert described[0]["State"]["Code"] == "active"
    assert described[0]["CreatedTime"].year >= 2024


def test_refusals_are_client_errors_with_elbs_codes(elbv2, ec2, nlb):
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    for kwargs, want in [
        ({"Name": "alb", "Type": "application", "Subnets": [subnet]}, "InvalidConfigurationRequest"),
        ({"Name": "boto-nlb", "Type": "network", "Subnets": [subnet]}, "DuplicateLoadBalancerName"),
        ({"Name": "x", "Type": "network", "Subnets": ["subnet-nope"]}, "SubnetNotFound"),
    ]:
        with pytest.raises(ClientError) as e:
            elbv2.create_load_balancer(**kwargs)
        assert code(e) == want
    with pytest.raises(ClientError) as e:
        elbv2.describe_load_balancers(Names=["nope"])
    assert code(e) == "LoadBalancerNotFound"


def test_a_paginator_walks_every_load_balancer(elbv2, ec2, nlb):
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    extra = [elbv2.create_load_balancer(Name=f"page-{i}", Type="network", Subnets=[subnet]) for i in range(3)]
    try:
        pages = list(elbv2.get_paginator("describe_load_balancers").paginate(PaginationConfig={"PageSize": 2}))
        assert len(pages) == 2
        names = [lb["LoadBalancerName"] for p in pages for lb in p["LoadBalancers"]]
        assert names == ["boto-nlb", "page-0", "page-1", "page-2"]
    finally:
        for made in extra:
            elbv2.delete_load_balancer(LoadBalancerArn=made["LoadBalancers"][0]["LoadBalancerArn"])


def test_a_target_group_its_targets_and_a_listener(elbv2, ec2, nlb, running):
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    group = elbv2.create_target_group(
        Name="boto-tg",
        Protocol="TCP",
        Port=30080,
        VpcId=vpc,
        TargetType="instance",
        HealthCheckProtocol="TCP",
        HealthCheckPort="traffic-port",
        HealthCheckIntervalSeconds=10,
        Tags=[{"Key": "team", "Value": "web"}],
    )["TargetGroups"][0]
    arn = group["TargetGroupArn"]
    assert ":targetgroup/boto-tg/" in arn and group["HealthCheckIntervalSeconds"] == 10
    with pytest.raises(ClientError) as e:
        elbv2.create_target_group(Name="boto-tg", Protocol="TCP", Port=1, VpcId=vpc)
    assert code(e) == "DuplicateTargetGroupName"

    elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": i, "Port": 30080} for i in running])
    with pytest.raises(ClientError) as e:
        elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": "i-00000000000000000"}])
    assert code(e) == "InvalidTarget"
    health = elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
    assert {h["TargetHealth"]["State"] for h in health} == {"unused"}
    assert {h["TargetHealth"]["Reason"] for h in health} == {"Target.NotInUse"}

    listener = elbv2.create_listener(
        LoadBalancerArn=nlb["LoadBalancerArn"],
        Protocol="TCP",
        Port=80,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": arn}],
    )["Listeners"][0]
    assert listener["DefaultActions"][0]["TargetGroupArn"] == arn
    with pytest.raises(ClientError) as e:
        elbv2.create_listener(
            LoadBalancerArn=nlb["LoadBalancerArn"],
            Protocol="TCP",
            Port=80,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": arn}],
        )
    assert code(e) == "DuplicateListener"
    with pytest.raises(ClientError) as e:
        elbv2.create_listener(
            LoadBalancerArn=nlb["LoadBalancerArn"],
            Protocol="TLS",
            Port=443,
            Certificates=[{"CertificateArn": "arn:aws:acm:local-1:1:certificate/x"}],
            DefaultActions=[{"Type": "forward", "TargetGroupArn": arn}],
        )
    assert code(e) == "CertificateNotFound"
    with pytest.raises(ClientError) as e:
        elbv2.delete_target_group(TargetGroupArn=arn)
    assert code(e) == "ResourceInUse"

    groups = elbv2.describe_target_groups(LoadBalancerArn=nlb["LoadBalancerArn"])["TargetGroups"]
    assert [g["TargetGroupArn"] for g in groups] == [arn]
    assert groups[0]["LoadBalancerArns"] == [nlb["LoadBalancerArn"]]
    listeners = elbv2.describe_listeners(LoadBalancerArn=nlb["LoadBalancerArn"])["Listeners"]
    assert [(l["Protocol"], l["Port"]) for l in listeners] == [("TCP", 80)]
    # No data plane here: nothing checks the targets.
    health = elbv2.describe_target_health(TargetGroupArn=arn)["TargetHealthDescriptions"]
    assert {h["TargetHealth"]["State"] for h in health} == {"unavailable"}

    elbv2.modify_target_group(TargetGroupArn=arn, HealthyThresholdCount=3, UnhealthyThresholdCount=3)
    assert elbv2.describe_target_groups(Names=["boto-tg"])["TargetGroups"][0]["HealthyThresholdCount"] == 3
    elbv2.modify_target_group_attributes(
        TargetGroupArn=arn, Attributes=[{"Key": "deregistration_delay.timeout_seconds", "Value": "30"}]
    )
    attributes = elbv2.describe_target_group_attributes(TargetGroupArn=arn)["Attributes"]
    assert {"Key": "deregistration_delay.timeout_seconds", "Value": "30"} in attributes
    elbv2.deregister_targets(TargetGroupArn=arn, Targets=[{"Id": running[0], "Port": 30080}])
    health = elbv2.describe_target_health(TargetGroupArn=arn, Targets=[{"Id": running[0], "Port": 30080}])
    assert health["TargetHealthDescriptions"][0]["TargetHealth"]["State"] == "draining"

    elbv2.delete_listener(ListenerArn=listener["ListenerArn"])
    elbv2.delete_target_group(TargetGroupArn=arn)
    with pytest.raises(ClientError) as e:
        elbv2.describe_target_groups(TargetGroupArns=[arn])
    assert code(e) == "TargetGroupNotFound"


def test_tags_and_attributes_of_a_load_balancer(elbv2, nlb):
    arn = nlb["LoadBalancerArn"]
    elbv2.add_tags(ResourceArns=[arn], Tags=[{"Key": "cost-center", "Value": "42"}])
    tags = elbv2.describe_tags(ResourceArns=[arn])["TagDescriptions"][0]["Tags"]
    assert {"Key": "cost-center", "Value": "42"} in tags
    elbv2.remove_tags(ResourceArns=[arn], TagKeys=["cost-center"])
    tags = elbv2.describe_tags(ResourceArns=[arn])["TagDescriptions"][0]["Tags"]
    assert tags == [{"Key": "kubernetes.io/service-name", "Value": "default/web"}]
    with pytest.raises(ClientError) as e:
        elbv2.add_tags(ResourceArns=[arn], Tags=[{"Key": f"k{i}", "Value": "v"} for i in range(50)])
    assert code(e) == "TooManyTags"

    elbv2.modify_load_balancer_attributes(
        LoadBalancerArn=arn, Attributes=[{"Key": "load_balancing.cross_zone.enabled", "Value": "true"}]
    )
    attributes = elbv2.describe_load_balancer_attributes(LoadBalancerArn=arn)["Attributes"]
    assert {"Key": "load_balancing.cross_zone.enabled", "Value": "true"} in attributes
    with pytest.raises(ClientError) as e:
        elbv2.modify_load_balancer_attributes(LoadBalancerArn=arn, Attributes=[{"Key": "nope", "Value": "1"}])
    assert code(e) == "InvalidConfigurationRequest"
