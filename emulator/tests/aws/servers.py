"""Servers a test starts for itself: a fresh fakecloud (its own database, nothing the other tests made) and moto's
server, the reference the differential test compares the face with. Each on a free loopback port, stopped when the
test's fixture ends; each waited for at most START_WITHIN seconds, then refused with its log.
"""

import os
import re
import subprocess
import tempfile
import time
from contextlib import contextmanager
from typing import NamedTuple, Optional, Tuple

START_WITHIN = 20


@contextmanager
def _serving(argv, ready, env=None):
    """Run argv until the context ends; yield the first match of `ready` in its output, and its log's path."""
    with tempfile.TemporaryDirectory() as work:
        log_path = os.path.join(work, "server.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=work, env=env)
        try:
            deadline = time.monotonic() + START_WITHIN
            while True:
                with open(log_path) as f:
                    found = re.search(ready, f.read())
                if found:
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    with open(log_path) as f:
                        raise RuntimeError(f"{argv[0]} did not start within {START_WITHIN}s:\n{f.read()}")
                time.sleep(0.1)
            yield found, work
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Cloud(NamedTuple):
    url: str
    #: The credentials file's variables (the fakecloud tokens, the AWS keys).
    credentials: dict
    #: Where the cloud answers DNS (host, port), when it was served with `--dns-listen`.
    dns: Optional[Tuple[str, int]]


@contextmanager
def fresh_cloud(*flags):
    """A cloud of its own, as `make test`'s throwaway one is served, with `fakecloud serve`'s `flags` besides."""
    with tempfile.TemporaryDirectory() as data:
        db = os.path.join(data, "fc.db")
        argv = [os.environ["FAKECLOUD_BIN"], "serve", "--listen", "127.0.0.1:0", "--db", db]
        argv += ["--boot-delay", "0s", "--stop-delay", "0s", "--terminate-delay", "0s", *flags]
        # Without the run's tokens in its environment, it makes its own and writes them beside its database.
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKECLOUD_")} | {"RUST_LOG": "warn"}
        ready = r"fakecloud: serving (http://[^ ;]+)"
        if "--dns-listen" in flags:
            # Its DNS address is printed after its URL.
            ready += r"(?s:.*)fakecloud: DNS on ([0-9.]+):([0-9]+)"
        with _serving(argv, ready, env=env) as (m, _):
            credentials = {}
            with open(os.path.join(data, "fc.credentials")) as f:
                for line in f:
                    if line.startswith("export "):
                        name, _, value = line[len("export ") :].strip().partition("=")
                        credentials[name] = value
            dns = (m.group(2), int(m.group(3))) if "--dns-listen" in flags else None
            yield Cloud(m.group(1), credentials, dns)


@contextmanager
def moto():
    """moto's server (the `moto_server` of the pinned moto): yields its URL. It takes any key pair."""
    with _serving(["moto_server", "-H", "127.0.0.1", "-p", "0"], r"Running on (http://127\.0\.0\.1:\d+)") as (m, _):
        yield m.group(1)
