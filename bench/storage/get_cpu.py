"""Client CPU per S3 GET of a small object: the lean signed GET against boto3, same run.

A cold epoch through the cache is CPU-bound on a 2-core node: every millisecond the client
spends per GET is a millisecond the server (moto, RGW) does not get. This measures
``time.process_time`` of THIS process (the servers run in others) over ``--gets``
sequential GETs of ``--size`` bytes with If-Match, for:

* raw boto3 ``get_object`` with a default client (what a user would write; baseline),
* ``S3Store.read`` with ``lean_get=False`` (GETs through boto3: the code before the change),
* ``S3Store.read`` with its GETs signed by botocore's ``S3SigV4Auth`` (the lean GET before
  ``sign_get`` wrote the signature out itself),
* ``S3Store.read`` (the lean signed urllib3 GET).

moto is served over HTTP/1.1 keep-alive, as a real object store (``tests/moto_http11.py``).

Contenders alternate within each round (so bursts of load hit all alike); ``--rounds``
rounds, medians reported.

Usage: PYTHONPATH=. .venv/bin/python bench/storage/get_cpu.py [--endpoint moto|ceph|both]
       (ceph: reuses DATAHUB_TEST_CEPH_ENV if set, else starts a throw-away cluster)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import boto3  # noqa: E402
from botocore.auth import S3SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402

import datahub.storage.s3get as s3get  # noqa: E402
from bench.cache.common import load_average, s3_endpoint  # noqa: E402
from datahub.config import load_config  # noqa: E402
from datahub.storage.s3 import S3Store  # noqa: E402


def measure(fn: Callable[[str], int], keys: list[str], gets: int, size: int) -> tuple[float, float]:
    """(CPU ms per GET, wall ms per GET) over ``gets`` sequential GETs."""
    c0, w0 = time.process_time(), time.perf_counter()
    for i in range(gets):
        assert fn(keys[i % len(keys)]) == size
    return (time.process_time() - c0) / gets * 1e3, (time.perf_counter() - w0) / gets * 1e3


def botocore_signed() -> Callable[..., None]:
    """``sign_get`` as it was: botocore's signer over a request object (the same headers)."""

    def sign_get(path: str, host: str, headers: dict, credentials, region: str) -> None:
        request = AWSRequest("GET", f"http://{host}{path}", headers={"Host": host, **headers})
        S3SigV4Auth(credentials, "s3", region).add_auth(request)
        headers.clear()
        headers.update(request.headers.items())

    return sign_get


def signed_by(signer: Callable[..., None], fn: Callable[[str], int]) -> Callable[[str], int]:
    def call(key: str) -> int:
        s3get.sign_get = signer
        try:
            return fn(key)
        finally:
            s3get.sign_get = OURS

    return call


OURS = s3get.sign_get


def run(kind: str, args: argparse.Namespace) -> None:
    with s3_endpoint(kind) as ep, tempfile.TemporaryDirectory() as home:
        bucket = ep.new_bucket("getcpu")
        overrides = {"home": home, **ep.s3_config_overrides()}
        config = load_config(env={}, overrides=overrides).s3
        lean, boto_path = S3Store(bucket, "", config), S3Store(bucket, "", config, lean_get=False)
        keys = [f"obj/{i:05d}" for i in range(args.objects)]
        etags = {k: lean.put(k, os.urandom(args.size)).etag for k in keys}
        client = boto3.client(
            "s3",
            endpoint_url=ep.url,
            aws_access_key_id=ep.access_key,
            aws_secret_access_key=ep.secret_key,
            region_name="us-east-1",
        )

        def raw_boto3(key: str) -> int:
            resp = client.get_object(Bucket=bucket, Key=key, IfMatch=f'"{etags[key]}"')
            return len(resp["Body"].read())

        contenders = {
            "boto3 get_object, default client (baseline)": raw_boto3,
            "S3Store.read through boto3 (before)": lambda k: len(boto_path.read(k, etag=etags[k])),
            "S3Store.read, lean GET, botocore's signer": signed_by(
                botocore_signed(), lambda k: len(lean.read(k, etag=etags[k]))
            ),
            "S3Store.read, lean signed GET (after)": lambda k: len(lean.read(k, etag=etags[k])),
        }
        for fn in contenders.values():  # warm connections and code paths
            measure(fn, keys, min(50, args.gets), args.size)
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, fn in contenders.items():
                results[name].append(measure(fn, keys, args.gets, args.size))
        lean.close()
        boto_path.close()
    print(f"\n## {kind}: {args.gets} GETs of {args.size} bytes with If-Match, one thread, "
          f"{args.rounds} rounds ({load_average()})")  # fmt: skip
    print(f"{'':<46} {'CPU ms/GET':>11} {'wall ms/GET':>12}   CPU per round")
    medians = {}
    for name, runs in results.items():
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        medians[name] = cpu
        rounds = " ".join(f"{r[0]:.3f}" for r in runs)
        print(f"{name:<46} {cpu:11.3f} {wall:12.3f}   {rounds}")
    base, before, botocore_signer, after = medians.values()
    print(
        f"CPU per GET: before/after {before / after:.2f}x, raw boto3/after {base / after:.2f}x,"
        f" botocore's signer/ours {botocore_signer / after:.2f}x ({(botocore_signer - after) * 1e3:.0f} us)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", choices=["moto", "ceph", "both"], default="both")
    ap.add_argument("--gets", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--objects", type=int, default=200, help="distinct objects, read round-robin")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"# client CPU per S3 GET; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for kind in ["moto", "ceph"] if args.endpoint == "both" else [args.endpoint]:
        run(kind, args)


if __name__ == "__main__":
    main()
