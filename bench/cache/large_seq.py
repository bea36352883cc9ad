"""Cold sequential read of one large object through ``open_cache(...).read``, from a moto
server on loopback started here, against a plain boto3 ``get_object`` of the same object
(the endpoint's one-stream ceiling), measured in the same run, alternating, ``--reps`` times.

Four passes per rep, each on a fresh cache directory:
- boto3 get_object of the whole object (baseline, the ceiling; it keeps nothing);
- datahub with readahead runs only (``stream_min_bytes = 0``: the code before streams);
- datahub with streams (the configuration's defaults: one streaming GET per reader), which
  also writes every page through to the disk tier;
- the same without a disk tier (``disk_bytes = 0``): what the disk write costs.

Prints MiB/s per pass, the medians, the ratio of each datahub mode to boto3 against the
goal (>= 0.8x), and how many requests reached the origin (the cache's own counter).

Usage: .venv/bin/python bench/cache/large_seq.py [--mib 512] [--read-kib 1024] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from baselines import boto3_client
from common import config_in, header

from datahub.cache import open_cache
from datahub.storage import StoreRegistry
from tests.servers import MotoServer

GOAL = 0.8  # x the boto3 one-stream ceiling (issue 4)


def datahub_pass(ep, bucket: str, key: str, total: int, read: int, **cache: object) -> tuple[float, int]:
    """(seconds, origin requests) for a cold sequential read in ``read``-byte reads."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as home:
        config = config_in(Path(home), **cache)
        s3 = config.s3
        s3.endpoint_url, s3.access_key_id, s3.secret_access_key = ep.url, ep.access_key, ep.secret_key
        s3.region = "us-east-1"
        with StoreRegistry(config) as stores:
            ref = stores.store(f"s3://{bucket}").ref(key)
            with open_cache(config, stores) as cache_:
                t0 = time.perf_counter()
                n = 0
                for off in range(0, total, read):
                    n += len(cache_.read(ref, off, read))
                seconds = time.perf_counter() - t0
                assert n == total, (n, total)
                requests = cache_.origin.counters.fetches
    return seconds, requests


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--read-kib", type=int, default=1024, help="size of each read (FUSE sends 128 KiB)")
    ap.add_argument(
        "--readahead",
        type=int,
        default=4,
        help="read-ahead window of the runs-only pass, in 4 MiB pages (readahead_bytes)",
    )
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    total, read = args.mib * 2**20, args.read_kib * 1024
    header(
        f"cold sequential read of a {args.mib} MiB object in {args.read_kib} KiB reads from moto on loopback"
    )
    print(f"# load average at start: {os.getloadavg()}")
    moto = MotoServer(keep_alive=True)
    rates: dict[str, list[float]] = {"boto3": [], "runs": [], "streams": [], "ram_only": []}
    requests: dict[str, int] = {}
    try:
        ep = moto.endpoint
        client = boto3_client(ep.url, ep.access_key, ep.secret_key)
        bucket, key = "bench", "big.bin"
        client.create_bucket(Bucket=bucket)
        client.put_object(Bucket=bucket, Key=key, Body=os.urandom(total))
        for rep in range(args.reps):
            t0 = time.perf_counter()
            assert len(client.get_object(Bucket=bucket, Key=key)["Body"].read()) == total
            rates["boto3"].append(total / (time.perf_counter() - t0) / 2**20)
            t, requests["runs"] = datahub_pass(
                ep, bucket, key, total, read, stream_min_bytes=0, readahead_bytes=args.readahead * 4 * 1024**2
            )
            rates["runs"].append(total / t / 2**20)
            t, requests["streams"] = datahub_pass(ep, bucket, key, total, read)
            rates["streams"].append(total / t / 2**20)
            t, requests["ram_only"] = datahub_pass(ep, bucket, key, total, read, disk_bytes=0)
            rates["ram_only"].append(total / t / 2**20)
            print(
                f"rep {rep + 1}: boto3 {rates['boto3'][-1]:.0f} MiB/s, datahub runs {rates['runs'][-1]:.0f} MiB/s "
                f"({requests['runs']} requests), datahub streams {rates['streams'][-1]:.0f} MiB/s "
                f"({requests['streams']} requests), streams without a disk tier {rates['ram_only'][-1]:.0f} MiB/s; "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    finally:
        moto.stop()
    med = {name: statistics.median(values) for name, values in rates.items()}
    print(f"\nmedians of {args.reps}:")
    print(f"  boto3 get_object, one stream (baseline)   {med['boto3']:8.0f} MiB/s")
    for name, label in (
        ("runs", f"readahead runs ({args.readahead} pages)"),
        ("streams", "streams (defaults)"),
        ("ram_only", "streams, no disk tier"),
    ):
        ratio = med[name] / med["boto3"]
        verdict = "met" if ratio >= GOAL else "missed"
        print(
            f"  datahub {label:<33} {med[name]:8.0f} MiB/s  {ratio:.2f}x boto3 "
            f"(goal >= {GOAL}x: {verdict}), {requests[name]} origin requests"
        )
    print(f"# load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
