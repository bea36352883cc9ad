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

``--origin-latency-ms 0,5,10,20`` runs the rounds once per latency L. For L > 0 every
contender reaches the server through the same loopback delay proxy
(``bench/latency_proxy.py``, its own process), which holds the server's answers back by
L ms: a model of a real object store, latency-bound rather than bound by a server that
shares the client's cores. The proxy's CPU is printed apart from client and server
(infrastructure, not a contender); a summary table across the L values ends the run.
L = 0 (the default) talks to the server directly, as before the option existed.

``--concurrency 16,64`` adds a datahub contender per extra value (prefetch workers and
origin slots; 16 is the default configuration), to see whether that bound is what limits
datahub at a given latency. ``--sequential-get`` adds a reference contender that sends one
GET per object, one at a time: s3fs ``cat_file`` sends a HEAD before every GET (s3fs
2026.9 with its default ``max_concurrency`` > 1), so it pays two round trips per object.

Usage: .venv/bin/python bench/cache/cold_read.py [--endpoint moto|ceph|both] [--objects 2000]
           [--rounds 3] [--origin-latency-ms 0[,5,...]] [--concurrency 16[,64,...]]
           [--sequential-get] [--no-before]
       (ceph: reuses the cluster named by DATAHUB_TEST_CEPH_ENV, else starts one, ~1 min)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import baselines
from common import config_in, header, load_average, row, s3_endpoint

from bench.latency_proxy import LatencyProxy
from datahub.cache import open_cache
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef

S3FS, BOTO3, BEFORE, DATAHUB, SEQ_GET = (
    "s3fs, sequential cat_file (baseline)",
    "boto3, 16 threads get_object (baseline)",
    "datahub, GETs through boto3 (before)",
    "datahub prefetch + read all from the cache",
    "boto3, sequential get_object (reference)",
)


def datahub_name(concurrency: int, args) -> str:
    """The first ``--concurrency`` is the datahub contender; the others are named by theirs."""
    return DATAHUB if concurrency == args.concurrency[0] else f"datahub, concurrency {concurrency}"


def children_cpu(exclude: frozenset[int] = frozenset()) -> float:
    """CPU seconds used so far by this process's child processes (the servers it started),
    leaving out the pids in ``exclude`` (the latency proxy, reported apart)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as fh:
                pids = fh.read().split()
        except OSError:
            continue
        for pid in pids:
            if int(pid) in exclude:
                continue
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
    return total


def datahub_run(ep, url: str, bucket: str, args, total: int, lean: bool, concurrency: int) -> float:
    """Seconds for prefetch + read-all with a fresh, empty cache, reaching S3 at ``url``;
    ``concurrency`` prefetch workers and origin slots (the defaults are 16 and 16, with 32
    pooled connections: concurrency 16 here is the default configuration)."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as home:
        config = config_in(
            Path(home),
            page_size=4 * 2**20,
            prefetch_concurrency=concurrency,
            origin_concurrency=concurrency,
        )
        s3 = config.s3
        s3.endpoint_url, s3.access_key_id, s3.secret_access_key = url, ep.access_key, ep.secret_key
        s3.region, s3.max_pool_connections = "us-east-1", 2 * concurrency
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


@dataclass
class Medians:
    """One latency's medians, for the summary table."""

    latency_ms: float
    seconds: dict[str, float]
    proxy_cpu_ms: float  # proxy CPU per object, median over every contender's runs


def ratio_line(label: str, base: list[float], subject: list[float], goal: str) -> str:
    """``label: median ratio (goal; every round's ratio)``: base time / subject time."""
    rounds = " ".join(f"{b / s:.2f}" for b, s in zip(base, subject, strict=True))
    return f"{label}: {statistics.median(base) / statistics.median(subject):.2f}x ({goal}rounds {rounds})"


