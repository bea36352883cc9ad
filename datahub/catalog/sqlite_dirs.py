"""The SQLite catalog's directory table: every directory of a dataset with the versions it is
live in, kept by each commit, so a listing steps from subdirectory to subdirectory.

Why (issue 38, docs/catalog.md "Directories"): ``records`` is clustered by key, and an old
version's directory level lies among the rows of every later version. Listing the root of
version 1 of a 10^8-record dataset stepped over the 3.2x10^6 rows that later versions added
under ``s100/`` … ``s111/`` (keys between v1's ``s10/`` and ``s11/``): 504 MB read for one
``ls``. With this table a listing reads, per directory level, the subdirectories any
version ever had there (one row per live interval) and, between two of them, only that
level's own files: never the rows of another subtree.

The table (``dirs``): one row per directory path and live interval ``[from_seq, to_seq)``,
as records have, keyed ``(dataset_id, parent, path, from_seq)`` so the subdirectories of one
directory are one range. ``live`` is the count of the directory's live entries (files and
subdirectories) at the head, kept on the open row (``to_seq = OPEN``) only: when a commit
takes it to 0 the interval ends at the new version (or the row goes, if this commit made
it), and when a later change brings the directory back the interval reopens. The root has
no row. A dataset uses the table only when ``datasets.dirs`` is 1: new datasets, and old
ones once ``sqlite_dirs_backfill`` has filled it; any other dataset lists as before.
"""

from __future__ import annotations

import json
import logging
import operator
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from datahub.catalog.revisions import OPEN
from datahub.catalog.store import Gap, past_subtree, prefix_end
from datahub.errors import StorageError

log = logging.getLogger(__name__)

# distinct directories a commit accumulates counts for before it writes them (a flush of
# the row writer's queue each time: rarely, so a large commit's inserts keep their thread)
PENDING_DIRECTORIES = 20_000


def parent_of(path: str) -> str:
    """The directory holding ``path`` (a key, or a directory ending in ``/``): ``""`` for the root."""
    cut = path.rfind("/", 0, len(path) - 1)
    return path[: cut + 1]


def count_parents(keys: list[str], sign: int, into: Counter[str], *, ascending: bool = False) -> None:
    """Add ``sign`` per key to the count of the directory holding it (the root excluded).

    Keys the caller knows to be ascending (a first version's batches in key order, checked
    by the planner) that all lie in one directory, what a large commit's batches mostly
    are, are counted as a whole: every key between two with the same parent shares it, and
    is in that directory itself when no key holds a deeper ``/`` (one C-level count over
    the joined keys). Checking the order here again cost 0.5 ms per 2,000 keys."""
    if not keys:
        return
    first = parent_of(keys[0])
    one_level = ascending and first and first == parent_of(keys[-1])
    if one_level and "".join(keys).count("/") == first.count("/") * len(keys):
        into[first] += sign * len(keys)
        return
    for parent, n in Counter(map(parent_of, keys)).items():
        if parent:
            into[parent] += sign * n


def indexed(conn: sqlite3.Connection, dataset_id: int) -> bool:
    """Whether the dataset's directory table is complete (kept by commits, read by listings)."""
    row = conn.execute("SELECT dirs FROM datasets WHERE id = ?", (dataset_id,)).fetchone()
    return bool(row and row[0])


class PendingCounts:
    """A commit's per-directory deltas, batch by batch, until its store resolves them: shared
    by SQLite's table (``DirectoryCounts``) and MongoDB's (``mongo_dirs.StagedDirectories``).

    ``add(appeared, vanished)`` per planned batch (keys that became live or stopped being
    live at the head); ``pending()`` says when the store should resolve them (bounded
    memory); ``_resolve`` hands them over a directory level at a time, deepest first."""

    def __init__(self) -> None:
        self._deltas: Counter[str] = Counter()

    def add(self, appeared: list[str], vanished: list[str], *, ascending: bool = False) -> None:
        """Count a batch's keys (``ascending``: the caller checked that ``appeared`` is)."""
        count_parents(appeared, 1, self._deltas, ascending=ascending)
        count_parents(vanished, -1, self._deltas)

    def pending(self) -> bool:
        return len(self._deltas) >= PENDING_DIRECTORIES

    def _resolve(self, apply_level: Callable[[dict[str, int]], dict[str, int]]) -> None:
        """Take the accumulated deltas and apply them deepest directories first:
        ``apply_level(deltas of one level)`` returns per directory +1/-1 when it appeared or
        emptied (else 0), which adds or takes one entry of its parent, applied in the same pass."""
        deltas, self._deltas = self._deltas, Counter()
        by_depth: dict[int, dict[str, int]] = {}
        for path, delta in deltas.items():
            if delta:
                by_depth.setdefault(path.count("/"), {})[path] = delta
        while by_depth:
            depth = max(by_depth)
            for path, change in apply_level(by_depth.pop(depth)).items():
                parent = parent_of(path)
                if change and parent:
                    level = by_depth.setdefault(depth - 1, {})
                    level[parent] = level.get(parent, 0) + change


