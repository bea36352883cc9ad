"""Cold random reads in one large object through ``open_cache(...).read``, from a moto server
on loopback started here, against two baselines measured in the same run, ``--reps`` times:

- boto3: one ranged ``get_object`` per read (what a reader without a cache pays);
- download-then-serve: one boto3 ``get_object`` of the whole object, then every read
  sliced from memory (rclone's full cache mode at its best: nothing else runs meanwhile);
- datahub with whole-object fills off (``fill_whole_object_max = 0``: the code before);
- datahub with the defaults: after 4 random reads (out of order) the object is
  streamed into the cache in the background; reads that miss fetch their page at once.

The workload is the peers harness's large_rand: ``--reads`` reads of 128 KiB at random
4 KiB-aligned offsets (fixed seed), one thread, each pass capped at ``--max-seconds`` (the
rate is then over the reads done). Prints reads/s, the medians and the ratios.

Usage: .venv/bin/python bench/cache/large_rand.py [--mib 512] [--reads 2000] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from baselines import boto3_client
from common import config_in, header

from datahub.cache import open_cache
from datahub.storage import StoreRegistry
from tests.servers import MotoServer

PEER_BEST = 3.8  # reads/s of rclone-full in docs/benchmarks/mount.md (goal: >= 1.5x of it)


def offsets(size: int, reads: int, read: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(0, (size - read) // 4096) * 4096 for _ in range(reads)]


def timed(offs: list[int], read_at, max_seconds: float) -> tuple[float, int]:
    """(reads/s, requests-ish count left to the caller) over the reads done in the cap."""
    t0 = time.perf_counter()
    done = 0
    for off in offs:
        if time.perf_counter() - t0 > max_seconds:
            break
        read_at(off)
        done += 1
    return done / (time.perf_counter() - t0), done


def datahub_pass(ep, bucket, key, offs, read, max_seconds, **cache) -> tuple[float, int, int]:
    """(reads/s, reads done, origin requests) for a cold pass through a fresh cache."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as home:
        config = config_in(Path(home), **cache)
        s3 = config.s3
        s3.endpoint_url, s3.access_key_id, s3.secret_access_key = ep.url, ep.access_key, ep.secret_key
        s3.region = "us-east-1"
        with StoreRegistry(config) as stores:
            ref = stores.store(f"s3://{bucket}").ref(key)
            with open_cache(config, stores) as cache_:

                def read_at(off: int) -> None:
                    assert len(cache_.read(ref, off, read)) == read

                rate, done = timed(offs, read_at, max_seconds)
                requests = cache_.origin.counters.fetches
    return rate, done, requests


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--read-kib", type=int, default=128)
    ap.add_argument("--max-seconds", type=float, default=30.0, help="cap per pass (the peers harness: 30)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    total, read = args.mib * 2**20, args.read_kib * 1024
    offs = offsets(total, args.reads, read, args.seed)
    header(f"cold random {args.read_kib} KiB reads in a {args.mib} MiB object from moto on loopback")
    print(
        f"# {args.reads} reads per pass, capped at {args.max_seconds:.0f} s; load average {os.getloadavg()}"
    )
    moto = MotoServer(keep_alive=True)
    names = ("boto3_ranged", "download_then_serve", "datahub_no_fill", "datahub_fill")
    rates: dict[str, list[float]] = {n: [] for n in names}
    info: dict[str, str] = {}
    try:
        ep = moto.endpoint
        client = boto3_client(ep.url, ep.access_key, ep.secret_key)
        bucket, key = "bench", "big.bin"
        client.create_bucket(Bucket=bucket)
        client.put_object(Bucket=bucket, Key=key, Body=os.urandom(total))
        for rep in range(args.reps):

            def ranged(off: int) -> None:
                got = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={off}-{off + read - 1}")
                assert len(got["Body"].read()) == read

            rate, done = timed(offs, ranged, args.max_seconds)
            rates["boto3_ranged"].append(rate)
            info["boto3_ranged"] = f"{done} reads, {done} GETs"

            t0 = time.perf_counter()
            whole = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            view = memoryview(whole)
            for off in offs:
                assert len(bytes(view[off : off + read])) == read
            rates["download_then_serve"].append(len(offs) / (time.perf_counter() - t0))
            info["download_then_serve"] = f"{len(offs)} reads, 1 GET"
            del view, whole

            rate, done, requests = datahub_pass(
                ep, bucket, key, offs, read, args.max_seconds, fill_whole_object_max=0
            )
            rates["datahub_no_fill"].append(rate)
            info["datahub_no_fill"] = f"{done} reads, {requests} origin requests"
            rate, done, requests = datahub_pass(ep, bucket, key, offs, read, args.max_seconds)
            rates["datahub_fill"].append(rate)
            info["datahub_fill"] = f"{done} reads, {requests} origin requests"
            print(
                f"rep {rep + 1}: "
                + ", ".join(f"{n} {rates[n][-1]:.1f}/s" for n in names)
                + f"; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    finally:
        moto.stop()
    med = {n: statistics.median(v) for n, v in rates.items()}
    print(f"\nmedians of {args.reps} (reads/s; last rep's counts):")
    for n in names:
        print(f"  {n:<22} {med[n]:9.1f}  ({info[n]})")
    fill = med["datahub_fill"]
    print(f"  datahub_fill / boto3_ranged          {fill / med['boto3_ranged']:.1f}x")
    print(f"  datahub_fill / download_then_serve   {fill / med['download_then_serve']:.2f}x")
    print(f"  datahub_fill / datahub_no_fill       {fill / med['datahub_no_fill']:.1f}x")
    verdict = "met" if fill >= 1.5 * PEER_BEST else "missed"
    print(
        f"  datahub_fill / rclone-full {PEER_BEST} (mount.md) {fill / PEER_BEST:.0f}x (goal >= 1.5x: {verdict})"
    )
    print(f"# load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
