"""Fill the directory table (``sqlite_dirs``) of a dataset committed before it existed.

Why a pass of its own: a catalog made before schema version 4 has no ``dirs`` rows, and its
datasets list the old way (``datasets.dirs = 0``) until this has run. It reads the dataset's
records once, in key order (the table's own order: a directory's subtree is one run of
keys), keeping a stack of the directories that hold the current key. A directory's live
versions are the union of its entries' intervals (a file's ``[from_seq, to_seq)``, a
subdirectory's own union), so a directory's rows are known when the run of its keys ends.

- **Resumable**: every ``CHECKPOINT_ROWS`` rows one write transaction stores the finished
  directories' rows with the cursor (the last key read whole) and the stack, so a pass
  killed halfway goes on from there.
- **Nothing half-written**: listings and commits use the table only once the dataset's
  ``dirs`` flag is 1, set in the transaction that writes the last rows. A commit to the
  dataset during the pass (its head moved) makes the pass start that dataset over: the
  commit did not keep the half-filled table.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from datahub.catalog.revisions import OPEN
from datahub.catalog.sqlite_commit import head_seq, write_transaction
from datahub.catalog.sqlite_dirs import parent_of

CHECKPOINT_ROWS = 200_000  # records read between two checkpoints
MERGE_AT = 64  # a directory's distinct intervals merged when it holds more

# (dataset, rows read so far, rows the dataset's versions wrote in all: an estimate)
Progress = Callable[[str, int, int], None]


@dataclass(slots=True)
class _Frame:
    """A directory on the stack: its path, the intervals of its entries so far, and how many
    of its entries are live at the head."""

    path: str
    intervals: set[tuple[int, int]] = field(default_factory=set)
    live: int = 0

    def merged(self) -> list[tuple[int, int]]:
        """The intervals as disjoint ones, in order (touching ones joined: live throughout)."""
        out: list[list[int]] = []
        for start, end in sorted(self.intervals):
            if out and start <= out[-1][1]:
                out[-1][1] = max(out[-1][1], end)
            else:
                out.append([start, end])
        return [(a, b) for a, b in out]


def backfill(
    conn: sqlite3.Connection,
    dataset_id: int,
    dataset: str,
    *,
    progress: Progress | None = None,
    checkpoint_rows: int = CHECKPOINT_ROWS,
) -> bool:
    """Fill the directory table of one dataset and mark it complete; False when a commit to
    the dataset made the pass start over (the caller runs it again). Resumes a killed pass."""
    with write_transaction(conn):
        if conn.execute("SELECT dirs FROM datasets WHERE id = ?", (dataset_id,)).fetchone()[0]:
            return True  # done already (a new dataset's commits keep it)
        head = head_seq(conn, dataset_id)
        saved = conn.execute(
            "SELECT head, cursor, stack, rows_done FROM dirs_backfill WHERE dataset_id = ?", (dataset_id,)
        ).fetchone()
        if saved is None or saved[0] != head:  # a fresh pass (or one a commit made stale)
            conn.execute("DELETE FROM dirs WHERE dataset_id = ?", (dataset_id,))
            conn.execute(
                "INSERT OR REPLACE INTO dirs_backfill (dataset_id, head, cursor, stack, rows_done)"
                " VALUES (?, ?, '', '[]', 0)",
                (dataset_id, head),
            )
            cursor, stack, done = "", [], 0
        else:
            cursor, stack, done = saved[1], _load_stack(saved[2]), saved[3]
    total = conn.execute(
        "SELECT coalesce(SUM(added + modified), 0) FROM versions WHERE dataset_id = ?", (dataset_id,)
    ).fetchone()[0]

    def complete(finished: list[tuple]) -> bool:
        with write_transaction(conn):
            if not _still(conn, dataset_id, head):
                return False
            _write(conn, finished)
            conn.execute("DELETE FROM dirs_backfill WHERE dataset_id = ?", (dataset_id,))
            conn.execute("UPDATE datasets SET dirs = 1 WHERE id = ?", (dataset_id,))
        return True

    return run_pass(
        dataset,
        walk_from=lambda finished: walk(
            _rows(conn, dataset_id, cursor), stack, finished, dataset_id, done, checkpoint_rows
        ),
        checkpoint=lambda key, rows_done, finished: _checkpoint(
            conn, dataset_id, head, key, stack, rows_done, finished
        ),
        complete=complete,
        start=done,
        total=total,
        progress=progress,
    )


def run_pass(
    dataset: str,
    *,
    walk_from: Callable[[list[tuple]], Iterator[tuple[str | None, int]]],
    checkpoint: Callable[[str, int, list[tuple]], bool],
    complete: Callable[[list[tuple]], bool],
    start: int,
    total: int,
    progress: Progress | None,
) -> bool:
    """One backfill pass with its checkpoints and progress, for both stores' tables:
    ``walk_from(finished)`` is :func:`walk` over the store's rows; ``checkpoint(key, done,
    finished)`` stores a checkpoint and ``complete(finished)`` the last rows and the flag,
    each False when a commit made the pass stale (it then starts over)."""
    done = start
    if progress is not None:  # where this run starts (a resumed pass: past 0)
        progress(dataset, done, total)
    finished: list[tuple] = []
    for key, done in walk_from(finished):
        if key is None:  # the end: every directory finished
            break
        if not checkpoint(key, done, finished):
            return False
        finished.clear()
        if progress is not None:
            progress(dataset, done, total)
    if not complete(finished):
        return False
    if progress is not None:
        progress(dataset, done, total)
    return True


def walk(
    rows: Iterable[tuple[str, int, int]],
    stack: list[_Frame],
    finished: list[tuple],
    dataset_id: Any,
    done: int,
    checkpoint_rows: int,
) -> Iterator[tuple[str | None, int]]:
    """The pass itself (shared with ``mongo_dirs_backfill``): over ``rows``, a dataset's
    revisions ``(key, from_seq, to_seq)`` in key order, from ``stack``, appending finished
    directories' rows to ``finished``. Every ``checkpoint_rows`` revisions, between two keys,
    it yields (the last key read whole, revisions read so far): the caller stores ``finished``
    and the stack, and clears ``finished``. At the end it finishes the stack and yields
    ``(None, revisions read)``."""
    since, previous = 0, None
    for key, from_seq, to_seq in rows:
        if key != previous:
            if since >= checkpoint_rows and previous is not None:  # between two keys: all of one read
                yield previous, done
                since = 0
            previous = key
            parent = parent_of(key)
            if not stack or stack[-1].path != parent:
                _enter(stack, parent, finished, dataset_id)
        if stack:  # a key in the root counts in no directory
            top = stack[-1]
            top.intervals.add((from_seq, to_seq))
            top.live += to_seq == OPEN
            if len(top.intervals) > MERGE_AT:
                top.intervals = set(top.merged())
        done += 1
        since += 1
    while stack:
        _finish(stack, finished, dataset_id)
    yield None, done


def backfill_all(conn: sqlite3.Connection, *, progress: Progress | None = None) -> list[str]:
    """Fill the directory table of every dataset that has none yet (in name order); a pass
    that a commit made stale is run again. Returns the datasets filled."""
    filled = []
    for dataset_id, name in conn.execute(
        "SELECT id, name FROM datasets WHERE dirs = 0 ORDER BY name"
    ).fetchall():
        while not backfill(conn, dataset_id, name, progress=progress):
            pass  # a commit landed during the pass: over again on the new head
        filled.append(name)
    return filled


_READ_ROWS = 20_000  # rows per read (no statement stays open across a checkpoint's transaction)


def _rows(conn: sqlite3.Connection, dataset_id: int, cursor: str) -> Iterator[tuple[str, int, int]]:
    """Every revision of the dataset above key ``cursor``, in (key, from_seq) order."""
    after = (cursor, OPEN)  # past every revision of the cursor's key
    while True:
        rows = conn.execute(
            "SELECT key, from_seq, to_seq FROM records WHERE dataset_id = ? AND (key, from_seq) > (?, ?)"
            " ORDER BY key, from_seq LIMIT ?",
            (dataset_id, *after, _READ_ROWS),
        ).fetchall()
        yield from rows
        if len(rows) < _READ_ROWS:
            return
        after = rows[-1][:2]


def _enter(stack: list[_Frame], parent: str, finished: list[tuple], dataset_id: Any) -> None:
    """Make ``parent`` the top of the stack: finish the directories the keys have left, open
    the ones between the deepest still holding them and ``parent``."""
    while stack and not parent.startswith(stack[-1].path):
        _finish(stack, finished, dataset_id)
    start = len(stack[-1].path) if stack else 0
    while start < len(parent):
        end = parent.index("/", start) + 1
        stack.append(_Frame(parent[:end]))
        start = end


def _finish(stack: list[_Frame], finished: list[tuple], dataset_id: Any) -> None:
    """Pop the top directory: its rows are final; its intervals count in its parent's."""
    frame = stack.pop()
    merged = frame.merged()
    parent = parent_of(frame.path)
    finished.extend(
        (dataset_id, parent, frame.path, start, end, frame.live if end == OPEN else 0)
        for start, end in merged
    )
    if stack:
        stack[-1].intervals.update(merged)
        stack[-1].live += bool(merged) and merged[-1][1] == OPEN


