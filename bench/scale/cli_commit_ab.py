"""CPU per record of ``datahub commit --changes FILE`` (a first version of plain puts): this
checkout against an older commit, alternated, same run, same file.

    .venv/bin/python bench/scale/cli_commit_ab.py [--base 9dea05b] [--records 1000000] [--rounds 2]
        [--page-size 16384] [--no-base] [--profile]

The change-set file (``bench/scale``'s records as the JSON lines ``datahub commit --changes``
reads, ``scale.change_lines``) is written once. Each round runs, in a fresh process per side
(the base's ``datahub`` exported with ``git archive`` and put first on ``PYTHONPATH``),
``Catalog.commit(dataset, read_changes(FILE))`` — what the CLI's ``commit`` runs, without
the process start — then a 1 % commit (``scale.small_changes``, objects, the same on both
sides). Prints CPU seconds of the whole process during the commit (the figure that
survives a shared machine), the caller's thread alone (``time.thread_time``; the rest is
the SQLite writer thread), wall seconds, the 1 % commit against the full one, the catalog's
size and the load average. ``--page-size`` adds a side: this checkout on a catalog file
created with that SQLite page size. ``--profile`` prints where the 1 % commit's caller's
thread spends its CPU (``cProfile`` on ``time.thread_time``, functions by own time).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale.scale import change_lines  # noqa: E402

# Runs inside each side's process: only ``datahub`` comes from that side.
CHILD = r"""
import os, shutil, sqlite3, sys, tempfile, time
sys.path.append(sys.argv[5])  # the bench's own modules (bench.scale.scale), after the side's datahub
from datahub.catalog import open_catalog
from datahub.cli.commit_cmd import read_changes
from bench.scale.scale import small_changes

path, n, page = sys.argv[1], int(sys.argv[2]), int(sys.argv[4])
d = tempfile.mkdtemp(dir=sys.argv[3])
if page:
    db = sqlite3.connect(f"{d}/c.db")
    db.execute(f"PRAGMA page_size = {page}")
    db.execute("CREATE TABLE x (a)")
    db.execute("DROP TABLE x")
    db.close()
catalog = open_catalog(f"sqlite:///{d}/c.db")
catalog.create_dataset("s")
t, c, th = time.perf_counter(), time.process_time(), time.thread_time()
catalog.commit("s", read_changes(path))
wall, cpu, own = time.perf_counter() - t, time.process_time() - c, time.thread_time() - th
profile = None
if sys.argv[6] == "1":  # where the 1 % commit's caller's thread spends its CPU
    import cProfile
    profile = cProfile.Profile(time.thread_time)
    profile.enable()
t, c = time.perf_counter(), time.process_time()
catalog.commit("s", small_changes(n, 0.01))
wall2, cpu2 = time.perf_counter() - t, time.process_time() - c
if profile is not None:
    import pstats
    profile.disable()
    pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(14)
catalog.close()
size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 2**20
shutil.rmtree(d)
print(f"full {cpu:6.2f} CPU-s = {n / cpu:8,.0f} records/CPU-s ({wall:6.1f} s wall = {n / wall:8,.0f}/s); "
      f"caller's thread {own:6.2f} CPU-s = {n / own:9,.0f} records/s, other threads {cpu - own:6.2f} CPU-s "
      f"= {n / max(cpu - own, 1e-9):9,.0f}/s; 1 % commit {cpu2:5.2f} CPU-s = {cpu2 / cpu:6.2%} of the full "
      f"one's CPU ({wall2 / wall:6.2%} of its wall); {size:5.0f} MiB; load {os.getloadavg()[0]:.1f}", flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="9dea05b", help="the older commit (before put_lines)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--page-size", type=int, default=0, help="also run this checkout on such pages")
    parser.add_argument("--no-base", action="store_true", help="only this checkout (a large run)")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the 1 %% commit's caller's thread (CPU time)"
    )
    parser.add_argument("--dir", default=None, help="where the file and catalogs go (default: a temp dir)")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        old = Path(tmp) / "base"
        old.mkdir()
        archive = subprocess.run(
            ["git", "archive", args.base, "datahub"], cwd=ROOT, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        changes = Path(tmp) / "changes.jsonl"
        with changes.open("w") as fh:
            fh.writelines(change_lines(args.records))
        sides = {f"base {args.base}": (str(old), 0), f"head {head.stdout.strip()}": (str(ROOT), 0)}
        if args.no_base:
            del sides[f"base {args.base}"]
        if args.page_size:
            sides[f"head, {args.page_size // 1024} KiB pages"] = (str(ROOT), args.page_size)
        print(f"datahub commit --changes A/B, {args.records:,} records, {args.rounds} rounds", flush=True)
        for _ in range(args.rounds):
            for label, (path, page) in sides.items():
                env = {**os.environ, "PYTHONPATH": path}
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(changes), str(args.records), tmp, str(page), str(ROOT),
                     "1" if args.profile else "0"],
                    env=env, cwd=tmp, check=True, capture_output=True, text=True,
                )  # fmt: skip
                print(f"{label:>22}: {out.stdout.strip()}", flush=True)
                if args.profile:
                    print(out.stderr, flush=True)


if __name__ == "__main__":
    main()
