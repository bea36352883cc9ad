"""The SQLite catalog's commit path: one version's rows, written inside the caller's transaction.

Why a module of its own: the store (``sqlite_store.py``) owns connections, error translation
and the reads; this module owns the write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``, or a
rollback of everything) and what a commit writes in it. The planner in ``revisions.py`` decides the writes batch by
batch (``batch_size`` changes at a time, so memory stays bounded whatever the change set), and
the version row carries the change set's digest when the commit has an id, so a retry with
the same id and the same changes returns the version it already made (``replay``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator

from datahub.catalog.model import Change, Put
from datahub.catalog.put_lines import PutLines, batches
from datahub.catalog.revisions import OPEN, CommitPlanner, LiveRevision, change_digest, replay
from datahub.catalog.sqlite_dirs import DirectoryCounts, indexed
from datahub.catalog.sqlite_read_ahead import LeafReadAhead
from datahub.catalog.sqlite_schema import RECORD_COLS, dump_json, record_of_row
from datahub.catalog.sqlite_writer import RowWriter
from datahub.catalog.store import stale_base

_CLOSE_SQL = "UPDATE records SET to_seq = ? WHERE dataset_id = ? AND key = ? AND from_seq = ?"


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One ``BEGIN IMMEDIATE`` transaction, committed when the block ends and rolled back
    whole if it raises: nothing half-written, the whole change set or nothing."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        conn.rollback()
        raise
    finally:
        # A big commit fills this thread's page cache with the pages it wrote; give them back
        # (they stay in the OS page cache) instead of holding up to cache_mib per API thread.
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA shrink_memory")


def head_seq(conn: sqlite3.Connection, dataset_id: int) -> int:
    """The dataset's newest version (0 before the first commit)."""
    row = conn.execute("SELECT MAX(seq) FROM versions WHERE dataset_id = ?", (dataset_id,)).fetchone()
    return row[0] or 0


