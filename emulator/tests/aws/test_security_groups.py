"""Security groups through boto3 (issue #49): what cloud-provider-aws does with them for a LoadBalancer Service
(a group per load balancer, its source ranges and ICMP for path MTU, the load balancer's group in the nodes'
group, and a delete retried while something still uses the group), with EC2's error codes.

Run by scripts/test-aws-face.sh, after test_ec2.py (whose reads count the instances the CLI made).
"""

import boto3
import pytest
from botocore.exceptions import ClientError
from test_ec2 import ONCE, error_code, set_quota


@pytest.fixture(scope="module")
def ec2():
    return boto3.client("ec2", config=ONCE)


@pytest.fixture(scope="module")
def vpc(ec2):
    return ec2.describe_vpcs()["Vpcs"][0]["VpcId"]


def web(cidrs, port=80):
    return {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, "IpRanges": [{"CidrIp": c} for c in cidrs]}


MTU = {"IpProtocol": "icmp", "FromPort": 3, "ToPort": 4, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}


def group(ec2, group_id):
    return ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]


def test_a_services_group_is_made_authorized_and_found_as_the_aws_ccm_finds_it(ec2, vpc):
    tags = [{"Key": "kubernetes.io/cluster/c1", "Value": "owned"}]
    made = ec2.create_security_group(
        GroupName="k8s-elb-a1b2",
        Description="Security group for Kubernetes ELB a1b2 (default/web)",
        VpcId=vpc,
        TagSpecifications=[{"ResourceType": "security-group", "Tags": tags}],
    )
    gid = made["GroupId"]
    assert gid.startswith("sg-") and len(gid) == 20
    with pytest.raises(ClientError) as e:
        ec2.create_security_group(GroupName="k8s-elb-a1b2", Description="again", VpcId=vpc)
    assert error_code(e) == "InvalidGroup.Duplicate"

    ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=[web(["10.0.0.0/8", "192.168.0.0/16"]), MTU])
    with pytest.raises(ClientError) as e:
        ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=[web(["10.0.0.0/8"])])
    assert error_code(e) == "InvalidPermission.Duplicate"
    with pytest.raises(ClientError) as e:
        ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=[web(["10.0.0.1/8"], port=81)])
    assert error_code(e) == "InvalidPermission.Malformed"
    with pytest.raises(ClientError) as e:
        ec2.authorize_security_group_ingress(GroupId="sg-00000000000000000", IpPermissions=[web(["10.0.0.0/8"])])
    assert error_code(e) == "InvalidGroup.NotFound"

    g = group(ec2, gid)
    assert (g["GroupName"], g["VpcId"], g["Tags"]) == ("k8s-elb-a1b2", vpc, tags)
    by_protocol = {p["IpProtocol"]: p for p in g["IpPermissions"]}
    assert sorted(r["CidrIp"] for r in by_protocol["tcp"]["IpRanges"]) == ["10.0.0.0/8", "192.168.0.0/16"]
    assert (by_protocol["tcp"]["FromPort"], by_protocol["tcp"]["ToPort"]) == (80, 80)
    assert (by_protocol["icmp"]["FromPort"], by_protocol["icmp"]["ToPort"]) == (3, 4)

    # The CCM's look-ups: by name in the VPC, by ID, by the cluster's tag.
    for filters in (
        [{"Name": "group-name", "Values": ["k8s-elb-a1b2"]}, {"Name": "vpc-id", "Values": [vpc]}],
        [{"Name": "group-id", "Values": [gid]}],
        [{"Name": "tag:kubernetes.io/cluster/c1", "Values": ["owned"]}],
        [{"Name": "tag-key", "Values": ["kubernetes.io/cluster/c1"]}],
    ):
        found = ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
        assert [f["GroupId"] for f in found] == [gid], filters

    ec2.revoke_security_group_ingress(GroupId=gid, IpPermissions=[web(["192.168.0.0/16"])])
    with pytest.raises(ClientError) as e:
        ec2.revoke_security_group_ingress(GroupId=gid, IpPermissions=[web(["192.168.0.0/16"])])
    assert error_code(e) == "InvalidPermission.NotFound"
    ranges = [r["CidrIp"] for p in group(ec2, gid)["IpPermissions"] if p["IpProtocol"] == "tcp" for r in p["IpRanges"]]
    assert ranges == ["10.0.0.0/8"]


def test_a_group_in_use_is_not_deleted_until_nothing_uses_it(ec2, vpc):
    elb = ec2.create_security_group(GroupName="k8s-elb-c3d4", Description="elb", VpcId=vpc)["GroupId"]
    nodes = ec2.create_security_group(GroupName="nodes", Description="the cluster's nodes", VpcId=vpc)["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=nodes, IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": elb}]}]
    )
    assert group(ec2, nodes)["IpPermissions"][0]["UserIdGroupPairs"][0]["GroupId"] == elb
    with pytest.raises(ClientError) as e:
        ec2.delete_security_group(GroupId=elb)
    assert error_code(e) == "DependencyViolation"

    launched = ec2.run_instances(ImageId="ami-1", MinCount=1, MaxCount=1, SecurityGroupIds=[nodes])["Instances"][0]
    assert [g["GroupId"] for g in launched["SecurityGroups"]] == [nodes]
    ec2.revoke_security_group_ingress(
        GroupId=nodes, IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": elb}]}]
    )
    ec2.delete_security_group(GroupId=elb)
    with pytest.raises(ClientError) as e:
        ec2.delete_security_group(GroupId=nodes)
    assert error_code(e) == "DependencyViolation"
    ec2.terminate_instances(InstanceIds=[launched["InstanceId"]])
    ec2.delete_security_group(GroupName="nodes")
    with pytest.raises(ClientError) as e:
        ec2.describe_security_groups(GroupIds=[nodes])
    assert error_code(e) == "InvalidGroup.NotFound"

    default = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["default"]}])["SecurityGroups"]
    with pytest.raises(ClientError) as e:
        ec2.delete_security_group(GroupId=default[0]["GroupId"])
    assert error_code(e) == "CannotDelete"


def test_the_rules_per_group_quota_refuses_as_ec2_does(ec2, vpc):
    gid = ec2.create_security_group(GroupName="crowded", Description="many rules", VpcId=vpc)["GroupId"]
    set_quota("rules-per-security-group", 2)
    try:
        ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=[web(["10.0.0.0/8"])])
        with pytest.raises(ClientError) as e:
            ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=[web(["10.1.0.0/16", "10.2.0.0/16"])])
        assert error_code(e) == "RulesPerSecurityGroupLimitExceeded"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert len(group(ec2, gid)["IpPermissions"][0]["IpRanges"]) == 1
    finally:
        set_quota("rules-per-security-group", 60)
    ec2.delete_security_group(GroupId=gid)
