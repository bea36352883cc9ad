"""Issue 38 (lsm38): the delta (LSM) layout, prototyped beside the real SQLite catalog.

Why this exists: a spread 1 % commit in today's layout (docs/catalog.md, "How versions cost
O(changes)") closes one revision in place per change, so it dirties one random leaf of
``records`` per change. The design the last stops named but never measured writes a commit's
changes as a **sorted delta** instead, reads version ``v`` as ``records`` overlaid by the
deltas up to ``v``, and folds deltas into ``records`` later. This module is that design, on
the catalog's own file and schema (``records``, ``versions``), so ``bench/scale/lsm38.py`` can
measure it side by side with the real commit path, and ``tests/bench/test_lsm38.py`` can hold
its answers to the real store's.

Layout (two tables added to a catalog file):

* ``lsm_delta(dataset_id, seq, key, url, etag, size, checksum, meta, labels)``, clustered on
  ``(dataset_id, seq, key)``: a version's puts (the new record) and tombstones (``url`` NULL),
  appended in key order; the commit never reads the base (a **blind** write).
* ``lsm_versions(dataset_id, seq, …counts)``: versions whose deltas are not folded yet; the
  counts (added/removed/modified, the bytes' change) are filled by the fold, or by the commit
  when asked to count (``counted=True``: it then reads each key's state at the base, which is
  what a commit that must know its counts pays).

**The invariant readers rely on:** for every key, its deltas of seq <= T are folded into
``records`` (closing its open revision, opening the new one) and deleted in one transaction.
So version ``v`` of a key is always: its newest remaining delta of seq <= ``v``, else its
``records`` revision live at ``v``. The fold can therefore run in short transactions over key
ranges, beside readers (WAL snapshots) and beside commits (they append deltas of higher seqs).

Not in the prototype (what landing it needs is in docs/catalog.md, "lsm38"): ``Patch`` (a
delta of a patch would merge at read time), the directory table (``dirs``: the fold would keep
it, as a commit does today), commit ids and digests, the Mongo store.
"""

from __future__ import annotations

import heapq
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from datahub.catalog import Delete, DiffEntry, Put, Record
from datahub.catalog.catalog import validated_changes
from datahub.catalog.model import DirFile
from datahub.catalog.revisions import OPEN, batched
from datahub.catalog.sqlite_schema import RECORD_COLS, dump_json, record_of_row
from datahub.catalog.store import prefix_end
from datahub.errors import RecordNotFound

SCHEMA = """
CREATE TABLE IF NOT EXISTS lsm_delta (
    dataset_id INTEGER NOT NULL, seq INTEGER NOT NULL, key TEXT NOT NULL,
    url TEXT, etag TEXT, size INTEGER, checksum TEXT, meta TEXT, labels TEXT,
    PRIMARY KEY (dataset_id, seq, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lsm_versions (
    dataset_id INTEGER NOT NULL, seq INTEGER NOT NULL, changes INTEGER NOT NULL,
    added INTEGER NOT NULL DEFAULT 0, removed INTEGER NOT NULL DEFAULT 0,
    modified INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0,
    counted INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dataset_id, seq)
) WITHOUT ROWID;
"""
BATCH = 2000
VALUES = "url, etag, size, checksum, meta, labels"
Row = tuple  # (key, url, etag, size, checksum, meta, labels); url None: a tombstone


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection with the SQLite store's pragmas (sqlite_store.py: WAL, ``synchronous=FULL``,
    a 16 MiB page cache, a 30 s busy timeout), autocommit, the delta tables made."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
    for pragma in (
        "journal_mode = WAL", "synchronous = FULL", "cache_size = -16384", "temp_store = MEMORY",
        "journal_size_limit = 67108864",
    ):  # fmt: skip
        conn.execute(f"PRAGMA {pragma}")
    conn.executescript(SCHEMA)
    return conn


