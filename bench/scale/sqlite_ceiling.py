"""SQLite's own insert rate for the catalog's ``records`` row, with no per-record Python work.

    .venv/bin/python bench/scale/sqlite_ceiling.py [--rows 500000] [--dir DIR]

Rows are prebuilt in Python, then written by ``executemany`` in batches of 2,000 inside one
``BEGIN IMMEDIATE`` WAL transaction (``synchronous=FULL``), as a commit writes them. Prints
records per CPU-second and per wall second for today's 10-column row and variants (plain
INSERT, larger batches, 8/16 KiB pages, no ``url`` column, key columns plus one packed
value, with and without the url), today's row inserted from one JSON array per batch
(``INSERT … SELECT … FROM json_each(?)``, the encoding counted: how the catalog's commit
writes them), then today's row written by a second thread fed by this one — ``executemany``
(which takes the GIL back for every row) and one ``json_each`` statement per batch (the GIL
released for the whole batch) — against the same loop in one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

OPEN = 2**62
SCHEMA = f"""CREATE TABLE records (dataset_id INTEGER NOT NULL, key TEXT NOT NULL,
 from_seq INTEGER NOT NULL, to_seq INTEGER NOT NULL, url TEXT NOT NULL, etag TEXT NOT NULL,
 size INTEGER NOT NULL, checksum TEXT, meta TEXT, labels TEXT,
 PRIMARY KEY (dataset_id, key, from_seq)) WITHOUT ROWID;
