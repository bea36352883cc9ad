"""CPU per record of a large commit: this checkout against an older commit, alternated, same run.

    .venv/bin/python bench/scale/commit_ab.py [--base 1c2a17b] [--records 200000] [--rounds 2]

Each round runs, in a fresh process per side (the base's ``datahub`` package exported with
``git archive`` into a temp dir and put first on ``PYTHONPATH``), a full commit of
``--records`` records of ``bench/scale``'s shape through the ``Catalog`` facade, then a 1 %
commit, and prints CPU seconds (the figure that survives a shared machine), wall seconds,
the CPU of the caller's thread alone (the commit's critical path when the SQLite writer
thread has a core of its own: the wall rate on two free cores is at most its rate), the
generator alone and the catalog's size, with the load average. Sides alternate so load
changes hit both.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Runs inside each side's process: only ``datahub`` comes from that side.
CHILD = r"""
import os, shutil, sys, tempfile, time
from datahub.catalog import Delete, Put, Record, open_catalog
import datahub

n = int(sys.argv[1])

def key_of(i):
    return f"train/{i // 10000:05d}/{i:09d}.jpg"

def record(i, generation=0):
    key = key_of(i)
    return Record(key, f"s3://bench-bucket/imagenet/{key}", f"{i:024x}{generation:08x}",
                  100_000 + i % 50_000, meta={"split": "train"})

def full(n):
    return (Put(record(i)) for i in range(n))

def small(n):
    for j, i in enumerate(range(0, n, 100)):
        kind = j % 5
        yield Put(record(i, 1)) if kind < 3 else Delete(key_of(i)) if kind == 3 else Put(record(n + j))

d = tempfile.mkdtemp(dir=sys.argv[2])
catalog = open_catalog(f"sqlite:///{d}/c.db")
catalog.create_dataset("s")
c = time.process_time(); sum(1 for _ in full(n)); gen = time.process_time() - c
t, c, th = time.perf_counter(), time.process_time(), time.thread_time()
catalog.commit("s", full(n))
wall, cpu, own = time.perf_counter() - t, time.process_time() - c, time.thread_time() - th
t, c = time.perf_counter(), time.process_time()
catalog.commit("s", small(n))
wall2, cpu2 = time.perf_counter() - t, time.process_time() - c
catalog.close()
size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 2**20
shutil.rmtree(d)
print(f"full {cpu:6.2f} CPU-s = {n / cpu:8,.0f} records/CPU-s ({wall:6.1f} s wall = {n / wall:7,.0f}/s); "
      f"caller's thread {own:6.2f} CPU-s = {n / own:8,.0f} records/s; generator alone {gen:5.2f} CPU-s; "
      f"1 % commit {cpu2 / cpu:6.2%} of the full one's CPU ({wall2 / wall:6.2%} of its wall); {size:5.0f} MiB; "
      f"load {os.getloadavg()[0]:.1f}", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="1c2a17b", help="the older commit (issue 38 was measured there)")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the catalogs go (default: a temp dir)")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        old = Path(tmp) / "base"
        old.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.base, "datahub"], cwd=ROOT, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        sides = {f"base {args.base}": str(old), f"head {head.stdout.strip()}": str(ROOT)}
        print(f"commit A/B, {args.records:,} records, {args.rounds} rounds")
        for _ in range(args.rounds):
            for label, path in sides.items():
                env = {**os.environ, "PYTHONPATH": path}
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(args.records), tmp],
                    env=env, cwd=tmp, check=True, capture_output=True, text=True,
                )  # fmt: skip
                print(f"{label:>14}: {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
