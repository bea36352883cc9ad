"""One sqlite3 connection per thread to one WAL database file.

sqlite3 connections must not be shared between threads, and the catalog, the task queue
and LabelX all serve several threads (API workers, pack workers, FUSE threads). This is
the one place that opens those connections with the same pragmas and closes them all.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


class SQLiteConnections:
    """Per-thread connections to ``path`` in WAL mode, so readers never wait for a writer.

    ``synchronous="FULL"`` (the default) makes a committed transaction survive power loss,
    not just a process crash; use ``"NORMAL"`` only for state that may be recomputed.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
        pragmas: Iterable[str] = (),
    ) -> None:
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout = busy_timeout
        self._pragmas = ("journal_mode = WAL", f"synchronous = {synchronous}", *pragmas)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use (autocommit; transactions are explicit)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
            for pragma in self._pragmas:
                conn.execute(f"PRAGMA {pragma}")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front: all or nothing, never half-written."""
        conn = self.get()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