def run_at_latency(ep, bucket: str, keys: list[str], args, latency_ms: float) -> Medians:
    """``args.rounds`` rounds of every contender, all through one proxy adding
    ``latency_ms`` (none at 0); prints the figures and returns the medians."""
    total = args.size * args.objects
    proxy = LatencyProxy(ep.url, latency_ms) if latency_ms > 0 else None
    with proxy or nullcontext():
        url = proxy.url if proxy else ep.url
        client = baselines.boto3_client(url, ep.access_key, ep.secret_key)

        def s3fs_run() -> float:
            t0 = time.perf_counter()
            assert baselines.s3fs_sequential_read(url, ep.access_key, ep.secret_key, bucket, keys) == total
            return time.perf_counter() - t0

        def boto3_run(threads: int) -> float:
            t0 = time.perf_counter()
            assert baselines.boto3_threaded_read(client, bucket, keys, threads=threads) == total
            return time.perf_counter() - t0

        def datahub(lean: bool, concurrency: int) -> Callable[[], float]:
            return lambda: datahub_run(ep, url, bucket, args, total, lean, concurrency)

        contenders: dict[str, Callable[[], float]] = {S3FS: s3fs_run}
        if args.sequential_get:
            contenders[SEQ_GET] = lambda: boto3_run(1)
        contenders[BOTO3] = lambda: boto3_run(16)
        if args.before:
            contenders[BEFORE] = datahub(False, args.concurrency[0])
        for n in args.concurrency:
            contenders[datahub_name(n, args)] = datahub(True, n)
        baselines.boto3_threaded_read(client, bucket, keys[:200], threads=16)  # warm the server
        times: dict[str, list[float]] = {name: [] for name in contenders}
        cpu: dict[str, list[float]] = {name: [] for name in contenders}
        server: dict[str, list[float]] = {name: [] for name in contenders}
        proxy_cpu: dict[str, list[float]] = {name: [] for name in contenders}
        exclude = frozenset([proxy.pid]) if proxy else frozenset()

        def proxy_seconds() -> float:
            return proxy.cpu_seconds() if proxy else 0.0

        loads = []
        for _ in range(args.rounds):
            for name, run in contenders.items():
                c0, s0, p0 = time.process_time(), children_cpu(exclude), proxy_seconds()
                times[name].append(run())
                cpu[name].append(time.process_time() - c0)
                server[name].append(children_cpu(exclude) - s0)
                proxy_cpu[name].append(proxy_seconds() - p0)
            loads.append(os.getloadavg()[0])
    where = f"origin latency {latency_ms:g} ms (loopback delay proxy)" if proxy else "no added latency"
    print(
        f"\n## {ep.name}, {where}: {args.objects} objects of {args.size} bytes, {args.rounds} rounds, medians"
    )
    print(f"# {load_average()}; 1-min load after each round: {' '.join(f'{x:.1f}' for x in loads)}")
    print(f"# datahub: prefetch_concurrency = origin_concurrency = {args.concurrency[0]}")
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, seconds in med.items():
        client_cpu = statistics.median(cpu[name]) / args.objects * 1e3
        server_cpu = statistics.median(server[name]) / args.objects * 1e3
        rounds = " ".join(f"{t:.2f}" for t in times[name])
        extra = f"{args.objects / seconds:7.0f} objects/s  client CPU {client_cpu:.2f} ms/object"
        extra += f", server {server_cpu:.2f}"
        if proxy:
            extra += f", proxy {statistics.median(proxy_cpu[name]) / args.objects * 1e3:.2f}"
        row(name, seconds, total, f"{extra}; rounds: {rounds} s")
    print(ratio_line("speed-up vs sequential s3fs", times[S3FS], times[DATAHUB], "goal >= 5; "))
    print(ratio_line("speed-up vs 16-thread boto3", times[BOTO3], times[DATAHUB], "goal >= 1; "))
    if SEQ_GET in med:
        print(
            ratio_line(
                "speed-up vs sequential boto3 (one GET per object)", times[SEQ_GET], times[DATAHUB], ""
            )
        )
    if BEFORE in med:
        print(f"lean GET vs GETs through boto3 (datahub before/after): {med[BEFORE] / med[DATAHUB]:.2f}x")
    for n in args.concurrency[1:]:
        name = datahub_name(n, args)
        print(ratio_line(f"{name}: vs sequential s3fs", times[S3FS], times[name], ""))
        print(ratio_line(f"{name}: vs 16-thread boto3", times[BOTO3], times[name], ""))
    all_proxy = [c for runs in proxy_cpu.values() for c in runs]
    return Medians(latency_ms, med, statistics.median(all_proxy) / args.objects * 1e3)