def dataset_id(conn: sqlite3.Connection, name: str) -> int:
    return conn.execute("SELECT id FROM datasets WHERE name = ?", (name,)).fetchone()[0]


def head(conn: sqlite3.Connection, ds: int) -> int:
    """The newest version, folded or not."""
    return conn.execute(
        "SELECT max(s) FROM (SELECT max(seq) AS s FROM versions WHERE dataset_id = ?1"
        " UNION ALL SELECT max(seq) FROM lsm_versions WHERE dataset_id = ?1)",
        (ds,),
    ).fetchone()[0]


def delta_row(ds: int, seq: int, change: Put | Delete) -> tuple:
    if isinstance(change, Put):
        r = change.record
        return (
            ds,
            seq,
            r.key,
            r.url,
            r.etag,
            r.size,
            r.checksum or None,
            dump_json(r.meta),
            dump_json(r.labels),
        )
    if isinstance(change, Delete):
        return (ds, seq, change.key, None, None, None, None, None, None)
    raise ValueError(f"the delta prototype takes puts and deletes, not {type(change).__name__}")


def same(a: Row | None, b: Row | None) -> bool:
    """Two stored states of one key equal as Records (a missing key or a tombstone is None)."""
    if a is None or b is None:
        return a is b
    if a[1:5] != b[1:5]:
        return False
    return all(
        x == y or json.loads(x or "{}") == json.loads(y or "{}") for x, y in zip(a[5:], b[5:], strict=True)
    )


@dataclass
class Counts:
    added: int = 0
    removed: int = 0
    modified: int = 0
    bytes: int = 0

    def change(self, old: Row | None, new: Row | None) -> None:
        if same(old, new):
            return
        if old is None:
            self.added += 1
        elif new is None:
            self.removed += 1
        else:
            self.modified += 1
        self.bytes += (new[3] if new else 0) - (old[3] if old else 0)


def live(row: Row | None) -> Row | None:
    return None if row is None or row[1] is None else row


