"""Write-back write throughput vs writing the same files to local disk with fsync on close.

    .venv/bin/python bench/writeback/write_throughput.py [--scale 1.0] [--ceph-env /tmp/ceph-probe/env.sh]

Workloads (issue 3): 64 x 16 MiB and 2,000 x 100 KB files, written in 1 MiB calls then
closed, one writer thread (what a training job's checkpoint/log writer does) and, to show
how it scales, 4 writer threads. Baseline, measured in the same run on the same disk:
open/write/fsync/close of plain files. Write-back: ``Workspace.open/write/close`` with the
shared tier on a local directory (the embedded default) and, with ``--ceph-env``, on a
real Ceph RGW bucket. Each close returns only after the data is durable in the shared tier
and journaled. Goal: write-back / local >= 0.6. Prints one line per case and the ratios.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.cache.writeback import open_workspace
from datahub.config import load_config
from datahub.storage import StoreRegistry

MiB = 1024**2
PIECE = MiB


def workloads(scale: float) -> list[tuple[str, int, int]]:
    return [
        ("64 x 16 MiB", max(1, int(64 * scale)), 16 * MiB),
        ("2000 x 100 KB", max(1, int(2000 * scale)), 100_000),
    ]


def payload(size: int) -> bytes:
    return os.urandom(size)


def write_local(directory: Path, count: int, data: bytes, threads: int) -> float:
    directory.mkdir(parents=True)

    def one(i: int) -> None:
        fd = os.open(directory / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for off in range(0, len(data), PIECE):
                os.write(fd, data[off : off + PIECE])
            os.fsync(fd)
        finally:
            os.close(fd)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))
    return time.perf_counter() - start


def write_workspace(home: Path, overrides: dict, count: int, data: bytes, threads: int) -> float:
    config = load_config(env={}, overrides={"home": str(home), **overrides})
    stores = StoreRegistry(config)
    ws = open_workspace(f"bench-{uuid.uuid4().hex[:6]}", config, stores)

    def one(i: int) -> None:
        with ws.open(f"f{i}", create=True) as fh:
            for off in range(0, len(data), PIECE):
                fh.write(off, data[off : off + PIECE])

    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, range(count)))
        return time.perf_counter() - start
    finally:
        ws.abandon()  # the flush to the origin is not part of the write path being measured
        stores.close()


class CephBucket:
    """The bench's scratch bucket on Ceph RGW: emptied after every case, removed at the end
    (the test cluster is small; a full OSD blocks everyone)."""

    def __init__(self, env_file: str) -> None:
        env = {}
        for line in Path(env_file).read_text().splitlines():
            if line.startswith("export "):
                name, _, value = line[len("export ") :].partition("=")
                env[name] = shlex.split(value)[0] if value else ""
        import boto3

        self.env = env
        self.name = f"wb-bench-{uuid.uuid4().hex[:8]}"
        self.client = boto3.client(
            "s3", endpoint_url=env["CEPH_RGW_ENDPOINT"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1",
        )  # fmt: skip
        self.client.create_bucket(Bucket=self.name)

    def overrides(self) -> dict:
        env = self.env
        return {
            "s3": {"endpoint_url": env["CEPH_RGW_ENDPOINT"], "access_key_id": env["AWS_ACCESS_KEY_ID"],
                   "secret_access_key": env["AWS_SECRET_ACCESS_KEY"], "region": "us-east-1", "path_style": True},
            "cache": {"shared_url": f"s3://{self.name}/shared"},
        }  # fmt: skip

    def empty(self) -> None:
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self.client.delete_objects(Bucket=self.name, Delete={"Objects": keys, "Quiet": True})

    def remove(self) -> None:
        self.empty()
        self.client.delete_bucket(Bucket=self.name)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the file counts (quick runs)")
    parser.add_argument("--ceph-env", help="env.sh of a running Ceph (shared/tools/ceph) to bench RGW too")
    parser.add_argument("--threads", default="1,4", help="writer thread counts")
    parser.add_argument("--dir", default=None, help="scratch directory on the disk under test")
    parser.add_argument("--page-size", default=None, help="chunk size of the workspace (default 4MiB)")
    parser.add_argument("--only", default=None, help="run only workloads whose label contains this")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the summary shows medians")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="wb-bench-", dir=args.dir))
    page = {"cache": {"page_size": args.page_size}} if args.page_size else {}
    shared_cases = [("shared=local dir", {**page})]
    bucket = CephBucket(args.ceph_env) if args.ceph_env else None
    if bucket is not None:
        ceph = bucket.overrides()
        ceph["cache"].update(page.get("cache", {}))
        shared_cases.append(("shared=Ceph RGW", ceph))
    print(
        f"# write-back write throughput, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, scratch {scratch}"
    )
    results: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    try:
        for round_no in range(args.repeat):
            for label, count, size in workloads(args.scale):
                if args.only and args.only not in label:
                    continue
                data = payload(size)
                total = count * size / MiB
                for threads in map(int, args.threads.split(",")):
                    base = write_local(scratch / f"local-{uuid.uuid4().hex[:6]}", count, data, threads)
                    print(
                        f"[{round_no}] {label:14} threads={threads}  local disk+fsync {total / base:8.1f} MiB/s"
                    )
                    for name, overrides in shared_cases:
                        home = scratch / f"home-{uuid.uuid4().hex[:6]}"
                        secs = write_workspace(home, overrides, count, data, threads)
                        if bucket is not None and "shared_url" in overrides.get("cache", {}):
                            bucket.empty()
                        results.setdefault((label, threads, name), []).append((total / base, total / secs))
                        print(f"[{round_no}] {label:14} threads={threads}  write-back {name:17} "
                              f"{total / secs:8.1f} MiB/s  ratio {base / secs:.2f}", flush=True)  # fmt: skip
                    shutil.rmtree(scratch, ignore_errors=True)
                    scratch.mkdir()
        print(
            "\n| workload | writers | shared tier | local disk+fsync MiB/s | write-back MiB/s | ratio (median) |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for (label, threads, name), runs in results.items():
            base = statistics.median(b for b, _ in runs)
            wb = statistics.median(w for _, w in runs)
            ratio = statistics.median(w / b for b, w in runs)
            print(
                f"| {label} | {threads} | {name.removeprefix('shared=')} | {base:.1f} | {wb:.1f} | {ratio:.2f} |"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if bucket is not None:
            bucket.remove()


if __name__ == "__main__":
    main()
