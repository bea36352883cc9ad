#!/usr/bin/env python3
"""Write-back flush at object-store latency (issue 13 goal: 2,000 x 100 KB at L = 20 ms).

Why: the write path of a workspace ends at the local journal (bench/writeback measures
that); what reaches the object store is the flush, one PUT per file through a fixed origin
concurrency, so at 20 ms per request its rate is set by how many uploads are in flight, not
by CPU. This bench writes the files into a fresh workspace (no background flusher), then
times ``Workspace.flush()`` to the origin behind ``bench/latency_proxy.py``, and checks
that every file is in the bucket with its size.

Two origins (``--origin``): moto (counts the requests it saw during the flush), or radosgw
of a throw-away single-node Ceph (``bench/cold/rgw.py``). moto spends 4-5 ms of CPU per
100 KB PUT on one core, which caps any client near 240 files/s; radosgw does not, so it
shows what the client's concurrency does. The CPU of the bench process and of the origin
during the flush is printed, and from it the rate this machine could reach at best:
``ceiling = cores / (client CPU per file + origin CPU per file)``.

The datahub that is measured is the one Python imports: run an older commit from a
``git worktree`` with ``PYTHONPATH`` (the script prints the path it imports)::

    .venv/bin/python bench/cold/flush.py --latency-ms 20
    PYTHONPATH=/tmp/base13 .venv/bin/python bench/cold/flush.py --latency-ms 20
    .venv/bin/python bench/cold/flush.py --latency-ms 20 --origin rgw
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # bench.*; last, so PYTHONPATH's datahub wins

import boto3

import datahub
from bench.cold.moto import Moto
from bench.cold.rgw import Rgw
from bench.latency_proxy import LatencyProxy, _cpu_of
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace

MiB = 1024**2
REQUEST = re.compile(r'"([A-Z]+) \S+ HTTP/[\d.]+" (\d{3})')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100_000, help="bytes per file")
    ap.add_argument("--origin", choices=["moto", "rgw"], default="moto")
    ap.add_argument("--port", type=int, default=5033, help="moto's port on 127.0.0.1")
    ap.add_argument("--dir", default=None, help="scratch directory (workspace home)")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="cold-flush-", dir=args.dir))
    print(f"# datahub from {Path(datahub.__file__).parent}", file=sys.stderr)
    try:
        with _origin(args, scratch) as origin, LatencyProxy(origin.url, args.latency_ms) as proxy:
            s3 = boto3.client("s3", endpoint_url=origin.url, region_name="us-east-1", **origin.keys)
            s3.create_bucket(Bucket="flush")
            overrides = {
                "home": str(scratch / "home"),
                "objects_url": "s3://flush/objects",
                "s3": {"endpoint_url": proxy.url, "access_key_id": origin.keys["aws_access_key_id"],
                       "secret_access_key": origin.keys["aws_secret_access_key"],
                       "region": "us-east-1", "path_style": True},
            }  # fmt: skip
            config = load_config(env={}, overrides=overrides)
            stores = StoreRegistry(config)
            ws = open_workspace(f"flush-{uuid.uuid4().hex[:6]}", config, stores, background=False)
            data = os.urandom(args.size)
            t0 = time.perf_counter()
            for i in range(args.files):
                with ws.open(f"f{i:05d}", create=True) as fh:
                    for off in range(0, len(data), MiB):
                        fh.write(off, data[off : off + MiB])
            write_s = time.perf_counter() - t0
            mark = origin.mark()
            cpu0, origin0 = _cpu_of(os.getpid()), origin.cpu()
            t0 = time.perf_counter()
            ws.flush()
            flush_s = time.perf_counter() - t0
            cpu, origin_cpu = _cpu_of(os.getpid()) - cpu0, origin.cpu() - origin0
            requests = origin.requests_since(mark)
            ws.close()
            stores.close()
            sizes = {}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket="flush"):
                sizes.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
            flushed = sum(1 for size in sizes.values() if size == args.size)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    cores = os.cpu_count() or 1
    per_file = (cpu + origin_cpu) / args.files
    result = {
        "datahub": str(Path(datahub.__file__).parent),
        "origin": args.origin,
        "latency_ms": args.latency_ms,
        "files": args.files,
        "size": args.size,
        "write_s": round(write_s, 2),
        "flush_s": round(flush_s, 2),
        "files_per_s": round(args.files / flush_s, 1),
        "mib_per_s": round(args.files * args.size / MiB / flush_s, 2),
        "objects_of_full_size_in_bucket": flushed,
        "requests_during_flush": dict(requests),
        "cpu_s": {"bench": round(cpu, 2), args.origin: round(origin_cpu, 2)},
        "ceiling_files_per_s": round(cores / per_file, 1) if per_file else None,
        "of_ceiling": round(args.files / flush_s * per_file / cores, 2) if per_file else None,
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }
    print(json.dumps(result))
    if flushed < args.files:
        sys.exit(f"only {flushed} of {args.files} files reached the bucket with their size")


class _MotoOrigin:
    """moto: its request log tells which requests the flush sent."""

    def __init__(self, moto: Moto) -> None:
        self.moto = moto
        self.url = moto.url
        self.keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}

    def cpu(self) -> float:
        return _cpu_of(self.moto.pid)

    def mark(self) -> int:
        return self.moto.log_path.stat().st_size

    def requests_since(self, mark: int) -> dict[str, int]:
        time.sleep(0.3)  # let moto log the last requests
        with open(self.moto.log_path, "rb") as fh:
            fh.seek(mark)
            text = fh.read().decode("utf-8", "replace")
        return dict(Counter(m.group(1) for m in REQUEST.finditer(text)))


class _RgwOrigin:
    """radosgw: no request log here; the bucket listing afterwards checks what arrived."""

    def __init__(self, rgw: Rgw) -> None:
        self.url, self.keys, self.cpu = rgw.url, rgw.keys, rgw.cpu

    def mark(self) -> int:
        return 0

    def requests_since(self, mark: int) -> dict[str, int]:
        return {}


@contextlib.contextmanager
def _origin(args: argparse.Namespace, scratch: Path) -> Iterator[_MotoOrigin | _RgwOrigin]:
    if args.origin == "rgw":
        with Rgw(scratch / "ceph") as rgw:
            yield _RgwOrigin(rgw)
    else:
        with Moto(args.port, scratch / "run") as moto:
            yield _MotoOrigin(moto)


if __name__ == "__main__":
    main()
