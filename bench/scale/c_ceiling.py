"""SQLite's insert rate for the ``records`` row with no Python in the loop (a C program),
beside the same rows written by the catalog's Python paths, alternated in one run.

    .venv/bin/python bench/scale/c_ceiling.py [--rows 300000] [--rounds 2] [--dir DIR]

Why: docs/catalog.md put SQLite's ceiling for this row at ~130,000–145,000 per CPU-second,
but measured it from Python (``sqlite_ceiling.py``). Here ``sqlite_c_ceiling.c`` (compiled by
this script with ``-O2 -Wall -Werror``) inserts the same rows — ``bench/scale``'s change
lines, the catalog's schema (``sqlite_schema.SCHEMA``), its pragmas (WAL,
``synchronous=FULL``, 16 MiB cache, 4 KiB pages), keys in order, one prepared statement, one
transaction. Sides, each on a fresh file, alternated in every round:

- ``C, rows``: the 10-column row bound from fields cut before the clock starts;
- ``C, lines parsed``: the same, the lines cut into fields inside the timed loop;
- ``C, packed``: key columns plus one packed value (``[url, etag, size, meta]``);
- ``C, no WAL``: ``C, rows`` with ``journal_mode=OFF``, ``synchronous=OFF`` (the B-tree alone);
- ``json_each``: today's writer statement (``sqlite_writer.lines_sql``) over ``put_lines``
  chunks of 2,000 lines (the chunks built before the clock; only the statements timed);
- ``json_each, no insert``: the same statement's ``SELECT`` alone, every column read (what
  decoding the lines costs SQLite);
- ``executemany``: the 10-column rows prebuilt in Python, bound in batches of 2,000;
- ``C module``: the commit's C insert path (``datahub.catalog._put_rows``), when built, on
  the same chunks, through a Python ``sqlite3`` connection.

Prints records per CPU-second and per wall second of each side, the file's size, and the
load average (the machine is shared: CPU seconds are the figure that holds).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale.scale import change_lines  # noqa: E402
from bench.scale.sqlite_ceiling import connect  # noqa: E402
from datahub.catalog.put_lines import CHUNK_LINES, put_lines  # noqa: E402
from datahub.catalog.revisions import OPEN  # noqa: E402
from datahub.catalog.sqlite_schema import SCHEMA  # noqa: E402
from datahub.catalog.sqlite_writer import insert_sql, lines_sql  # noqa: E402

PACKED = """CREATE TABLE records (dataset_id INTEGER NOT NULL, key TEXT NOT NULL,
 from_seq INTEGER NOT NULL, to_seq INTEGER NOT NULL, v TEXT,
 PRIMARY KEY (dataset_id, key, from_seq)) WITHOUT ROWID;"""


def build(tmp: Path) -> Path:
    exe = tmp / "sqlite_c_ceiling"
    src = Path(__file__).with_name("sqlite_c_ceiling.c")
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{ROOT / 'datahub/catalog'}",
            "-o",
            str(exe),
            str(src),
            "-lsqlite3",
        ],
        check=True,
    )
    return exe


def fresh(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def size_mib(path: Path) -> float:
    return sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal") if os.path.exists(f"{path}{s}")) / 2**20


def report(label: str, n: int, cpu: float, wall: float, path: Path) -> None:
    print(
        f"{label:22} {n / cpu:9,.0f} records/CPU-s ({cpu / n * 1e6:5.2f} µs) {n / wall:9,.0f} records/s wall"
        f" {size_mib(path):5.0f} MiB | load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def run_c(exe: Path, db: Path, schema: Path, lines: Path, mode: str, label: str) -> None:
    fresh(db)
    out = subprocess.run([str(exe), str(db), str(schema), str(lines), mode, "4096"], check=True,
                         capture_output=True, text=True).stdout.split()  # fmt: skip
    report(label, int(out[0]), float(out[1]), float(out[2]), db)


def timed(label: str, db: Path, n: int, write: Callable[[sqlite3.Connection], object]) -> None:
    conn = connect(db, SCHEMA)  # sqlite_ceiling's: a fresh file, the catalog's pragmas
    cpu, wall = time.process_time(), time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    write(conn)
    conn.execute("COMMIT")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    conn.close()  # as the C program does before its size is read (the WAL checkpointed, removed)
    report(label, n, cpu, wall, db)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000, help="rows each side inserts")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every side, in turn")
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    args = parser.parse_args()
    n = args.rows
    print(
        f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {n:,} rows, {args.rounds} rounds"
    )
    try:
        from datahub.catalog import _put_rows
    except ImportError:
        _put_rows = None
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp_name:
        tmp = Path(tmp_name)
        exe, db = build(tmp), tmp / "t.db"
        lines_file, schema, packed = tmp / "changes.jsonl", tmp / "schema.sql", tmp / "packed.sql"
        schema.write_text(SCHEMA)
        packed.write_text(PACKED)
        with lines_file.open("w") as fh:
            fh.writelines(change_lines(n))
        lines = change_lines(n)
        chunks = []
        while chunk := list(islice(lines, CHUNK_LINES)):
            chunks.append(put_lines(chunk))
        assert all(chunks), "the bench's lines are plain puts"
        by_row = insert_sql(1, 1, OPEN)[0]
        rows = [
            (p.record.key, p.record.url, p.record.etag, p.record.size, "", '{"split":"train"}', None)
            for c in chunks
            for p in c.puts()
        ]
        by_lines = lines_sql(1, 1, OPEN)
        fields = ("key", "url", "etag", "size", "meta", "labels")  # the columns lines_sql reads
        decode = " + ".join(f"ifnull(length(json_extract(value, '$.record.{f}')), 0)" for f in fields)
        decode = f"SELECT sum({decode}) FROM json_each(?)"
        for _ in range(args.rounds):
            run_c(exe, db, schema, lines_file, "rows", "C, rows")
            run_c(exe, db, schema, lines_file, "parse-rows", "C, lines parsed")
            run_c(exe, db, packed, lines_file, "packed", "C, packed")
            run_c(exe, db, schema, lines_file, "rows-nowal", "C, no WAL")
            timed("json_each", db, n, lambda c: [c.execute(by_lines, (ch.text,)) for ch in chunks])
            timed(
                "json_each, no insert",
                db,
                n,
                lambda c: [c.execute(decode, (ch.text,)).fetchone() for ch in chunks],
            )
            timed(
                "executemany", db, n,
                lambda c: [c.executemany(by_row, rows[i : i + CHUNK_LINES]) for i in range(0, n, CHUNK_LINES)],
            )  # fmt: skip
            if _put_rows is not None:
                timed(
                    "C module", db, n, lambda c: [_put_rows.insert(c, 1, 1, OPEN, ch.text) for ch in chunks]
                )
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
