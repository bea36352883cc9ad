"""A bounded pool of sqlite3 connections to one WAL database file.

sqlite3 connections must not be used by two threads at once, and the catalog, the task queue
and LabelX all serve several threads (API workers, pack workers, FUSE threads). This is the
one place that opens those connections with the same pragmas and closes them all, and that
creates a new database file owner-only (``create_private``).

Why a bounded pool and not one connection per thread (issue 24 item 9): the API's thread pool
replaces its idle threads, and every new thread opened a new connection with its own page
cache (``cache_size``, 16 MiB for the catalog) while the old ones stayed open: one
``datahub serve`` grew from 75 to 428 MB over repeated load runs. Now:

- ``connection()`` lends a connection for a block (a query, a page, a transaction) and takes
  it back; at most ``max_connections`` are open, and a thread past that waits for one to be
  returned. The lease is re-entrant in a thread (a nested block gets the same connection), so
  a transaction and the reads inside it share one connection. Readers hold no connection
  between pages, so a slow client never pins one.
- ``get()`` (for stores whose methods each run one statement and that predate the leases) binds
  one connection to the calling thread for the thread's life and returns it to the pool when
  the thread ends: never more than one per live thread, and none kept for a dead one.
- Idle connections beyond ``max_idle`` are closed, so a burst does not keep its caches.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from datahub.errors import StorageError
from datahub.lmdb_fork import held_at_fork, on_quiet, using
from datahub.procs import PerProcess


class _Binding:
    """A connection bound to one thread (``get``); goes back to the pool when the thread ends
    (CPython clears a dead thread's ``threading.local`` values, which drops this object)."""

    __slots__ = ("conn", "depth", "pool")

    def __init__(self, pool: SQLiteConnections, conn: sqlite3.Connection, depth: int) -> None:
        self.pool, self.conn, self.depth = pool, conn, depth

    def __del__(self) -> None:
        try:
            self.pool._give(self.conn)
        except Exception:
            pass


class _Pool:
    """One process's connections and the lock over them (``SQLiteConnections._pool``)."""

    def __init__(self) -> None:
        self.local = threading.local()  # this thread's lease or binding
        # re-entrant: a dead thread's binding may be given back by a finalizer in any thread
        self.cond = threading.Condition(threading.RLock())
        self.idle: list[sqlite3.Connection] = []
        self.open: set[sqlite3.Connection] = set()
        self.bound: set[sqlite3.Connection] = set()  # bound to a thread by get()
        self.opening = 0


class SQLiteConnections:
    """Connections to ``path`` in WAL mode, so readers never wait for a writer.

    ``synchronous="FULL"`` (the default) makes a committed transaction survive power loss,
    not just a process crash; use ``"NORMAL"`` only for state that may be recomputed.

    Across ``fork`` (a DataLoader worker, a ``multiprocessing`` worker with the "fork" start
    method, using a pool its parent opened): the connections are per process
    (``procs.PerProcess``), so the child opens its own and never uses or closes the parent's;
    every lease is a section of the fork gate (``lmdb_fork.using``), so a fork waits until no
    other thread holds a connection; and once it is quiet, the parent closes its idle
    connections (``_close_idle_at_fork``), so the child inherits no SQLite state of the file.

    Why all three: SQLite forbids using a connection opened before a fork in the child, or
    even closing it there. And SQLite keeps its own per-process record of the locks held on
    each file (shared by every connection of the process), which a child inherits: with a
    connection of the parent open at the fork, the child's own new connections took no lock
    the kernel knew of. Then the parent closing its last connection found itself alone,
    checkpointed and deleted the WAL, and the child's later commits went to the deleted file
    (lost, though each reported success); with a parent thread inside a write transaction at
    the fork, the child could never write ("database is locked"). And the parent's
    connections lent to its threads at the fork counted against ``max_connections`` in the
    child for ever: with all of them lent, the child's first query waited for ever
    (tests/catalog/test_fork27.py). A pool that still had a connection open at the fork (a
    thread-bound one from ``get``, a lease held past the gate's wait, or the forking
    thread's own) cannot be used in that child: StorageError says so.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 30.0,
        synchronous: str = "FULL",
        pragmas: Iterable[str] = (),
        max_connections: int = 8,
        max_idle: int = 4,
    ) -> None:
        self.path = str(path)
        self.mode = create_private(Path(self.path))  # the file's mode: 0600 when made here
        self._busy_timeout = busy_timeout
        self._pragmas = ("journal_mode = WAL", f"synchronous = {synchronous}", *pragmas)
        self.max_connections, self.max_idle = max(1, max_connections), max(0, max_idle)
        self._pool: PerProcess[_Pool] = PerProcess(_Pool, inherited=self._refuse_held)
        self._closed = False
        self.opened_total = 0  # connections ever opened (tests, and a leak is easy to see)
        _POOLS.add(self)

    @property
    def open_count(self) -> int:
        """Connections of this process open now, lent or idle."""
        return len(self._pool.get().open)

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for the block (autocommit; transactions are explicit)."""
        with using(self):  # no fork while a thread holds a connection (see the class doc)
            pool = self._pool.get()
            held = getattr(pool.local, "held", None)
            if held is not None:  # nested, or a thread bound by get(): the same connection
                held.depth += 1
                try:
                    yield held.conn
                finally:
                    held.depth -= 1
                return
            conn = self._take(pool)
            lease = _Lease(conn)
            pool.local.held = lease
            try:
                yield conn
            finally:
                pool.local.held = None
                self._give(conn, pool)

    def get(self) -> sqlite3.Connection:
        """This thread's connection, bound to it until the thread ends (see the module doc).

        Not counted against ``max_connections`` while bound (a thread that keeps one must not
        make another wait forever); at most one per live thread. A bound connection is open
        at every fork: a forked child cannot use this pool (see the class doc); prefer
        ``connection``."""
        pool = self._pool.get()
        held = getattr(pool.local, "held", None)
        if held is None:
            held = _Binding(self, self._take(pool, bind=True), depth=1)
            pool.local.held = held
        return held.conn

    @contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken up front: all or nothing, never half-written."""
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # --- the pool -------------------------------------------------------------------------------
    def _take(self, pool: _Pool, *, bind: bool = False) -> sqlite3.Connection:
        """An idle connection, else a new one; a lease past ``max_connections`` waits for one
        to come back, a binding never waits (see ``get``)."""
        with pool.cond:
            while True:
                if pool.idle:
                    conn = pool.idle.pop()
                    if bind:
                        pool.bound.add(conn)
                    return conn
                if bind or self._closed or self._lendable(pool) < self.max_connections:
                    pool.opening += 1  # counted now: two threads must not both take the last slot
                    break
                pool.cond.wait()
        try:
            return self._open_new(pool, bound=bind)
        finally:
            with pool.cond:
                pool.opening -= 1
                pool.cond.notify()

    @staticmethod
    def _lendable(pool: _Pool) -> int:
        """Connections that count against ``max_connections``: open and unbound, or being opened."""
        return len(pool.open) - len(pool.bound) + pool.opening

    def _open_new(self, pool: _Pool, *, bound: bool) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            for pragma in self._pragmas:
                self._pragma(conn, pragma)
        except BaseException:
            conn.close()
            raise
        with pool.cond:
            pool.open.add(conn)
            if bound:
                pool.bound.add(conn)
            self.opened_total += 1
        return conn

    def _pragma(self, conn: sqlite3.Connection, pragma: str) -> None:
        """Run ``pragma``, retrying "database is locked" until the busy timeout.

        Why: switching a new database to WAL takes an exclusive lock, and SQLite answers
        SQLITE_BUSY at once, without its busy handler, while another connection opens the same
        new file (two CSI publishes creating one catalog at the same moment failed with Busy
        after no wait at all; tests/csi/test_review13b.py)."""
        deadline = time.monotonic() + self._busy_timeout
        delay = 0.005
        while True:
            try:
                conn.execute(f"PRAGMA {pragma}")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _give(self, conn: sqlite3.Connection, pool: _Pool | None = None) -> None:
        """Back to the idle list, or closed (past ``max_idle``, after ``close``, or mid-transaction:
        a connection left in a transaction must not be lent to someone else). A connection of
        another process's pool (the parent's, in a forked child) is never touched. ``pool``:
        this process's, when the caller has it."""
        pool = pool or self._pool.current()
        if pool is None:
            return
        with pool.cond:
            if conn not in pool.open:
                return  # closed by close() meanwhile, or not this process's
            pool.bound.discard(conn)
            keep = not self._closed and len(pool.idle) < self.max_idle and not conn.in_transaction
            if keep:
                pool.idle.append(conn)
            else:
                pool.open.discard(conn)
            pool.cond.notify()
        if not keep:
            conn.close()

    def _refuse_held(self, parents: _Pool) -> None:
        """In a forked child, before it opens its own connections: refused if the parent had
        one open at the fork (see the class doc)."""
        if parents.open or held_at_fork(self):
            raise StorageError(
                f"cannot use the SQLite database {self.path} in this forked process ({os.getpid()}): "
                f"its parent had {len(parents.open) or 'a'} connection(s) to it open at the fork (a "
                "thread-bound one, or a transaction that outlived the fork's wait), and SQLite's "
                "record of the file's locks is wrong in a child then; open it in the child's parent "
                "only after forking, or start workers with the 'spawn' method",
                path=self.path,
            )

    def _close_idle(self) -> None:
        """Close this process's idle connections (the fork gate is quiet: none is lent)."""
        pool = self._pool.current()
        if pool is None:
            return
        with pool.cond:
            idle, pool.idle = pool.idle, []
            pool.open.difference_update(idle)
        for conn in idle:
            conn.close()

    def close(self) -> None:
        """Close every connection of this process, lent ones included (their holders get
        ProgrammingError); in a forked child, the parent's are left alone."""
        self._closed = True
        pool = self._pool.current()
        if pool is None:
            return
        with pool.cond:
            conns, pool.open, pool.idle, pool.bound = list(pool.open), set(), [], set()
            pool.cond.notify_all()
        for conn in conns:
            conn.close()
        pool.local = threading.local()


