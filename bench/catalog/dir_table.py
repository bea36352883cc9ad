"""The directory table (issue 38, ``datahub/catalog/sqlite_dirs.py``): an old version's root
listing, commits with and without the table, and the backfill of an older catalog.

    .venv/bin/python bench/catalog/dir_table.py [--records 1000000] [--dir DIR] [--rounds 3] [--no-plain]

One process, one catalog file, the shape of the kept 10^8 catalog scaled down: v1 of
``--records`` keys ``sNN/dNNN/fNNNNN.jpg`` over 100 top directories ``s00..s99``, then

- v2: a 1 % commit spread over the key space (60 % modified, 20 % deleted, 20 % added);
- v3: 3.2 % more keys under ``s100/`` … ``s111/`` (as the 10^8 catalog's later commits
  added 3.2x10^6): they sort between v1's ``s10/`` and ``s11/``;
- v4: every key of ``s05/`` deleted (a version under a deleted subtree).

Two datasets get the same commits, alternated: ``kept`` keeps the directory table,
``plain`` does not (``datasets.dirs = 0``: the listing and commit path of a catalog made
before it). Each commit prints this process's CPU seconds (all threads: the insert thread
too) and records per CPU second. Then, on ``kept``, each listing is measured with the table
and without it (the flag set to 0 for the measure: the old path on the same file),
alternated for ``--rounds`` rounds, after ``posix_fadvise(DONTNEED)`` of the catalog file (its
pages leave the page cache; other files are untouched): bytes read from disk
(``/proc/self/io`` read_bytes), bytes read by syscalls (rchar), SQLite VM steps (in 1000s),
CPU ms of the thread, wall ms. Last, the backfill of ``kept`` (its table dropped): seconds,
CPU seconds, rows/s, and whether it filled the same rows the commits kept.
Every figure line carries the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from datahub.catalog import Catalog, Delete, Put, Record  # noqa: E402
from datahub.catalog.put_lines import CHUNK_LINES, PutLines, put_lines  # noqa: E402
from datahub.catalog.sqlite_store import SQLiteCatalogStore  # noqa: E402

TOPS = 100  # v1's top directories s00..s99
PER_DIR = 1000  # files per leaf directory


def key(i: int, top: int) -> str:
    d, f = divmod(i, PER_DIR)
    return f"s{top:02}/d{d:03}/f{f:05}.jpg"


def v1_keys(n: int) -> Iterator[str]:
    per_top = n // TOPS
    for top in range(TOPS):
        for i in range(per_top):
            yield key(i, top)


def line(k: str, generation: int = 0) -> str:
    return (
        f'{{"op":"put","record":{{"key":"{k}","url":"s3://bench-bucket/{k}","etag":"e{generation:08x}",'
        f'"size":{100_000 + len(k)},"meta":{{"split":"train"}}}}}}\n'
    )


def v1_chunks(n: int) -> Iterator[PutLines]:
    keys = v1_keys(n)
    while True:
        chunk = [line(k) for _, k in zip(range(CHUNK_LINES), keys, strict=False)]
        if not chunk:
            return
        checked = put_lines(chunk)
        assert checked is not None
        yield checked


def record(k: str, generation: int) -> Record:
    return Record(
        k, f"s3://bench-bucket/{k}", f"e{generation:08x}", 100_000 + len(k), meta={"split": "train"}
    )


def spread(n: int) -> Iterator[Put | Delete]:
    """1 % of v1, one key every 100: 3 modified, 1 deleted, 1 added (a new file beside it)."""
    for j, k in enumerate(k for i, k in enumerate(v1_keys(n)) if i % 100 == 0):
        kind = j % 5
        if kind < 3:
            yield Put(record(k, 1))
        elif kind == 3:
            yield Delete(k)
        else:
            yield Put(record(k.replace(".jpg", "-new.jpg"), 1))


def later_subtrees(n: int) -> Iterator[Put]:
    """3.2 % of n new keys under s100/ .. s111/ (between v1's s10/ and s11/)."""
    per = int(n * 0.032) // 12
    for top in range(100, 112):
        for i in range(per):
            yield Put(record(key(i, top), 2))


def deleted_subtree(n: int) -> Iterator[Delete]:
    """Every key live under s05/ after v2 (v2 deleted some and added some), in key order."""
    live = []
    for i, k in enumerate(v1_keys(n)):
        if not k.startswith("s05/"):
            continue
        kind = (i // 100) % 5 if i % 100 == 0 else -1
        if kind != 3:
            live.append(k)
        if kind == 4:
            live.append(k.replace(".jpg", "-new.jpg"))
    for k in sorted(live):
        yield Delete(k)


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def proc_io() -> tuple[int, int]:
    fields = dict(x.split(": ") for x in Path("/proc/self/io").read_text().splitlines())
    return int(fields["read_bytes"]), int(fields["rchar"])


def drop_file_cache(db: Path) -> None:
    for path in (db, Path(f"{db}-wal")):
        if path.exists():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def commit(catalog: Catalog, dataset: str, changes, label: str, count: int) -> None:
    c0, t0 = cpu(), time.perf_counter()
    catalog.commit(dataset, changes)
    c, t = cpu() - c0, time.perf_counter() - t0
    print(
        f"commit {label:<22} {dataset:<6} {count:>10,} changes  {t:7.2f} s  CPU {c:7.2f} s"
        f"  {count / c:>9,.0f} changes/CPU-s  {load()}",
        flush=True,
    )


def measure(db: Path, seq: int, with_table: bool) -> str:
    """One cold listing: a store of its own (no SQLite page cache of an earlier listing), the
    catalog file's pages dropped from the OS page cache."""
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute("UPDATE datasets SET dirs = ? WHERE name = 'kept'", (int(with_table),))
    store = SQLiteCatalogStore(db)
    catalog = Catalog(store)
    store.get_version("kept", seq)  # the connection open, the version row read
    drop_file_cache(db)
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    with store._conn() as conn:
        conn.set_progress_handler(tick, 1000)
    (r0, c0), cpu0, t0 = proc_io(), time.thread_time(), time.perf_counter()
    entries = list(catalog.list_directory("kept", seq))
    t, cputime, (r, c) = time.perf_counter() - t0, time.thread_time() - cpu0, proc_io()
    catalog.close()
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute("UPDATE datasets SET dirs = 1 WHERE name = 'kept'")
    return (
        f"{'table' if with_table else 'no table':<8} {len(entries):>4} entries  disk read {(r - r0) / 1e6:9.2f} MB"
        f"  rchar {(c - c0) / 1e6:9.2f} MB  VM steps {steps[0]:>8,}k  CPU {cputime * 1000:8.1f} ms"
        f"  wall {t * 1000:8.1f} ms  {load()}"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--no-plain", action="store_true", help="commit only to kept (no commit A/B; half the time)"
    )
    args = p.parse_args(argv)
    work = args.dir or Path(tempfile.mkdtemp(prefix="dir-table-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "catalog.db"
    n = args.records
    print(
        f"records {n:,}  dir {work}  commit {os.popen(f'git -C {ROOT} rev-parse --short HEAD').read().strip()}"
    )
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}  {os.cpu_count()} CPUs  {load()}", flush=True)
    store = SQLiteCatalogStore(db)
    catalog = Catalog(store)
    try:
        names = ("kept",) if args.no_plain else ("kept", "plain")
        for name in names:
            catalog.create_dataset(name)
        with sqlite3.connect(db, isolation_level=None) as conn:
            conn.execute("UPDATE datasets SET dirs = 0 WHERE name = 'plain'")
        steps: list[tuple[str, Callable[[], object], int]] = [
            ("v1 full (lines)", lambda: v1_chunks(n), n),
            ("v2 1 % spread", lambda: spread(n), n // 100),
            ("v3 s100..s111 added", lambda: later_subtrees(n), int(n * 0.032) // 12 * 12),
            ("v4 s05/ deleted", lambda: deleted_subtree(n), sum(1 for _ in deleted_subtree(n))),
        ]
        for i, (label, changes, count) in enumerate(steps):
            for name in names if i % 2 == 0 else names[::-1]:
                commit(catalog, name, changes(), label, count)
        print(f"catalog on disk {sum(f.stat().st_size for f in work.glob('catalog.db*')) / 2**20:,.0f} MiB")
        for label, seq in (
            ("root of v1 (old version)", 1),
            ("root of v4 (s05/ deleted)", 4),
            ("root of v3", 3),
        ):
            print(f"list {label}:")
            for r in range(args.rounds):
                for with_table in (True, False) if r % 2 == 0 else (False, True):
                    print("  " + measure(db, seq, with_table), flush=True)
        table = "SELECT * FROM dirs WHERE dataset_id = (SELECT id FROM datasets WHERE name = 'kept') ORDER BY 1, 2, 3, 4"
        with sqlite3.connect(db) as conn:
            kept = conn.execute(table).fetchall()
        with sqlite3.connect(db, isolation_level=None) as conn:
            conn.execute("UPDATE datasets SET dirs = 0")
            conn.execute("DELETE FROM dirs")
        drop_file_cache(db)
        c0, t0 = cpu(), time.perf_counter()
        last = [0.0]

        def progress(dataset: str, done: int, total: int) -> None:
            now = time.perf_counter()
            if now - last[0] >= 5 or done == total:
                last[0] = now
                print(
                    f"  backfill {dataset}: {done:,}/{total:,} rows  {now - t0:6.1f} s  {load()}", flush=True
                )

        filled = store.fill_directory_tables(progress=progress)
        c, t = cpu() - c0, time.perf_counter() - t0
        with sqlite3.connect(db) as conn:
            again = conn.execute(table).fetchall()
            rows = conn.execute("SELECT count(*) FROM records").fetchone()[0]
        print(
            f"backfill {filled}: {rows:,} record rows in {t:.1f} s, CPU {c:.1f} s ({rows / c:,.0f} rows/CPU-s)"
            f"  {len(again):,} directory rows of kept, the same as its commits kept: {again == kept}  {load()}"
        )
    finally:
        catalog.close()
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
