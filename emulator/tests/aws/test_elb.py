"""boto3's classic Elastic Load Balancing client (`elb`, 2012-06-01) against fakecloud's AWS face (issue #50): the
calls cloud-provider-aws makes for a Service of type LoadBalancer, as a user of the SDK meets them.

The load balancers made here are the native API's too (FAKECLOUD_ENDPOINT with the user token); the instances
are those scripts/test-aws-face.sh made with the CLI (FAKECLOUD_AWS_MADE).
"""

import json
import os
import urllib.request

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

ONCE = Config(retries={"total_max_attempts": 1, "mode": "standard"})


@pytest.fixture(scope="module")
def elb():
    return boto3.client("elb", config=ONCE)


@pytest.fixture(scope="module")
def made():
    with open(os.environ["FAKECLOUD_AWS_MADE"]) as f:
        return {i["name"]: i for i in json.load(f)}


@pytest.fixture(scope="module")
def subnets():
    ec2 = boto3.client("ec2", config=ONCE)
    return {s["AvailabilityZone"]: s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]}


def native(path):
    """A native API call with the user token; its JSON answer."""
    request = urllib.request.Request(
        os.environ["FAKECLOUD_ENDPOINT"] + path,
        headers={"Authorization": "Bearer " + os.environ["FAKECLOUD_USER_TOKEN"]},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def native_named(name):
    return [lb for lb in native("/v1/load-balancers?page_size=1000")["items"] if lb["name"] == name]


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]


def listener(port, instance_port, protocol="TCP"):
    return {"Protocol": protocol, "LoadBalancerPort": port, "InstanceProtocol": protocol, "InstancePort": instance_port}


@pytest.fixture(scope="module")
def group():
    """The VPC's default security group, which admits what its own members send (no load balancer client)."""
    ec2 = boto3.client("ec2", config=ONCE)
    return ec2.describe_security_groups(GroupNames=["default"])["SecurityGroups"][0]["GroupId"]


@pytest.fixture
def lb(elb, subnets, group):
    """A load balancer as cloud-provider-aws makes one; deleted after the test."""
    name = "a" + os.urandom(8).hex()
    dns = elb.create_load_balancer(
        LoadBalancerName=name,
        Listeners=[listener(80, 30080), listener(8080, 30081, "HTTP")],
        Subnets=[subnets[sorted(subnets)[0]]],
        SecurityGroups=[group],
        Tags=[{"Key": "kubernetes.io/service-name", "Value": "default/web"}],
    )["DNSName"]
    yield name, dns
    elb.delete_load_balancer(LoadBalancerName=name)


def test_a_load_balancer_is_described_at_once_and_is_the_native_apis(elb, lb, subnets, group):
    name, dns = lb
    [d] = elb.describe_load_balancers(LoadBalancerNames=[name])["LoadBalancerDescriptions"]
    assert d["DNSName"] == dns and d["Scheme"] == "internet-facing"
    assert [ld["Listener"] for ld in d["ListenerDescriptions"]] == [listener(80, 30080), listener(8080, 30081, "HTTP")]
    assert d["HealthCheck"] == {
        "Target": "TCP:30080",
        "Interval": 30,
        "Timeout": 5,
        "UnhealthyThreshold": 2,
        "HealthyThreshold": 10,
    }
    zone = sorted(subnets)[0]
    assert (d["Subnets"], d["AvailabilityZones"]) == ([subnets[zone]], [zone])
    assert d["SecurityGroups"] == [group]
    assert d["VPCId"].startswith("vpc-") and d["CanonicalHostedZoneNameID"].startswith("Z")
    assert d["CreatedTime"].year >= 2024
    [row] = native_named(name)
    assert (row["state"], row["dns_name"]) == ("active", dns)
    assert [(l["protocol"], l["port"], l["backend_port"]) for l in row["listeners"]] == [
        ("TCP", 80, 30080),
        ("TCP", 8080, 30081),
    ]


