"""A deep page of a large diff, with the catalog's start key against the same-run baseline of
reading the diff from its start and dropping the entries before the cursor (what the API's
and the browser's diff pages did before ``diff(start_after=)``).

    .venv/bin/python bench/web/diff_seek.py [--entries 100000] [--repeat 20]

A SQLite catalog in a temporary directory holds a dataset whose v2 modifies every record of
v1, so the diff v1 -> v2 has ``--entries`` entries. Each figure is the median (and p95) wall
time and the median CPU time of one page of 100 entries at a cursor 10 %, 50 % and 99 % of the
way through the diff, plus the first page. The machine may be shared: the load average is
printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from itertools import dropwhile, islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.catalog import Put, Record, open_catalog

PAGE = 100


def timed(run, repeat: int) -> tuple[float, float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        run()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    walls.sort()
    return statistics.median(walls), walls[int(0.95 * (len(walls) - 1))], statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        catalog = open_catalog(f"sqlite:///{Path(tmp) / 'c.db'}")
        catalog.create_dataset("d")
        keys = [f"k/{i:07d}" for i in range(args.entries)]
        catalog.commit("d", (Put(Record(k, "s3://b/" + k, "e1", 1)) for k in keys))
        catalog.commit("d", (Put(Record(k, "s3://b/" + k, "e2", 1)) for k in keys))

        def seek(after: str) -> list:
            return list(islice(catalog.diff("d", 1, 2, start_after=after), PAGE))

        def drop(after: str) -> list:  # the baseline: the old way
            return list(islice(dropwhile(lambda e: e.key <= after, catalog.diff("d", 1, 2)), PAGE))

        print(f"diff of {args.entries:,} modified entries, pages of {PAGE}; load {os.getloadavg()[0]:.1f}")
        print(
            f"{'cursor at':>10} {'start key: median / p95 / CPU':>34} {'baseline (drop): median / p95 / CPU':>40}"
        )
        for share in (0.0, 0.1, 0.5, 0.99):
            after = keys[int(share * args.entries) - 1] if share else ""
            assert [e.key for e in seek(after)] == [e.key for e in drop(after)]
            new = timed(lambda a=after: seek(a), args.repeat)
            old = timed(lambda a=after: drop(a), max(3, args.repeat // 4))
            print(
                f"{share:>9.0%} {new[0] * 1e3:>14.2f} / {new[1] * 1e3:.2f} / {new[2] * 1e3:.2f} ms"
                f" {old[0] * 1e3:>18.1f} / {old[1] * 1e3:.1f} / {old[2] * 1e3:.1f} ms"
            )
        catalog.close()


if __name__ == "__main__":
    main()