def summary(kind: str, args, results: list[Medians]) -> None:
    """One line per latency and datahub concurrency: medians and ratios from the runs above."""
    print(f"\n## {kind}: summary, {args.objects} objects, medians of {args.rounds} rounds")
    seq = " | sequential GET s" if args.sequential_get else ""
    print(
        f"| L ms | s3fs s{seq} | boto3 s | datahub concurrency | datahub s | datahub objects/s "
        "| vs s3fs | vs boto3 | proxy CPU ms/object |"
    )
    print("|---" * (9 + bool(seq)) + "|")
    for r in results:
        s, b = r.seconds[S3FS], r.seconds[BOTO3]
        seq = f" | {r.seconds[SEQ_GET]:.2f}" if args.sequential_get else ""
        for n in args.concurrency:
            d = r.seconds[datahub_name(n, args)]
            print(
                f"| {r.latency_ms:g} | {s:.2f}{seq} | {b:.2f} | {n} | {d:.2f} | {args.objects / d:.0f} "
                f"| {s / d:.2f}x | {b / d:.2f}x | {r.proxy_cpu_ms:.2f} |"
            )


def bench(kind: str, args) -> None:
    with s3_endpoint(kind) as ep:
        client = baselines.boto3_client(ep.url, ep.access_key, ep.secret_key)
        bucket = ep.new_bucket("coldread")
        objects = {f"train/{i:06d}.jpg": os.urandom(args.size) for i in range(args.objects)}
        baselines.upload(client, bucket, objects)
        keys = sorted(objects)
        try:
            results = [run_at_latency(ep, bucket, keys, args, latency) for latency in args.origin_latency_ms]
        finally:
            baselines.delete_all(client, bucket, keys)
    if len(results) > 1 or results[0].latency_ms > 0 or len(args.concurrency) > 1:
        summary(kind, args, results)


def number_list(kind: type, low: float, example: str) -> Callable[[str], list]:
    """An argparse type for ``0,5,10,20``: numbers of ``kind``, each at least ``low``."""

    def parse(text: str) -> list:
        try:
            values = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            values = []
        if not values or any(v < low for v in values):
            raise argparse.ArgumentTypeError(
                f"{text!r}: give numbers >= {low} separated by commas, e.g. {example}"
            )
        return values

    return parse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", choices=["moto", "ceph", "both"], default="both")
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--concurrency",
        type=number_list(int, 1, "16,64"),
        default=[16],
        metavar="N[,N2,...]",
        help="datahub prefetch/origin concurrency (16 = the defaults); more values add datahub contenders",
    )
    ap.add_argument("--no-before", dest="before", action="store_false", help="skip the boto3-GET datahub run")
    ap.add_argument(
        "--origin-latency-ms",
        type=number_list(float, 0, "0,5,10,20"),
        default=[0.0],
        metavar="L[,L2,...]",
        help="run once per L, every contender through a proxy adding L ms per round trip (0: direct)",
    )
    ap.add_argument(
        "--sequential-get",
        action="store_true",
        help="add a reference contender: one boto3 get_object per object, one at a time "
        "(s3fs cat_file sends a HEAD before each GET)",
    )
    args = ap.parse_args()
    header(f"cold read of {args.objects} objects of {args.size} bytes, S3 on loopback")
    for kind in ["moto", "ceph"] if args.endpoint == "both" else [args.endpoint]:
        bench(kind, args)


if __name__ == "__main__":
    main()
