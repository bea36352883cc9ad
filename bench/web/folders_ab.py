"""The browser's folder view from the directory table against the keyed walk it replaces
(issue 38 item 4: a version's root of 100 folders cost 40.7 ms at 10^8, a query per folder).

    .venv/bin/python bench/web/folders_ab.py [--records 1000000] [--rounds 15]
    .venv/bin/python bench/web/folders_ab.py --catalog CATALOG.db --dataset big \\
        --pages 1:,2:,1:s05/,1:s05/d005/ [--rounds 15]

A = ``folders.by_keys`` (the view before: the key-ordered walk, one keyset query per folder
shown; still the view with a filter), B = ``folders.by_directory`` (``browse`` without a
filter: one directory level from the store, then one ``get_records`` for the files shown).
Both run in this process on the same catalog, A and B alternated in every round (A B, then B
A), so the machine's load falls on both alike. Per page: the median CPU ms of this process
(the page's whole catalog work, no HTTP), and the SQLite statements and VM steps (in 50s)
one page runs: counts, which do not move with the load. The two views' pages are checked
equal first.

Without ``--catalog`` a catalog is built under ``--workdir`` (``/var/tmp``): ``ds`` v1 of
``--records`` keys ``sNN/dNN/fNN.jpg`` (100 per leaf directory, 100 leaves per ``sNN``: a
root of 100 folders at 10^6), v2 adds ``t00/``..``t19/`` (after every ``sNN`` in key order)
and deletes ``s90/``..``s99/``. With ``--catalog`` the file is only read (no commit; the
SQLite store opens it as any reader does).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.browser import folders
from datahub.catalog import Delete, Put, Record
from datahub.catalog.catalog import Catalog
from datahub.catalog.sqlite_store import SQLiteCatalogStore

VIEWS: dict[str, Callable[..., Any]] = {"A by_keys": folders.by_keys, "B by_directory": folders.by_directory}


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def key(i: int) -> str:
    top, rest = divmod(i, 10_000)
    return f"s{top:02d}/d{rest // 100:02d}/f{rest % 100:02d}.jpg"


def record(k: str) -> Record:
    return Record(k, f"s3://bench/{k}", "e" + k, 1000 + len(k), labels={"class": "cat"})


def build(path: Path, n: int) -> None:
    catalog = Catalog(SQLiteCatalogStore(path))
    try:
        catalog.create_dataset("ds")
        t0 = time.perf_counter()
        catalog.commit("ds", (Put(record(key(i))) for i in range(n)))
        later = [Put(record(f"t{i:02d}/x.jpg")) for i in range(20)]
        gone = (Delete(key(i)) for i in range(n) if key(i) >= "s90/")
        catalog.commit("ds", [*later, *gone])
        print(f"built {n:,} records in {time.perf_counter() - t0:.1f} s ({load()})", flush=True)
    finally:
        catalog.close()


def measured(store: SQLiteCatalogStore, run: Callable[[], Any]) -> tuple[float, int, int, Any]:
    """(CPU s, statements, VM steps in 50s, result) of ``run()`` on one pooled connection."""
    counts = [0, 0]

    def statement(_sql: str) -> None:
        counts[0] += 1

    def step() -> int:
        counts[1] += 1
        return 0

    with store._conn() as conn:  # nested store calls use this same connection
        conn.set_trace_callback(statement)
        conn.set_progress_handler(step, 50)
        try:
            c0 = time.process_time()
            result = run()
            cpu = time.process_time() - c0
        finally:
            conn.set_trace_callback(None)
            conn.set_progress_handler(None, 0)
    return cpu, counts[0], counts[1], result


def pages_of(spec: str) -> Iterator[tuple[int, str]]:
    for item in spec.split(","):
        seq, _, prefix = item.partition(":")
        yield int(seq), prefix


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--catalog", type=Path, help="an existing SQLite catalog, only read")
    parser.add_argument("--dataset", default="ds")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument(
        "--pages", default="1:,2:,1:s05/,1:s05/d05/", help="SEQ:PREFIX,... (the first page of each)"
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"))
    args = parser.parse_args(argv)
    made = None
    if args.catalog is None:
        made = Path(tempfile.mkdtemp(prefix="folders-ab-", dir=args.workdir))
        args.catalog = made / "catalog.db"
        build(args.catalog, args.records)
    store = SQLiteCatalogStore(args.catalog)
    catalog = Catalog(store)
    print(
        f"catalog {args.catalog} dataset {args.dataset}; {args.rounds} rounds after 2 warm-up ones ({load()})"
    )
    try:
        for seq, prefix in pages_of(args.pages):
            calls = {
                name: functools.partial(view, catalog, args.dataset, seq, prefix=prefix, after="", limit=100)
                for name, view in VIEWS.items()
            }
            answers = {name: call() for name, call in calls.items()}
            a, b = answers.values()
            if a != b:
                raise SystemExit(f"v{seq} {prefix!r}: the two views differ")
            entries, more = b
            folders_shown = sum(e.is_folder for e in entries)
            samples: dict[str, list[tuple[float, int, int]]] = {name: [] for name in calls}
            for round_ in range(args.rounds + 2):
                order = list(calls) if round_ % 2 == 0 else list(calls)[::-1]
                for name in order:
                    cpu, statements, steps, _ = measured(store, calls[name])
                    if round_ >= 2:
                        samples[name].append((cpu, statements, steps))
            print(
                f"\nv{seq} {prefix or '(root)'}: {len(entries)} entries ({folders_shown} folders),"
                f" more: {more is not None}  ({load()})"
            )
            for name, runs in samples.items():
                cpus = sorted(r[0] * 1000 for r in runs)
                print(
                    f"   {name:15} CPU median {statistics.median(cpus):7.2f} ms (min {cpus[0]:.2f},"
                    f" max {cpus[-1]:.2f})  statements {runs[0][1]:4d}  VM steps x50 {runs[0][2]:6d}",
                    flush=True,
                )
    finally:
        catalog.close()
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


if __name__ == "__main__":
    main()
