"""The cold read of a one-page object, with and without a Range header (shortrec15).

Why: the cache's origin read of a small object's only page (``datahub.cache.origin.read_range``)
went out without a Range header, so a record claiming a few bytes of a much larger object
read the whole body before the length check refused it (a 1-byte record of a multi-GB object
downloaded it all, in every mount and preview). It now always asks a bounded range: the
record's bytes and one more. This measures what the header costs on the path it changes:

* client CPU per GET (``time.process_time`` of THIS process; moto runs in another) of
  ``--size``-byte objects with If-Match through ``S3Store.read`` (the lean GET), unranged
  (before) and ranged to one byte past the end (after), alternating within each round;
* for a record of ``--claimed`` bytes of a ``--big``-byte object: the bytes each read moves
  and its CPU, before and after;
* the client code the header adds, without the network (low noise): ``sign_get`` with and
  without a ``Range`` header, and ``check_answer_range`` on a 206, per call.

Both make one request per read. The machine is shared: wall figures under load are noise
and are printed only for completeness; the load average is printed.

Usage: PYTHONPATH=. .venv/bin/python bench/cache/short_record_get.py [--gets 2000] [--rounds 5]
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

from botocore.credentials import ReadOnlyCredentials  # noqa: E402

from bench.cache.common import load_average, s3_endpoint  # noqa: E402
from datahub.config import load_config  # noqa: E402
from datahub.storage.s3 import S3Store  # noqa: E402
from datahub.storage.s3errors import check_answer_range  # noqa: E402
from datahub.storage.s3get import sign_get  # noqa: E402


def measure(fn: Callable[[str], int], keys: list[str], gets: int) -> tuple[float, float, int]:
    """(CPU ms per GET, wall ms per GET, bytes per GET) over ``gets`` sequential GETs."""
    c0, w0, moved = time.process_time(), time.perf_counter(), 0
    for i in range(gets):
        moved += fn(keys[i % len(keys)])
    return (time.process_time() - c0) / gets * 1e3, (time.perf_counter() - w0) / gets * 1e3, moved // gets


def report(title: str, results: dict[str, list[tuple[float, float, int]]]) -> None:
    print(f"\n## {title} ({load_average()})")
    print(f"{'':<44} {'CPU ms/GET':>11} {'wall ms/GET':>12} {'bytes/GET':>10}   CPU per round")
    medians = []
    for name, runs in results.items():
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        medians.append(cpu)
        rounds = " ".join(f"{r[0]:.3f}" for r in runs)
        print(f"{name:<44} {cpu:11.3f} {wall:12.3f} {runs[0][2]:10d}   {rounds}")
    before, after = medians
    print(f"CPU per GET after/before: {after / before:.3f} ({(after - before) * 1e3:+.0f} us)")


def alternate(
    contenders: dict[str, Callable[[str], int]], keys: list[str], gets: int, rounds: int
) -> dict[str, list[tuple[float, float, int]]]:
    for fn in contenders.values():  # warm connections and code paths
        measure(fn, keys, min(20, gets))
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders.items())
        for name, fn in order if r % 2 == 0 else reversed(order):  # A/B, then B/A
            results[name].append(measure(fn, keys, gets))
    return results


def header_code(calls: int, rounds: int) -> None:
    """CPU per call of what the Range header adds on the client, alternating within rounds."""
    creds = ReadOnlyCredentials("AKIDEXAMPLE", "secret", None)

    def sign(ranged: bool) -> None:
        headers = {"If-Match": '"0123456789abcdef0123456789abcdef"'}
        if ranged:
            headers["Range"] = "bytes=0-100000"
        sign_get("/bucket/obj/00001", "127.0.0.1:9000", headers, creds, "us-east-1")

    def check() -> None:
        check_answer_range(206, "bytes 0-99999/100000", 100000, 0, 100001, "bucket", "obj/00001")

    contenders = {
        "sign_get, If-Match (before)": lambda: sign(False),
        "sign_get, If-Match + Range (after)": lambda: sign(True),
        "check_answer_range on a 206 (after only)": check,
    }
    results: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            c0 = time.process_time()
            for _ in range(calls):
                fn()
            results[name].append((time.process_time() - c0) / calls * 1e6)
    print(f"\n## client code only, {calls} calls a round, {rounds} rounds ({load_average()})")
    for name, runs in results.items():
        print(f"{name:<44} {statistics.median(runs):8.2f} us/call   " + " ".join(f"{r:.2f}" for r in runs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gets", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100_000, help="bytes of each small object")
    ap.add_argument("--objects", type=int, default=200, help="distinct objects, read round-robin")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--big", type=int, default=64 << 20, help="bytes of the object a short record names")
    ap.add_argument("--claimed", type=int, default=1, help="bytes the short record claims")
    ap.add_argument("--big-gets", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20000, help="calls a round of the client-code part")
    args = ap.parse_args()
    print(f"# cold one-page origin read, unranged (before) vs ranged (after); "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    with s3_endpoint("moto") as ep, tempfile.TemporaryDirectory() as home:
        bucket = ep.new_bucket("shortrec")
        config = load_config(env={}, overrides={"home": home, **ep.s3_config_overrides()}).s3
        store = S3Store(bucket, "", config)
        keys = [f"obj/{i:05d}" for i in range(args.objects)]
        etags = {k: store.put(k, os.urandom(args.size)).etag for k in keys}
        small = alternate(
            {
                "unranged GET (before)": lambda k: len(store.read(k, 0, None, etag=etags[k])),
                "ranged GET, size + 1 (after)": lambda k: len(store.read(k, 0, args.size + 1, etag=etags[k])),
            },
            keys,
            args.gets,
            args.rounds,
        )
        report(
            f"moto: {args.gets} GETs of {args.size}-byte objects with If-Match, {args.rounds} rounds", small
        )
        big_etag = store.put("big", os.urandom(args.big)).etag
        short = alternate(
            {
                "unranged GET (before)": lambda k: len(store.read(k, 0, None, etag=big_etag)),
                "ranged GET, claimed + 1 (after)": lambda k: len(
                    store.read(k, 0, args.claimed + 1, etag=big_etag)
                ),
            },
            ["big"],
            args.big_gets,
            args.rounds,
        )
        report(
            f"moto: a {args.claimed}-byte record of a {args.big}-byte object, {args.big_gets} reads a round",
            short,
        )
        store.close()
    header_code(args.calls, args.rounds)


if __name__ == "__main__":
    main()
