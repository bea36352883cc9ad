"""The SQLite catalog's writer leases, in a file of their own beside the catalog (``<catalog>.leases``).

Why not a table of the catalog file: SQLite has one writer per file, and a commit of 10^6
records holds the catalog's write lock for its whole transaction (22-37 s at load 14-17,
docs/benchmarks.md "leftovers22"). A workspace's lease renewal waited behind it, and its holder
fenced itself (``ttl - ttl/6``: 25 s at the default ttl) with the catalog healthy all along
(flaky21 found it). A lease turn here takes this file's lock only: milliseconds, whatever the
catalog is committing.

Moving in (``LeaseFile.adopt``): a catalog whose leases were in its own ``leases`` table hands
them over once: triggers on that table refuse every later write of it first (an older datahub
still running beside this one then fails to take or renew a lease, loudly, instead of holding
one this file does not know: two writers), then its rows are copied here and ``moved`` is set.
A crash between the two steps repeats both at the next open.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from datahub.catalog.leases import Lease, LeaseChange, visible_page
from datahub.catalog.sqlite_schema import LEASE_TAKER, LEASES_TABLE
from datahub.sqlite_pool import SQLiteConnections, create_private

LEASE_COLS = "name, owner, holder, epoch, expires, dataset"
TAKER = LEASE_TAKER  # the principal the API server appended to a lease's holder, indexed
SCHEMA = (
    LEASES_TABLE
    + f"""
CREATE INDEX IF NOT EXISTS leases_by_target ON leases (dataset, name);
CREATE INDEX IF NOT EXISTS leases_by_taker ON leases ({TAKER}, name);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
)
MOVED = "writer leases moved to {path}: upgrade this datahub (leftovers22)"


def lease_path(catalog: Path) -> Path:
    """Beside the catalog file itself (a ``catalog.db`` that is a link: beside its target)."""
    real = Path(os.path.realpath(catalog))
    return real.with_name(real.name + ".leases")


class LeaseFile:
    """The leases of one SQLite catalog, in their own file."""

    def __init__(self, catalog: Path, *, busy_timeout: float, mode: int = 0o600) -> None:
        """``mode``: the catalog file's, given to this file (made here, or opened by its owner
        after the catalog's mode changed): whoever may take a lease in the catalog (a group
        sharing it) may here."""
        self.path = lease_path(catalog)
        if create_private(self.path) != mode:
            with contextlib.suppress(OSError):
                os.chmod(self.path, mode)  # a path, no descriptor of the database (create_private)
        self._db = SQLiteConnections(self.path, busy_timeout=busy_timeout, max_connections=2, max_idle=2)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        with self._db.connection() as conn:
            yield conn

    def adopt(self, catalog: Callable[[], object]) -> None:
        """Make the schema, and take over the catalog's own ``leases`` rows once (module doc).
        ``catalog``: a context manager of a connection to the catalog file."""
        with self.connection() as conn:
            conn.executescript(SCHEMA)
            if conn.execute("SELECT 1 FROM meta WHERE key = 'moved'").fetchone():
                return
        with catalog() as main:  # type: ignore[attr-defined]
            main.execute("BEGIN IMMEDIATE")
            try:
                for op in ("INSERT", "UPDATE"):
                    message = MOVED.format(path=self.path).replace("'", "''")
                    main.execute(
                        f"CREATE TRIGGER IF NOT EXISTS leases_moved_{op.lower()} BEFORE {op} ON leases "
                        f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
                    )
                rows = main.execute(f"SELECT {LEASE_COLS} FROM leases").fetchall()
                main.execute("COMMIT")
            except BaseException:
                main.rollback()
                raise
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if not conn.execute("SELECT 1 FROM meta WHERE key = 'moved'").fetchone():
                    conn.executemany(
                        f"INSERT OR IGNORE INTO leases ({LEASE_COLS}) VALUES (?, ?, ?, ?, ?, ?)", rows
                    )
                    conn.execute("INSERT INTO meta (key, value) VALUES ('moved', ?)", (str(len(rows)),))
                conn.execute("COMMIT")
            except BaseException:
                conn.rollback()
                raise

    def turn(self, name: str, change: LeaseChange, now: Callable[[], float]) -> Lease | None:
        """Read ``name``'s lease, apply ``change`` (which may raise Conflict) and write its
        result, in one BEGIN IMMEDIATE transaction of this file: takers are serialised here."""
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(f"SELECT {LEASE_COLS} FROM leases WHERE name = ?", (name,)).fetchone()
                lease = change(Lease(*row) if row else None, now())
                if lease is not None:
                    conn.execute(
                        f"INSERT OR REPLACE INTO leases ({LEASE_COLS}) VALUES (?, ?, ?, ?, ?, ?)",
                        (lease.name, lease.owner, lease.holder, lease.epoch, lease.expires, lease.dataset),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.rollback()
                raise
        return lease

    def page(
        self,
        after: str,
        limit: int,
        targets: Collection[str] | None,
        taker: str,
        datasets_exist: Callable[[list[str]], set[str]],
    ) -> list[Lease]:
        """``CatalogStore.list_leases``: a range of the primary key, or of leases_by_target and
        leases_by_taker (``leases.visible_page``). A taker's leases are those bound to a dataset
        that does not exist, asked of the catalog (``datasets_exist``) a page at a time, read on
        until ``limit`` are found or the range ends (a short page only at its end)."""
        cols = f"SELECT {LEASE_COLS} FROM leases"
        with self.connection() as conn:
            if targets is None:
                rows = conn.execute(f"{cols} WHERE name > ? ORDER BY name LIMIT ?", (after, limit))
                return [Lease(*row) for row in rows]

            def read(target: str | None, below: str | None) -> list[Lease]:
                upper = "" if below is None else " AND name < ?"
                bounds = (below,) if below is not None else ()
                if target is not None:
                    query = f"{cols} WHERE dataset = ? AND name > ?{upper} ORDER BY name LIMIT ?"
                    return [Lease(*row) for row in conn.execute(query, (target, after, *bounds, limit))]
                query = (
                    f"{cols} WHERE {TAKER} = ? AND name > ?{upper} AND substr(holder, -?) = ?"
                    " AND dataset != '' ORDER BY name LIMIT ?"
                )
                suffix = f" [{taker}]"
                found: list[Lease] = []
                start = after
                while len(found) < limit:
                    rows = [
                        Lease(*r)
                        for r in conn.execute(
                            query, (f"{taker}]", start, *bounds, len(suffix), suffix, limit)
                        )
                    ]
                    existing = datasets_exist(sorted({lease.dataset for lease in rows}))
                    found += [lease for lease in rows if lease.dataset not in existing]
                    if len(rows) < limit:
                        break
                    start = rows[-1].name
                return found[:limit]

            return visible_page(read, targets, taker, limit)

    def prune(
        self, after: str, limit: int, prunable: Callable[[Lease, float], bool], now: Callable[[], float]
    ):
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")  # no take between the read and the delete
            try:
                page = [
                    Lease(*row)
                    for row in conn.execute(
                        f"SELECT {LEASE_COLS} FROM leases WHERE name > ? ORDER BY name LIMIT ?",
                        (after, limit),
                    )
                ]
                at = now()
                gone = [lease.name for lease in page if prunable(lease, at)]
                conn.executemany("DELETE FROM leases WHERE name = ?", [(name,) for name in gone])
                conn.execute("COMMIT")
            except BaseException:
                conn.rollback()
                raise
        return gone, page[-1].name if len(page) == limit else None