_POOLS: weakref.WeakSet[SQLiteConnections] = weakref.WeakSet()  # every pool of the process


def _close_idle_at_fork() -> None:
    """At a fork, once no other thread holds a connection: close every pool's idle
    connections, so the child inherits none (``SQLiteConnections``; they reopen on demand)."""
    for ref in list(_POOLS.data):  # a copy made in C: a thread adding a pool cannot break it
        pool = ref()
        if pool is not None:
            pool._close_idle()


on_quiet(_close_idle_at_fork)


class _Lease:
    __slots__ = ("conn", "depth")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn, self.depth = conn, 0


def create_private(path: Path) -> int:
    """Create the database file ``path`` owner-only (0600) if it does not exist yet; its mode
    either way (SQLite gives the ``-wal`` and ``-shm`` files the database's mode).

    Why: the catalog (and the task queue in the same file) holds every dataset's records,
    access lists and tokens' records, and LabelX's database a copy of its projects' records and
    its accounts' password hashes; SQLite would create any of them with the umask (0644).
    Whichever of them opens a new file first makes it, so each opens through here. An existing file's mode is left as it
    is: who may read it is its owner's choice (a catalog a group shares).

    Never holds a descriptor of the database path itself, not even of a file it has just
    made: closing any descriptor of the database file drops every POSIX lock this process
    holds on it, SQLite's own connections' included (its WAL locks), and another connection
    of the process then reads a stale state (tests/csi/test_grants.py: a grant made through
    the API was not seen). So the empty file is made under a private name, closed, then
    linked into place (``link`` fails if another thread or process made it meanwhile), and
    another thread opening the same new database never sees a descriptor of it closed.

    A path that is a symbolic link is made at the file it names, which SQLite opens: else the
    link itself met the ``link`` above, and SQLite made a link to a file not there yet with
    the umask (review15a).
    """
    path = Path(os.path.realpath(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return 0o600  # SQLite's own open reports the failure, with the caller's context
    if path.exists():
        return _mode_of(path)
    staged = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    try:
        os.close(os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except OSError:
        return 0o600  # an unwritable directory: SQLite's own open reports it
    try:
        os.link(staged, path)
    except FileExistsError:
        return _mode_of(path)
    except OSError:  # a file system without hard links: made in place, closed at once
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        return _mode_of(path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(staged)
    return 0o600


def _mode_of(path: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode) & 0o666
    except OSError:
        return 0o600