class DirectoryCounts(PendingCounts):
    """A commit's changes to its dataset's directory table, inside the commit's transaction:
    ``write`` applies the net counts when ``pending()`` and at the end (the caller flushes its
    queued inserts first: one statement at a time)."""

    def __init__(self, conn: sqlite3.Connection, dataset_id: int, new: int) -> None:
        super().__init__()
        self._conn, self._dataset_id, self._new = conn, dataset_id, new

    def write(self) -> bool:
        """Apply the accumulated counts; False (the table given up, see ``_give_up``) when
        they do not fit the table."""
        try:
            self._write()
        except _Inconsistent as exc:
            self._give_up(str(exc))
            return False
        return True

    def _give_up(self, why: str) -> None:
        """A table whose counts do not fit the records (a defect, or rows edited by hand) must
        neither fail every commit nor answer listings: the dataset goes back to the listing
        without it, in this commit's transaction, and ``datahub migrate`` fills it again."""
        log.warning(
            "dataset id %d: its directory table does not match its records (%s); the dataset lists "
            "without it until `datahub migrate` fills it again",
            self._dataset_id,
            why,
        )
        self._conn.execute("UPDATE datasets SET dirs = 0 WHERE id = ?", (self._dataset_id,))
        self._conn.execute("DELETE FROM dirs WHERE dataset_id = ?", (self._dataset_id,))
        self._deltas.clear()

    def _write(self) -> None:
        """Apply the accumulated counts, a row at a time, deepest directories first."""
        self._resolve(lambda level: {path: self._apply(path, delta) for path, delta in level.items()})

    def _apply(self, path: str, delta: int) -> int:
        """Add ``delta`` to the live entries of ``path``; +1/-1 when it appeared/emptied, else 0."""
        if not delta:
            return 0
        conn, ds, new, parent = self._conn, self._dataset_id, self._new, parent_of(path)
        row = conn.execute(
            "SELECT from_seq, live FROM dirs WHERE dataset_id = ? AND parent = ? AND path = ? AND to_seq = ?",
            (ds, parent, path, OPEN),
        ).fetchone()
        if row is not None:
            from_seq, live = row
            live += delta
            if live < 0:
                raise _Inconsistent(f"directory {path!r}: more entries removed than it held")
            if live:
                conn.execute(
                    "UPDATE dirs SET live = ? WHERE dataset_id = ? AND parent = ? AND path = ? AND from_seq = ?",
                    (live, ds, parent, path, from_seq),
                )
                return 0
            if from_seq == new:  # made by this commit and emptied again: never live
                conn.execute(
                    "DELETE FROM dirs WHERE dataset_id = ? AND parent = ? AND path = ? AND from_seq = ?",
                    (ds, parent, path, new),
                )
            else:
                conn.execute(
                    "UPDATE dirs SET to_seq = ?, live = 0"
                    " WHERE dataset_id = ? AND parent = ? AND path = ? AND from_seq = ?",
                    (new, ds, parent, path, from_seq),
                )
            return -1
        if delta < 0:
            raise _Inconsistent(f"directory {path!r}: entries removed from a directory not live at the head")
        # emptied earlier in this commit (its interval ended at ``new``): the same interval goes on
        reopened = conn.execute(
            "UPDATE dirs SET to_seq = ?, live = ? WHERE dataset_id = ? AND parent = ? AND path = ? AND to_seq = ?",
            (OPEN, delta, ds, parent, path, new),
        ).rowcount
        if not reopened:
            conn.execute(
                "INSERT INTO dirs (dataset_id, parent, path, from_seq, to_seq, live) VALUES (?, ?, ?, ?, ?, ?)",
                (ds, parent, path, new, OPEN, delta),
            )
        return 1


class _Inconsistent(Exception):
    """The table's counts do not fit the commit's changes."""


