"""A spread commit written in place (today) or appended to side tables (a delta layout).

    .venv/bin/python bench/scale/delta_ab.py --catalog DIR --mode inplace|delta|leaves
        [--records 100000000] [--fraction 0.01] [--evict] [--readers]

Issue 38 item 3: a spread 1 % commit of 10⁸ records (one key in a hundred) touches one leaf
of ``records`` per change. docs/catalog.md names a layout that would not: a version's new
revisions and its closes appended in ``(dataset, seq, key)`` order to tables of their own,
read beside ``records`` and folded into it later. This measures it before anyone builds it,
on the kept 10⁸ catalog of ``bench/scale/scale.py --keep`` (``DIR/catalog.db``), with the
change set ``small_commit.py`` would commit next (60 % modified, 20 % deleted, 20 % added):

* ``inplace``: today's writes with no Python planner: per batch of 2,000 the lookup of the
  keys' open revisions (``key IN (…) AND to_seq = OPEN`` on the commit's connection, the
  next batch read ahead by ``sqlite_read_ahead``'s four threads, as a real commit), the
  ``UPDATE`` closing each base revision, the ``INSERT`` of each new one, inside one
  ``BEGIN IMMEDIATE``, then **ROLLBACK** (the kept catalog stays as it was; no checkpoint:
  a real commit's COMMIT copies as many pages again, ``small_commit.py`` measures it);
* ``delta``: the same lookups on the catalog, and the writes appended to two ``WITHOUT
  ROWID`` side tables clustered on ``(dataset_id, seq, key)`` — ``delta_put`` (the new
  revisions' columns) and ``delta_close`` (key, from_seq) — in a fresh side file (the same
  pragmas: WAL, ``synchronous=FULL``, 4 KiB pages), COMMIT and checkpoint included;
* ``leaves``: the lookups alone — what any design pays that must know each key's base
  revision (added/modified counts, ``total_bytes``): reading the touched leaves.

Each run prints wall, CPU (user, system) per change, bytes read and written
(``/proc/self/io``) and the WAL's size; run the modes in turns, each ``--evict``ed, with the
load printed. ``--readers`` (after ``delta``) measures what the delta layout costs readers,
warm: a lookup of a key (``records`` plus one probe of each side table per unfolded version)
and a listing of a key range (``records``' range merged with each side table's range).
"""

from __future__ import annotations

import argparse
import heapq
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale import scale  # noqa: E402
from bench.scale.small_commit import evict, io_bytes, spread_changes  # noqa: E402
from datahub.catalog import Delete, Put, Record  # noqa: E402
from datahub.catalog.revisions import OPEN, batched  # noqa: E402
from datahub.catalog.sqlite_read_ahead import READ_AHEAD_THREADS, LeafReadAhead  # noqa: E402
from datahub.catalog.sqlite_schema import RECORD_COLS, dump_json  # noqa: E402

