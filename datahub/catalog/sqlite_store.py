"""SQLiteCatalogStore: the embedded default catalog, one file in WAL mode.

Why it is shaped this way:

- WAL lets readers keep reading committed versions while a commit's transaction is open;
  each thread gets its own connection, and ``busy_timeout`` makes a second writer wait for
  the first instead of failing at once.
- ``records`` is a WITHOUT ROWID table clustered on (dataset, key, from_seq), so listing a
  version is one ordered range scan; pages are fetched by keyset (``key > last``), never
  OFFSET, and no page query stays open between pages.
- A commit is ONE ``BEGIN IMMEDIATE`` transaction (``sqlite_commit.py``), so an error at
  change N — a bad key, a stale base, the caller's generator raising — rolls back everything.
- Two partial/secondary indexes serve diff: revisions that began in a range (from_seq) and
  revisions that ended in a range (to_seq, closed ones only).
- Memory stays bounded whatever the change set: batches of ``batch_size`` changes, each
  connection's page cache capped at ``cache_mib`` (the OS page cache holds the rest of the
  file and does not count against the process), and a commit's connection hands its cache
  back when the commit ends, so concurrent commits on several API threads do not each keep
  one filled (issue 12 item 3: a 59 MB commit body in <= 3x its size of server RSS).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import operator
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from datahub.catalog.filter import RecordFilter
from datahub.catalog.leases import (
    LIST_PAGE,
    PRUNE_LAPSED,
    Lease,
    LeaseChange,
    check_page,
    check_prune,
    prunable,
)
from datahub.catalog.model import (
    BrowserSession,
    Change,
    Dataset,
    DiffEntry,
    DirFile,
    Record,
    TokenInfo,
    Version,
)
from datahub.catalog.record_json import record_json
from datahub.catalog.revisions import OPEN, merge_diff
from datahub.catalog.sqlite_commit import head_seq, write_transaction, write_version
from datahub.catalog.sqlite_dirs import gap_pages, indexed, sqlite_gap_rows, subdirectories
from datahub.catalog.sqlite_dirs_backfill import Progress, backfill_all
from datahub.catalog.sqlite_gate import RETRY_AFTER_SECONDS, CommitGate
from datahub.catalog.sqlite_leases import LeaseFile
from datahub.catalog.sqlite_read_ahead import READ_AHEAD_THREADS, LeafReadAhead
from datahub.catalog.sqlite_schema import (
    DATASET_COLS,
    DIR_FILE_COLS,
    RECORD_COLS,
    RECORD_JSON,
    VERSION_COLS,
    dump_json,
    ensure_schema,
    load_json,
    prefix_bounds,
    record_of_row,
)
from datahub.catalog.store import (
    CatalogStore,
    Gap,
    GapFiles,
    Subdirectories,
    diff_page,
    narrowed,
    page_hint,
    prefix_below,
    revision_mismatch,
)
from datahub.errors import (
    AlreadyExists,
    Busy,
    DatasetNotFound,
    NoSpace,
    NotFound,
    RecordNotFound,
    StorageError,
    VersionNotFound,
)
from datahub.sqlite_pool import SQLiteConnections

_first, _second = operator.itemgetter(0), operator.itemgetter(1)


_MAX_REMEMBERED_IDS = 100_000
_SQLITE_FULL, _SQLITE_IOERR = 13, 10  # primary result codes (the low byte of an extended one)
_NEARLY_FULL_BYTES = 1 << 20
_FIRST_DIFF_PAGE = 64  # rows of a diff stream's first page (see _revisions)


class SQLiteCatalogStore(CatalogStore):
    """Catalog in one SQLite file. Thread-safe: one connection per thread."""

    takes_put_lines = True  # chunks of checked put lines are inserted from their text

    def __init__(
        self,
        path: str | Path,
        *,
        batch_size: int = 2000,
        page_size: int = 2000,
        cache_mib: int = 16,
        busy_timeout_ms: int = 30_000,
        commit_wait_s: float = 600.0,
        max_connections: int = 4,
        clock: Callable[[], float] = time.time,
        read_ahead_threads: int = READ_AHEAD_THREADS,
    ) -> None:
        """``commit_wait_s``: how long a commit waits for its turn behind others (see
        ``sqlite_gate``) before it is refused as busy, nothing written. ``read_ahead_threads``:
        reader threads that read a commit's next batch of pages ahead (``sqlite_read_ahead``;
        0: none, the commit reads each page when it needs it)."""
        self.path = Path(path)
        self.read_ahead_threads = read_ahead_threads
        self.batch_size, self.page_size = batch_size, page_size
        self.busy_timeout_ms = busy_timeout_ms
        self.clock = clock
        self._ids: dict[str, int] = {}  # dataset name -> row id (see _dataset_id)
        # FULL: a committed version must survive power loss, not only a crash (promise 1)
        self._db = SQLiteConnections(
            self.path,
            busy_timeout=busy_timeout_ms / 1000,
            synchronous="FULL",
            pragmas=(
                f"cache_size = -{cache_mib * 1024}",
                "temp_store = MEMORY",
                "journal_size_limit = 67108864",
            ),
            # a few connections serve any number of threads: reads in WAL run side by side, and
            # the page caches (cache_mib each) are bounded by this, not by the thread count
            max_connections=max_connections,
            max_idle=max_connections,
        )
        self._gate = CommitGate(f"{self.path}.commit-lock", max_wait=commit_wait_s, mode=self._db.mode)
        self._instance: str | None = None
        with self._translate(f"open catalog {self.path}"), self._db.connection() as conn:
            ensure_schema(conn)
        # writer leases in a file of their own: a renewal never waits behind a commit (sqlite_leases)
        self._leases = LeaseFile(self.path, busy_timeout=busy_timeout_ms / 1000, mode=self._db.mode)
        with self._translate(f"open the writer leases of catalog {self.path}"):
            self._leases.adopt(self._db.connection)

    # --- connections -------------------------------------------------------------------------
    def _conn(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A pooled connection for one block (a statement, a page, a commit): see sqlite_pool."""
        return self._db.connection()

    def close(self) -> None:
        self._db.close()
        self._leases.close()
        self._gate.close()

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        """Translate sqlite3 errors into datahub errors once, at this boundary."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if _out_of_space(exc, self.path):
                raise NoSpace(
                    f"{what}: the file system that holds {self.path} is full ({exc}); "
                    "nothing was written: free space there and run it again"
                ) from exc
            if "locked" in str(exc) or "busy" in str(exc):
                # not a conflict the caller caused: the file stayed locked by another writer
                raise Busy(
                    f"{what}: the catalog stayed busy (locked by another writer) past the timeout; "
                    f"nothing was written, retry in {RETRY_AFTER_SECONDS} s",
                    retry_after=RETRY_AFTER_SECONDS,
                ) from exc
            raise StorageError(f"{what}: SQLite error: {exc}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"{what}: SQLite error: {exc}") from exc

    def _query(self, what: str, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        with self._translate(what), self._conn() as conn:
            return conn.execute(sql, tuple(params)).fetchall()

    def _dataset_id(self, name: str) -> int:
        """The dataset's row id, remembered: datasets are never renamed or deleted, so an id read
        from a committed row stays right (a request would otherwise spend a query on it per
        store call, several per API request)."""
        known = self._ids.get(name)
        if known is not None:
            return known
        rows = self._query(f"find dataset {name!r}", "SELECT id FROM datasets WHERE name = ?", (name,))
        if rows:
            if len(self._ids) >= _MAX_REMEMBERED_IDS:
                self._ids.clear()
            self._ids[name] = rows[0][0]
        if not rows:
            raise DatasetNotFound(
                f"dataset {name!r} not found; create it first or check `datahub dataset list`",
                dataset=name,
            )
        return rows[0][0]

    # --- datasets -------------------------------------------------------------------------------
    def create_dataset(self, dataset: Dataset) -> Dataset:
        created = dataset.created_at or self.clock()
        try:
            with self._translate(f"create dataset {dataset.name!r}"), self._conn() as conn:
                conn.execute(
                    # dirs = 1: a new dataset's commits keep its directory table from the first
                    "INSERT INTO datasets (name, description, source, owner, acl, created_at, dirs)"
                    " VALUES (?, ?, ?, ?, ?, ?, 1)",
                    (
                        dataset.name,
                        dataset.description,
                        dataset.source,
                        dataset.owner,
                        dump_json(dict(dataset.acl)),
                        created,
                    ),
                )
        except StorageError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise AlreadyExists(
                    f"dataset {dataset.name!r} already exists; pick another name", dataset=dataset.name
                ) from exc
            raise
        return self.get_dataset(dataset.name)

    def _dataset(self, row: tuple) -> Dataset:
        name, description, source, owner, acl, created_at, revision, sources = row
        return Dataset(
            name, description, source, owner, load_json(acl), created_at, revision, tuple(load_json(sources))
        )

    def get_dataset(self, name: str) -> Dataset:
        rows = self._query(
            f"get dataset {name!r}",
            f"SELECT {DATASET_COLS} FROM datasets WHERE name = ?",
            (name,),
        )
        if not rows:
            raise DatasetNotFound(
                f"dataset {name!r} not found; create it first or check `datahub dataset list`",
                dataset=name,
            )
        return self._dataset(rows[0])

    def list_datasets(self) -> Iterator[Dataset]:
        rows = self._query(
            "list datasets",
            f"SELECT {DATASET_COLS} FROM datasets ORDER BY name",
        )
        return iter([self._dataset(r) for r in rows])

    def update_dataset(
        self, name: str, fields: Mapping[str, Any], *, expected_revision: int | None = None
    ) -> Dataset:
        """One ``UPDATE … RETURNING`` (its own transaction) of just ``fields``, so a racing
        update of other columns is never overwritten with what this caller read earlier."""
        values = {
            f: dump_json(_json_column(f, v)) if f in ("acl", "sources") else v for f, v in fields.items()
        }
        assignments = "".join(f"{column} = ?, " for column in values)  # names checked by Catalog
        where, params = "name = ?", [*values.values(), name]
        if expected_revision is not None:
            where, params = where + " AND revision = ?", [*params, expected_revision]
        with self._translate(f"update dataset {name!r}"), self._conn() as conn:
            row = conn.execute(
                f"UPDATE datasets SET {assignments}revision = revision + 1 WHERE {where} "
                f"RETURNING {DATASET_COLS}",
                params,
            ).fetchone()
        if row is None:
            # DatasetNotFound if it is not there at all
            raise revision_mismatch(self.get_dataset(name), expected_revision)
        return self._dataset(row)

    # --- versions -------------------------------------------------------------------------------
    def head(self, dataset: str) -> int:
        dataset_id = self._dataset_id(dataset)
        with self._translate(f"head of dataset {dataset!r}"), self._conn() as conn:
            return head_seq(conn, dataset_id)

    def _version(self, dataset: str, row: tuple, tags: tuple[str, ...]) -> Version:
        seq, parent, message, author, created, count, nbytes, added, removed, modified, lineage = row
        return Version(
            dataset, seq, parent, message, author, created, tags, count, nbytes, added, removed, modified,
            load_json(lineage),
        )  # fmt: skip

    def _tags_of(self, dataset_id: int, seq: int | None = None) -> dict[int, tuple[str, ...]]:
        sql = "SELECT seq, tag FROM tags WHERE dataset_id = ?" + (" AND seq = ?" if seq is not None else "")
        out: dict[int, list[str]] = {}
        for s, tag in self._query(
            "read tags", sql + " ORDER BY tag", (dataset_id,) + ((seq,) if seq else ())
        ):
            out.setdefault(s, []).append(tag)
        return {s: tuple(t) for s, t in out.items()}

    def get_version(self, dataset: str, seq: int) -> Version:
        dataset_id = self._dataset_id(dataset)
        rows = self._query(
            f"get version {dataset}@{seq}",
            f"SELECT {VERSION_COLS} FROM versions WHERE dataset_id = ? AND seq = ?",
            (dataset_id, seq),
        )
        if not rows:
            raise VersionNotFound(
                f"dataset {dataset!r} has no version {seq}; see `datahub log {dataset}`",
                dataset=dataset,
                version=seq,
            )
        return self._version(dataset, rows[0], self._tags_of(dataset_id, seq).get(seq, ()))

    def list_versions(self, dataset: str) -> Iterator[Version]:
        dataset_id = self._dataset_id(dataset)
        tags = self._tags_of(dataset_id)
        rows = self._query(
            f"list versions of {dataset!r}",
            f"SELECT {VERSION_COLS} FROM versions WHERE dataset_id = ? ORDER BY seq DESC",
            (dataset_id,),
        )
        return iter([self._version(dataset, r, tags.get(r[0], ())) for r in rows])

    def commit(
        self,
        dataset: str,
        base: int,
        changes: Iterable[Change],
        *,
        message: str = "",
        author: str = "",
        lineage: dict | None = None,
        commit_id: str | None = None,
    ) -> Version:
        dataset_id = self._dataset_id(dataset)
        what = f"commit to dataset {dataset!r}"
        # the turn first: a commit waiting for it holds no pooled connection
        read_ahead = LeafReadAhead(self.path, dataset_id, self.read_ahead_threads)
        try:
            with self._gate.turn(what), self._translate(what), self._conn() as conn, write_transaction(conn):
                seq = write_version(
                    conn, dataset_id, dataset, base, changes, message=message, author=author,
                    lineage=lineage, commit_id=commit_id, batch_size=self.batch_size, now=self.clock,
                    read_ahead=read_ahead if self.read_ahead_threads > 0 else None,
                )  # fmt: skip
                read_ahead.close()  # no reader of ours left when COMMIT checkpoints the WAL
        finally:
            read_ahead.close()
        return self.get_version(dataset, seq)

    def commit_turn(self, dataset: str) -> contextlib.AbstractContextManager[None]:
        return self._gate.turn(f"commit to dataset {dataset!r}")

    # --- tags -------------------------------------------------------------------------------------
    def set_tag(self, dataset: str, tag: str, seq: int) -> None:
        dataset_id = self._dataset_id(dataset)
        self.get_version(dataset, seq)
        with self._translate(f"tag {dataset}@{seq} as {tag!r}"), self._conn() as conn:
            conn.execute(
                "INSERT INTO tags (dataset_id, tag, seq) VALUES (?, ?, ?)"
                " ON CONFLICT (dataset_id, tag) DO UPDATE SET seq = excluded.seq",
                (dataset_id, tag, seq),
            )

    def delete_tag(self, dataset: str, tag: str) -> None:
        dataset_id = self._dataset_id(dataset)
        with self._translate(f"untag {tag!r} in {dataset!r}"), self._conn() as conn:
            cur = conn.execute("DELETE FROM tags WHERE dataset_id = ? AND tag = ?", (dataset_id, tag))
        if cur.rowcount == 0:
            raise NotFound(f"dataset {dataset!r} has no tag {tag!r}", dataset=dataset, tag=tag)

    def tag_target(self, dataset: str, tag: str) -> int:
        dataset_id = self._dataset_id(dataset)
        rows = self._query(
            "resolve tag", "SELECT seq FROM tags WHERE dataset_id = ? AND tag = ?", (dataset_id, tag)
        )
        if not rows:
            raise VersionNotFound(
                f"dataset {dataset!r} has no tag {tag!r}; see `datahub log {dataset}`",
                dataset=dataset,
                tag=tag,
            )
        return rows[0][0]

    # --- records ----------------------------------------------------------------------------------
    def list_records(
        self,
        dataset: str,
        seq: int,
        *,
        prefix: str = "",
        start_after: str = "",
        limit: int | None = None,
        where: RecordFilter | None = None,
    ) -> Iterator[Record]:
        dataset_id = self._dataset_id(dataset)
        self.get_version(dataset, seq)
        return self._list(dataset_id, seq, prefix, start_after, limit, where)

    def list_keys(self, dataset: str, seq: int) -> Iterator[str]:
        dataset_id = self._dataset_id(dataset)
        self.get_version(dataset, seq)
        pages = self._row_pages(dataset_id, seq, "", "", self.page_size, columns="key")
        return (row[0] for rows in pages for row in rows)

    def _list(
        self,
        dataset_id: int,
        seq: int,
        prefix: str,
        after: str,
        limit: int | None,
        where: RecordFilter | None,
    ) -> Iterator[Record]:
        return narrowed(
            self._pages(dataset_id, seq, prefix, after, page_hint(self.page_size, limit, where)), where, limit
        )

    def list_record_json(
        self, dataset: str, seq: int, *, prefix: str = "", start_after: str = "", limit: int | None = None
    ) -> Iterator[str]:
        """Written by SQLite itself from the stored row (see ``RECORD_JSON``): no Python
        object per column. A record whose meta/labels could nest too deep is NULL there and
        encoded from ``get_record``, which shows it as a direct read does."""
        dataset_id = self._dataset_id(dataset)
        self.get_version(dataset, seq)
        page = page_hint(self.page_size, limit, None)
        pages = self._row_pages(dataset_id, seq, prefix, start_after, page, f"key, {RECORD_JSON}")
        lines = itertools.chain.from_iterable(self._json_page(dataset, seq, rows) for rows in pages)
        return lines if limit is None else itertools.islice(lines, limit)

    def _directory_pages(
        self, dataset: str, seq: int
    ) -> Callable[[str, str, int | None], Iterator[list[DirFile]]]:
        """The DirFile columns selected by SQL (``DIR_FILE_COLS``: the mtime read out of the
        stored meta by SQLite), so a directory listing builds no Record and decodes no JSON."""
        dataset_id = self._dataset_id(dataset)
        self.get_version(dataset, seq)

        def pages(prefix: str, after: str, limit: int | None) -> Iterator[list[DirFile]]:
            page = page_hint(self.page_size, limit, None)
            return self._row_pages(dataset_id, seq, prefix, after, page, DIR_FILE_COLS)

        return pages

    def _directory_index(self, dataset: str, seq: int) -> tuple[Subdirectories, GapFiles] | None:
        """The directory table's two reads (``sqlite_dirs``), when the dataset's is complete."""
        dataset_id = self._dataset_id(dataset)
        self.get_version(dataset, seq)
        with self._translate(f"read dataset {dataset!r}"), self._conn() as conn:
            if not indexed(conn, dataset_id):
                return None

        def subdirs(prefix: str, after: str, limit: int) -> list[tuple[str, bool]]:
            with self._translate(f"list directory {prefix!r} of {dataset}@{seq}"), self._conn() as conn:
                return subdirectories(conn, dataset_id, seq, prefix, after, limit)

        def files(prefix: str, gaps: list[Gap], limit: int | None) -> Iterator[list[DirFile]]:
            page = page_hint(self.page_size, limit, None)
            query = functools.partial(self._query, f"list directory {prefix!r} of {dataset}@{seq}")
            find = sqlite_gap_rows(query, DIR_FILE_COLS, dataset_id, seq, prefix)
            return gap_pages(find, _first, gaps, limit, page)

        return subdirs, files

    def _json_page(self, dataset: str, seq: int, rows: list[tuple]) -> list[str]:
        lines = list(map(_second, rows))
        if None in lines:
            for i, line in enumerate(lines):
                if line is None:
                    lines[i] = record_json(self.get_record(dataset, seq, rows[i][0]))
        return lines

    def _pages(self, dataset_id: int, seq: int, prefix: str, after: str, page: int) -> Iterator[Record]:
        """Every record live in ``seq`` after ``after``, by keyset pages of ``page`` rows."""
        for rows in self._row_pages(dataset_id, seq, prefix, after, page):
            yield from map(record_of_row, rows)

    def _row_pages(
        self, dataset_id: int, seq: int, prefix: str, after: str, page: int, columns: str = RECORD_COLS
    ) -> Iterator[list[tuple]]:
        """The rows of ``_pages`` (``columns``, the key first), a list per page."""
        bound_sql, bounds = prefix_bounds(prefix)
        if prefix and after < prefix:
            # SQLite seeks the key index by ``key > after`` and filters by the prefix's bounds,
            # so ``after = ""`` scanned every key before the prefix (a prefix at the end of a
            # 10^6-record version: 300 ms). Any value in [after, prefix) selects the same rows.
            after = max(after, prefix_below(prefix))
        sql = (
            f"SELECT {columns} FROM records WHERE dataset_id = ? AND key > ?{bound_sql}"
            " AND from_seq <= ? AND to_seq > ? ORDER BY key LIMIT ?"
        )
        while True:
            rows = self._query("list records", sql, (dataset_id, after, *bounds, seq, seq, page))
            yield rows
            if len(rows) < page:
                return
            after = rows[-1][0]

    def get_record(self, dataset: str, seq: int, key: str) -> Record:
        dataset_id = self._dataset_id(dataset)
        self.get_version(dataset, seq)
        rows = self._query(
            "get record",
            f"SELECT {RECORD_COLS} FROM records WHERE dataset_id = ? AND key = ?"
            " AND from_seq <= ? AND to_seq > ?",
            (dataset_id, key, seq, seq),
        )
        if not rows:
            raise RecordNotFound(
                f"dataset {dataset!r} version {seq} has no record {key!r}",
                dataset=dataset,
                version=seq,
                key=key,
            )
        return record_of_row(rows[0])

    def get_records(self, dataset: str, seq: int, keys: list[str]) -> dict[str, Record]:
        dataset_id = self._dataset_id(dataset)
        self.get_version(dataset, seq)
        found: dict[str, Record] = {}
        with self._translate("look up records"), self._conn() as conn:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                rows = conn.execute(
                    f"SELECT {RECORD_COLS} FROM records WHERE dataset_id = ?"
                    f" AND key IN ({','.join('?' * len(chunk))}) AND from_seq <= ? AND to_seq > ?",
                    (dataset_id, *chunk, seq, seq),
                ).fetchall()
                found.update((row[0], record_of_row(row)) for row in rows)
        return found

    def diff(
        self, dataset: str, a: int, b: int, *, prefix: str = "", start_after: str = ""
    ) -> Iterator[DiffEntry]:
        dataset_id = self._dataset_id(dataset)
        for seq in (a, b):
            if seq:
                self.get_version(dataset, seq)
        if a >= b:
            raise ValueError("store diff needs a < b; the Catalog facade handles other orders")
        return self._diff(dataset_id, a, b, prefix, start_after)

    def _diff(self, dataset_id: int, a: int, b: int, prefix: str, start_after: str) -> Iterator[DiffEntry]:
        if a == 0:  # from the empty state every record live at b is added: b's listing
            page = page_hint(self.page_size, None, None)
            return (
                DiffEntry("added", r.key, None, r)
                for r in self._pages(dataset_id, b, prefix, start_after, min(page, _FIRST_DIFF_PAGE * 16))
            )
        seqs = range(a + 1, b + 1)
        page = diff_page(a, b)
        # Revisions that ended in (a, b] and were live at a: the old side, one stream per end seq.
        old = [
            self._revisions(
                dataset_id, "records_ended", "to_seq", s, "from_seq <= ?", a, prefix, page, start_after
            )
            for s in seqs
        ]
        # Revisions that began in (a, b] and are still live at b: the new side.
        new = [
            self._revisions(
                dataset_id, "records_began", "from_seq", s, "to_seq > ?", b, prefix, page, start_after
            )
            for s in seqs
        ]
        by_key: Callable[[Record], str] = lambda r: r.key  # noqa: E731
        return merge_diff(heapq.merge(*old, key=by_key), heapq.merge(*new, key=by_key))

    def _revisions(
        self,
        dataset_id: int,
        index: str,
        column: str,
        seq: int,
        cond: str,
        bound: int,
        prefix: str,
        page: int,
        start_after: str = "",
    ) -> Iterator[Record]:
        """Revisions with ``column == seq`` matching ``cond`` above ``start_after``, in key order,
        by keyset pages.

        The pages start small and grow to ``page`` (x4 each): an API diff page of 50 entries
        read 4,096 rows from each stream, most of the server's CPU on a mixed workload (issue
        24 item 9), while a whole diff still reads large pages after the first few."""
        # lets SQLite use the partial indexes (see sqlite_schema: records_began has no version 1 rows)
        extra = f" AND to_seq < {OPEN}" if column == "to_seq" else " AND from_seq > 1"
        bound_sql, bounds = prefix_bounds(prefix)
        sql = (
            f"SELECT {RECORD_COLS} FROM records INDEXED BY {index}"
            f" WHERE dataset_id = ? AND {column} = ?{extra} AND key > ?{bound_sql}"
            f" AND {cond} ORDER BY key LIMIT ?"
        )
        after, size = start_after, min(_FIRST_DIFF_PAGE, page)
        while True:
            rows = self._query("diff", sql, (dataset_id, seq, after, *bounds, bound, size))
            yield from map(record_of_row, rows)
            if len(rows) < size:
                return
            after, size = rows[-1][0], min(page, size * 4)

    def fill_directory_tables(self, progress: Progress | None = None) -> list[str]:
        """Fill the directory table of every dataset committed before the catalog had one
        (``sqlite_dirs_backfill``: one pass per dataset, resumable, used once complete)."""
        with self._translate("fill the directory tables"), self._conn() as conn:
            return backfill_all(conn, progress=progress)

    # --- tokens -----------------------------------------------------------------------------------
    def put_token(self, token: TokenInfo) -> None:
        with self._translate("store token"), self._conn() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO tokens (token_hash, principal, is_admin, created_at, description, extra)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    token.token_hash,
                    token.principal,
                    int(token.is_admin),
                    token.created_at or self.clock(),
                    token.description,
                    dump_json(dict(token.extra)),
                ),
            )

    def get_token(self, token_hash: str) -> TokenInfo | None:
        rows = self._query(
            "read token",
            "SELECT token_hash, principal, is_admin, created_at, description, extra FROM tokens"
            " WHERE token_hash = ?",
            (token_hash,),
        )
        if not rows:
            return None
        h, principal, is_admin, created, description, extra = rows[0]
        return TokenInfo(h, principal, bool(is_admin), created, description, dict(load_json(extra)))

    def delete_token(self, token_hash: str) -> None:
        with self._translate("delete token"), self._conn() as conn:
            conn.execute("DELETE FROM tokens WHERE token_hash = ?", (token_hash,))
            conn.execute("DELETE FROM browser_sessions WHERE token_hash = ?", (token_hash,))

    def list_tokens(self) -> list[TokenInfo]:
        rows = self._query(
            "list tokens",
            "SELECT token_hash, principal, is_admin, created_at, description, extra FROM tokens"
            " ORDER BY principal, created_at, token_hash",
            (),
        )
        return [
            TokenInfo(h, principal, bool(is_admin), created, description, dict(load_json(extra)))
            for h, principal, is_admin, created, description, extra in rows
        ]

    # --- dataset browser sessions -----------------------------------------------------------------
    def instance_id(self) -> str:
        if self._instance is None:  # one row, never changed: read once
            rows = self._query(
                "read the catalog's instance id", "SELECT value FROM catalog_meta WHERE key = 'instance'", ()
            )
            self._instance = rows[0][0]
        return self._instance

    def put_browser_session(self, session: BrowserSession, now: float) -> None:
        with self._translate("store a browser session"), self._conn() as conn:
            conn.execute("DELETE FROM browser_sessions WHERE expires_at < ?", (now,))
            conn.execute(
                "INSERT OR REPLACE INTO browser_sessions (id_hash, token_hash, expires_at) VALUES (?, ?, ?)",
                (session.id_hash, session.token_hash, session.expires_at),
            )

    def get_browser_session(self, id_hash: str) -> BrowserSession | None:
        rows = self._query(
            "read a browser session",
            "SELECT id_hash, token_hash, expires_at FROM browser_sessions WHERE id_hash = ?",
            (id_hash,),
        )
        return BrowserSession(*rows[0]) if rows else None

    def delete_browser_session(self, id_hash: str) -> None:
        with self._translate("delete a browser session"), self._conn() as conn:
            conn.execute("DELETE FROM browser_sessions WHERE id_hash = ?", (id_hash,))

    # --- writer leases ----------------------------------------------------------------------------
    def list_leases(
        self,
        after: str = "",
        limit: int = LIST_PAGE,
        *,
        targets: Collection[str] | None = None,
        taker: str = "",
    ) -> list[Lease]:
        check_page(limit)
        with self._translate("list the writer leases"):
            return self._leases.page(after, limit, targets, taker, self._datasets_named)

    def _datasets_named(self, names: list[str]) -> set[str]:
        """Which of ``names`` are datasets (the lease list of a taker: ``LeaseFile.page``)."""
        found: set[str] = set()
        with self._conn() as conn:
            for i in range(0, len(names), 500):
                part = names[i : i + 500]
                marks = ",".join("?" * len(part))
                found.update(
                    r[0] for r in conn.execute(f"SELECT name FROM datasets WHERE name IN ({marks})", part)
                )
        return found

    def prune_leases(
        self, after: str = "", limit: int = LIST_PAGE, lapsed_for: float = PRUNE_LAPSED
    ) -> tuple[list[str], str | None]:
        check_prune(limit, lapsed_for)
        with self._translate("prune the writer leases"):
            return self._leases.prune(
                after, limit, lambda lease, now: prunable(lease, now, lapsed_for), self.clock
            )

    def _lease_turn(self, what: str, name: str, change: LeaseChange) -> Lease | None:
        """Read ``name``'s lease, apply ``change`` (which may raise Conflict) and write its result,
        in one BEGIN IMMEDIATE transaction of the leases' own file (``sqlite_leases``): two nodes
        asking at once are serialised by SQLite, and neither waits behind a catalog commit."""
        with self._translate(what):
            return self._leases.turn(name, change, self.clock)


def _json_column(field: str, value: Any) -> Any:
    """A dataset's JSON column as JSON takes it: the access list a dict, the sources a list."""
    return dict(value) if field == "acl" else list(value)


def _out_of_space(exc: sqlite3.Error, path: Path) -> bool:
    """Whether ``exc`` means the catalog's file system is full.

    SQLite says so itself only for a write into the database (SQLITE_FULL). Opening a WAL
    database on a full file system fails earlier, while its ``-shm`` file is sized, as a plain
    "disk I/O error": a user would look for a broken disk. So an I/O error also counts when the
    file system has less than a MiB left for this process.
    """
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code == _SQLITE_FULL:
        return True
    if code != _SQLITE_IOERR:
        return False
    try:
        fs = os.statvfs(path.parent)
    except OSError:
        return False
    return fs.f_bavail * fs.f_frsize < _NEARLY_FULL_BYTES
