"""Catalog scale figures on SQLite (issue 16 item 3): 10^7 records in one dataset.

    .venv/bin/python bench/catalog/scale.py [--records 10000000] [--fraction 0.01] [--dir DIR]

Steps, each through the public ``Catalog`` facade (the path every writer and reader takes,
validation included), in one process:

1. commit v1: ``--records`` puts, keys in key order as an S3 listing or an import produces
   them (``train/NNNN/NNNNNNNN.jpg``, S3 URLs, MD5 etags, one small ``meta`` field);
2. commit v2 changing ``--fraction`` of the records, spread over the key space (60 %
   modified, 20 % deleted, 20 % added);
3. list v2 completely as ``Record`` objects;
4. diff v1..v2;
5. peak RSS of the process (``VmHWM``) over all of it.

Goals (issue 16): v2 / v1 commit time <= 3 %; listing >= 250,000 records/s; peak RSS
<= 400 MB (diff has no goal here; bench_catalog.py's is <= 2 s at 10^6). The machine may be
shared: every step prints the load average (``uptime``) next to its figure, and CPU
seconds of this process beside wall seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from datahub.catalog import Delete, Put, Record, open_catalog

GOALS = {"small_commit_ratio": 0.03, "list_rate": 250_000, "peak_rss_mb": 400}


def vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def key_of(i: int) -> str:
    return f"train/{i // 10_000:04d}/{i:08d}.jpg"


def record(i: int, generation: int = 0) -> Record:
    key = key_of(i)
    etag = hashlib.md5(f"{key}:{generation}".encode()).hexdigest()
    return Record(
        key, f"s3://bench-bucket/imagenet/{key}", etag, 100_000 + i % 50_000, meta={"split": "train"}
    )


def full_changes(n: int) -> Iterator[Put]:
    return (Put(record(i)) for i in range(n))


def small_changes(n: int, fraction: float) -> Iterator[Put | Delete]:
    """``fraction`` of the records, one every 1/fraction keys: 3 modified, 1 deleted, 1 added
    (``n + j``, so after the last key) in every 5."""
    step = round(1 / fraction)
    for j, i in enumerate(range(0, n, step)):
        kind = j % 5
        if kind < 3:
            yield Put(record(i, generation=1))
        elif kind == 3:
            yield Delete(key_of(i))
        else:
            yield Put(record(n + j))


def step(label: str, fn: Callable[[], Any], rows: list[dict]) -> Any:
    load = uptime()
    start, cpu = time.perf_counter(), time.process_time()
    value = fn()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    rows.append({"step": label, "wall": wall, "cpu": cpu, "hwm": vm_hwm_mb(), "uptime": load})
    print(
        f"{label:<28} {wall:9.2f} s wall {cpu:9.2f} s CPU  VmHWM {rows[-1]['hwm']:6.0f} MB  | {load}",
        flush=True,
    )
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--dir", default=None, help="where the catalog file goes (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the catalog file (prints its path)")
    args = parser.parse_args()
    n = args.records
    workdir = tempfile.mkdtemp(prefix="bench-catalog-scale-", dir=args.dir)
    db = os.path.join(workdir, "catalog.db")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    print(
        f"catalog scale: {n:,} records, {args.fraction:.0%} change, SQLite {sqlite3.sqlite_version}, file {db}"
    )
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, git {commit.stdout.strip() or '?'}, "
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    rows: list[dict] = []
    try:
        catalog = open_catalog(f"sqlite:///{db}")
        catalog.create_dataset("scale")
        v1 = step("commit v1 (full)", lambda: catalog.commit("scale", full_changes(n)), rows)
        v2 = step(
            "commit v2 (1 % change)", lambda: catalog.commit("scale", small_changes(n, args.fraction)), rows
        )
        listed = step(
            "list v2 (full listing)", lambda: sum(1 for _ in catalog.list_records("scale", 2)), rows
        )
        diffed = step("diff v1..v2", lambda: sum(1 for _ in catalog.diff("scale", 1, 2)), rows)
        catalog.close()
        size_mib = sum(p.stat().st_size for p in Path(workdir).iterdir()) / 2**20
    finally:
        if args.keep:
            print(f"kept {db}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    full, small, listing, diff = rows
    changed = v2.added + v2.removed + v2.modified
    ratio, rate, peak = small["wall"] / full["wall"], listed / listing["wall"], vm_hwm_mb()

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print()
    print(
        f"v1 {v1.record_count:,} records; v2 {v2.record_count:,} (+{v2.added:,} -{v2.removed:,} ~{v2.modified:,})"
    )
    print(f"catalog files {size_mib:,.0f} MiB")
    print("| measure | figure | goal | | uptime at the step's start |")
    print("|---|---|---|---|---|")
    print(
        f"| commit v1, {n:,} records | {full['wall']:.1f} s ({n / full['wall']:,.0f} records/s; "
        f"{full['cpu']:.1f} CPU-s) | — | | {full['uptime']} |"
    )
    print(
        f"| commit v2, {changed:,} changes | {small['wall']:.2f} s = **{ratio:.2%}** of v1 "
        f"(CPU: {small['cpu'] / full['cpu']:.2%}) | ≤ {GOALS['small_commit_ratio']:.0%} "
        f"| {verdict(ratio <= GOALS['small_commit_ratio'])} | {small['uptime']} |"
    )
    print(
        f"| list v2 | {listing['wall']:.1f} s, **{rate:,.0f} records/s** ({listed / listing['cpu']:,.0f} per CPU-s) "
        f"| ≥ {GOALS['list_rate']:,}/s | {verdict(rate >= GOALS['list_rate'])} | {listing['uptime']} |"
    )
    print(f"| diff v1..v2 | {diff['wall']:.2f} s, {diffed:,} entries | — | | {diff['uptime']} |")
    print(
        f"| peak RSS (VmHWM, whole run) | **{peak:.0f} MB** | ≤ {GOALS['peak_rss_mb']} MB "
        f"| {verdict(peak <= GOALS['peak_rss_mb'])} | {uptime()} (end) |"
    )


if __name__ == "__main__":
    main()