def commit(
    conn: sqlite3.Connection, dataset: str, changes: Iterable[Put | Delete], *, counted: bool = False
) -> tuple[int, Counts | None]:
    """Append ``changes`` as the delta of a new version on the head, in one transaction.

    Blind by default: nothing of the base is read, so the commit writes pages in proportion to
    its changes whatever their spread. ``counted`` reads each key's state at the base (as today's
    planner must) to know the counts at commit. The same checks as every write path
    (``validated_changes``). Within one commit the last change of a key wins."""
    ds = dataset_id(conn, dataset)
    conn.execute("BEGIN IMMEDIATE")
    try:
        seq = head(conn, ds) + 1
        n, counts = 0, Counts() if counted else None
        view = View(conn, ds, seq - 1) if counted else None
        seen: set[str] = set()
        for batch in batched(validated_changes(dataset, changes), BATCH):
            rows, put = {}, set()
            for change in batch:
                row = delta_row(ds, seq, change)
                rows[row[2]] = row
                if row[3] is not None:
                    put.add(row[2])
            ordered = sorted(rows.values())
            if counts is not None and view is not None:
                fresh = [r[2] for r in ordered if r[2] not in seen]
                olds = view.get_many(fresh)
                for r in ordered:
                    if r[2] in seen:
                        raise ValueError(f"counted mode: key {r[2]!r} changed twice in one commit")
                    if r[3] is None and r[2] not in olds and r[2] not in put:  # as the planner (revisions.py)
                        raise RecordNotFound(
                            f"cannot delete record {r[2]!r}: dataset {dataset!r} has no such key at version "
                            f"{seq - 1}; put it first or fix the key",
                            dataset=dataset,
                            version=seq - 1,
                            key=r[2],
                        )
                    counts.change(olds.get(r[2]), live(r[2:]))
                seen.update(fresh)
            conn.executemany("INSERT OR REPLACE INTO lsm_delta VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", ordered)
            n += len(batch)
        c = counts or Counts()
        conn.execute(
            "INSERT INTO lsm_versions VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (ds, seq, n, c.added, c.removed, c.modified, c.bytes, int(counted)),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return seq, counts


class View:
    """Version ``seq`` of a dataset as ``records`` overlaid by its unfolded deltas.

    Every read below is one ``records`` stream plus one stream per unfolded delta of seq <=
    ``seq``, merged by key (the newest delta of a key wins; a tombstone hides it). Open it
    inside one read transaction (``BEGIN``) for a consistent snapshot beside a fold."""

    def __init__(self, conn: sqlite3.Connection, ds: int, seq: int) -> None:
        self.conn, self.ds, self.seq = conn, ds, seq
        self.deltas = [
            s
            for (s,) in conn.execute(
                "SELECT seq FROM lsm_versions WHERE dataset_id = ? AND seq <= ? ORDER BY seq", (ds, seq)
            )
        ]

    # --- point reads ---------------------------------------------------------------------------
    def get(self, key: str) -> Record | None:
        if self.deltas:
            marks = ",".join("?" * len(self.deltas))
            row = self.conn.execute(
                f"SELECT key, {VALUES} FROM lsm_delta WHERE dataset_id = ? AND seq IN ({marks}) AND key = ?"
                " ORDER BY seq DESC LIMIT 1",
                (self.ds, *self.deltas, key),
            ).fetchone()
            if row is not None:
                return record_of_row(row) if row[1] is not None else None
        row = self.conn.execute(
            f"SELECT {RECORD_COLS} FROM records WHERE dataset_id = ? AND key = ? AND from_seq <= ? AND to_seq > ?",
            (self.ds, key, self.seq, self.seq),
        ).fetchone()
        return record_of_row(row) if row else None

    def get_many(self, keys: list[str]) -> dict[str, Row]:
        """The live rows of ``keys`` at this version (absent keys missing)."""
        out: dict[str, Row] = {}
        hidden: set[str] = set()
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            newest: dict[str, tuple[int, Row]] = {}
            if self.deltas:
                dmarks = ",".join("?" * len(self.deltas))
                for seq, *row in self.conn.execute(
                    f"SELECT seq, key, {VALUES} FROM lsm_delta WHERE dataset_id = ? AND seq IN ({dmarks})"
                    f" AND key IN ({marks})",
                    (self.ds, *self.deltas, *chunk),
                ):
                    if row[0] not in newest or newest[row[0]][0] < seq:
                        newest[row[0]] = (seq, tuple(row))
            for k, (_, row) in newest.items():
                if row[1] is None:
                    hidden.add(k)
                else:
                    out[k] = row
            rest = [k for k in chunk if k not in newest]
            if rest:
                marks = ",".join("?" * len(rest))
                for row in self.conn.execute(
                    f"SELECT {RECORD_COLS} FROM records WHERE dataset_id = ? AND key IN ({marks})"
                    " AND from_seq <= ? AND to_seq > ?",
                    (self.ds, *rest, self.seq, self.seq),
                ):
                    out[row[0]] = row
        return out

    # --- ordered reads -------------------------------------------------------------------------
    def _records(self, lo: str, hi: str | None, first: int, page: int, op: str = ">") -> Iterator[Row]:
        """Rows live at ``seq`` with ``lo < key`` (``<=`` for ``op=">="``) ``< hi``, keyset pages
        growing from ``first``."""
        bound = " AND key < ?" if hi is not None else ""
        size = first
        while True:
            rows = self.conn.execute(
                f"SELECT {RECORD_COLS} FROM records WHERE dataset_id = ? AND key {op} ?{bound}"
                " AND from_seq <= ? AND to_seq > ? ORDER BY key LIMIT ?",
                (self.ds, lo, *([hi] if hi is not None else []), self.seq, self.seq, size),
            ).fetchall()
            yield from rows
            if len(rows) < size:
                return
            lo, size, op = rows[-1][0], min(page, size * 4), ">"

    def _delta(
        self, seq: int, lo: str, hi: str | None, first: int, page: int, cols: str = VALUES, op: str = ">"
    ) -> Iterator[Row]:
        bound = " AND key < ?" if hi is not None else ""
        size = first
        while True:
            rows = self.conn.execute(
                f"SELECT key, {cols} FROM lsm_delta WHERE dataset_id = ? AND seq = ? AND key {op} ?{bound}"
                " ORDER BY key LIMIT ?",
                (self.ds, seq, lo, *([hi] if hi is not None else []), size),
            ).fetchall()
            yield from rows
            if len(rows) < size:
                return
            lo, size, op = rows[-1][0], min(page, size * 4), ">"

    def rows(
        self, after: str = "", hi: str | None = None, first: int = 64, page: int = 1024, op: str = ">"
    ) -> Iterator[Row]:
        """Every live row of the version with ``after < key`` (``<=`` for ``op=">="``) ``< hi``,
        in key order."""
        streams = [_tagged(0, self._records(after, hi, first, page, op))]
        # a delta holds a few rows per page of records (1 % of them): its pages start small
        streams += [_tagged(-s, self._delta(s, after, hi, min(first, 16), page, op=op)) for s in self.deltas]
        last = None
        for key, _, row in heapq.merge(*streams):  # per key, the newest delta comes first
            if key == last:
                continue
            last = key
            if row[1] is not None:
                yield row

    def list_page(self, after: str = "", limit: int = 1000) -> list[Record]:
        return [record_of_row(r) for r in islice(self.rows(after, first=min(limit + 1, 1024)), limit)]

    def directory_page(self, prefix: str, after: str = "", limit: int = 1000) -> list[DirFile | str]:
        """One level under ``prefix`` (files as Records, subdirectories as ``prefix + name + '/'``),
        as ``list_directory`` answers: a subdirectory's subtree is skipped by restarting every
        stream at ``prefix_end`` of it (no directory table: the fold would keep one, see the
        module's docstring). ``after`` is a cursor of that order (a key, or a subdirectory)."""
        out: list[DirFile | str] = []
        hi = prefix_end(prefix) if prefix else None
        if after.endswith("/") and after.startswith(prefix) and len(after) > len(prefix):
            lo, op = prefix_end(after), ">="
        elif after >= prefix:
            lo, op = after, ">"
        else:
            lo, op = prefix, ">="
        while len(out) < limit:
            for row in self.rows(lo, hi, first=16, page=1024, op=op):
                name = row[0][len(prefix) :]
                slash = name.find("/")
                if slash < 0:
                    out.append((row[0], row[1], row[2], row[3], _mtime(row[5])))
                    lo, op = row[0], ">"
                    if len(out) == limit:
                        return out
                    continue
                sub = prefix + name[: slash + 1]
                out.append(sub)
                lo, op = prefix_end(sub), ">="  # restart past the subtree
                break
            else:
                return out
        return out

    def diff_page(self, a: int, after: str = "", limit: int = 50) -> list[DiffEntry]:
        """Changes from version ``a`` (< ``seq``) to this one, in key order, above ``after``.

        The candidate keys are those of the deltas in (a, seq] plus ``records``' revisions that
        began or ended in (a, seq] (today's diff indexes: the folded versions, and the keys a
        fold under way has folded of the others);
        each candidate is then read at ``a`` and at ``seq``, and unchanged ones dropped."""
        old_view = View(self.conn, self.ds, a)
        streams = [
            ((r[0],) for r in self._delta(s, after, None, 64, 1024, "1")) for s in self.deltas if s > a
        ]
        for s in range(a + 1, self.seq + 1):  # folded versions, and the folded keys of a fold under way
            streams.append(self._changed(s, after, "records_began", "from_seq"))
            streams.append(self._changed(s, after, "records_ended", "to_seq"))
        out: list[DiffEntry] = []
        keys = _unique(k for (k,) in heapq.merge(*streams))
        while len(out) < limit:
            chunk = list(islice(keys, limit * 2))
            if not chunk:
                break
            old, new = old_view.get_many(chunk), self.get_many(chunk)
            for k in chunk:
                o, n = old.get(k), new.get(k)
                if same(o, n):
                    continue
                kind = "added" if o is None else "removed" if n is None else "modified"
                out.append(
                    DiffEntry(kind, k, record_of_row(o) if o else None, record_of_row(n) if n else None)  # type: ignore[arg-type]
                )
                if len(out) == limit:
                    break
        return out

    def _changed(self, seq: int, after: str, index: str, column: str) -> Iterator[tuple[str]]:
        extra = f" AND to_seq < {OPEN}" if column == "to_seq" else " AND from_seq > 1"
        sql = (
            f"SELECT key FROM records INDEXED BY {index} WHERE dataset_id = ? AND {column} = ?{extra}"
            " AND key > ? ORDER BY key LIMIT ?"
        )
        size = 64
        while True:
            rows = self.conn.execute(sql, (self.ds, seq, after, size)).fetchall()
            yield from rows
            if len(rows) < size:
                return
            after, size = rows[-1][0], min(1024, size * 4)


def _tagged(rank: int, rows: Iterator[Row]) -> Iterator[tuple[str, int, Row]]:
    """``(key, rank, row)``: the newest delta of a key (the lowest rank) sorts first."""
    for row in rows:
        yield row[0], rank, row


def _mtime(meta: str | None) -> float | None:
    """DirFile's mtime: meta's "mtime" when it is a number (model.dir_file), parsed only when
    the stored text names it."""
    if not meta or '"mtime"' not in meta:
        return None
    value = json.loads(meta).get("mtime")
    return value if type(value) in (int, float) else None


def _unique(keys: Iterable[str]) -> Iterator[str]:
    last = None
    for k in keys:
        if k != last:
            yield k
            last = k


@dataclass
class FoldStats:
    keys: int = 0
    closes: int = 0
    inserts: int = 0
    transactions: int = 0
    versions: list[int] = field(default_factory=list)


def fold(
    conn: sqlite3.Connection,
    dataset: str,
    upto: int | None = None,
    chunk: int = 5000,
    after_chunk: Callable[[FoldStats], None] | None = None,
    pause: float = 0.0,
) -> FoldStats:
    """Fold every unfolded delta of seq <= ``upto`` into ``records``: per key, in seq order, close
    its open revision and open the new one, then delete the key's deltas — about ``chunk`` delta
    rows per short transaction (readers never wait; a commit waits about one chunk when the
    fold pauses ``pause`` s between chunks: without a pause, measured, a commit waiting in the
    busy handler lost every race to the next chunk and timed out after 30 s). The counts of each
    version are summed across chunks in ``lsm_versions`` and become its ``versions`` row at the end.
    The key ranges go in key order, so the leaves of ``records`` are rewritten in file order."""
    ds = dataset_id(conn, dataset)
    top = upto if upto is not None else head(conn, ds)
    seqs = [
        s
        for (s,) in conn.execute(
            "SELECT seq FROM lsm_versions WHERE dataset_id = ? AND seq <= ? ORDER BY seq", (ds, top)
        )
    ]
    stats = FoldStats(versions=seqs)
    if not seqs:
        return stats
    per = max(1, chunk // len(seqs))
    after = ""
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # the next rows of each delta (chunk / deltas of each), up to the lowest last key of a
            # delta that had more: every delta row of the keys taken is folded together
            streams = [
                [(r[0], s, r) for r in conn.execute(
                    f"SELECT key, {VALUES} FROM lsm_delta WHERE dataset_id = ? AND seq = ? AND key > ? ORDER BY key LIMIT ?",
                    (ds, s, after, per),
                )]
                for s in seqs
            ]  # fmt: skip
            full = [rows[-1][0] for rows in streams if len(rows) == per]
            hi = min(full) if full else None
            rows = sorted(r for rows in streams for r in rows if hi is None or r[0] <= hi)
            if not rows:
                conn.execute("ROLLBACK")
                break
            keys = list(dict.fromkeys(r[0] for r in rows))
            current = _open_revisions(conn, ds, keys)
            closes, inserts, counts = [], [], {s: Counts() for s in seqs}
            for key, s, row in rows:
                now = current.get(key)  # (from_seq, row, inserted here)
                new = live(row)
                old = now[1] if now else None
                counts[s].change(old, new)
                if same(old, new):
                    continue
                if now is not None:
                    if now[2]:
                        inserts[now[3]] = (*inserts[now[3]][:3], s, *inserts[now[3]][4:])
                    else:
                        closes.append((s, ds, key, now[0]))
                if new is not None:
                    inserts.append((ds, key, s, OPEN, *new[1:]))
                    current[key] = (s, new, True, len(inserts) - 1)
                else:
                    current.pop(key, None)
            conn.executemany(
                "UPDATE records SET to_seq = ? WHERE dataset_id = ? AND key = ? AND from_seq = ?", closes
            )
            conn.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", inserts)
            for s in seqs:
                conn.execute(
                    "DELETE FROM lsm_delta WHERE dataset_id = ? AND seq = ? AND key > ?"
                    + (" AND key <= ?" if hi is not None else ""),
                    (ds, s, after, *([hi] if hi is not None else [])),
                )
                c = counts[s]
                conn.execute(
                    "UPDATE lsm_versions SET added = added + ?, removed = removed + ?, modified = modified + ?,"
                    " bytes = bytes + ? WHERE dataset_id = ? AND seq = ? AND counted = 0",
                    (c.added, c.removed, c.modified, c.bytes, ds, s),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        stats.keys += len(keys)
        stats.closes += len(closes)
        stats.inserts += len(inserts)
        stats.transactions += 1
        if after_chunk is not None:
            after_chunk(stats)
        if pause:
            # give way: a commit waiting in SQLite's busy handler (which sleeps up to 100 ms
            # between tries) would otherwise lose every race for the lock to the next chunk
            time.sleep(pause)
        after = keys[-1]
        if hi is None:
            break
    _publish(conn, ds, seqs)
    return stats


def _open_revisions(conn: sqlite3.Connection, ds: int, keys: list[str]) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for i in range(0, len(keys), 500):
        part = keys[i : i + 500]
        for from_seq, *row in conn.execute(
            f"SELECT from_seq, {RECORD_COLS} FROM records WHERE dataset_id = ? AND key IN ({','.join('?' * len(part))})"
            " AND to_seq = ?",
            (ds, *part, OPEN),
        ):
            out[row[0]] = (from_seq, tuple(row), False, -1)
    return out


def _publish(conn: sqlite3.Connection, ds: int, seqs: list[int]) -> None:
    """The folded versions' ``versions`` rows, in seq order, from their summed counts."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for s in seqs:
            count, size = conn.execute(
                "SELECT record_count, total_bytes FROM versions WHERE dataset_id = ? AND seq = ?", (ds, s - 1)
            ).fetchone()
            added, removed, modified, delta = conn.execute(
                "SELECT added, removed, modified, bytes FROM lsm_versions WHERE dataset_id = ? AND seq = ?",
                (ds, s),
            ).fetchone()
            conn.execute(
                "INSERT INTO versions (dataset_id, seq, parent, message, author, created_at, record_count,"
                " total_bytes, added, removed, modified) VALUES (?, ?, ?, 'lsm38 fold', '', 0, ?, ?, ?, ?, ?)",
                (ds, s, s - 1, count + added - removed, size + delta, added, removed, modified),
            )
            conn.execute("DELETE FROM lsm_versions WHERE dataset_id = ? AND seq = ?", (ds, s))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
