"""Real S3 servers for tests, on free 127.0.0.1 ports: moto in server mode and a real Ceph.

Used by the session-scoped fixtures in ``tests/conftest.py``. Nothing here talks to any
address but loopback.
"""

from __future__ import annotations

import http.client
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import boto3
import httpx
from botocore.config import Config as BotoConfig

from tests.moto_launch import MOTO_SERVER

REPO = Path(__file__).resolve().parent.parent
CEPH_TOOLS = REPO / "scripts" / "ceph-dev"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def wait_for_http(proc: subprocess.Popen, url: str, what: str = "datahub serve") -> None:
    """Until ``url`` answers any HTTP status: a server started as a user types it is ready when
    its first page answers, not when its port is bound (uvicorn binds before its app is up).
    A process that exits meanwhile fails the test with its stderr."""
    deadline = time.monotonic() + 120  # a hang guard, never a timing goal
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"{what} did not answer"
        try:
            httpx.get(url, timeout=30)
            return
        except httpx.TransportError:
            time.sleep(0.2)


@dataclass
class S3Endpoint:
    """An S3 endpoint a test may create buckets on."""

    name: str  # "moto" | "ceph"
    url: str
    access_key: str
    secret_key: str
    extra: dict = field(default_factory=dict)  # ceph: CEPH_CONF, CEPH_POOL, CEPH_PYLIB …

    def client(self):
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=BotoConfig(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def new_bucket(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def s3_config_overrides(self) -> dict:
        """``Config`` overrides (datahub.config) that point the s3 section at this endpoint."""
        return {
            "s3": {
                "endpoint_url": self.url,
                "access_key_id": self.access_key,
                "secret_access_key": self.secret_key,
                "region": "us-east-1",
                "path_style": True,
                "max_attempts": 3,
            }
        }


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REQUEST = re.compile(r'"([A-Z]+) (\S+) HTTP/1\.[01]" (\d{3})')


class MotoServer:
    """moto in server mode on loopback. ``keep_alive=True`` (the benchmarks): the same app over
    HTTP/1.1 keep-alive connections, as a real object store serves them (``tests/moto_http11.py``
    says why); the tests keep ``moto_server``, which closes every connection."""

    def __init__(self, *, keep_alive: bool = False) -> None:
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False)  # noqa: SIM115 - lives as long as the server
        if keep_alive:
            cmd = [sys.executable, str(Path(__file__).with_name("moto_http11.py"))]
        else:
            cmd = list(MOTO_SERVER)  # moto_server, its backend lookup's directory scan done once
        cmd += ["-H", "127.0.0.1", "-p", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_port(self.port)
        self.endpoint = S3Endpoint("moto", f"http://127.0.0.1:{self.port}", "testing", "testing")

    def log_size(self) -> int:
        """Where the request log ends now: ``answered(bucket, since=...)`` then sees only later requests."""
        return Path(self.log.name).stat().st_size

    def answered(self, bucket: str, *, since: int = 0) -> list[tuple[str, str, int]]:
        """(method, target, status) of every request for ``bucket`` the server logged after
        byte ``since`` of its log, in order.

        Why one parser: the server's log colours the request of every answer but a 200 (ANSI
        escapes between the opening quote and the method: 206 ranges, 204 deletes, every
        403), so a pattern written against a plain line silently counts successes only; a
        check for "no 403" then cannot fail."""
        with open(self.log.name, "rb") as fh:
            fh.seek(since)
            text = fh.read().decode(errors="replace")
        text = _ANSI.sub("", text[: text.rfind("\n") + 1])  # complete lines only
        found = _REQUEST.findall(text)
        return [
            (m, t, int(code))
            for m, t, code in found
            if t == f"/{bucket}" or t.startswith((f"/{bucket}/", f"/{bucket}?"))
        ]

    def put_objects(self, bucket: str, objects: Iterable[tuple[str, bytes]], threads: int = 8) -> None:
        """PUT each (key, bytes) into ``bucket``: plain S3 PUT Object requests from a few threads,
        naming the endpoint's access key (moto takes the account, and so each object's owner,
        from it, as for boto3's PUTs) with no real signature (moto verifies none).

        Why not boto3: filling a bucket of thousands of objects for a test, boto3 spent ~4.8
        CPU-ms per PUT in the test's process (signing, checksums, its event hooks) against
        ~0.8 here, on the two cores the server and the other worker share (docs/benchmarks.md,
        "Suite time (branch suite-fast)"). Every answer must be 200.
        """
        local = threading.local()
        credential = f"{self.endpoint.access_key}/20260101/us-east-1/s3/aws4_request"
        auth = f"AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders=host, Signature=0"

        def put(item: tuple[str, bytes]) -> None:
            key, body = item
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            headers = {"Authorization": auth, "Content-Length": str(len(body))}
            conn.request("PUT", f"/{bucket}/{quote(key)}", body=body, headers=headers)
            resp = conn.getresponse()
            text = resp.read()
            if resp.will_close:
                conn.close()
            if resp.status != 200:
                raise RuntimeError(f"PUT s3://{bucket}/{key} answered {resp.status}: {text[:300]!r}")

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(put, objects))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class CephCluster:
    """A throw-away single-node Ceph (mon, osd, rgw) under a temp dir, via scripts/ceph-dev.

    ``DATAHUB_TEST_CEPH_ENV=/path/env.sh`` reuses a cluster that is already running
    (faster while developing); it is then left running after the tests. So does ``reuse``
    (the env.sh of the cluster a parallel run's first worker started: tests/conftest.py).
    """

    def __init__(self, reuse: Path | None = None) -> None:
        reuse = reuse or os.environ.get("DATAHUB_TEST_CEPH_ENV")
        self.owned = not reuse
        if reuse:
            env_file = Path(reuse)
            self.dir = env_file.parent
        else:
            self.dir = Path(tempfile.mkdtemp(prefix="datahub-ceph-"))
            env = {k: v for k, v in os.environ.items() if not k.startswith("CEPH_")}
            env["CEPH_WITH_MGR"] = "0"  # librados and RGW work without it; saves RAM and seconds
            # Output goes to a file, not a pipe: the daemons outlive the script and would hold a
            # pipe open, so reading it to EOF could wait for ever.
            log = self.dir.with_suffix(".up.log")
            with open(log, "wb") as out:
                res = subprocess.run(
                    ["bash", str(CEPH_TOOLS / "ceph-up.sh"), str(self.dir)],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=600,
                )
            if res.returncode != 0:
                tail = log.read_text(errors="replace")[-4000:]
                raise RuntimeError(f"ceph-up.sh failed (exit {res.returncode}), see {log}:\n{tail}")
            env_file = self.dir / "env.sh"
        self.vars = _read_exports(env_file)
        self.endpoint = S3Endpoint(
            "ceph",
            self.vars["CEPH_RGW_ENDPOINT"],
            self.vars["AWS_ACCESS_KEY_ID"],
            self.vars["AWS_SECRET_ACCESS_KEY"],
            extra={k: v for k, v in self.vars.items() if k.startswith("CEPH_")},
        )
        self._wait_until_rgw_answers()

    def _wait_until_rgw_answers(self, timeout: float = 60.0) -> None:
        """ceph-up.sh returns once RGW listens; the first requests can still fail while it warms up."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.endpoint.client().list_buckets()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def stop(self) -> None:
        if self.owned:
            stop_ceph(self.dir)


def stop_ceph(cluster_dir: Path) -> None:
    """Stop the daemons ceph-up.sh started in ``cluster_dir`` and delete it."""
    try:
        subprocess.run(
            ["bash", str(CEPH_TOOLS / "ceph-down.sh"), str(cluster_dir), "--purge", "--kill"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pass  # a stuck teardown must not hang the test session; the daemons die with the VM


def _read_exports(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            out[name] = shlex.split(value)[0] if value else ""
    return out
