"""One directory level (``list_directory``, what a mount's cold ``ls`` and the browser's
folder view read) of two code trees on one catalog: a base checkout against this one, in
alternating child processes, so the load falls on both alike.

    .venv/bin/python bench/web/level_ab.py --base ../main --catalog CATALOG.db --dataset big \\
        --levels 1:,1:s05/,1:s05/d005/ [--pairs 3] [--repeat 20]

Per level and tree: the median CPU ms of a whole listing (in the child: no process start),
the entries, and the SQLite statements and VM steps (in 50s) of one listing, which do not
move with the load. The catalog is only read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()

CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from datahub.catalog.catalog import Catalog
from datahub.catalog.sqlite_store import SQLiteCatalogStore
catalog = Catalog(SQLiteCatalogStore(sys.argv[2]))
dataset, repeat, out = sys.argv[3], int(sys.argv[4]), {}
for level in sys.argv[5].split(","):
    seq, _, prefix = level.partition(":")
    run = lambda: sum(1 for _ in catalog.list_directory(dataset, int(seq), prefix=prefix))
    entries = run()
    counts = [0, 0]
    def statement(_sql):
        counts[0] += 1
    def step():
        counts[1] += 1
        return 0
    with catalog.store._conn() as conn:
        conn.set_trace_callback(statement)
        conn.set_progress_handler(step, 50)
        run()
        conn.set_trace_callback(None)
        conn.set_progress_handler(None, 0)
        cpus = []
        for _ in range(repeat):
            c0 = time.process_time()
            run()
            cpus.append(time.process_time() - c0)
    out[level] = {"entries": entries, "statements": counts[0], "steps": counts[1], "cpu": cpus}
catalog.close()
print(json.dumps(out))
"""


def child(tree: Path, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        "-c",
        CHILD,
        str(tree),
        str(args.catalog),
        args.dataset,
        str(args.repeat),
        args.levels,
    ]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", type=Path, required=True, help="the base code tree (a checkout)")
    parser.add_argument("--catalog", type=Path, required=True)
    parser.add_argument("--dataset", default="ds")
    parser.add_argument("--levels", default="1:,1:s05/")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    trees = {"base": args.base.resolve(), "head": HERE.parents[2]}
    cpus: dict[tuple[str, str], list[float]] = {}
    seen: dict[tuple[str, str], dict] = {}
    for pair in range(args.pairs):
        order = ["base", "head"] if pair % 2 == 0 else ["head", "base"]
        for name in order:
            t0 = time.perf_counter()
            got = child(trees[name], args)
            for level, figures in got.items():
                cpus.setdefault((name, level), []).extend(figures["cpu"])
                seen[(name, level)] = figures
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"pair {pair + 1} {name}: {time.perf_counter() - t0:.1f} s (load {load})", flush=True)
    for level in args.levels.split(","):
        seq, _, prefix = level.partition(":")
        print(f"\nlevel v{seq} {prefix or '(root)'}")
        for name in trees:
            f = seen[(name, level)]
            runs = sorted(c * 1000 for c in cpus[(name, level)])
            print(
                f"   {name}: {f['entries']:6d} entries  CPU median {statistics.median(runs):8.2f} ms"
                f" (min {runs[0]:.2f})  statements {f['statements']:5d}  VM steps x50 {f['steps']:7d}"
            )


if __name__ == "__main__":
    main()