BATCH = 2000
SIDE_SCHEMA = """
CREATE TABLE IF NOT EXISTS delta_put (
    dataset_id INTEGER NOT NULL, seq INTEGER NOT NULL, key TEXT NOT NULL,
    url TEXT NOT NULL, etag TEXT NOT NULL, size INTEGER NOT NULL, checksum TEXT, meta TEXT, labels TEXT,
    PRIMARY KEY (dataset_id, seq, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS delta_close (
    dataset_id INTEGER NOT NULL, seq INTEGER NOT NULL, key TEXT NOT NULL, from_seq INTEGER NOT NULL,
    PRIMARY KEY (dataset_id, seq, key)
) WITHOUT ROWID;
"""
_INSERT = (
    "INSERT OR REPLACE INTO records (dataset_id, key, from_seq, to_seq, url, etag, size, checksum, meta, labels)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_CLOSE = "UPDATE records SET to_seq = ? WHERE dataset_id = ? AND key = ? AND from_seq = ?"


def connect(path: Path) -> sqlite3.Connection:
    """The catalog store's pragmas (sqlite_store.py): WAL, FULL, a 16 MiB page cache."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    for pragma in ("journal_mode = WAL", "synchronous = FULL", "cache_size = -16384", "temp_store = MEMORY"):
        conn.execute(f"PRAGMA {pragma}")
    return conn


def key_of(change: Put | Delete) -> str:
    return change.record.key if isinstance(change, Put) else change.key


def lookup(conn: sqlite3.Connection, dataset_id: int, keys: list[str]) -> dict[str, int]:
    """The open revisions of ``keys`` by key: their from_seq. The statement of
    ``sqlite_commit._lookup``, without decoding each row into a ``Record`` (SQLite's side of a
    lookup; every mode runs this same one)."""
    out: dict[str, int] = {}
    for i in range(0, len(keys), 500):
        chunk = keys[i : i + 500]
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(
            f"SELECT {RECORD_COLS}, from_seq FROM records WHERE dataset_id = ? AND key IN ({marks}) AND to_seq = ?",
            (dataset_id, *chunk, OPEN),
        ):
            out[row[0]] = row[7]
    return out


def values(r: Record) -> tuple:
    """A revision's value columns as the store binds them."""
    return (r.url, r.etag, r.size, r.checksum or None, dump_json(r.meta), dump_json(r.labels))


def run(args: argparse.Namespace) -> None:
    db = (args.catalog / "catalog.db").resolve()
    if args.evict:
        evict(db)
    conn = connect(db)
    dataset_id, base = conn.execute(
        "SELECT d.id, MAX(v.seq) FROM datasets d JOIN versions v ON v.dataset_id = d.id WHERE d.name = ?",
        (args.dataset,),
    ).fetchone()
    new = base + 1
    side_path = args.side / "delta.db"
    side = None
    if args.mode == "delta":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{side_path}{suffix}").unlink(missing_ok=True)
        side = connect(side_path)
        side.executescript(SIDE_SCHEMA)
    print(
        f"bench/scale/delta_ab.py --mode {args.mode}: {args.dataset}@v{base} of {db.stat().st_size / 2**30:.1f} GiB, "
        f"{args.fraction:.2%} of {args.records:,} keys spread; "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {os.getloadavg()}",
        flush=True,
    )
    ahead = LeafReadAhead(db, dataset_id, args.read_ahead_threads)
    t0, c0, io0 = time.perf_counter(), os.times(), io_bytes()
    looked = found = 0
    conn.execute("BEGIN IMMEDIATE" if args.mode == "inplace" else "BEGIN")
    if side is not None:
        side.execute("BEGIN IMMEDIATE")
    stream = batched(spread_changes(args.records, args.fraction, base), BATCH)
    batch = next(stream, None)
    while batch is not None:
        following = next(stream, None)
        if following is not None:
            ahead.submit([key_of(c) for c in following])
        keys = [key_of(c) for c in batch]
        live = lookup(conn, dataset_id, keys)
        looked += len(keys)
        found += len(live)
        closes = [(k, live[k]) for k in keys if k in live]
        puts = [c.record for c in batch if isinstance(c, Put)]
        if args.mode == "inplace":
            conn.executemany(_CLOSE, ((new, dataset_id, k, f) for k, f in closes))
            conn.executemany(_INSERT, ((dataset_id, r.key, new, OPEN, *values(r)) for r in puts))
        elif side is not None:
            side.executemany(
                "INSERT INTO delta_close VALUES (?, ?, ?, ?)",
                sorted((dataset_id, new, k, f) for k, f in closes),
            )
            side.executemany(
                "INSERT INTO delta_put VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                sorted((dataset_id, new, r.key, *values(r)) for r in puts),
            )
        batch = following
    ahead.close()
    planned = time.perf_counter() - t0
    wal = Path(f"{side_path if side is not None else db}-wal")
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    if args.mode == "inplace":
        conn.execute("ROLLBACK")
    else:
        conn.execute("COMMIT")
        if side is not None:
            side.execute("COMMIT")
            side.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wall, c1, io1 = time.perf_counter() - t0, os.times(), io_bytes()
    user, system = c1.user - c0.user, c1.system - c0.system
    print(
        f"  {looked:,} changes looked up ({found:,} with an open revision); wall {wall:.1f} s "
        f"(lookups and writes {planned:.1f} s, then {'ROLLBACK' if args.mode == 'inplace' else 'COMMIT + checkpoint'} "
        f"{wall - planned:.1f} s)\n"
        f"  CPU {user + system:.1f} s (user {user:.1f}, system {system:.1f}) = {(user + system) / looked * 1e6:.1f} µs "
        f"per change; read {(io1[0] - io0[0]) / 2**20:,.0f} MiB, written {(io1[1] - io0[1]) / 2**20:,.0f} MiB "
        f"(WAL before the end {wal_bytes / 2**20:,.0f} MiB); read-ahead {ahead.keys_read:,} keys; "
        f"load {os.getloadavg()}",
        flush=True,
    )
    if side is not None:
        size = side_path.stat().st_size
        print(f"  side file {size / 2**20:,.1f} MiB ({size / looked:.0f} B per change)", flush=True)
        if args.readers:
            readers(conn, side, dataset_id, base, new, args.records)
        side.close()
    conn.close()


def readers(
    conn: sqlite3.Connection, side: sqlite3.Connection, dataset_id: int, base: int, new: int, n: int
) -> None:
    """What the delta layout costs a reader of version ``new`` (one unfolded version), warm:
    a lookup probes ``records`` and each side table; a listing merges their key ranges."""
    keys = [scale.key_of(i) for i in range(0, n, max(1, n // 10_000))]
    for k in keys[:2000]:  # warm the pages both variants read
        conn.execute("SELECT 1 FROM records WHERE dataset_id = ? AND key = ?", (dataset_id, k)).fetchall()

    def lookup_records(k: str) -> list:
        return conn.execute(
            f"SELECT {RECORD_COLS} FROM records WHERE dataset_id = ? AND key = ? AND from_seq <= ? AND to_seq > ?",
            (dataset_id, k, base, base),
        ).fetchall()

    def lookup_delta(k: str) -> list:
        got = lookup_records(k)
        closed = side.execute(
            "SELECT 1 FROM delta_close WHERE dataset_id = ? AND seq = ? AND key = ?", (dataset_id, new, k)
        ).fetchall()
        put = side.execute(
            "SELECT key, url, etag, size, checksum, meta, labels FROM delta_put WHERE dataset_id = ? AND seq = ? AND key = ?",
            (dataset_id, new, k),
        ).fetchall()
        return put or ([] if closed else got)

    for name, fn in (("records", lookup_records), ("records + side", lookup_delta)) * 2:
        c0 = time.thread_time()
        for k in keys:
            fn(k)
        print(
            f"  lookup ({name}): {(time.thread_time() - c0) / len(keys) * 1e6:.1f} µs CPU per key, warm",
            flush=True,
        )

    lo, hi = scale.key_of(n // 2), scale.key_of(n // 2 + 100_000)

    def list_records() -> Iterator[tuple]:
        yield from conn.execute(
            f"SELECT {RECORD_COLS} FROM records WHERE dataset_id = ? AND key >= ? AND key < ?"
            " AND from_seq <= ? AND to_seq > ? ORDER BY key",
            (dataset_id, lo, hi, base, base),
        )

    def list_delta() -> Iterator[tuple]:
        closed = {
            k for (k,) in side.execute(
                "SELECT key FROM delta_close WHERE dataset_id = ? AND seq = ? AND key >= ? AND key < ?",
                (dataset_id, new, lo, hi),
            )
        }  # fmt: skip
        puts = side.execute(
            "SELECT key, url, etag, size, checksum, meta, labels FROM delta_put"
            " WHERE dataset_id = ? AND seq = ? AND key >= ? AND key < ? ORDER BY key",
            (dataset_id, new, lo, hi),
        )
        old = (r for r in list_records() if r[0] not in closed)
        yield from heapq.merge(old, puts, key=lambda r: r[0])

    for name, fn in (("records", list_records), ("records + side", list_delta)) * 2:
        c0 = time.thread_time()
        rows = sum(1 for _ in fn())
        cpu = time.thread_time() - c0
        print(
            f"  listing of a key range ({name}): {rows:,} rows, {cpu / rows * 1e6:.2f} µs CPU per row",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--catalog", type=Path, required=True, help="a dir kept by scale.py --layout tree --keep")
    p.add_argument("--mode", choices=("inplace", "delta", "leaves"), required=True)
    p.add_argument("--records", type=int, default=100_000_000, help="records of the dataset's v1")
    p.add_argument("--fraction", type=float, default=0.01)
    p.add_argument("--dataset", default="big")
    p.add_argument("--side", type=Path, default=Path("/var/tmp"), help="where delta mode's side file goes")
    p.add_argument("--evict", action="store_true", help="evict the catalog from the OS page cache first")
    p.add_argument("--readers", action="store_true", help="delta mode: then measure a reader's cost")
    p.add_argument("--read-ahead-threads", type=int, default=READ_AHEAD_THREADS, help="as small_commit.py's")
    args = p.parse_args(argv)
    scale.key_of = scale.key_tree
    run(args)


if __name__ == "__main__":
    main()
