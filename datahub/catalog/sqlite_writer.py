"""A SQLite commit's new revisions, inserted by a second thread while the caller's thread
reads, checks and plans the next batch.

Why: a large commit is CPU-bound in one thread, and SQLite's own inserts are about half of
the catalog's share of it (issue 38 item 3). ``executemany`` cannot run beside the Python
work: it takes the GIL back for every row it binds, and a thread waiting for the GIL waits a
switch interval (5 ms) while the other computes, so a writer thread fed by the planning
thread saved nothing (measured, docs/benchmarks.md). Here a whole batch is one statement,
``INSERT … SELECT … FROM json_each(?)`` over the batch's rows encoded as one JSON array by
the C encoder, so SQLite decodes and inserts the 2,000 rows inside one ``sqlite3_step``,
with the GIL released for all of it, on the other core.

What stays the same: the rows (``_rows``: the same values, type for type, that
``executemany`` bound; tests compare the two), the one transaction (the thread runs on the
commit's own connection, inside its ``BEGIN IMMEDIATE``; the caller stops it before the
``COMMIT`` or the rollback), and the errors (an error of the thread's statement is raised
again in the caller's thread, at its next write or ``flush``). The caller flushes before any
other statement on the connection (lookups, closes, the version row), so every statement
sees the rows inserted before it.

A chunk of checked put lines (``write_lines``) is inserted by C where the module is built and
the connection's handle checks out (``put_rows``: it cuts the lines into fields and binds them,
GIL released), else by one ``INSERT … SELECT json_extract(…) FROM json_each(?)`` over the text.

Two kinds of batch are bound row by row instead, in the caller's thread: a batch whose text
holds ``\\u0000`` (SQLite's JSON functions cut a string at an escaped NUL) and one over
``MAX_QUEUED_CHARS`` (to bound the memory of batches in flight, ~3 texts of at most that).
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from operator import attrgetter

from datahub.catalog.model import Record
from datahub.catalog.put_lines import PutLines
from datahub.catalog.put_rows import inserter
from datahub.catalog.sqlite_schema import dump_json_column

MAX_QUEUED_CHARS = 8 << 20  # a batch text larger than this is written at once, not queued

_COLUMNS = attrgetter("key", "url", "etag", "size", "checksum")
_META, _LABELS = attrgetter("meta"), attrgetter("labels")


def _refuse(o: object) -> object:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


# Strings as they are (no \\uXXXX for non-ASCII: SQLite decodes those to the same text, but a
# lone surrogate must fail at binding, as executemany's does); rows are str/int/None only.
_ENCODE = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _refuse, json.encoder.encode_basestring, None, ":", ",", False, False, True
)


def _rows(records: list[Record]) -> Iterator[tuple]:
    """The records' rows as the insert binds them, built column by column with C-level passes
    (one ``map`` per column, ``zip`` for the tuples): a 10^8-record commit builds 10^8 rows.
    meta/labels are compact sorted JSON text, NULL when empty (``dump_json``)."""
    metas = dump_json_column(list(map(_META, records)))
    labels = dump_json_column(list(map(_LABELS, records)))
    return map(tuple.__add__, map(_COLUMNS, records), zip(metas, labels, strict=True))


def insert_sql(dataset_id: int, new: int, to_seq: int) -> tuple[str, str]:
    """The two statements that insert revisions ``[new, to_seq)`` of a dataset: one row bound
    at a time (``executemany``), and a batch's rows from one JSON array (``json_each``).
    dataset_id, from_seq and to_seq are integers written into the SQL, the same for every row."""
    head = (
        "INSERT OR REPLACE INTO records"
        " (dataset_id, from_seq, to_seq, key, url, etag, size, checksum, meta, labels)"
    )
    constants = f"{int(dataset_id)}, {int(new)}, {int(to_seq)}"
    by_row = f"{head} VALUES ({constants}, ?, ?, ?, ?, nullif(?, ''), ?, ?)"
    # json_extract rather than ``->>`` (SQLite 3.38+): the JSON functions the listings use already
    item = [f"json_extract(value, '$[{i}]')" for i in range(7)]
    item[4] = f"nullif({item[4]}, '')"
    by_batch = f"{head} SELECT {constants}, {', '.join(item)} FROM json_each(?)"
    return by_row, by_batch


def lines_sql(dataset_id: int, new: int, to_seq: int) -> str:
    """The statement that inserts a ``PutLines`` chunk (its lines as one JSON array) as
    revisions ``[new, to_seq)``: the columns read from each line's ``record`` (checksum NULL,
    absent meta/labels NULL: what the row of the same ``Put`` holds)."""
    fields = ", ".join(f"json_extract(value, '$.record.{f}')" for f in ("key", "url", "etag", "size"))
    extra = ", ".join(f"json_extract(value, '$.record.{f}')" for f in ("meta", "labels"))
    return (
        "INSERT OR REPLACE INTO records"
        " (dataset_id, from_seq, to_seq, key, url, etag, size, checksum, meta, labels)"
        f" SELECT {int(dataset_id)}, {int(new)}, {int(to_seq)}, {fields}, NULL, {extra} FROM json_each(?)"
    )


class RowWriter:
    """Inserts batches of new revisions on a second thread (see the module's doc).

    Use as a context manager around the commit's batches: leaving it waits for the thread
    and raises its error, if any; leaving it on an exception discards what is still queued
    (the transaction is about to be rolled back)."""

    def __init__(self, conn: sqlite3.Connection, dataset_id: int, new: int, to_seq: int) -> None:
        self._conn = conn
        self._by_row, self._by_batch = insert_sql(dataset_id, new, to_seq)
        self._by_lines = lines_sql(dataset_id, new, to_seq)
        self._in_c = inserter(conn, dataset_id, new, to_seq)  # None: C cannot be used (put_rows)
        self._queue: queue.Queue[tuple[Callable[[str], object], str] | None] = queue.Queue(maxsize=2)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> None:
        if self._thread is None:
            return
        if kind is not None:  # abandon the rest: drop what is queued, let the running statement end
            self._discard = True
        self._queue.put(None)
        self._thread.join()
        self._thread = None
        if kind is None:
            self._raise()

    _discard = False

    def write(self, records: list[Record]) -> None:
        """Insert ``records`` (queued: inserted by the thread unless the batch is bound row by row)."""
        self._raise()
        rows = list(_rows(records))
        text = "".join(_ENCODE(rows, 0)) if _ENCODE else None
        if text is None or len(text) > MAX_QUEUED_CHARS or "\\u0000" in text:
            self.flush()
            self._conn.executemany(self._by_row, rows)
            return
        self._queue_statement(self._batch, text)

    def write_lines(self, lines: PutLines) -> None:
        """Insert a chunk of checked put lines as they are (no Python object per record: C
        cuts the lines into the rows, ``put_rows``, or SQLite reads them from the lines' JSON)."""
        self._raise()
        if len(lines.text) > MAX_QUEUED_CHARS:
            self.flush()
            self._lines(lines.text)
            return
        self._queue_statement(self._lines, lines.text)

    def _batch(self, text: str) -> None:
        self._conn.execute(self._by_batch, (text,))

    def _lines(self, text: str) -> None:
        if self._in_c is None or self._in_c(text) is None:  # None: not taken, nothing inserted
            self._conn.execute(self._by_lines, (text,))

    def _queue_statement(self, insert: Callable[[str], object], text: str) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="catalog-commit-rows", daemon=True)
            self._thread.start()
        self._queue.put((insert, text))

    def flush(self) -> None:
        """Wait until every queued batch is inserted (before any other statement on the
        connection), raising the thread's error if one failed."""
        if self._thread is not None:
            self._queue.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self._discard = True  # nothing after a failed batch may be written
            raise error

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is None and not self._discard:
                    item[0](item[1])
            except BaseException as exc:  # handed to the caller's thread, raised there
                self._error = exc
            finally:
                self._queue.task_done()
