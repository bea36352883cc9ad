"""The B-tree pages a SQLite commit's next batch will touch, read ahead on other connections.

Why: a commit of changes spread over a large version (a 1 % commit of 10^8 records: one key
in every hundred) looks up, closes and inserts next to rows whose leaf pages lie anywhere in
a 16 GB file, most of them not in the OS page cache. SQLite reads a page when it needs it,
one ``pread`` at a time, so such a commit waited for one random disk read per change, one
after the other (issue 38 item 3; docs/catalog.md, "A spread commit's reads"). While the
commit's thread plans and writes batch *k*, this reads the keys of batch *k + 1* with a few
reader threads, each on its own read-only connection (WAL readers run beside the writer), so
several reads are in flight at once and the pages are in the OS page cache when the commit's
own connection asks for them.

It only reads: what the commit writes and its transaction are unchanged, and any error here
is dropped (the commit then reads the page itself, as before). A key read ahead but written
by the commit first simply read a page the commit does not use.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

# Reads in flight at once (each thread one synchronous read). 16, not 4: the disk answers
# about twice the random page reads a second and each costs less CPU, and a cold spread 1 %
# commit at 10^8 took 4-9 % less CPU (docs/catalog.md, "Eighth pass"; 32 did no better).
# Each thread's connection holds a 1 MiB page cache.
READ_AHEAD_THREADS = 16
_CHUNK = 250  # keys per statement (bound parameters)


class LeafReadAhead:
    """Reads ``keys`` of one dataset's ``records`` ahead of a commit (:meth:`submit`).

    Threads and connections are made at the first :meth:`submit`, so a commit of one batch
    costs nothing; :meth:`close` waits for the reads in flight and closes the connections."""

    def __init__(self, path: Path, dataset_id: int, threads: int = READ_AHEAD_THREADS) -> None:
        self.path, self.dataset_id, self.threads = path, dataset_id, threads
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.keys_read = 0  # keys whose pages were read ahead (tests, benches)

    def submit(self, keys: list[str]) -> None:
        """Read the pages of ``keys`` (sorted here) in the background; reads still queued from
        an earlier batch are dropped first (the commit is past them: it read those itself)."""
        if not keys or self.threads <= 0:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="datahub-commit-ahead")
        for future in self._pending:
            future.cancel()
        ordered = sorted(keys)
        # one contiguous slice per thread: each walks its part of the key space in order
        step = max(1, -(-len(ordered) // self.threads))
        self._pending = [
            self._pool.submit(self._read, ordered[i : i + step]) for i in range(0, len(ordered), step)
        ]

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=1.0, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA query_only = 1")
            conn.execute("PRAGMA cache_size = -1024")  # the point is the OS page cache, not this one
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def _read(self, keys: list[str]) -> None:
        try:
            conn = self._conn()
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i : i + _CHUNK]
                marks = ",".join("?" * len(chunk))
                conn.execute(
                    f"SELECT count(*) FROM records WHERE dataset_id = ? AND key IN ({marks})",
                    (self.dataset_id, *chunk),
                ).fetchone()
                with self._lock:
                    self.keys_read += len(chunk)
        except sqlite3.Error as exc:  # an optimisation only: the commit reads the pages itself
            log.debug("reading a commit's pages ahead in %s failed: %s", self.path, exc)

    def close(self) -> None:
        for future in self._pending:
            future.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for conn in self._conns:
            conn.close()
        self._conns.clear()
