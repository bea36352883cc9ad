"""Task queue in the catalog's SQLite file (its own two tables, WAL mode).

One short-lived transaction per call; a claim is a single ``UPDATE … RETURNING`` inside
``BEGIN IMMEDIATE``, so SQLite's write lock makes it atomic across threads and processes.
Each thread gets its own connection (sqlite3 connections must not be shared). A task's
``lease`` and ``holder`` columns bind it to whoever claimed it (``datahub.tasks.base``); a file
from before they existed gains them when opened, and its DOING rows (no lease) wait for expiry.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from datahub.errors import Conflict, StorageError, job_not_found
from datahub.sqlite_pool import SQLiteConnections
from datahub.tasks.base import (
    DOING,
    DONE,
    FAILED,
    TODO,
    Clock,
    Job,
    LeaseLost,
    Task,
    TaskQueue,
    check_job_json,
    check_task_json,
    joined_meta,
    lease_lost,
    new_lease,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS datahub_task_jobs (
    job TEXT PRIMARY KEY, meta TEXT NOT NULL, total INTEGER NOT NULL, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS datahub_tasks (
    job TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL, payload TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '', lease_until REAL NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0, result TEXT NOT NULL DEFAULT '{}',
    error TEXT NOT NULL DEFAULT '', updated_at REAL NOT NULL,
    lease TEXT NOT NULL DEFAULT '', holder TEXT NOT NULL DEFAULT '',
    claim TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job, idx)
);
CREATE INDEX IF NOT EXISTS datahub_tasks_claim ON datahub_tasks (job, state, idx);
"""
_COLUMNS = "job, idx, state, payload, owner, lease_until, attempts, result, error, lease"
_ADDED = {
    "lease": "lease TEXT NOT NULL DEFAULT ''",
    "holder": "holder TEXT NOT NULL DEFAULT ''",
    "claim": "claim TEXT NOT NULL DEFAULT ''",  # the claim id a task was taken under (review44)
}


