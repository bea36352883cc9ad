"""Catalog benchmark (issue 2): commit 1,000,000 records, a 1 % change, list, diff — on SQLite.

Prints seconds, records/s and peak RSS for each step, the ratios against the goals, and
baselines measured in the same run on the same file system:

- "full-copy snapshot": what a commit costs when a version copies every row (the design
  the revision ranges avoid) — one INSERT ... SELECT of the whole version;
- "raw SQLite scan": iterating the same rows as bare tuples, without building Records.

Usage: .venv/bin/python bench/catalog/bench_catalog.py [--records 1000000] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import resource
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator

from datahub.catalog import Delete, Put, Record, open_catalog

GOALS = {"small_commit_ratio": 0.03, "list_rate": 200_000, "diff_seconds": 2.0, "peak_rss_mb": 400}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def key_of(i: int) -> str:
    return f"train/{i % 1000:04d}/{i:08d}.jpg"


def record(i: int, generation: int = 0) -> Record:
    key = key_of(i)
    etag = hashlib.md5(f"{key}:{generation}".encode()).hexdigest()
    return Record(key, f"s3://bench-bucket/imagenet/{key}", etag, 100_000 + i % 50_000)


def full_changes(n: int) -> Iterator[Put]:
    return (Put(record(i)) for i in range(n))


def small_changes(n: int, fraction: float) -> Iterator[Put | Delete]:
    """1 % of the dataset: 60 % modified, 20 % deleted, 20 % added, spread over the key space."""
    step = int(1 / fraction)
    for j, i in enumerate(range(0, n, step)):
        kind = j % 5
        if kind < 3:
            yield Put(record(i, generation=1))
        elif kind == 3:
            yield Delete(key_of(i))
        else:
            yield Put(record(n + j))


CPU: dict[str, float] = {}  # step label -> CPU seconds of this process (wall time can include waiting)


def timed(label: str, fn):
    start, cpu = time.perf_counter(), time.process_time()
    value = fn()
    seconds = time.perf_counter() - start
    CPU[label] = time.process_time() - cpu
    print(f"{label:<34} {seconds:8.2f} s wall {CPU[label]:8.2f} s CPU   peak RSS {peak_rss_mb():6.0f} MB",
          flush=True)  # fmt: skip
    return value, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--dir", default=None, help="where the catalog file goes (default: a temp dir)")
    args = parser.parse_args()
    n = args.records
    workdir = tempfile.mkdtemp(prefix="bench-catalog-", dir=args.dir)
    db = os.path.join(workdir, "catalog.db")
    print(f"catalog benchmark: {n:,} records, {args.fraction:.0%} change, SQLite file {db}")
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"SQLite {sqlite3.sqlite_version}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    try:
        catalog = open_catalog(f"sqlite:///{db}")
        catalog.create_dataset("bench")
        v1, t_full = timed("commit v1 (full)", lambda: catalog.commit("bench", full_changes(n)))
        v2, t_small = timed(
            "commit v2 (1 % change)", lambda: catalog.commit("bench", small_changes(n, args.fraction))
        )
        changed = v2.added + v2.removed + v2.modified
        listed, t_list = timed(
            "list v2 (full listing)", lambda: sum(1 for _ in catalog.list_records("bench", 2))
        )
        diffed, t_diff = timed("diff v1..v2", lambda: sum(1 for _ in catalog.diff("bench", 1, 2)))
        catalog.close()
        # --- baselines, same file system, same run --------------------------------------------------
        conn = sqlite3.connect(db)
        _, t_copy = timed(
            "baseline: full-copy snapshot",
            lambda: (
                conn.execute("CREATE TABLE copy AS SELECT * FROM records WHERE from_seq <= 2 AND to_seq > 2"),
                conn.commit(),
            ),
        )
        raw, t_raw = timed(
            "baseline: raw SQLite scan",
            lambda: sum(
                1 for _ in conn.execute("SELECT key, url, etag, size, checksum, meta, labels FROM copy")
            ),
        )
        conn.close()
        size_mb = os.path.getsize(db) / 2**20
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rss = peak_rss_mb()
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    cpu_full, cpu_small = CPU["commit v1 (full)"], CPU["commit v2 (1 % change)"]
    cpu_list, cpu_diff = CPU["list v2 (full listing)"], CPU["diff v1..v2"]
    print()
    print(f"{'step':<26}{'seconds':>9}{'records/s':>12}   goal")
    print(f"{'commit v1 (full)':<26}{t_full:9.2f}{n / t_full:12,.0f}")
    print(f"{'commit v2 (1 %)':<26}{t_small:9.2f}{changed / t_small:12,.0f}   "
          f"{t_small / t_full:.2%} of full (goal <= {GOALS['small_commit_ratio']:.0%}) "
          f"{'OK' if t_small / t_full <= GOALS['small_commit_ratio'] else 'MISSED'}")  # fmt: skip
    print(f"{'list v2':<26}{t_list:9.2f}{listed / t_list:12,.0f}   goal >= {GOALS['list_rate']:,}/s "
          f"{'OK' if listed / t_list >= GOALS['list_rate'] else 'MISSED'}")  # fmt: skip
    print(f"{'diff v1..v2':<26}{t_diff:9.2f}{diffed / t_diff:12,.0f}   goal <= {GOALS['diff_seconds']} s "
          f"{'OK' if t_diff <= GOALS['diff_seconds'] else 'MISSED'} ({diffed:,} entries)")  # fmt: skip
    print(f"{'peak RSS':<26}{rss:8.0f} MB{'':>12}goal <= {GOALS['peak_rss_mb']} MB "
          f"{'OK' if rss <= GOALS['peak_rss_mb'] else 'MISSED'}")  # fmt: skip
    print(f"baseline full-copy snapshot {t_copy:.2f} s: the 1 % commit costs {t_small / t_copy:.2%} of it")
    print(f"baseline raw scan {raw / t_raw:,.0f} rows/s: listing Records runs at {t_raw / t_list:.0%} of it")
    print(f"CPU-time view (immune to other load): 1 % commit {cpu_small / cpu_full:.2%} of full; "
          f"listing {listed / cpu_list:,.0f} records per CPU-second; diff {cpu_diff:.2f} CPU-s")  # fmt: skip
    print(f"catalog file {size_mb:.0f} MiB; v1 {v1.record_count:,} records, v2 {v2.record_count:,} "
          f"(+{v2.added} -{v2.removed} ~{v2.modified})")  # fmt: skip


if __name__ == "__main__":
    main()
