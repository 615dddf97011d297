#!/usr/bin/env python3
"""Same call pattern against fakecloud and moto's server, with the same thin HTTP client (requests, keep-alive),
so the ratio compares the servers, not the clients. Sequential, one call at a time, on loopback.

Operations: create instance (moto: RunInstances), get instance by id (DescribeInstances InstanceId.1), create
route (CreateRoute), create load balancer (elbv2 CreateLoadBalancer), and a page of 1,000 instances
(DescribeInstances MaxResults=1000). Usage: moto_compare.py FAKECLOUD_URL TOKEN [N]
"""
import statistics
import subprocess
import sys
import time
import re
import socket

import requests

N = int(sys.argv[3]) if len(sys.argv) > 3 else 300
PAGE_ITEMS = 1000


def timed(fn, n):
    samples = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return samples[len(samples) // 2], samples[int((len(samples) - 1) * 0.99)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fakecloud:
    def __init__(self, url, token):
        self.url, self.s = url, requests.Session()
        self.s.headers["Authorization"] = f"Bearer {token}"

    def post(self, path, body):
        r = self.s.post(self.url + path, json=body)
        assert r.status_code in (200, 201), r.text
        return r.json()

    def setup(self):
        for q in ("instances", "load-balancers", "routes-per-route-table"):
            r = self.s.put(f"{self.url}/v1/quotas/{q}", json={"limit": 1000000})
            assert r.status_code == 200, r.text
        self.target = self.post("/v1/instances", {"name": "py-target"})["id"]

    def create_instance(self, i):
        self.post("/v1/instances", {"name": f"py-{i}"})

    def get_instance(self, i):
        assert self.s.get(f"{self.url}/v1/instances/{self.target}").status_code == 200

    def create_route(self, i):
        self.post("/v1/route-tables/main/routes", {"name": f"r{i}", "destination": f"100.100.{i // 256}.{i % 256}/32",
                                                   "target_instance": self.target})

    def create_lb(self, i):
        self.post("/v1/load-balancers", {"name": f"pylb-{i}", "scheme": "internal",
                                         "listeners": [{"protocol": "TCP", "port": 80, "backend_port": 30080}]})

    def fill(self, count):
        for i in range(count):
            self.post("/v1/instances", {"name": f"fill-{i}"})

    def page(self, i):
        r = self.s.get(f"{self.url}/v1/instances", params={"page_size": PAGE_ITEMS})
        assert len(r.json()["items"]) == PAGE_ITEMS


class Moto:
    """EC2 and ELBv2 query APIs; moto does not check signatures, so plain form posts work."""

    def __init__(self):
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}/"
        self.s = requests.Session()
        for _ in range(100):
            try:
                self.s.get(self.url + "moto-api/")
                break
            except requests.ConnectionError:
                time.sleep(0.1)

    def call(self, service, params):
        headers = {"Authorization": f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/{service}/aws4_request, "
                                    "SignedHeaders=host, Signature=0",
                   "Content-Type": "application/x-www-form-urlencoded"}
        r = self.s.post(self.url, data=params, headers=headers)
        assert r.status_code == 200, r.text[:500]
        return r.text

    def ec2(self, action, **p):
        return self.call("ec2", {"Action": action, "Version": "2016-11-15", **p})

    def setup(self):
        vpc = re.search(r"<vpcId>(vpc-[0-9a-f]+)</vpcId>", self.ec2("CreateVpc", CidrBlock="10.0.0.0/16")).group(1)
        self.subnets = [re.search(r"<subnetId>(subnet-[0-9a-f]+)</subnetId>",
                                  self.ec2("CreateSubnet", VpcId=vpc, CidrBlock=f"10.0.{k}.0/24",
                                           AvailabilityZone=f"us-east-1{z}")).group(1) for k, z in ((0, "a"), (1, "b"))]
        self.rtb = re.search(r"<routeTableId>(rtb-[0-9a-f]+)</routeTableId>", self.ec2("CreateRouteTable", VpcId=vpc)).group(1)
        self.target = self.run_one()

    def run_one(self):
        text = self.ec2("RunInstances", ImageId="ami-12c6146b", MinCount="1", MaxCount="1", InstanceType="t3.small")
        return re.search(r"<instanceId>(i-[0-9a-f]+)</instanceId>", text).group(1)

    def create_instance(self, i):
        self.run_one()

    def get_instance(self, i):
        self.ec2("DescribeInstances", **{"InstanceId.1": self.target})

    def create_route(self, i):
        self.ec2("CreateRoute", RouteTableId=self.rtb, DestinationCidrBlock=f"100.100.{i // 256}.{i % 256}/32",
                 InstanceId=self.target)

    def create_lb(self, i):
        self.call("elasticloadbalancing", {"Action": "CreateLoadBalancer", "Version": "2015-12-01", "Name": f"pylb-{i}",
                                           "Scheme": "internal", "Subnets.member.1": self.subnets[0],
                                           "Subnets.member.2": self.subnets[1]})

    def fill(self, count):
        done = 0
        while done < count:
            k = min(100, count - done)
            self.ec2("RunInstances", ImageId="ami-12c6146b", MinCount=str(k), MaxCount=str(k), InstanceType="t3.small")
            done += k

    def page(self, i):
        self.ec2("DescribeInstances", MaxResults=str(PAGE_ITEMS))

    def close(self):
        self.proc.terminate()


def measure(api):
    api.setup()
    rows = {}
    for name, fn in (("create-instance", api.create_instance), ("get-instance", api.get_instance),
                     ("create-route", api.create_route), ("create-lb", api.create_lb)):
        rows[name] = timed(fn, N)
    api.fill(PAGE_ITEMS)
    rows["list page of 1,000 instances"] = timed(api.page, 20)
    return rows


def main():
    fc = measure(Fakecloud(sys.argv[1], sys.argv[2]))
    moto = Moto()
    try:
        mo = measure(moto)
    finally:
        moto.close()
    import moto as moto_pkg
    print(f"\nSame client (python requests, sequential), N={N} per operation; moto {moto_pkg.__version__}\n")
    print("| operation | fakecloud p50 ms | moto p50 ms | moto / fakecloud (p50) | fakecloud p99 ms | moto p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for k in fc:
        print(f"| {k} | {fc[k][0]:.2f} | {mo[k][0]:.2f} | {mo[k][0] / fc[k][0]:.1f}x | {fc[k][1]:.2f} | {mo[k][1]:.2f} |")


if __name__ == "__main__":
    main()
