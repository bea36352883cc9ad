"""A throw-away single-node Ceph with radosgw on 127.0.0.1, as an origin for the cold benches.

Why: moto answers each request in Python on one core (about 4-5 ms of CPU per 100 KB PUT),
so a bench against it measures moto once the client keeps a few requests in flight. radosgw
is the S3 server of a real Ceph: C++ and threaded, so at 20 ms per request the client's
concurrency, not the server, decides the rate. ``scripts/ceph-dev/ceph-up.sh`` starts it
(memstore OSD, no manager); ``stop()`` runs ``ceph-down.sh --purge``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bench.latency_proxy import _cpu_of

REPO = Path(__file__).resolve().parents[2]
CEPH_DEV = REPO / "scripts" / "ceph-dev"


class Rgw:
    """``Rgw(run_dir)``: started at once; ``url``, ``keys`` (boto3 kwargs), ``cpu()``; ``stop()``."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "CEPH_WITH_MGR": "0", "CEPH_OSD_SIZE_GB": "8"}
        res = subprocess.run(
            ["bash", str(CEPH_DEV / "ceph-up.sh"), str(run_dir)], env=env, capture_output=True, text=True
        )
        if res.returncode != 0:
            tail = "\n".join((res.stdout + res.stderr).splitlines()[-20:])
            raise RuntimeError(f"ceph-up.sh {run_dir} exited {res.returncode}:\n{tail}")
        exports = dict(
            line[len("export ") :].split("=", 1)
            for line in res.stdout.splitlines()
            if line.startswith("export ")
        )
        self.url = exports["CEPH_RGW_ENDPOINT"].strip("'\"")
        self.keys = {
            "aws_access_key_id": exports["AWS_ACCESS_KEY_ID"].strip("'\""),
            "aws_secret_access_key": exports["AWS_SECRET_ACCESS_KEY"].strip("'\""),
        }

    def pids(self) -> list[int]:
        """Every daemon of this cluster (radosgw, OSD, monitor), from the pid files ceph-up.sh wrote."""
        return [int(p.read_text().strip()) for p in sorted((self.dir / "pids").glob("*.pid"))]

    def cpu(self) -> float:
        """CPU seconds used so far by the cluster's daemons together."""
        return sum(_cpu_of(pid) for pid in self.pids())

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(CEPH_DEV / "ceph-down.sh"), str(self.dir), "--purge"], capture_output=True
        )

    def __enter__(self) -> Rgw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
