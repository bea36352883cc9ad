"""Cold read of N objects of 100 KB from S3 (moto on loopback, or Ceph RGW, or both):
datahub (prefetch, then read everything through the cache) against plain sequential
s3fs reads (goal: >= 5x faster) and 16-thread boto3 reads (goal: >= 1x).

Every contender starts cold: the server holds the same bytes each time, datahub gets an
empty cache directory. The datahub figure includes both passes (prefetch + reads). Each
round runs every contender once, in turn (so a burst of load from the shared machine hits
all of them alike); medians of ``--rounds`` rounds are reported, with each round's ratios.
``datahub, GETs through boto3`` is the same cache with ``StoreRegistry(lean_s3_get=False)``:
the code before the lean GET, as a same-run baseline (``--no-before`` skips it). Client
CPU is this process's ``process_time`` per object; server CPU is that of this process's
child processes (the moto server, or a Ceph cluster the script started; not a reused one),
which bounds the wall time from below when the server is CPU-bound.

Usage: .venv/bin/python bench/cache/cold_read.py [--endpoint moto|ceph|both] [--objects 2000]
       (ceph: reuses the cluster named by DATAHUB_TEST_CEPH_ENV, else starts one, ~1 min)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import baselines
from common import config_in, header, load_average, row, s3_endpoint

from datahub.cache import open_cache
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef

S3FS, BOTO3, BEFORE, DATAHUB = (
    "s3fs, sequential cat_file (baseline)",
    "boto3, 16 threads get_object (baseline)",
    "datahub, GETs through boto3 (before)",
    "datahub prefetch + read all from the cache",
)


def children_cpu() -> float:
    """CPU seconds used so far by this process's child processes (the servers it started)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as fh:
                pids = fh.read().split()
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total


def datahub_run(ep, bucket: str, args, total: int, lean: bool) -> float:
    """Seconds for prefetch + read-all with a fresh, empty cache."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as home:
        config = config_in(
            Path(home),
            page_size=4 * 2**20,
            prefetch_concurrency=args.concurrency,
            origin_concurrency=args.concurrency,
        )
        s3 = config.s3
        s3.endpoint_url, s3.access_key_id, s3.secret_access_key = ep.url, ep.access_key, ep.secret_key
        s3.region, s3.max_pool_connections = "us-east-1", 2 * args.concurrency
        with StoreRegistry(config, lean_s3_get=lean) as stores:
            store = stores.store(f"s3://{bucket}")
            refs = [
                ObjectRef(store.url_for(i.key), i.etag, i.size) for i in store.list("train/")
            ]  # the catalog's job
            with open_cache(config, stores) as cache:
                t0 = time.perf_counter()
                report = cache.prefetch(refs)
                assert sum(len(cache.read(r)) for r in refs) == total
                seconds = time.perf_counter() - t0
                assert report.pages_fetched == args.objects and cache.origin.counters.fetches == args.objects
    return seconds


def bench(kind: str, args) -> None:
    with s3_endpoint(kind) as ep:
        client = baselines.boto3_client(ep.url, ep.access_key, ep.secret_key)
        bucket = ep.new_bucket("coldread")
        objects = {f"train/{i:06d}.jpg": os.urandom(args.size) for i in range(args.objects)}
        baselines.upload(client, bucket, objects)
        keys = sorted(objects)
        total = args.size * args.objects

        def s3fs_run() -> float:
            t0 = time.perf_counter()
            assert baselines.s3fs_sequential_read(ep.url, ep.access_key, ep.secret_key, bucket, keys) == total
            return time.perf_counter() - t0

        def boto3_run() -> float:
            t0 = time.perf_counter()
            assert baselines.boto3_threaded_read(client, bucket, keys, threads=16) == total
            return time.perf_counter() - t0

        contenders: dict[str, Callable[[], float]] = {S3FS: s3fs_run, BOTO3: boto3_run}
        if args.before:
            contenders[BEFORE] = lambda: datahub_run(ep, bucket, args, total, lean=False)
        contenders[DATAHUB] = lambda: datahub_run(ep, bucket, args, total, lean=True)
        baselines.boto3_threaded_read(client, bucket, keys[:200], threads=16)  # warm the server
        times: dict[str, list[float]] = {name: [] for name in contenders}
        cpu: dict[str, list[float]] = {name: [] for name in contenders}
        server: dict[str, list[float]] = {name: [] for name in contenders}
        loads = []
        try:
            for _ in range(args.rounds):
                for name, run in contenders.items():
                    c0, s0 = time.process_time(), children_cpu()
                    times[name].append(run())
                    cpu[name].append(time.process_time() - c0)
                    server[name].append(children_cpu() - s0)
                loads.append(os.getloadavg()[0])
        finally:
            baselines.delete_all(client, bucket, keys)
    print(f"\n## {kind}: {args.objects} objects of {args.size} bytes, {args.rounds} rounds, medians")
    print(f"# {load_average()}; 1-min load after each round: {' '.join(f'{x:.1f}' for x in loads)}")
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, seconds in med.items():
        client_cpu = statistics.median(cpu[name]) / args.objects * 1e3
        server_cpu = statistics.median(server[name]) / args.objects * 1e3
        rounds = " ".join(f"{t:.1f}" for t in times[name])
        row(
            name,
            seconds,
            total,
            f"  client CPU {client_cpu:.2f} ms/object, server {server_cpu:.2f}; rounds: {rounds} s",
        )
    per_round_s3fs = [s / d for s, d in zip(times[S3FS], times[DATAHUB], strict=True)]
    per_round_boto = [b / d for b, d in zip(times[BOTO3], times[DATAHUB], strict=True)]
    print(
        f"speed-up vs sequential s3fs: {med[S3FS] / med[DATAHUB]:.2f}x (goal >= 5; rounds "
        + " ".join(f"{x:.2f}" for x in per_round_s3fs)
        + ")"
    )
    print(
        f"speed-up vs 16-thread boto3: {med[BOTO3] / med[DATAHUB]:.2f}x (goal >= 1; rounds "
        + " ".join(f"{x:.2f}" for x in per_round_boto)
        + ")"
    )
    if BEFORE in med:
        print(f"lean GET vs GETs through boto3 (datahub before/after): {med[BEFORE] / med[DATAHUB]:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", choices=["moto", "ceph", "both"], default="both")
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16, help="datahub prefetch/origin concurrency")
    ap.add_argument("--no-before", dest="before", action="store_false", help="skip the boto3-GET datahub run")
    args = ap.parse_args()
    header(f"cold read of {args.objects} objects of {args.size} bytes, S3 on loopback")
    for kind in ["moto", "ceph"] if args.endpoint == "both" else [args.endpoint]:
        bench(kind, args)


if __name__ == "__main__":
    main()