def test_instances_register_and_the_deregistered_waiter_ends(elb, lb, made):
    name, _ = lb
    one, two = made["web-1"]["id"], made["web-2"]["id"]
    registered = elb.register_instances_with_load_balancer(
        LoadBalancerName=name, Instances=[{"InstanceId": one}, {"InstanceId": two}]
    )["Instances"]
    assert registered == [{"InstanceId": one}, {"InstanceId": two}]
    assert native_named(name)[0]["backends"] == [one, two]
    # This cloud serves no data plane here: nothing is health-checked, and it says so.
    states = elb.describe_instance_health(LoadBalancerName=name)["InstanceStates"]
    assert [(s["InstanceId"], s["State"], s["ReasonCode"]) for s in states] == [
        (one, "Unknown", "ELB"),
        (two, "Unknown", "ELB"),
    ]
    elb.deregister_instances_from_load_balancer(LoadBalancerName=name, Instances=[{"InstanceId": one}])
    # Deregistered: the waiter takes the InvalidInstance answer for success, as on AWS.
    elb.get_waiter("instance_deregistered").wait(
        LoadBalancerName=name, Instances=[{"InstanceId": one}], WaiterConfig={"Delay": 1, "MaxAttempts": 3}
    )
    with pytest.raises(ClientError) as e:
        elb.register_instances_with_load_balancer(LoadBalancerName=name, Instances=[{"InstanceId": "i-0123456789abcdef0"}])
    assert error_code(e) == "InvalidInstance"
    with pytest.raises(ClientError) as e:
        elb.register_instances_with_load_balancer(
            LoadBalancerName=name, Instances=[{"InstanceId": made["stopped-1"]["id"]}]
        )
    assert error_code(e) == "InvalidInstance"


def test_the_health_check_listeners_and_policies_as_the_ccm_syncs_them(elb, lb):
    name, _ = lb
    check = {"Target": "HTTP:10256/healthz", "Interval": 10, "Timeout": 5, "UnhealthyThreshold": 6, "HealthyThreshold": 2}
    assert elb.configure_health_check(LoadBalancerName=name, HealthCheck=check)["HealthCheck"] == check
    assert native_named(name)[0]["health_check"] == {
        "protocol": "HTTP",
        "port": 10256,
        "path": "/healthz",
        "interval_seconds": 10,
    }
    elb.delete_load_balancer_listeners(LoadBalancerName=name, LoadBalancerPorts=[80, 8080])
    elb.create_load_balancer_listeners(LoadBalancerName=name, Listeners=[listener(443, 30443)])
    with pytest.raises(ClientError) as e:
        elb.create_load_balancer_listeners(LoadBalancerName=name, Listeners=[listener(443, 30444)])
    assert error_code(e) == "DuplicateListener"
    with pytest.raises(ClientError) as e:
        elb.create_load_balancer_listeners(LoadBalancerName=name, Listeners=[listener(8443, 30443, "SSL")])
    assert error_code(e) == "CertificateNotFound"
    policy = {
        "LoadBalancerName": name,
        "PolicyName": "k8s-proxyprotocol-enabled",
        "PolicyTypeName": "ProxyProtocolPolicyType",
        "PolicyAttributes": [{"AttributeName": "ProxyProtocol", "AttributeValue": "true"}],
    }
    elb.create_load_balancer_policy(**policy)
    elb.create_load_balancer_policy(**policy)  # again, as the CCM does on every sync
    elb.set_load_balancer_policies_for_backend_server(
        LoadBalancerName=name, InstancePort=30443, PolicyNames=["k8s-proxyprotocol-enabled"]
    )
    [d] = elb.describe_load_balancers(LoadBalancerNames=[name])["LoadBalancerDescriptions"]
    assert d["BackendServerDescriptions"] == [{"InstancePort": 30443, "PolicyNames": ["k8s-proxyprotocol-enabled"]}]
    assert d["Policies"]["OtherPolicies"] == ["k8s-proxyprotocol-enabled"]
    # An empty list, as the CCM sends it to take the policy off.
    elb.set_load_balancer_policies_for_backend_server(LoadBalancerName=name, InstancePort=30443, PolicyNames=[])
    elb.delete_load_balancer_policy(LoadBalancerName=name, PolicyName="k8s-proxyprotocol-enabled")
    with pytest.raises(ClientError) as e:
        elb.describe_load_balancer_policies(LoadBalancerName=name, PolicyNames=["k8s-proxyprotocol-enabled"])
    assert error_code(e) == "PolicyNotFound"


