#!/usr/bin/env python3
"""fakecloud, through its native API and through its AWS face, against moto's server, server against server: all
driven by the same native load generator (wrk) at the same concurrency, so the client's cost is the same for each
and small.

For each operation and server: requests/s at saturation, p50/p99 latency, and the server's CPU seconds per
1,000 requests (from /proc/<pid>/stat before and after the run), the cost that does not depend on the client.
The native API and the face are one fakecloud process, each row run natively and then through the face on the
same cloud; the face's CPU over the native call's is issue #49's target (at most 1.2x). The operations (ROWS) run
in that order, the lookups with 5,000 instances and the target in each cloud; every create is a real create
(unique names and destinations).

How each server is driven: the native API and moto by bench/saturation.lua, which fills in each create's unique
name or destination (moto does not check signatures, so its calls carry a fixed Authorization header). The face
verifies SigV4, whose HMACs wrk's Lua cannot compute: its calls are signed here with botocore, as boto3 signs them,
just before their run, and sent by bench/replay.lua. A signature holds 15 minutes, so a lookup signed once is
replayed for the whole run; creates are signed one per request, twice as many as the native call completed in the
same time (a run that uses them all up fails). bench/replay.lua also sends the calls that alternate (set-targets),
on every server. Any non-2xx answer of the face fails the run; the native API's and moto's are counted in the
last column (moto refuses a DeregisterTargets of a target already taken out, which 32 calls in flight, answered
in any order, make now and then).

Usage: moto_compare.py FAKECLOUD_BIN: a `fakecloud` binary (or one serving as `BIN serve FLAGS...`), served here on
loopback with a database of its own, and moto's server beside it. SAT_CONNECTIONS (32), SAT_SECONDS (10) and
SAT_PAGE_SECONDS (20) set the load; BENCH_ROWS (comma-separated row names) runs only those rows and BENCH_MOTO=0
leaves moto out, for profiling one call (e.g. `perf record -p` on the served cloud); BENCH_RUST_LOG the served
cloud's RUST_LOG (default warn; e.g. sqlx::query=debug lists each call's statements in its log, for profiling).
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Optional
from urllib.parse import urlencode, urlparse

import botocore
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

CONNECTIONS = int(os.environ.get("SAT_CONNECTIONS", "32"))
SECONDS = int(os.environ.get("SAT_SECONDS", "10"))
PAGE_SECONDS = int(os.environ.get("SAT_PAGE_SECONDS", "20"))
THREADS = 2
FLEET = 5000
PAGE_ITEMS = 1000
PAGE = f"page of {PAGE_ITEMS:,} instances"
SATURATION = Path(__file__).with_name("saturation.lua")
REPLAY = Path(__file__).with_name("replay.lua")
TICKS = os.sysconf("SC_CLK_TCK")
START_WITHIN = 20
EC2, ELBV2 = "2016-11-15", "2015-12-01"
FORM = "application/x-www-form-urlencoded; charset=utf-8"

# The operations, in the order they run, and the calls each server gets.
ALL_ROWS = {
    "get-instance": "one instance by ID: native GET /v1/instances/{id}; AWS DescribeInstances InstanceId.1",
    "find-instance": f"one of {FLEET + 1:,} instances by a key: native GET /v1/instances?name= (the native API has "
                     "no private DNS name filter); AWS DescribeInstances Filter.1.Name=private-dns-name",
    "create-route": "native POST /v1/route-tables/main/routes; AWS CreateRoute, on the main route table's EC2 ID "
                    "(moto: a route table made for it)",
    "set-targets": "native PATCH /v1/load-balancers/{id} setting its backends to two instances and to one in turn; "
                   "AWS RegisterTargets and DeregisterTargets of a second instance in turn, on a network load "
                   "balancer's target group holding one",
    "create-instance": "native POST /v1/instances; AWS RunInstances (moto only)",
    "create-lb": "native POST /v1/load-balancers; AWS elbv2 CreateLoadBalancer (moto only)",
    PAGE: f"native GET /v1/instances?page_size={PAGE_ITEMS}; AWS DescribeInstances MaxResults={PAGE_ITEMS} (moto only)",
}


ONLY = [r for r in os.environ.get("BENCH_ROWS", "").split(",") if r]
assert all(r in ALL_ROWS for r in ONLY), f"BENCH_ROWS names rows that are not {list(ALL_ROWS)}: {ONLY}"
ROWS = {row: calls for row, calls in ALL_ROWS.items() if not ONLY or row in ONLY}
WITH_MOTO = os.environ.get("BENCH_MOTO", "1") != "0"


class Template(NamedTuple):
    """One call for bench/saturation.lua: the same each time but for its placeholders ({n}, {zone}, {ip})."""
    method: str
    path: str
    headers: dict
    body: str = ""


class Replay(NamedTuple):
    """Raw requests for bench/replay.lua: `wrap`, sent in turn by each thread again and again; otherwise each once."""
    requests: list
    wrap: bool


class Result(NamedTuple):
    rps: float
    p50: Optional[float]
    p99: Optional[float]
    #: The server's CPU seconds per 1,000 requests.
    cpu: Optional[float]
    #: Non-2xx answers.
    failed: int
    completed: int


def cpu_seconds(pid):
    """User + system CPU time of the process (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def to_ms(text):
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def raw(url, method, path, headers, body=""):
    """An HTTP/1.1 request to `url`'s host, as bytes on the wire."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {urlparse(url).netloc}", *(f"{k}: {v}" for k, v in headers.items())]
    if body:
        lines.append(f"Content-Length: {len(body.encode())}")
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()


def route_ip(n):
    """bench/saturation.lua's {ip} for the number n: an address in 100.64.0.0/10."""
    return f"100.{64 + n // 65536 % 64}.{n // 256 % 256}.{n % 256}"


def first(xml, name):
    """The text of the first <name> element of xml."""
    return re.search(f"<{name}>([^<]*)</{name}>", xml).group(1)


def wrk(url, pid, load, seconds):
    """One wrk run of `load` (a Template or a Replay) against url, whose server is the process pid."""
    with tempfile.NamedTemporaryFile() as file:
        if isinstance(load, Template):
            script = SATURATION
            env = dict(BENCH_METHOD=load.method, BENCH_PATH=load.path, BENCH_BODY=load.body,
                       BENCH_HEADERS="\n".join(f"{k}: {v}" for k, v in load.headers.items()))
        else:
            script = REPLAY
            file.write(b"".join(b"%d\n%s" % (len(r), r) for r in load.requests))
            file.flush()
            env = dict(BENCH_REQUESTS=file.name, BENCH_THREADS=str(THREADS), BENCH_WRAP="1" if load.wrap else "0")
        before = cpu_seconds(pid)
        done = subprocess.run(["wrk", f"-t{THREADS}", f"-c{CONNECTIONS}", f"-d{seconds}s", "--timeout", "120s",
                               "--latency", "-s", str(script), url], env=dict(os.environ, **env),
                              capture_output=True, text=True)
        used = cpu_seconds(pid) - before
    out = done.stdout
    assert done.returncode == 0, f"wrk failed on {load}:\n{out}{done.stderr}"
    errors = re.search(r"Socket errors: (.*)", out)
    assert not errors, f"{load}: socket errors\n{out}"
    assert "replay: ran out" not in out, f"the run used up its {len(load.requests)} requests before its end\n{out}"
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    failed = int(bad.group(1)) if bad else 0
    total = int(re.search(r"(\d+) requests in", out).group(1))
    if total == 0:
        return Result(0.0, None, None, None, failed, 0)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = to_ms(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = to_ms(re.search(r"\s99%\s+(\S+)", out).group(1))
    return Result(rps, p50, p99, used / total * 1000, failed, total)


def run(server, side, row, load):
    # The clock perf's `-k CLOCK_MONOTONIC` records, so a profile of the whole script can be cut to one run.
    print(f"    {side} {row}: running from {time.monotonic():.1f} s", file=sys.stderr)
    result = wrk(server.url, server.pid, load, PAGE_SECONDS if row == PAGE else SECONDS)
    print(f"    {side} {row}: {result.rps:.0f} req/s, {result.failed} failed", file=sys.stderr)
    return result


class Face:
    """fakecloud's AWS face: calls POSTed to / as form bodies, signed with the cloud's key as boto3 signs them."""

    def __init__(self, url, credentials, region):
        self.url = url
        keys = Credentials(credentials["AWS_ACCESS_KEY_ID"], credentials["AWS_SECRET_ACCESS_KEY"])
        self.signers = {s: SigV4Auth(keys, s, region) for s in ("ec2", "elasticloadbalancing")}

    def headers(self, service, body):
        """The headers of `body` for `service`, signed now."""
        req = AWSRequest(method="POST", url=self.url + "/", data=body, headers={"Content-Type": FORM})
        self.signers[service].add_auth(req)
        return dict(req.headers)

    def call(self, service, version, action, **params):
        """One call's answer; a refusal fails the bench."""
        body = urlencode({"Action": action, "Version": version, **params})
        r = requests.post(self.url + "/", data=body, headers=self.headers(service, body))
        assert r.status_code == 200, f"{action}: {r.status_code} {r.text[:500]}"
        return r.text

    def signed(self, service, bodies, wrap):
        """A Replay of `bodies`, each signed now."""
        return Replay([raw(self.url, "POST", "/", self.headers(service, b), b) for b in bodies], wrap)


class Fakecloud:
    """A cloud of its own (`BIN serve` on loopback, a fresh database, no provisioning delays): its native API and
    its AWS face, whose keys are in the credentials file it writes beside its database."""

    def __init__(self, binary):
        self.dir = tempfile.TemporaryDirectory()
        db = Path(self.dir.name, "fc.db")
        log = Path(self.dir.name, "serve.log")
        # Its own tokens and keys, not any of the caller's environment's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKECLOUD_")} | {"RUST_LOG": os.environ.get("BENCH_RUST_LOG", "warn")}
        with log.open("w") as out:
            # A /12 VPC: a saturated create run makes more instances and load balancers than a /16's subnets hold.
            self.proc = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--boot-delay", "0s",
                                          "--lb-provision-delay", "0s", "--vpc-cidr", "10.0.0.0/12", "--db", str(db)],
                                         stdout=subprocess.DEVNULL, stderr=out, env=env)
        self.pid, self.credentials = self.proc.pid, db.with_suffix(".credentials")
        deadline = time.monotonic() + START_WITHIN
        while not (serving := re.search(r"fakecloud: serving (http://[^ ;]+)", log.read_text())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text()
                self.close()
                raise RuntimeError(f"fakecloud did not start within {START_WITHIN}s:\n{text}")
            time.sleep(0.1)
        self.url = serving.group(1)

    def get(self, path):
        r = requests.get(self.url + path, headers=self.headers)
        assert r.status_code == 200, f"GET {path}: {r.status_code} {r.text[:500]}"
        return r.json()

    def post(self, path, body):
        r = requests.post(self.url + path, json=body, headers=self.headers)
        assert r.status_code in (200, 201), f"POST {path}: {r.status_code} {r.text[:500]}"
        return r.json()

    def setup(self):
        credentials = dict(line[len("export "):].strip().split("=", 1)
                           for line in self.credentials.read_text().splitlines() if line.startswith("export "))
        self.headers = {"Authorization": f"Bearer {credentials['FAKECLOUD_USER_TOKEN']}",
                        "Content-Type": "application/json"}
        self.admin = {"Authorization": f"Bearer {credentials['FAKECLOUD_ADMIN_TOKEN']}"}
        self.face = face = Face(self.url, credentials, self.get("/v1/region")["name"])
        for q in ("instances", "load-balancers", "routes-per-route-table"):
            r = requests.put(f"{self.url}/v1/quotas/{q}", json={"limit": 1000000}, headers=self.admin)
            assert r.status_code == 200, r.text[:500]
        with ThreadPoolExecutor(16) as pool:
            fleet = list(pool.map(lambda i: self.post("/v1/instances", {"name": f"fleet-{i}"})["id"], range(FLEET)))
        self.target = self.post("/v1/instances", {"name": "sat-target"})["id"]
        # The instance the set-targets row puts in and takes out; a target group takes running instances only.
        self.other = fleet[0]
        deadline = time.monotonic() + START_WITHIN
        while any(self.get(f"/v1/instances/{i}")["state"] != "running" for i in (self.target, self.other)):
            assert time.monotonic() < deadline, "the instances did not come up"
            time.sleep(0.1)
        self.dns = first(face.call("ec2", EC2, "DescribeInstances", **{"InstanceId.1": self.target}), "privateDnsName")
        # The cloud's only route table: the main one.
        self.rtb = first(face.call("ec2", EC2, "DescribeRouteTables"), "routeTableId")
        lb = {"name": "sat-targets", "scheme": "internal", "backends": [self.target],
              "listeners": [{"protocol": "TCP", "port": 80, "backend_port": 30080}]}
        self.lb = self.post("/v1/load-balancers", lb)["id"]
        subnets = face.call("ec2", EC2, "DescribeSubnets")
        nlb = face.call("elasticloadbalancing", ELBV2, "CreateLoadBalancer", Name="sat-nlb", Type="network",
                        **{"Subnets.member.1": first(subnets, "subnetId")})
        self.group = first(face.call("elasticloadbalancing", ELBV2, "CreateTargetGroup", Name="sat-tg", Protocol="TCP",
                                     Port="30080", VpcId=first(subnets, "vpcId")), "TargetGroupArn")
        # Both in from the start; a target deregistered drains for 5 minutes, still in the group, so no
        # DeregisterTargets of the second is of a target not there.
        face.call("elasticloadbalancing", ELBV2, "RegisterTargets", TargetGroupArn=self.group,
                  **{"Targets.member.1.Id": self.target, "Targets.member.2.Id": self.other})
        face.call("elasticloadbalancing", ELBV2, "CreateListener", LoadBalancerArn=first(nlb, "LoadBalancerArn"),
                  Protocol="TCP", Port="80", **{"DefaultActions.member.1.Type": "forward",
                                                "DefaultActions.member.1.TargetGroupArn": self.group})

    def operations(self):
        """Per row: the native call's load, and a function of the native run's Result giving the face's load (signed
        when called, so just before the face's run), or None."""
        face, ec2 = self.face, lambda action, **p: urlencode({"Action": action, "Version": EC2, **p})
        route = f'{{"name": "r{{n}}", "destination": "{{ip}}/32", "target_instance": "{self.target}"}}'
        lb = ('{"name": "satlb-{n}", "scheme": "internal", '
              '"listeners": [{"protocol": "TCP", "port": 80, "backend_port": 30080}]}')
        # Past the numbers bench/saturation.lua gives the native run's two threads (2^20 each).
        face_routes = lambda native: face.signed("ec2", [
            ec2("CreateRoute", RouteTableId=self.rtb, DestinationCidrBlock=f"{route_ip(2 ** 21 + k)}/32",
                InstanceId=self.target) for k in range(max(1000, 2 * native.completed))], wrap=False)
        backends = [raw(self.url, "PATCH", f"/v1/load-balancers/{self.lb}", self.headers, f'{{"backends": {b}}}')
                    for b in (f'["{self.target}", "{self.other}"]', f'["{self.target}"]')]
        targets = [urlencode({"Action": a, "Version": ELBV2, "TargetGroupArn": self.group,
                              "Targets.member.1.Id": self.other}) for a in ("RegisterTargets", "DeregisterTargets")]
        return [
            ("get-instance", Template("GET", f"/v1/instances/{self.target}", self.headers),
             lambda _: face.signed("ec2", [ec2("DescribeInstances", **{"InstanceId.1": self.target})], wrap=True)),
            ("find-instance", Template("GET", "/v1/instances?name=sat-target", self.headers),
             lambda _: face.signed("ec2", [ec2("DescribeInstances", **{"Filter.1.Name": "private-dns-name",
                                                                      "Filter.1.Value.1": self.dns})], wrap=True)),
            ("create-route", Template("POST", "/v1/route-tables/main/routes", self.headers, route), face_routes),
            ("set-targets", Replay(backends, wrap=True),
             lambda _: face.signed("elasticloadbalancing", targets, wrap=True)),
            ("create-instance",
             Template("POST", "/v1/instances", self.headers, '{"name": "sat-{n}", "zone": "{zone}"}'), None),
            ("create-lb", Template("POST", "/v1/load-balancers", self.headers, lb), None),
            (PAGE, Template("GET", f"/v1/instances?page_size={PAGE_ITEMS}", self.headers), None),
        ]

    def close(self):
        self.proc.terminate()
        self.proc.wait()
        self.dir.cleanup()


class Moto:
    """EC2 and ELBv2 query APIs; moto does not check signatures, so plain form posts work."""

    def __init__(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid, self.url = self.proc.pid, f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                requests.get(self.url + "/moto-api/")
                break
            except requests.ConnectionError:
                time.sleep(0.1)

    @staticmethod
    def auth(service):
        return {"Content-Type": "application/x-www-form-urlencoded",
                "Authorization": f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/{service}/aws4_request, "
                                 "SignedHeaders=host, Signature=0"}

    def call(self, service, version, action, **p):
        r = requests.post(self.url + "/", data={"Action": action, "Version": version, **p}, headers=self.auth(service))
        assert r.status_code == 200, r.text[:500]
        return r.text

    def ec2(self, action, **p):
        return self.call("ec2", EC2, action, **p)

    def elbv2(self, action, **p):
        return self.call("elasticloadbalancing", ELBV2, action, **p)

    def setup(self):
        vpc = first(self.ec2("CreateVpc", CidrBlock="10.0.0.0/16"), "vpcId")
        self.subnets = [first(self.ec2("CreateSubnet", VpcId=vpc, CidrBlock=f"10.0.{k}.0/24",
                                       AvailabilityZone=f"us-east-1{z}"), "subnetId") for k, z in ((0, "a"), (1, "b"))]
        self.rtb = first(self.ec2("CreateRouteTable", VpcId=vpc), "routeTableId")
        image = dict(ImageId="ami-12c6146b", InstanceType="t3.small")
        self.target = first(self.ec2("RunInstances", MinCount="1", MaxCount="1", **image), "instanceId")
        self.dns = first(self.ec2("DescribeInstances", **{"InstanceId.1": self.target}), "privateDnsName")
        fleet = [self.ec2("RunInstances", MinCount="100", MaxCount="100", **image) for _ in range(FLEET // 100)]
        self.other = first(fleet[0], "instanceId")
        nlb = self.elbv2("CreateLoadBalancer", Name="sat-nlb", Type="network",
                         **{"Subnets.member.1": self.subnets[0]})
        self.group = first(self.elbv2("CreateTargetGroup", Name="sat-tg", Protocol="TCP", Port="30080", VpcId=vpc),
                           "TargetGroupArn")
        self.elbv2("RegisterTargets", TargetGroupArn=self.group,
                   **{"Targets.member.1.Id": self.target, "Targets.member.2.Id": self.other})
        self.elbv2("CreateListener", LoadBalancerArn=first(nlb, "LoadBalancerArn"), Protocol="TCP", Port="80",
                   **{"DefaultActions.member.1.Type": "forward", "DefaultActions.member.1.TargetGroupArn": self.group})

    def operations(self):
        ec2, elb = "Version=2016-11-15&Action=", "elasticloadbalancing"
        targets = [raw(self.url, "POST", "/", self.auth(elb),
                       urlencode({"Action": a, "Version": ELBV2, "TargetGroupArn": self.group,
                                  "Targets.member.1.Id": self.other}))
                   for a in ("RegisterTargets", "DeregisterTargets")]
        post = lambda body, service="ec2": Template("POST", "/", self.auth(service), body)
        return [
            ("get-instance", post(ec2 + f"DescribeInstances&InstanceId.1={self.target}")),
            ("find-instance",
             post(ec2 + f"DescribeInstances&Filter.1.Name=private-dns-name&Filter.1.Value.1={self.dns}")),
            ("create-route", post(ec2 + f"CreateRoute&RouteTableId={self.rtb}&DestinationCidrBlock={{ip}}%2F32"
                                        f"&InstanceId={self.target}")),
            ("set-targets", Replay(targets, wrap=True)),
            ("create-instance",
             post(ec2 + "RunInstances&ImageId=ami-12c6146b&MinCount=1&MaxCount=1&InstanceType=t3.small")),
            ("create-lb", post("Version=2015-12-01&Action=CreateLoadBalancer&Name=satlb-{n}&Scheme=internal"
                               f"&Subnets.member.1={self.subnets[0]}&Subnets.member.2={self.subnets[1]}", elb)),
            (PAGE, post(ec2 + f"DescribeInstances&MaxResults={PAGE_ITEMS}")),
        ]

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def main():
    fc = Fakecloud(sys.argv[1])
    native, face = {}, {}
    try:
        fc.setup()
        for row, load, face_load in fc.operations():
            if row not in ROWS:
                continue
            native[row] = run(fc, "native", row, load)
            if face_load:
                face[row] = run(fc, "face", row, face_load(native[row]))
                assert face[row].completed and not face[row].failed, f"the face failed {row}: {face[row]}"
    finally:
        fc.close()
    mo = {}
    if WITH_MOTO:
        moto = Moto()
        try:
            moto.setup()
            mo = {row: run(moto, "moto", row, load) for row, load in moto.operations() if row in ROWS}
        finally:
            moto.close()
    import moto as moto_pkg
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    print(f"\nwrk -t{THREADS} -c{CONNECTIONS} -d{SECONDS}s (pages: -d{PAGE_SECONDS}s), bench/saturation.lua and "
          f"bench/replay.lua; {wrk_version.strip()}; moto {moto_pkg.__version__}; the face's calls signed with "
          f"botocore {botocore.__version__}; {FLEET:,} instances and the target in each cloud before the lookups\n")
    print("| operation | native req/s | face req/s | moto req/s | native p50 / p99 ms | face p50 / p99 ms "
          "| moto p50 / p99 ms | native CPU s per 1,000 | face CPU s per 1,000 | moto CPU s per 1,000 "
          "| face / native CPU | moto / native CPU | moto / face CPU | failed (native, face, moto) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def num(x, digits):
        return "none completed" if x is None else f"{x:.{digits}f}"

    def ratio(a, b, digits=0):
        return f"{a / b:.{digits}f}x" if a and b else "—"

    for row in ROWS:
        n, m, f = native[row], mo.get(row, Result(0, None, None, None, 0, 0)), face.get(row)
        print(f"| {row} | {n.rps:.0f} | {f'{f.rps:.0f}' if f else '—'} | {m.rps:.1f} "
              f"| {num(n.p50, 2)} / {num(n.p99, 2)} | {f'{f.p50:.2f} / {f.p99:.2f}' if f else '—'} "
              f"| {num(m.p50, 1)} / {num(m.p99, 1)} | {num(n.cpu, 3)} | {f'{f.cpu:.3f}' if f else '—'} "
              f"| {num(m.cpu, 2)} | {ratio(f.cpu, n.cpu, 2) if f else '—'} | {ratio(m.cpu, n.cpu)} "
              f"| {ratio(m.cpu, f.cpu) if f else '—'} | {n.failed}, {f.failed if f else '—'}, {m.failed} |")
    print()
    for row, calls in ROWS.items():
        print(f"- {row}: {calls}")


if __name__ == "__main__":
    main()
