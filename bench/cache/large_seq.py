"""Cold sequential read of one large object through ``open_cache(...).read`` in 1 MiB
reads, from a moto server on loopback started here, against a plain boto3 get_object of
the same object (the endpoint's ceiling, measured in the same run).

Prints MiB/s, the ratio to boto3, and how many GET requests reached the origin (counted
by a FlakyProxy in front of moto), so the effect of coalesced readahead is visible.

Usage: .venv/bin/python bench/cache/large_seq.py [--mib 256] [--readahead 4]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import boto3
from common import config_in, header, row

from datahub.cache import open_cache
from datahub.storage import StoreRegistry
from tests.faults import FlakyProxy
from tests.servers import MotoServer

READ = 2**20


def datahub_run(url: str, ep, bucket: str, key: str, readahead: int, total: int) -> tuple[float, int]:
    """(seconds, origin GET count) for a cold 1 MiB sequential read through the cache."""
    with FlakyProxy(url) as proxy, tempfile.TemporaryDirectory(dir="/var/tmp") as home:
        config = config_in(Path(home), page_size=4 * 2**20, readahead_pages=readahead)
        s3 = config.s3
        s3.endpoint_url, s3.access_key_id, s3.secret_access_key = proxy.url, ep.access_key, ep.secret_key
        s3.region = "us-east-1"
        with StoreRegistry(config) as stores:
            store = stores.store(f"s3://{bucket}")
            ref = store.ref(key)
            with open_cache(config, stores) as cache:
                before = len(proxy.requests)
                t0 = time.perf_counter()
                n = 0
                for off in range(0, total, READ):
                    n += len(cache.read(ref, off, READ))
                seconds = time.perf_counter() - t0
                assert n == total
        gets = sum(1 for m, _ in proxy.requests[before:] if m == "GET")
    return seconds, gets


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--readahead", type=int, default=4)
    args = ap.parse_args()
    total = args.mib * 2**20
    header(f"cold sequential read of a {args.mib} MiB object in 1 MiB reads from moto on loopback")
    moto = MotoServer()
    try:
        ep = moto.endpoint
        client = boto3.client(
            "s3",
            endpoint_url=ep.url,
            aws_access_key_id=ep.access_key,
            aws_secret_access_key=ep.secret_key,
            region_name="us-east-1",
        )
        bucket, key = "bench", "big.bin"
        client.create_bucket(Bucket=bucket)
        client.put_object(Bucket=bucket, Key=key, Body=os.urandom(total))
        t0 = time.perf_counter()
        assert len(client.get_object(Bucket=bucket, Key=key)["Body"].read()) == total
        t_boto = time.perf_counter() - t0
        row("boto3 get_object, whole object (baseline)", t_boto, total)
        t_dh, gets = datahub_run(ep.url, ep, bucket, key, args.readahead, total)
        row(
            f"datahub cache.read 1 MiB, readahead {args.readahead}", t_dh, total, f"ratio {t_boto / t_dh:.2f}"
        )
        print(f"origin GETs: {gets} for {total // (4 * 2**20)} pages of 4 MiB")
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
