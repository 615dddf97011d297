"""A classic ELB and an NLB made with boto3 carry traffic to instances' ports through their DNS names (issue #49).

The cloud is one of this module's own, served with its load balancers' data plane (`--serve-load-balancers`) and
its names (`--dns-listen`); its instances are addresses of this host (`--loopback-instances`, each launched with
RunInstances' PrivateIpAddress) where a small TCP server greets each connection with its name. The DNSName each
API gives is resolved with dnspython against the cloud's DNS and connected to, as a client on AWS does; the
instances' health comes from the data plane's checks, waited for with boto3's own waiters.
"""

import os
import socket
import socketserver
import threading
import time

import boto3
import dns.resolver
import pytest
from botocore.config import Config

from servers import fresh_cloud

ONCE = Config(retries={"total_max_attempts": 1, "mode": "standard"})
REGION = "local-1"
# This module's own /24s of 127.0.0.0/8 (the emulator's Rust tests take 127.77.N and 127.78.N for small N).
POOL = "127.77.240.0/24"
BACKENDS = ["127.78.240.1", "127.78.240.2"]
# How long the data plane may take to follow a change (it promises a second): only a hang takes this long.
FOLLOW = 30
# One connect or read: only a hang takes this long; a refusal ends it at once.
IO = 5


@pytest.fixture(scope="module")
def cloud():
    flags = ["--serve-load-balancers", "--loopback-instances", "--public-pool", POOL, "--lb-delete-delay", "0s"]
    with fresh_cloud(*flags, "--dns-listen", "127.0.0.1:0") as cloud:
        yield cloud


