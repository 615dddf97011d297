"""The AWS CLI (v1, pinned by scripts/aws-clients.sh) against fakecloud's AWS face, as a user types it: the
same environment boto3 reads (AWS_ENDPOINT_URL, AWS_DEFAULT_REGION, the keys from the credentials file). EC2
(after test_ec2.py, whose reads count exactly the instances the `fakecloud` CLI made: pytest runs the files in
name order), then `aws elb` and `aws elbv2` as a user load-balances those instances by hand.
"""

import json
import os
import subprocess

import pytest

# A bound on each command, so that a hang fails the test instead of the run.
TIMEOUT = 60


def aws(*args, env=None):
    """`aws <args> --output json`: its exit code (the CLI v1 exits 255 on an error answer), its JSON answer (None if it printed none) and its stderr."""
    argv = ["aws", *args, "--output", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=env or os.environ)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else None, done.stderr


def ok(*args):
    code, answer, err = aws(*args)
    assert code == 0, f"aws {' '.join(args)} exited {code}: {err}"
    return answer


@pytest.fixture(scope="module")
def made():
    with open(os.environ["FAKECLOUD_AWS_MADE"]) as f:
        return {i["name"]: i["id"] for i in json.load(f)}


def test_describe_with_a_filter_and_a_query(made):
    web = ok(
        "ec2", "describe-instances", "--filters", "Name=tag:role,Values=web", "Name=instance-state-name,Values=running",
        "--query", "Reservations[].Instances[].InstanceId",
    )
    assert sorted(web) == sorted([made["web-1"], made["web-2"]])


def test_the_waiter_returns_once_the_instance_runs(made):
    ok("ec2", "wait", "instance-running", "--instance-ids", made["web-1"])


def test_tags_are_created_described_and_deleted(made):
    node = made["db-1"]
    ok("ec2", "create-tags", "--resources", node, "--tags", "Key=cli,Value=yes")
    found = ok("ec2", "describe-tags", "--filters", "Name=key,Values=cli")["Tags"]
    assert [(t["ResourceId"], t["Value"]) for t in found] == [(node, "yes")]
    ok("ec2", "delete-tags", "--resources", node, "--tags", "Key=cli")
    assert ok("ec2", "describe-tags", "--filters", "Name=key,Values=cli")["Tags"] == []


def test_a_route_is_made_seen_and_removed(made):
    table = ok("ec2", "describe-route-tables", "--query", "RouteTables[0].RouteTableId")
    route = ["--route-table-id", table, "--destination-cidr-block", "10.244.99.0/24"]
    ok("ec2", "create-route", *route, "--instance-id", made["web-2"])
    routes = ok("ec2", "describe-route-tables", "--route-table-ids", table, "--query", "RouteTables[0].Routes")
    assert {"DestinationCidrBlock": "10.244.99.0/24", "InstanceId": made["web-2"]}.items() <= routes[-1].items()
    ok("ec2", "delete-route", *route)
    code, _, err = aws("ec2", "delete-route", *route)
    assert code == 255 and "(InvalidRoute.NotFound)" in err, err


def test_launch_and_terminate():
    image = "ami-0123456789abcdef0"
    launched = ok("ec2", "run-instances", "--image-id", image, "--instance-type", "fc.small", "--count", "1")
    node = launched["Instances"][0]["InstanceId"]
    ok("ec2", "wait", "instance-running", "--instance-ids", node)
    ok("ec2", "terminate-instances", "--instance-ids", node)
    ok("ec2", "wait", "instance-terminated", "--instance-ids", node)


def test_refusals_are_the_clis_error_messages():
    code, _, err = aws("ec2", "describe-instances", "--instance-ids", "i-0123456789abcdef0")
    assert code == 255 and "(InvalidInstanceID.NotFound)" in err, err
    wrong = {**os.environ, "AWS_SECRET_ACCESS_KEY": "not-the-secret-" + "x" * 25}
    code, _, err = aws("ec2", "describe-instances", env=wrong)
    assert code == 255 and "(AuthFailure)" in err, err