def subdirectories(
    conn: sqlite3.Connection, dataset_id: int, seq: int, prefix: str, after: str, limit: int
) -> list[tuple[str, bool]]:
    """The subdirectories of ``prefix`` above ``after`` that any version had, in order, each
    once with whether it is live in ``seq``: at most ``limit`` of them."""
    return [
        (path, bool(live))
        for path, live in conn.execute(
            "SELECT path, MAX(from_seq <= ? AND to_seq > ?) FROM dirs"
            " WHERE dataset_id = ? AND parent = ? AND path > ? GROUP BY path ORDER BY path LIMIT ?",
            (seq, seq, dataset_id, prefix, after, limit),
        )
    ]


PAST = "\U0010ffff"  # the greatest code point: a directory followed by it sorts after its subtree


def gap_pages(
    find: Callable[[list[Gap], int], list[Any]],
    key_of: Callable[[Any], str],
    gaps: list[Gap],
    limit: int | None,
    page: int,
) -> Iterator[list[Any]]:
    """The live rows of a version in the gaps of one directory level, in key order, a list
    per page of at most ``page``, at most ``limit`` in all: ``find(gaps, n)`` is ONE query
    (SQLite ``sqlite_gap_rows``, MongoDB ``mongo_dirs``) for the first ``n`` rows of all of
    ``gaps``, and the next page starts after the last key read, in the gap that holds it.

    Why one query for all of a page's gaps: a level has a gap per subdirectory it ever had,
    and on MongoDB each query is a round trip (on SQLite a statement: ~15 µs each); the
    ranges of one query examine the same index entries as a query per gap."""
    while gaps and (limit is None or limit > 0):
        want = page if limit is None else min(page, limit)
        rows = find(gaps, want)
        if rows:
            yield rows
        if len(rows) < want:
            return
        if limit is not None:
            limit -= len(rows)
        last = key_of(rows[-1])
        gaps = [(max(after, last), before) for after, before in gaps if before is None or before > last]


def gap_bounds(prefix: str, gaps: list[Gap]) -> list[tuple[str, str | None]]:
    r"""Each gap of the level ``prefix`` as ``[low, high)`` (high None: no bound), in short
    strings. Past a subtree (the directory followed by U+10FFFF, ``store.past_subtree``: about
    1 KiB) is ``>= prefix_end(directory)``, its equal for keys; after a cursor ``c`` is ``>=
    c + "\x01"``, its equal for keys (they hold no control character)."""
    bounds: list[tuple[str, str | None]] = []
    end = prefix_end(prefix) if prefix else None
    for after, before in gaps:
        skipped = after.rstrip(PAST)
        # a subdirectory's cursor, never the level's own: a file of the level named all U+10FFFF
        # (``prefix`` + U+10FFFF) strips to ``prefix``, and skipping that skipped the rest of
        # the level (review36)
        if len(skipped) < len(after) and skipped.endswith("/") and skipped != prefix:
            low = prefix_end(skipped)
        else:
            low = after + "\x01" if after else ""
        bounds.append((max(low, prefix), end if before is None else before))
    return bounds


# the live rows of a version in a list of key ranges, one range of the primary key per
# range, in the list's order (CROSS JOIN: json_each is the outer loop)
_GAPS_SQL = (
    "SELECT {columns} FROM (SELECT json_extract(value, '$[0]') AS low, json_extract(value, '$[1]') AS high"
    " FROM json_each(?)) AS g CROSS JOIN records"
    " WHERE records.dataset_id = ? AND records.key >= g.low AND records.key < g.high"
    " AND records.from_seq <= ? AND records.to_seq > ? LIMIT ?"
)
_ABOVE_ALL = past_subtree("")  # above every key: the root's last gap


def sqlite_gap_rows(
    query: Callable[[str, tuple], list[tuple]], columns: str, dataset_id: int, seq: int, prefix: str
) -> Callable[[list[Gap], int], list[tuple]]:
    """``gap_pages``'s ``find`` on SQLite: one statement for all the gaps, the ranges sent as
    one JSON array. Its rows come range after range, each range in key order; they are
    checked to rise (a plan that did not keep that order is an error, never a wrong page)."""
    sql = _GAPS_SQL.format(columns=columns)

    def find(gaps: list[Gap], n: int) -> list[tuple]:
        ranges = [[low, _ABOVE_ALL if high is None else high] for low, high in gap_bounds(prefix, gaps)]
        rows = query(sql, (json.dumps(ranges, ensure_ascii=False), dataset_id, seq, seq, n))
        keys = [row[0] for row in rows]
        if not all(map(operator.lt, keys, keys[1:])):
            raise StorageError(f"the directory {prefix!r} was read out of key order (SQLite's plan)")
        return rows

    return find