def client(cloud, service):
    return boto3.client(
        service,
        endpoint_url=cloud.url,
        region_name=REGION,
        aws_access_key_id=cloud.credentials["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=cloud.credentials["AWS_SECRET_ACCESS_KEY"],
        config=ONCE,
    )


class Greeter(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(f"{self.server.name}\n".encode())


@pytest.fixture(scope="module")
def backends():
    """A greeting server on each backend address, all on one port (an ELB's InstancePort is one): the port."""
    servers, port = [], 0
    for k, ip in enumerate(BACKENDS):
        server = socketserver.ThreadingTCPServer((ip, port), Greeter)
        server.daemon_threads = True
        server.name = f"b{k + 1}"
        port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    yield port
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def instances(cloud):
    ec2 = client(cloud, "ec2")
    ids = []
    for ip in BACKENDS:
        [made] = ec2.run_instances(ImageId="ami-1", MinCount=1, MaxCount=1, PrivateIpAddress=ip)["Instances"]
        ids.append(made["InstanceId"])
    ec2.get_waiter("instance_running").wait(InstanceIds=ids, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    return ids


@pytest.fixture(scope="module")
def clients_group(cloud):
    """A security group for the classic ELB, the gate of who reaches it: no rule yet."""
    ec2 = client(cloud, "ec2")
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    return ec2.create_security_group(GroupName="lb-clients", Description="loopback clients", VpcId=vpc)["GroupId"]


def loopback_clients(group, port):
    """The ingress rule that admits this host's loopback clients to `port`."""
    rule = {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, "IpRanges": [{"CidrIp": "127.0.0.0/8"}]}
    return dict(GroupId=group, IpPermissions=[rule])


def resolve(cloud, name):
    """The name's addresses, asked of the cloud's DNS as a resolver forwarding its zone would ask."""
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = [cloud.dns[0]]
    resolver.port = cloud.dns[1]
    return [r.address for r in resolver.resolve(name, "A", lifetime=IO)]


def gone(cloud, name):
    """Whether the cloud's DNS says the name is not there (NXDOMAIN)."""
    try:
        resolve(cloud, name)
        return False
    except dns.resolver.NXDOMAIN:
        return True


def greeting(address, port):
    """Connect and read the backend's greeting; None when the connection is refused or closed at once."""
    try:
        with socket.create_connection((address, port), timeout=IO) as s:
            line = s.makefile().readline().strip()
            return line or None
    except OSError:
        return None


def until(what, check):
    """Wait for check() to be truthy (the data plane follows the API within a second); its value."""
    deadline = time.monotonic() + FOLLOW
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {FOLLOW}s: {what}")


def test_a_classic_elb_answers_through_its_name_and_its_group_decides_who_reaches_it(
    cloud, backends, instances, clients_group
):
    ec2, elb = client(cloud, "ec2"), client(cloud, "elb")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    name = "web-" + os.urandom(4).hex()
    listener = {"Protocol": "TCP", "LoadBalancerPort": 8080, "InstanceProtocol": "TCP", "InstancePort": backends}
    dns_name = elb.create_load_balancer(
        LoadBalancerName=name, Listeners=[listener], Subnets=[subnet], SecurityGroups=[clients_group]
    )["DNSName"]
    ec2.authorize_security_group_ingress(**loopback_clients(clients_group, 8080))
    # As cloud-provider-aws configures it: checks every 5 s, 2 in a row decide.
    check = {"Target": f"TCP:{backends}", "Interval": 5, "Timeout": 2, "UnhealthyThreshold": 2, "HealthyThreshold": 2}
    elb.configure_health_check(LoadBalancerName=name, HealthCheck=check)
    elb.register_instances_with_load_balancer(LoadBalancerName=name, Instances=[{"InstanceId": i} for i in instances])
    elb.get_waiter("instance_in_service").wait(LoadBalancerName=name, WaiterConfig={"Delay": 1, "MaxAttempts": FOLLOW})

    # A classic ELB answers at once, as AWS's do: its name resolves to its address in the pool.
    [address] = resolve(cloud, dns_name)
    assert address.startswith("127.77.240."), address
    until("both instances to answer", lambda: {greeting(address, 8080) for _ in range(8)} >= {"b1", "b2"})

    # The group no longer admits the clients: the data plane refuses them.
    ec2.revoke_security_group_ingress(**loopback_clients(clients_group, 8080))
    until("the load balancer to refuse a client its group does not admit", lambda: greeting(address, 8080) is None)

    elb.delete_load_balancer(LoadBalancerName=name)
    until("the deleted load balancer's name to be gone", lambda: gone(cloud, dns_name))


def test_an_nlb_answers_through_its_name_once_active_and_forwards_to_its_targets(cloud, backends, instances):
    ec2, elbv2 = client(cloud, "ec2"), client(cloud, "elbv2")
    subnets = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]]
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    [lb] = elbv2.create_load_balancer(
        Name="nlb-" + os.urandom(4).hex(), Type="network", SubnetMappings=[{"SubnetId": s} for s in subnets]
    )["LoadBalancers"]
    group = elbv2.create_target_group(
        Name="tg-" + os.urandom(4).hex(),
        Protocol="TCP",
        Port=backends,
        VpcId=vpc,
        HealthCheckProtocol="TCP",
        HealthCheckIntervalSeconds=10,
        HealthyThresholdCount=2,
    )["TargetGroups"][0]
    elbv2.register_targets(TargetGroupArn=group["TargetGroupArn"], Targets=[{"Id": i} for i in instances])
    elbv2.create_listener(
        LoadBalancerArn=lb["LoadBalancerArn"],
        Protocol="TCP",
        Port=9090,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": group["TargetGroupArn"]}],
    )
    elbv2.get_waiter("load_balancer_available").wait(
        LoadBalancerArns=[lb["LoadBalancerArn"]], WaiterConfig={"Delay": 1, "MaxAttempts": FOLLOW}
    )
    elbv2.get_waiter("target_in_service").wait(
        TargetGroupArn=group["TargetGroupArn"], WaiterConfig={"Delay": 1, "MaxAttempts": 3 * FOLLOW}
    )

    [address] = resolve(cloud, lb["DNSName"])
    assert address.startswith("127.77.240."), address
    until("both targets to answer", lambda: {greeting(address, 9090) for _ in range(8)} >= {"b1", "b2"})

    # A target deregistered is no longer sent traffic.
    elbv2.deregister_targets(TargetGroupArn=group["TargetGroupArn"], Targets=[{"Id": instances[1]}])
    until("only the registered target to answer", lambda: {greeting(address, 9090) for _ in range(8)} == {"b1"})

    elbv2.delete_load_balancer(LoadBalancerArn=lb["LoadBalancerArn"])
    until("the deleted load balancer's name to be gone", lambda: gone(cloud, lb["DNSName"]))