def _write(conn: sqlite3.Connection, finished: list[tuple]) -> None:
    conn.executemany(
        "INSERT INTO dirs (dataset_id, parent, path, from_seq, to_seq, live) VALUES (?, ?, ?, ?, ?, ?)",
        finished,
    )


def _still(conn: sqlite3.Connection, dataset_id: int, head: int) -> bool:
    """Whether this pass may go on: its progress row is there and no commit moved the head."""
    row = conn.execute("SELECT head FROM dirs_backfill WHERE dataset_id = ?", (dataset_id,)).fetchone()
    return row is not None and row[0] == head == head_seq(conn, dataset_id)


def _checkpoint(
    conn: sqlite3.Connection,
    dataset_id: int,
    head: int,
    cursor: str,
    stack: list[_Frame],
    done: int,
    finished: list[tuple],
) -> bool:
    """Store the finished rows with where the pass is, in one transaction; False if stale."""
    with write_transaction(conn):
        if not _still(conn, dataset_id, head):
            return False
        _write(conn, finished)
        conn.execute(
            "UPDATE dirs_backfill SET cursor = ?, stack = ?, rows_done = ? WHERE dataset_id = ?",
            (cursor, _dump_stack(stack), done, dataset_id),
        )
    return True


def _dump_stack(stack: list[_Frame]) -> str:
    return json.dumps([[f.path, f.merged(), f.live] for f in stack], separators=(",", ":"))


def _load_stack(text: str) -> list[_Frame]:
    return [_Frame(path, {(a, b) for a, b in intervals}, live) for path, intervals, live in json.loads(text)]
