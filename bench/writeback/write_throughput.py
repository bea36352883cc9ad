"""Write-back write throughput vs writing the same files to local disk with fsync on close.

    .venv/bin/python bench/writeback/write_throughput.py [--scale 1.0] [--ceph-env /tmp/ceph-probe/env.sh]

Workloads (issue 3): 64 x 16 MiB and 2,000 x 100 KB files, written in 1 MiB calls then
closed, one writer thread (what a training job's checkpoint/log writer does) and, to show
how it scales, 4 writer threads. Baseline, measured in the same run on the same disk:
open/write/fsync/close of plain files. Write-back: ``Workspace.open/write/close`` with the
shared tier on a local directory (the embedded default) and, with ``--ceph-env``, on a
real Ceph RGW bucket. Each close returns only after the data is durable in the shared tier
and journaled. Goal: write-back / local >= 0.6. Prints one line per case and the ratios.

The file list is cut into ``--slices`` parts (default 10) and the baseline and each
write-back case take turns slice by slice (the workspaces stay open in between), so a
change in the load of a shared machine affects both sides of a ratio alike; ``--slices 1``
runs each side in one go, as before 2026-11-22 03:30.
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

from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace

MiB = 1024**2
PIECE = MiB


def workloads(scale: float) -> list[tuple[str, int, int]]:
    return [
        ("64 x 16 MiB", max(1, int(64 * scale)), 16 * MiB),
        ("2000 x 100 KB", max(1, int(2000 * scale)), 100_000),
    ]


def payload(size: int) -> bytes:
    return os.urandom(size)


class LocalWriter:
    """The baseline: plain files on the local disk, fsync'd before close."""

    def __init__(self, directory: Path, data: bytes, threads: int) -> None:
        self.directory, self.data, self.threads = directory, data, threads
        directory.mkdir(parents=True)

    def one(self, i: int) -> None:
        fd = os.open(self.directory / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for off in range(0, len(self.data), PIECE):
                os.write(fd, self.data[off : off + PIECE])
            os.fsync(fd)
        finally:
            os.close(fd)

    def run(self, files: range) -> float:
        start = time.perf_counter()
        with ThreadPoolExecutor(self.threads) as pool:
            list(pool.map(self.one, files))
        return time.perf_counter() - start

    def close(self) -> None:
        pass


class WorkspaceWriter(LocalWriter):
    """Write-back: ``Workspace.open/write/close`` (close returns once durable and journaled)."""

    def __init__(self, home: Path, overrides: dict, data: bytes, threads: int) -> None:
        self.data, self.threads = data, threads
        config = load_config(env={}, overrides={"home": str(home), **overrides})
        self.stores = StoreRegistry(config)
        self.ws = open_workspace(f"bench-{uuid.uuid4().hex[:6]}", config, self.stores)

    def one(self, i: int) -> None:
        with self.ws.open(f"f{i}", create=True) as fh:
            for off in range(0, len(self.data), PIECE):
                fh.write(off, self.data[off : off + PIECE])

    def close(self) -> None:
        self.ws.abandon()  # the flush to the origin is not part of the write path being measured
        self.stores.close()


def slices(count: int, parts: int) -> list[range]:
    parts = max(1, min(parts, count))
    bounds = [count * k // parts for k in range(parts + 1)]
    return [range(bounds[k], bounds[k + 1]) for k in range(parts)]


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
    parser.add_argument(
        "--ceph-env", help="env.sh of a running Ceph (scripts/ceph-dev/ceph-up.sh) to bench RGW too"
    )
    parser.add_argument("--threads", default="1,4", help="writer thread counts")
    parser.add_argument("--dir", default=None, help="scratch directory on the disk under test")
    parser.add_argument("--page-size", default=None, help="chunk size of the workspace (default 4MiB)")
    parser.add_argument("--only", default=None, help="run only workloads whose label contains this")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the summary shows medians")
    parser.add_argument(
        "--slices", type=int, default=10,
        help="baseline and write-back alternate in this many slices of the file list (noise fairness)",
    )  # fmt: skip
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
                    base = 0.0
                    secs = dict.fromkeys(name for name, _ in shared_cases)
                    local = LocalWriter(scratch / f"local-{uuid.uuid4().hex[:6]}", data, threads)
                    spaces = {
                        name: WorkspaceWriter(
                            scratch / f"home-{uuid.uuid4().hex[:6]}", overrides, data, threads
                        )
                        for name, overrides in shared_cases
                    }
                    try:
                        # baseline and write-back alternate slice by slice, so a change in the
                        # machine's load hits both sides of the ratio alike
                        for files in slices(count, args.slices):
                            base += local.run(files)
                            for name, writer in spaces.items():
                                secs[name] = (secs[name] or 0.0) + writer.run(files)
                    finally:
                        for writer in spaces.values():
                            writer.close()
                    if bucket is not None:
                        bucket.empty()
                    print(
                        f"[{round_no}] {label:14} threads={threads}  local disk+fsync {total / base:8.1f} MiB/s"
                    )
                    for name, _ in shared_cases:
                        results.setdefault((label, threads, name), []).append(
                            (total / base, total / secs[name])
                        )
                        print(f"[{round_no}] {label:14} threads={threads}  write-back {name:17} "
                              f"{total / secs[name]:8.1f} MiB/s  ratio {base / secs[name]:.2f}", flush=True)  # fmt: skip
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