def write_version(
    conn: sqlite3.Connection,
    dataset_id: int,
    dataset: str,
    base: int,
    changes: Iterable[Change | PutLines],
    *,
    message: str,
    author: str,
    lineage: dict | None,
    commit_id: str | None,
    batch_size: int,
    now: Callable[[], float],
    read_ahead: LeafReadAhead | None = None,
) -> int:
    """Write version ``base + 1`` of ``dataset`` from ``changes``; returns its seq.

    Runs inside the caller's open write transaction and raises (for the caller to roll back)
    on a stale base, a bad change, or a commit id reused with other changes. ``read_ahead``:
    a commit on a base reads each next batch's pages ahead with it (``sqlite_read_ahead``)."""
    if commit_id is not None:
        row = conn.execute(
            "SELECT seq, commit_digest FROM versions WHERE dataset_id = ? AND commit_id = ?",
            (dataset_id, commit_id),
        ).fetchone()
        if row:  # a retry of a commit that already succeeded, if it sends the same changes
            return replay(dataset, commit_id, row[0], row[1], changes)
    head = head_seq(conn, dataset_id)
    if base != head:
        raise stale_base(dataset, base, head)
    new = base + 1
    if base:
        parent = conn.execute(
            "SELECT record_count, total_bytes FROM versions WHERE dataset_id = ? AND seq = ?",
            (dataset_id, base),
        ).fetchone()
    else:
        parent = (0, 0)
    # the dataset's directory table (sqlite_dirs), when it has one: kept in this transaction
    dirs = DirectoryCounts(conn, dataset_id, new) if indexed(conn, dataset_id) else None
    with RowWriter(conn, dataset_id, new, OPEN) as rows:
        # every statement but the inserts runs after the queued inserts (rows.flush): a lookup
        # must see the revisions this commit wrote in earlier batches
        def lookup(cond: str, value: int) -> Callable[[list[str]], dict[str, LiveRevision]]:
            def run(keys: list[str]) -> dict[str, LiveRevision]:
                rows.flush()
                return _lookup(conn, dataset_id, keys, cond, value)

            return run

        def keep_dirs(appeared: list[str], vanished: list[str], ascending: bool) -> None:
            nonlocal dirs
            if dirs is not None:
                dirs.add(appeared, vanished, ascending=ascending)
                if dirs.pending():  # rarely: the inserts' thread waits for this
                    rows.flush()
                    if not dirs.write():  # given up: the dataset lists without it from now on
                        dirs = None

        planner = CommitPlanner(dataset, base, lookup("to_seq = ?", OPEN), lookup("to_seq = ?", new))
        stream = batches(changes, batch_size)
        for batch in _looking_ahead(stream, read_ahead) if base and read_ahead is not None else stream:
            if isinstance(batch, PutLines):
                if planner.plan_fresh_puts(batch.keys, batch.total_size):
                    rows.write_lines(batch)  # a first version's puts in key order: rows from the lines
                    keep_dirs(batch.keys, [], True)  # ascending: plan_fresh_puts checked it
                    continue
                batch = batch.puts()  # any other chunk of puts: planned as objects
            ops = planner.plan(batch)
            if ops.close or ops.reopen or ops.drop:
                rows.flush()
            if ops.close:
                conn.executemany(_CLOSE_SQL, ((new, dataset_id, k, f) for k, f in ops.close))
            if ops.reopen:
                conn.executemany(_CLOSE_SQL, ((OPEN, dataset_id, k, f) for k, f in ops.reopen))
            if ops.drop:
                conn.executemany(
                    "DELETE FROM records WHERE dataset_id = ? AND key = ? AND from_seq = ?",
                    ((dataset_id, k, new) for k in ops.drop),
                )
            if ops.upsert:
                rows.write(ops.upsert)
            keep_dirs(ops.appeared, ops.vanished, ops.appeared_ascending)
        rows.flush()
        if dirs is not None:
            dirs.write()
    conn.execute(
        "INSERT INTO versions (dataset_id, seq, parent, message, author, created_at, record_count,"
        " total_bytes, added, removed, modified, lineage, commit_id, commit_digest)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            dataset_id, new, base or None, message, author, now(),
            parent[0] + planner.count_delta, planner.total_bytes(parent[1]),
            planner.added, planner.removed, planner.modified, dump_json(lineage), commit_id,
            change_digest(changes) if commit_id is not None else None,
        ),
    )  # fmt: skip
    return new


def _looking_ahead(
    stream: Iterator[list[Change] | PutLines], read_ahead: LeafReadAhead
) -> Iterator[list[Change] | PutLines]:
    """``stream``'s batches, each yielded once the next one is read and handed to
    ``read_ahead`` (one batch more in memory: the one whose pages are being read). An error
    reading the next batch (a bad change, the caller's generator raising) is raised after
    this batch was planned, as without the look-ahead: an earlier change's error comes first."""
    current = next(stream, None)
    while current is not None:
        try:
            following = next(stream, None)
        except Exception:
            yield current
            raise
        if following is not None:
            read_ahead.submit(_keys(following))
        yield current
        current = following


def _keys(batch: list[Change] | PutLines) -> list[str]:
    if isinstance(batch, PutLines):
        return batch.keys
    keys = []
    for change in batch:  # anything else is refused by the planner, in order
        key = change.record.key if isinstance(change, Put) else getattr(change, "key", None)
        if isinstance(key, str):
            keys.append(key)
    return keys


def _lookup(
    conn: sqlite3.Connection, dataset_id: int, keys: list[str], cond: str, value: int
) -> dict[str, LiveRevision]:
    """The revisions of ``keys`` matching ``cond`` (one per key), with their from_seq."""
    out: dict[str, LiveRevision] = {}
    for i in range(0, len(keys), 500):
        chunk = keys[i : i + 500]
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(
            f"SELECT {RECORD_COLS}, from_seq FROM records WHERE dataset_id = ? AND key IN ({marks}) AND {cond}",
            (dataset_id, *chunk, value),
        ):
            out[row[0]] = LiveRevision(record_of_row(row[:7]), row[7])
    return out