class SqliteTaskQueue(TaskQueue):
    def __init__(self, path: str | Path, clock: Clock = time.time, busy_timeout: float = 30.0) -> None:
        self.path = str(path)
        self.clock = clock
        # NORMAL: a task state lost to power failure is redone; tasks are idempotent
        self._db = SQLiteConnections(self.path, busy_timeout=busy_timeout, synchronous="NORMAL")
        try:
            with self._db.connection() as conn:
                conn.executescript(_SCHEMA)  # idempotent DDL; executescript manages its own tx
                have = {row[1] for row in conn.execute("PRAGMA table_info(datahub_tasks)")}
                for column, ddl in _ADDED.items():
                    if column not in have:  # a queue file written before leases were bound to holders
                        _add_column(conn, ddl)
        except sqlite3.Error as exc:
            raise StorageError(f"task queue database {self.path} cannot be opened: {exc}") from exc

    # --- connection and transactions ---------------------------------------------------------
    def _conn(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A pooled connection for one block; never one bound to a thread, which would be
        open at every fork (a forked child could not use the queue: ``sqlite_pool``)."""
        return self._db.connection()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            with self._db.immediate() as conn:
                yield conn
        except sqlite3.Error as exc:
            raise StorageError(f"task queue database {self.path} failed: {exc}") from exc

    # --- jobs --------------------------------------------------------------------------------
    def create_job(self, job: str, payloads: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> Job:
        check_job_json(job, payloads, meta)  # what MongoDB cannot hold, refused on every store
        now = self.clock()
        with self._tx() as db:
            row = db.execute("SELECT total, meta FROM datahub_task_jobs WHERE job=?", (job,)).fetchone()
            if row is not None and row[0] != len(payloads):
                raise Conflict(
                    f"job {job} already exists with {row[0]} tasks, not {len(payloads)}; "
                    "delete it first if its input really changed",
                    job=job,
                )
            meta = joined_meta(job, json.loads(row[1]) if row is not None else None, meta)
            if row is None:
                db.execute(
                    "INSERT INTO datahub_task_jobs (job, meta, total, created_at) VALUES (?,?,?,?)",
                    (job, json.dumps(dict(meta)), len(payloads), now),
                )
                db.executemany(
                    "INSERT INTO datahub_tasks (job, idx, state, payload, updated_at) VALUES (?,?,?,?,?)",
                    [(job, i, TODO, json.dumps(dict(p)), now) for i, p in enumerate(payloads)],
                )
            else:
                db.execute("UPDATE datahub_task_jobs SET meta=? WHERE job=?", (json.dumps(dict(meta)), job))
        return self.get_job(job)

    def get_job(self, job: str) -> Job:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT meta, total, created_at FROM datahub_task_jobs WHERE job=?", (job,)
            ).fetchone()
            if row is None:
                raise job_not_found(job)  # which kind it was to be, the caller knows
            counts = dict(
                conn.execute("SELECT state, count(*) FROM datahub_tasks WHERE job=? GROUP BY state", (job,))
            )
        return Job(job, json.loads(row[0]), row[1], counts, row[2])

    def delete_job(self, job: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM datahub_tasks WHERE job=?", (job,))
            db.execute("DELETE FROM datahub_task_jobs WHERE job=?", (job,))

    # --- tasks -------------------------------------------------------------------------------
    def claim(
        self, job: str, worker: str, lease_seconds: float, *, holder: str = "", claim_id: str = ""
    ) -> Task | None:
        now = self.clock()
        with self._tx() as db:
            if claim_id:  # a retry of a claim made already, whose answer was lost: the same task
                row = db.execute(
                    f"""UPDATE datahub_tasks SET lease_until=?, updated_at=?
                        WHERE job=? AND state=? AND claim=? AND holder=? RETURNING {_COLUMNS}""",
                    (now + lease_seconds, now, job, DOING, claim_id, holder),
                ).fetchone()
                if row:
                    return _task(row)
            row = db.execute(
                f"""UPDATE datahub_tasks
                    SET state=?, owner=?, lease_until=?, attempts=attempts+1, updated_at=?,
                        lease=?, holder=?, claim=?
                    WHERE job=? AND idx = (
                        SELECT idx FROM datahub_tasks
                        WHERE job=? AND (state=? OR (state=? AND lease_until <= ?))
                        ORDER BY state=?, idx LIMIT 1)
                    RETURNING {_COLUMNS}""",
                (
                    DOING,
                    worker,
                    now + lease_seconds,
                    now,
                    new_lease(),
                    holder,
                    claim_id,
                    job,
                    job,
                    TODO,
                    DOING,
                    now,
                    DOING,
                ),
            ).fetchone()
        return _task(row) if row else None

    def _owned_update(self, job: str, index: int, lease: str, holder: str, sets: str, params: tuple) -> Task:
        """Apply ``sets`` only while ``lease`` of ``holder`` holds the task (one atomic UPDATE)."""
        if not lease:  # rows from before leases had none: an empty id must never match them
            raise lease_lost(job, index)
        now = self.clock()
        with self._tx() as db:
            row = db.execute(
                f"""UPDATE datahub_tasks SET {sets}, updated_at=?
                    WHERE job=? AND idx=? AND state=? AND lease=? AND holder=? RETURNING {_COLUMNS}""",
                (*params, now, job, index, DOING, lease, holder),
            ).fetchone()
        if row is None:
            raise lease_lost(job, index)
        return _task(row)

    def renew(self, job: str, index: int, lease: str, lease_seconds: float, *, holder: str = "") -> Task:
        return self._owned_update(job, index, lease, holder, "lease_until=?", (self.clock() + lease_seconds,))

    def complete(
        self, job: str, index: int, lease: str, result: Mapping[str, Any], *, holder: str = ""
    ) -> Task:
        check_task_json(job, f"the result of task {index}", result)
        sets = "state=?, result=?, lease_until=0, lease=''"
        return self._owned_update(job, index, lease, holder, sets, (DONE, json.dumps(dict(result))))

    def fail(self, job: str, index: int, lease: str, error: str, *, holder: str = "") -> Task:
        sets = "state=?, error=?, lease_until=0, lease=''"
        return self._owned_update(job, index, lease, holder, sets, (FAILED, error))

    def release(self, job: str, index: int, lease: str, *, holder: str = "") -> None:
        try:
            sets = "state=?, owner='', lease_until=0, lease='', holder=''"
            self._owned_update(job, index, lease, holder, sets, (TODO,))
        except LeaseLost:
            pass  # someone else has it already: nothing to give back

    def retry_failed(self, job: str) -> int:
        with self._tx() as db:
            cur = db.execute(
                "UPDATE datahub_tasks SET state=?, owner='', error='', lease='', holder='', updated_at=? "
                "WHERE job=? AND state=?",
                (TODO, self.clock(), job, FAILED),
            )
            return cur.rowcount

    def tasks(self, job: str) -> Iterator[Task]:
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM datahub_tasks WHERE job=? ORDER BY idx", (job,)
            ).fetchall()
        return iter([_task(r) for r in rows])

    def close(self) -> None:
        self._db.close()


def _add_column(conn: sqlite3.Connection, ddl: str) -> None:
    try:
        conn.execute(f"ALTER TABLE datahub_tasks ADD COLUMN {ddl}")
        conn.commit()
    except sqlite3.OperationalError as exc:
        if "duplicate column" not in str(exc):  # another process opening the file added it first
            raise


def _task(row: tuple) -> Task:
    job, idx, state, payload, owner, lease_until, attempts, result, error, lease = row
    return Task(
        job, idx, state, json.loads(payload), owner, lease_until, attempts, json.loads(result), error, lease
    )