def test_a_classic_load_balancer_made_tagged_and_load_balancing_by_hand(made):
    subnet = ok("ec2", "describe-subnets", "--query", "Subnets[0].SubnetId")
    listener = "Protocol=TCP,LoadBalancerPort=80,InstanceProtocol=TCP,InstancePort=30080"
    made_lb = ok("elb", "create-load-balancer", "--load-balancer-name", "cli-elb", "--listeners", listener,
                 "--subnets", subnet, "--tags", "Key=team,Value=web")
    assert made_lb["DNSName"].startswith("cli-elb-")
    ok("elb", "configure-health-check", "--load-balancer-name", "cli-elb",
       "--health-check", "Target=TCP:30080,Interval=10,Timeout=5,UnhealthyThreshold=2,HealthyThreshold=2")
    ok("elb", "register-instances-with-load-balancer", "--load-balancer-name", "cli-elb",
       "--instances", made["web-1"], made["web-2"])
    described = ok("elb", "describe-load-balancers", "--load-balancer-names", "cli-elb",
                   "--query", "LoadBalancerDescriptions[0].[Instances[].InstanceId, HealthCheck.Target]")
    assert described == [[made["web-1"], made["web-2"]], "TCP:30080"]
    tags = ok("elb", "describe-tags", "--load-balancer-names", "cli-elb", "--query", "TagDescriptions[0].Tags")
    assert tags == [{"Key": "team", "Value": "web"}]
    ok("elb", "deregister-instances-from-load-balancer", "--load-balancer-name", "cli-elb",
       "--instances", made["web-2"])
    ok("elb", "wait", "instance-deregistered", "--load-balancer-name", "cli-elb", "--instances", made["web-2"])
    code, _, err = aws("elb", "create-load-balancer", "--load-balancer-name", "cli-elb", "--listeners", listener,
                       "--subnets", subnet)
    assert code == 255 and "(DuplicateLoadBalancerName)" in err, err
    ok("elb", "delete-load-balancer", "--load-balancer-name", "cli-elb")
    code, _, err = aws("elb", "describe-load-balancers", "--load-balancer-names", "cli-elb")
    assert code == 255 and "(LoadBalancerNotFound)" in err, err


def test_a_network_load_balancer_its_target_group_and_listener_by_hand(made):
    subnets = ok("ec2", "describe-subnets", "--query", "Subnets[].SubnetId")
    vpc = ok("ec2", "describe-vpcs", "--query", "Vpcs[0].VpcId")
    lb = ok("elbv2", "create-load-balancer", "--name", "cli-nlb", "--type", "network", "--subnets", *subnets,
            "--query", "LoadBalancers[0].LoadBalancerArn")
    group = ok("elbv2", "create-target-group", "--name", "cli-tg", "--protocol", "TCP", "--port", "30080",
               "--vpc-id", vpc, "--query", "TargetGroups[0].TargetGroupArn")
    ok("elbv2", "register-targets", "--target-group-arn", group, "--targets", f"Id={made['web-1']}")
    listener = ok("elbv2", "create-listener", "--load-balancer-arn", lb, "--protocol", "TCP", "--port", "80",
                  "--default-actions", f"Type=forward,TargetGroupArn={group}", "--query", "Listeners[0].ListenerArn")
    ok("elbv2", "wait", "load-balancer-available", "--load-balancer-arns", lb)
    ok("elbv2", "add-tags", "--resource-arns", lb, "--tags", "Key=team,Value=web")
    tags = ok("elbv2", "describe-tags", "--resource-arns", lb, "--query", "TagDescriptions[0].Tags")
    assert tags == [{"Key": "team", "Value": "web"}]
    targets = ok("elbv2", "describe-target-health", "--target-group-arn", group,
                 "--query", "TargetHealthDescriptions[].Target.Id")
    assert targets == [made["web-1"]]
    code, _, err = aws("elbv2", "delete-target-group", "--target-group-arn", group)
    assert code == 255 and "(ResourceInUse)" in err, err
    ok("elbv2", "delete-listener", "--listener-arn", listener)
    ok("elbv2", "delete-target-group", "--target-group-arn", group)
    ok("elbv2", "delete-load-balancer", "--load-balancer-arn", lb)