def test_attributes_are_kept_as_the_ccm_sets_them(elb, lb):
    name, _ = lb
    wanted = {
        "AccessLog": {"Enabled": False},
        "ConnectionDraining": {"Enabled": False},
        "ConnectionSettings": {"IdleTimeout": 60},
        "CrossZoneLoadBalancing": {"Enabled": False},
    }
    found = elb.describe_load_balancer_attributes(LoadBalancerName=name)["LoadBalancerAttributes"]
    assert found["ConnectionDraining"] == {"Enabled": False, "Timeout": 300}
    elb.modify_load_balancer_attributes(LoadBalancerName=name, LoadBalancerAttributes=wanted)
    found = elb.describe_load_balancer_attributes(LoadBalancerName=name)["LoadBalancerAttributes"]
    assert found == wanted, "what the CCM compares with what it wants"
    # An access log needs a bucket: 409, as botocore's model gives InvalidConfigurationRequest.
    with pytest.raises(ClientError) as e:
        elb.modify_load_balancer_attributes(LoadBalancerName=name, LoadBalancerAttributes={"AccessLog": {"Enabled": True}})
    assert (error_code(e), e.value.response["ResponseMetadata"]["HTTPStatusCode"]) == ("InvalidConfigurationRequest", 409)
    assert elb.describe_load_balancer_attributes(LoadBalancerName=name)["LoadBalancerAttributes"] == wanted


def test_tags_subnets_and_security_groups(elb, lb, subnets):
    name, _ = lb
    elb.add_tags(LoadBalancerNames=[name], Tags=[{"Key": "team", "Value": "web"}])
    [desc] = elb.describe_tags(LoadBalancerNames=[name])["TagDescriptions"]
    assert {t["Key"]: t["Value"] for t in desc["Tags"]} == {"kubernetes.io/service-name": "default/web", "team": "web"}
    elb.remove_tags(LoadBalancerNames=[name], Tags=[{"Key": "team"}])
    with pytest.raises(ClientError) as e:
        elb.add_tags(LoadBalancerNames=[name], Tags=[{"Key": f"k{i}"} for i in range(50)])
    assert error_code(e) == "TooManyTags"
    [desc] = elb.describe_tags(LoadBalancerNames=[name])["TagDescriptions"]
    assert [t["Key"] for t in desc["Tags"]] == ["kubernetes.io/service-name"], "nothing added"
    zones = sorted(subnets)
    attached = elb.attach_load_balancer_to_subnets(LoadBalancerName=name, Subnets=[subnets[zones[1]]])["Subnets"]
    assert attached == [subnets[zones[0]], subnets[zones[1]]]
    assert elb.detach_load_balancer_from_subnets(LoadBalancerName=name, Subnets=[subnets[zones[0]]])["Subnets"] == [
        subnets[zones[1]]
    ]
    ec2 = boto3.client("ec2", config=ONCE)
    mine = ec2.create_security_group(GroupName=f"k8s-elb-{name}", Description="the Service's")["GroupId"]
    groups = elb.apply_security_groups_to_load_balancer(LoadBalancerName=name, SecurityGroups=[mine])
    assert groups["SecurityGroups"] == [mine]
    with pytest.raises(ClientError) as e:
        elb.apply_security_groups_to_load_balancer(LoadBalancerName=name, SecurityGroups=["sg-0123456789abcdef0"])
    assert error_code(e) == "InvalidSecurityGroup"


def test_the_paginator_lists_every_load_balancer_and_errors_are_elbs(elb, subnets):
    names = [f"page-{i}" for i in range(3)]
    for n in names:
        elb.create_load_balancer(LoadBalancerName=n, Listeners=[listener(80, 30080)], Subnets=[subnets[sorted(subnets)[0]]])
    try:
        pages = elb.get_paginator("describe_load_balancers").paginate(PaginationConfig={"PageSize": 1})
        listed = [d["LoadBalancerName"] for p in pages for d in p["LoadBalancerDescriptions"]]
        assert [n for n in listed if n in names] == names
        with pytest.raises(ClientError) as e:
            elb.create_load_balancer(LoadBalancerName=names[0], Listeners=[listener(80, 30080)], Subnets=[subnets[sorted(subnets)[0]]])
        assert error_code(e) == "DuplicateLoadBalancerName"
    finally:
        for n in names:
            elb.delete_load_balancer(LoadBalancerName=n)
    with pytest.raises(ClientError) as e:
        elb.describe_load_balancers(LoadBalancerNames=[names[0]])
    assert error_code(e) == "LoadBalancerNotFound"
    with pytest.raises(ClientError) as e:
        elb.create_load_balancer(LoadBalancerName="x" * 33, Listeners=[listener(80, 30080)], AvailabilityZones=["local-1a"])
    assert error_code(e) == "ValidationError"
    # Deleting what is not there succeeds, as AWS's does.
    elb.delete_load_balancer(LoadBalancerName="never-made")
