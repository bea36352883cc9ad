"""A cold root listing of chosen versions of one dataset on an existing SQLite catalog, with
and without its directory table (issue 38: an old version's listing read the rows of keys
added after it; docs/catalog.md, "Directories").

    .venv/bin/python bench/catalog/root_listing.py --catalog FILE --dataset big --versions 1,18 [--rounds 2]

For each measure the dataset's ``dirs`` flag is set (1: the table, 0: the listing of a catalog
made before it) and set back to 1 afterwards, so the dataset must have a complete table
(``datahub migrate``). The catalog file's pages are dropped from the OS page cache before each
listing. Prints disk bytes read, the listing thread's CPU and wall time, and the load.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.catalog.dir_table import drop_file_cache, load, proc_io  # noqa: E402
from datahub.catalog import Catalog  # noqa: E402
from datahub.catalog.sqlite_store import SQLiteCatalogStore  # noqa: E402


def set_flag(db: Path, dataset: str, value: int) -> None:
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute("UPDATE datasets SET dirs = ? WHERE name = ?", (value, dataset))


def measure(db: Path, dataset: str, seq: int, with_table: bool) -> str:
    set_flag(db, dataset, int(with_table))
    try:
        store = SQLiteCatalogStore(db)
        catalog = Catalog(store)
        store.get_version(dataset, seq)  # the connection open, the version row read
        drop_file_cache(db)
        (r0, _), cpu0, t0 = proc_io(), time.thread_time(), time.perf_counter()
        entries = sum(1 for _ in catalog.list_directory(dataset, seq))
        t, cpu, (r, _) = time.perf_counter() - t0, time.thread_time() - cpu0, proc_io()
        catalog.close()
    finally:
        set_flag(db, dataset, 1)
    how = "table" if with_table else "no table"
    return (
        f"{dataset} v{seq:<3} {how:<8} {entries:>5} entries  disk read {(r - r0) / 1e6:8.2f} MB"
        f"  CPU {cpu * 1000:7.1f} ms  wall {t * 1000:7.1f} ms  {load()}"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--catalog", type=Path, required=True, help="the SQLite catalog file")
    p.add_argument("--dataset", required=True)
    p.add_argument("--versions", default="1", help="comma-separated version numbers")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    with sqlite3.connect(args.catalog) as conn:
        row = conn.execute("SELECT dirs FROM datasets WHERE name = ?", (args.dataset,)).fetchone()
    if row is None or row[0] != 1:
        sys.exit(
            f"{args.dataset}: no complete directory table in {args.catalog}: run `datahub migrate` first"
        )
    for _ in range(args.rounds):
        for seq in map(int, args.versions.split(",")):
            for with_table in (True, False):
                print(measure(args.catalog, args.dataset, seq, with_table), flush=True)


if __name__ == "__main__":
    main()