CREATE INDEX records_began ON records(dataset_id, from_seq, key) WHERE from_seq > 1;
CREATE INDEX records_ended ON records(dataset_id, to_seq, key) WHERE to_seq < {OPEN};"""
INSERT = "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
BY_BATCH = (
    "INSERT OR REPLACE INTO records SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4,"
    " value ->> 5, value ->> 6, value ->> 7, value ->> 8, value ->> 9 FROM json_each(?)"
)
ENCODE = json.encoder.c_make_encoder(
    None, None, json.encoder.encode_basestring, None, ":", ",", False, False, True
)
PACKED = """CREATE TABLE records (dataset_id INTEGER NOT NULL, key TEXT NOT NULL,
 from_seq INTEGER NOT NULL, to_seq INTEGER NOT NULL, v TEXT,
 PRIMARY KEY (dataset_id, key, from_seq)) WITHOUT ROWID;"""


def key(i: int) -> str:
    return f"train/{i // 10000:05d}/{i:09d}.jpg"


def rows(lo: int, hi: int) -> list[tuple]:
    return [
        (1, key(i), 1, OPEN, f"s3://bench-bucket/imagenet/{key(i)}", f"{i:024x}{0:08x}", 100_000 + i % 50_000,
         None, '{"split":"train"}', None)
        for i in range(lo, hi)
    ]  # fmt: skip


def connect(path: Path, schema: str, page: int = 4096) -> sqlite3.Connection:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA page_size = {page}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA cache_size = -16384")
    conn.executescript(schema)
    return conn


def report(label: str, n: int, wall: float, cpu: float, path: Path) -> None:
    size = sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal") if os.path.exists(f"{path}{s}")) / 2**20
    print(
        f"{label:42} {n / cpu:9,.0f} records/CPU-s {n / wall:9,.0f} records/s wall {size:6.0f} MiB"
        f" | load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def one_thread(
    path: Path, label: str, schema: str, sql: str, data: list[tuple], page: int, batch: int
) -> None:
    conn = connect(path, schema, page)
    t, c = time.perf_counter(), time.process_time()
    conn.execute("BEGIN IMMEDIATE")
    for i in range(0, len(data), batch):
        conn.executemany(sql, data[i : i + batch])
    conn.execute("COMMIT")
    report(label, len(data), time.perf_counter() - t, time.process_time() - c, path)
    conn.close()


def by_batch(batch: list[tuple]) -> str:
    return "".join(ENCODE(batch, 0))


def built_here(path: Path, n: int, threaded: bool, json_each: bool = False) -> None:
    """Rows built by this loop and written by this thread, or handed to a writer thread;
    bound row by row (executemany) or as one JSON array per batch (json_each)."""
    conn = connect(path, SCHEMA)
    t, c, own = time.perf_counter(), time.process_time(), time.thread_time()

    def write(batch: list[tuple]) -> None:
        if json_each:
            conn.execute(BY_BATCH, (by_batch(batch),))
        else:
            conn.executemany(INSERT, batch)

    conn.execute("BEGIN IMMEDIATE")
    if threaded:
        q: queue.Queue = queue.Queue(2)

        def writing() -> None:
            while (batch := q.get()) is not None:
                conn.execute(BY_BATCH, (batch,)) if json_each else conn.executemany(INSERT, batch)

        writer = threading.Thread(target=writing)
        writer.start()
        for lo in range(0, n, 2000):
            batch = rows(lo, min(n, lo + 2000))
            q.put(by_batch(batch) if json_each else batch)  # the encoding on this thread
        q.put(None)
        writer.join()
    else:
        for lo in range(0, n, 2000):
            write(rows(lo, min(n, lo + 2000)))
    conn.execute("COMMIT")
    label = f"built in the loop, {'json_each' if json_each else 'executemany'}, "
    label += "writer thread" if threaded else "one thread"
    report(label, n, time.perf_counter() - t, time.process_time() - c, path)
    print(f"{'':42} building thread {time.thread_time() - own:6.2f} CPU-s", flush=True)
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    print(f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {args.rows:,} rows")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "t.db"
        data = rows(0, args.rows)
        one_thread(path, "10 columns (today's row)", SCHEMA, INSERT, data, 4096, 2000)
        one_thread(
            path, "10 columns, plain INSERT", SCHEMA, INSERT.replace(" OR REPLACE", ""), data, 4096, 2000
        )
        one_thread(path, "10 columns, batches of 20,000", SCHEMA, INSERT, data, 4096, 20_000)
        one_thread(path, "10 columns, 8 KiB pages", SCHEMA, INSERT, data, 8192, 2000)
        one_thread(path, "10 columns, 16 KiB pages", SCHEMA, INSERT, data, 16384, 2000)
        no_url = [(*r[:4], *r[5:]) for r in data]
        one_thread(path, "9 columns (no url)", SCHEMA.replace("url TEXT NOT NULL,", ""),
                   "INSERT INTO records (dataset_id, key, from_seq, to_seq, etag, size, checksum, meta, labels)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", no_url, 4096, 2000)  # fmt: skip
        packed = [(1, r[1], 1, OPEN, json.dumps([r[5], r[6], r[8]], separators=(",", ":"))) for r in data]
        one_thread(path, "key columns + one packed value", PACKED, "INSERT INTO records VALUES (?, ?, ?, ?, ?)",
                   packed, 4096, 2000)  # fmt: skip
        with_url = [
            (1, r[1], 1, OPEN, json.dumps([r[4], r[5], r[6], r[8]], separators=(",", ":"))) for r in data
        ]
        one_thread(path, "key columns + one packed value with url", PACKED,
                   "INSERT INTO records VALUES (?, ?, ?, ?, ?)", with_url, 4096, 2000)  # fmt: skip
        del no_url, packed, with_url
        conn = connect(path, SCHEMA)
        t, c = time.perf_counter(), time.process_time()
        conn.execute("BEGIN IMMEDIATE")
        for i in range(0, len(data), 2000):
            conn.execute(BY_BATCH, (by_batch(data[i : i + 2000]),))
        conn.execute("COMMIT")
        report(
            "10 columns, json_each per batch",
            len(data),
            time.perf_counter() - t,
            time.process_time() - c,
            path,
        )
        conn.close()
        del data
        for threaded in (False, True, False, True):
            built_here(path, args.rows, threaded)
            built_here(path, args.rows, threaded, json_each=True)


if __name__ == "__main__":
    main()
