#!/usr/bin/env python3
"""fakecloud against moto's server, server against server: both driven by the same native load generator (wrk,
bench/saturation.lua) at the same concurrency, so the client's cost is the same for both and small.

For each operation and server: requests/s at saturation, p50/p99 latency, and the server's CPU seconds per
1,000 requests (from /proc/<pid>/stat before and after the run), the cost that does not depend on the client.

Operations: create instance (moto: RunInstances), get one instance (DescribeInstances InstanceId.1), create route
(CreateRoute), create load balancer (elbv2 CreateLoadBalancer), a page of 1,000 instances (DescribeInstances
MaxResults=1000). Every create is a real create (unique names and destinations).

Usage: moto_compare.py FAKECLOUD_URL TOKEN FAKECLOUD_PID. SAT_CONNECTIONS (32), SAT_SECONDS (10) and
SAT_PAGE_SECONDS (20) set the load.
"""
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

CONNECTIONS = int(os.environ.get("SAT_CONNECTIONS", "32"))
SECONDS = int(os.environ.get("SAT_SECONDS", "10"))
PAGE_SECONDS = int(os.environ.get("SAT_PAGE_SECONDS", "20"))
PAGE_ITEMS = 1000
LUA = Path(__file__).with_name("saturation.lua")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU time of the process (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def to_ms(text):
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def wrk(url, pid, method, path, headers, body, seconds):
    """One wrk run; returns (requests/s, p50 ms, p99 ms, server CPU s per 1,000 requests, failed requests)."""
    env = dict(os.environ, BENCH_METHOD=method, BENCH_PATH=path, BENCH_BODY=body,
               BENCH_HEADERS="\n".join(f"{k}: {v}" for k, v in headers.items()))
    before = cpu_seconds(pid)
    out = subprocess.run(["wrk", "-t2", f"-c{CONNECTIONS}", f"-d{seconds}s", "--timeout", "120s", "--latency",
                          "-s", str(LUA), url], env=env, check=True, capture_output=True, text=True).stdout
    used = cpu_seconds(pid) - before
    errors = re.search(r"Socket errors: (.*)", out)
    assert not errors, f"{method} {path}: socket errors\n{out}"
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    total = int(re.search(r"(\d+) requests in", out).group(1))
    if total == 0:
        return 0.0, None, None, None, 0
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = to_ms(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = to_ms(re.search(r"\s99%\s+(\S+)", out).group(1))
    return rps, p50, p99, used / total * 1000, int(bad.group(1)) if bad else 0


class Fakecloud:
    name = "fakecloud"

    def __init__(self, url, token, pid):
        self.url, self.pid = url.rstrip("/"), pid
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def setup(self):
        s = requests.Session()
        s.headers.update(self.headers)
        for q in ("instances", "load-balancers", "routes-per-route-table"):
            assert s.put(f"{self.url}/v1/quotas/{q}", json={"limit": 1000000}).status_code == 200
        self.target = s.post(f"{self.url}/v1/instances", json={"name": "sat-target"}).json()["id"]

    def operations(self):
        lb = ('{"name": "satlb-{n}", "scheme": "internal", '
              '"listeners": [{"protocol": "TCP", "port": 80, "backend_port": 30080}]}')
        route = f'{{"name": "r{{n}}", "destination": "{{ip}}/32", "target_instance": "{self.target}"}}'
        return [
            ("create-instance", "POST", "/v1/instances", '{"name": "sat-{n}", "zone": "{zone}"}'),
            ("get-instance", "GET", f"/v1/instances/{self.target}", ""),
            ("create-route", "POST", "/v1/route-tables/main/routes", route),
            ("create-lb", "POST", "/v1/load-balancers", lb),
            ("page of 1,000 instances", "GET", f"/v1/instances?page_size={PAGE_ITEMS}", ""),
        ]

    def close(self):
        pass


class Moto:
    """EC2 and ELBv2 query APIs; moto does not check signatures, so plain form posts work."""
    name = "moto"

    def __init__(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid, self.url = self.proc.pid, f"http://127.0.0.1:{port}"
        self.headers = {"Content-Type": "application/x-www-form-urlencoded"}
        for _ in range(100):
            try:
                requests.get(self.url + "/moto-api/")
                break
            except requests.ConnectionError:
                time.sleep(0.1)

    def auth(self, service):
        return {**self.headers, "Authorization": f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/"
                                                 f"{service}/aws4_request, SignedHeaders=host, Signature=0"}

    def ec2(self, action, **p):
        r = requests.post(self.url + "/", data={"Action": action, "Version": "2016-11-15", **p}, headers=self.auth("ec2"))
        assert r.status_code == 200, r.text[:500]
        return r.text

    def setup(self):
        vpc = re.search(r"<vpcId>(vpc-[0-9a-f]+)</vpcId>", self.ec2("CreateVpc", CidrBlock="10.0.0.0/16")).group(1)
        self.subnets = [re.search(r"<subnetId>(subnet-[0-9a-f]+)</subnetId>",
                                  self.ec2("CreateSubnet", VpcId=vpc, CidrBlock=f"10.0.{k}.0/24",
                                           AvailabilityZone=f"us-east-1{z}")).group(1) for k, z in ((0, "a"), (1, "b"))]
        self.rtb = re.search(r"<routeTableId>(rtb-[0-9a-f]+)</routeTableId>", self.ec2("CreateRouteTable", VpcId=vpc)).group(1)
        text = self.ec2("RunInstances", ImageId="ami-12c6146b", MinCount="1", MaxCount="1", InstanceType="t3.small")
        self.target = re.search(r"<instanceId>(i-[0-9a-f]+)</instanceId>", text).group(1)
        # The page needs 1,000 instances even if the create run made fewer.
        for _ in range(10):
            self.ec2("RunInstances", ImageId="ami-12c6146b", MinCount="100", MaxCount="100", InstanceType="t3.small")

    def operations(self):
        ec2 = "Version=2016-11-15&Action="
        return [
            ("create-instance", "POST", "/",
             ec2 + "RunInstances&ImageId=ami-12c6146b&MinCount=1&MaxCount=1&InstanceType=t3.small", "ec2"),
            ("get-instance", "POST", "/", ec2 + f"DescribeInstances&InstanceId.1={self.target}", "ec2"),
            ("create-route", "POST", "/",
             ec2 + f"CreateRoute&RouteTableId={self.rtb}&DestinationCidrBlock={{ip}}%2F32&InstanceId={self.target}", "ec2"),
            ("create-lb", "POST", "/",
             "Version=2015-12-01&Action=CreateLoadBalancer&Name=satlb-{n}&Scheme=internal"
             f"&Subnets.member.1={self.subnets[0]}&Subnets.member.2={self.subnets[1]}", "elasticloadbalancing"),
            ("page of 1,000 instances", "POST", "/", ec2 + f"DescribeInstances&MaxResults={PAGE_ITEMS}", "ec2"),
        ]

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def measure(server):
    server.setup()
    rows = {}
    for op in server.operations():
        name, method, path, body = op[:4]
        headers = server.auth(op[4]) if len(op) > 4 else server.headers
        seconds = PAGE_SECONDS if name.startswith("page") else SECONDS
        rows[name] = wrk(server.url + path, server.pid, method, path, headers, body, seconds)
        print(f"    {server.name} {name}: {rows[name][0]:.0f} req/s", file=sys.stderr)
    return rows


def main():
    fc = measure(Fakecloud(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    moto = Moto()
    try:
        mo = measure(moto)
    finally:
        moto.close()
    import moto as moto_pkg
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    print(f"\nwrk -t2 -c{CONNECTIONS} -d{SECONDS}s (pages: -d{PAGE_SECONDS}s), bench/saturation.lua; "
          f"{wrk_version.strip()}; moto {moto_pkg.__version__}\n")
    print("| operation | fakecloud req/s | moto req/s | fakecloud / moto | fakecloud p50 / p99 ms | moto p50 / p99 ms "
          "| fakecloud CPU s per 1,000 | moto CPU s per 1,000 | moto / fakecloud CPU | failed (fakecloud, moto) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    def num(x, digits):
        return "none completed" if x is None else f"{x:.{digits}f}"

    def ratio(a, b):
        return f"{a / b:.0f}x" if a and b else "—"

    for k in fc:
        f, m = fc[k], mo[k]
        print(f"| {k} | {f[0]:.0f} | {m[0]:.1f} | {ratio(f[0], m[0])} | {num(f[1], 2)} / {num(f[2], 2)} "
              f"| {num(m[1], 1)} / {num(m[2], 1)} | {num(f[3], 3)} | {num(m[3], 2)} | {ratio(m[3], f[3])} "
              f"| {f[4]}, {m[4]} |")


if __name__ == "__main__":
    main()
