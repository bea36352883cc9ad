"""The write-back journal: one LMDB environment per workspace, the only module importing lmdb.

It holds everything a restart needs, so a committed transaction *is* the acknowledgement:

- ``tree``: the namespace. Key ``parent\\0name`` (so a directory listing is one prefix scan),
  value ``{"t": "d", "mtime", "mode"}`` or ``{"t": "f", "id": file_id}``.
- ``files``: file records by id: size, mtime, mode, generation, and the chunk map
  ``{index: [shared_key, length]}`` naming immutable chunk objects in the shared tier.
  ``src`` is set when the chunks were evicted and the bytes live only in the origin.
  ``unverified`` (``{key: [length, fingerprint or null]}``, ``chunks.chunk_fingerprint``) marks
  a new file's first commit whose chunk uploads ran alongside it; recovery checks those chunks
  (see ``Workspace``).
  ``unacked`` marks a created file a namespace operation wrote in as empty before any
  fsync or close of it succeeded: a revert removes it (``Workspace.revert``), and so does
  recovery after a crash (``open_workspace``); the file's next commit clears it.
- ``origin``: what the origin holds at each path (file id, generation, etag, size, sha256).
  A path is dirty exactly when ``origin`` does not match the tree's file id and generation,
  and an ``origin`` path missing from the tree is a pending delete: no separate dirty flag
  can disagree with the data. A path's first upload writes an *intent* entry (generation 0,
  ``"intent": true``) before its PUT, so an object whose PUT landed unrecorded is deleted
  with its file all the same (``flusher.Flusher._intend``).
- ``garbage``: chunk objects unreferenced by a committed transaction, deleted afterwards
  (crash-safe order: unreference, commit, then delete).

Durability: LMDB runs with ``metasync=False``. A commit writes the transaction's pages and
``fdatasync``s them, then writes the meta page that makes them current *without* a flush of
its own (the next commit's ``fdatasync`` covers it). LMDB keeps its integrity that way (the
pages a meta page points at are on disk before it is written); what a power loss can undo
is the last transaction. So every transaction is followed by ``env.sync()`` (the meta page
flushed: durable when it returns, as with ``sync=True``), except a
transaction that writes deferred covered commits only (below).

Deferred covered commits (smallsync19, issue 41): a *covered* commit is a new small file's
first commit whose record is also appended to its pack beside the chunk and made durable by
the pack's own ``fdatasync`` (``packs.py``, "cover records"). That flush is its
acknowledgement: the close waits for no journal flush at all. Its change is computed at once
(``submit(covered=True)`` -> ``_record``: ``fn`` runs against an LMDB snapshot, its writes
captured) and kept in memory, *deferred*; every ``read()`` sees the deferred changes over
LMDB's snapshot, so this process sees the file at once. They are written into LMDB together
by the committer thread, one transaction for all that wait (one journal ``fdatasync`` per
batch, none waited for): once the oldest has waited ``DEFER_SECONDS``, at the next covered
close, whose pack flush then runs beside LMDB's (two flushes issued together cost the disk
about one; one issued while the other runs may wait for it); on the clock alone after twice
that when no close comes; at once when ``DEFER_BATCH`` wait; and
by *every* other write transaction before its own change (``write``, the group commit): a
transaction that may depend on them (a rename, an unlink, a flush's origin state, a
commit's base, an eviction, a clean close) is durable only with them. Why not LMDB without
``sync`` (``MDB_NOSYNC``): LMDB reuses pages the durable meta page may still name and the
disk does not keep write order, so a power loss can leave the environment corrupt, not just
old (LMDB's documentation of ``MDB_NOSYNC``); deferring in memory keeps every LMDB commit's
``fdatasync`` and makes fewer commits.

Each covered commit gets a number (``cover``) when it is recorded, and a transaction that
writes deferred commits stores the highest it wrote (``meta covered``): a pack record
numbered above the journal's value after a crash was never written into LMDB (the process
was killed first, or a power loss undid that transaction), and recovery replays it from the
pack (``_recover`` after any unclean close); one at or below it was, so its absence means it
was removed since (unlink) and it is not replayed. Readers take the deferred tuple *before*
their snapshot and leave out what the snapshot's ``covered`` says it holds (``_view_for``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import queue
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import lmdb

from datahub.errors import InvalidInput, NoSpace, StorageError
from datahub.lmdb_fork import close_inherited, transaction, using
from datahub.writeback.failure_log import FailureLog

_ID = struct.Struct(">Q")
T = TypeVar("T")
_DBS = ("tree", "files", "origin", "garbage", "meta")
# meta keys of cover records (module docstring): the boot of the session that has the journal
# open ("" once it closed cleanly), the session number, the highest cover number committed
OWNER_BOOT, COVER_EPOCH, COVERED = "owner_boot", "cover_epoch", "covered"
JOURNAL_ID = "journal_id"  # this journal's own chunk prefix in the shared tier (``chunks.py``)
# this journal's own folder under its flush target, ``j-<journal id>`` ("" or absent: a journal
# made before nodeloss18 flushes straight under the target; ``datahub/writeback/__init__.py``)
OBJECTS_PREFIX = "objects_prefix"
_NEARLY_FULL = 1024**2  # bytes free below which an LMDB I/O error is taken for ENOSPC
# deferred covered commits (module docstring): written into LMDB after this long, or once this many
# wait; past DEFER_MAX waiting, with less than DEFER_ROOM bytes free on the journal's device, or
# after a failed write transaction, covered commits are committed the synced way
DEFER_SECONDS, DEFER_BATCH, DEFER_MAX, DEFER_ROOM = 0.05, 256, 1024, 64 * 1024**2

log = logging.getLogger(__name__)


def shipped(db: str, key: bytes) -> bool:
    """Whether a write of ``key`` in ``db`` goes to the shared log (``shared_log.py``): what
    another node needs to rebuild the acknowledged files, namely the namespace, the file
    records, the merge bases of commits and the highest cover number written."""
    return db in ("tree", "files") or (db == "meta" and (key == b"covered" or key.startswith(b"committed:")))


class Shipper(Protocol):
    """Where a write transaction's shipped changes go besides LMDB (``shared_log.SharedLog``):
    ``ship`` starts writing them, ``landed`` waits for them before LMDB commits (raises if they
    did not land: the transaction is aborted), ``void`` marks them never committed: only when
    LMDB's commit did not happen. A commit whose flush (``sync``) then failed is in LMDB, and
    every later transaction builds on it (the garbage it listed is deleted): voided, the log
    said otherwise, and named a chunk gone since, which refused the whole adoption (review20b).
    Its caller gets the error; the change may or may not survive a power loss, and the log
    keeps it (a change whose close failed may be adopted)."""

    def ship(self, changes: dict[tuple[str, bytes], bytes | None]) -> Any: ...

    def landed(self, token: Any, doing: str) -> None: ...

    def void(self, token: Any) -> None: ...

    def close(self) -> None: ...


def _tree_key(path: str) -> bytes:
    parent, _, name = path.rpartition("/")
    return f"{parent}\0{name}".encode()


def _tree_path(key: bytes) -> str:
    parent, _, name = key.decode().partition("\0")
    return f"{parent}/{name}" if parent else name


#: ``json.dumps(value, separators=(",", ":"))`` builds an encoder per call (only its default
#: arguments share one); one built once gives the same bytes (small41c: two encodings a small file)
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def _dump(value: Any) -> bytes:
    return _COMPACT.encode(value).encode()


#: decoded namespace entries by their bytes (flat dicts of str, int and float), so the same
#: parent directory's entry is not parsed again for every file created or looked up in it:
#: each small file through a mount read it three times (its LOOKUP, CREATE and first
#: commit), 3-10 µs of JSON each. Bounded: emptied when full. Callers get a copy.
_ENTRIES: dict[bytes, dict] = {}
_ENTRIES_MAX = 4096


def _entry_of(raw: bytes) -> dict:
    entry = _ENTRIES.get(raw)
    if entry is None:
        entry = json.loads(raw)
        if len(_ENTRIES) >= _ENTRIES_MAX:
            _ENTRIES.clear()
        _ENTRIES[raw] = entry
    return dict(entry)


def _merged(
    rows: Iterator[tuple[bytes, bytes]], extra: dict[bytes, bytes | None]
) -> Iterator[tuple[bytes, bytes]]:
    """LMDB's ``rows`` (key order) with ``extra``'s changes over them: a value replaces or adds
    its key, None deletes it. One merge for ``Txn._scan`` (a prefix) and ``Txn._after`` (a
    resumable scan), which each had a copy of it."""
    changes = sorted(extra.items())
    at = 0
    for key, value in rows:
        while at < len(changes) and changes[at][0] < key:
            if changes[at][1] is not None:
                yield changes[at]  # type: ignore[misc]
            at += 1
        if at < len(changes) and changes[at][0] == key:
            if changes[at][1] is not None:
                yield changes[at]  # type: ignore[misc]
            at += 1
        else:
            yield key, value
    for key, change in changes[at:]:
        if change is not None:
            yield key, change


class Txn:
    """A read or write transaction with typed helpers (values are plain dicts)."""

    def __init__(
        self,
        txn: Any,
        dbs: dict[str, Any],
        view: dict[str, dict[bytes, bytes | None]] | None = None,
        record: dict[str, dict[bytes, bytes | None]] | None = None,
        shipped: dict[tuple[str, bytes], bytes | None] | None = None,
    ) -> None:
        self._txn = txn
        self._dbs = dbs
        # ``shipped``: this write transaction's changes the shared log carries (``Shipper``)
        self._shipped = shipped
        # ``view``: changes acknowledged but not in LMDB yet (module docstring, "Deferred
        # covered commits"), read over the LMDB snapshot; None (no value) marks a deletion.
        # ``record``: a recording transaction's own writes (they never reach ``_txn``)
        self._view = view
        self._record = record

    def _get(self, db: str, key: bytes) -> bytes | None:
        if self._view is not None or self._record is not None:
            for layer in (self._record, self._view):
                if layer is not None and key in layer.get(db, ()):
                    return layer[db][key]
        return self._txn.get(key, db=self._dbs[db])

    def _put(self, db: str, key: bytes, value: bytes | None) -> None:
        if self._shipped is not None and shipped(db, key):
            self._shipped[(db, key)] = value
        if self._record is None:
            if value is None:
                self._txn.delete(key, db=self._dbs[db])
            else:
                self._txn.put(key, value, db=self._dbs[db])
        elif db == "meta":  # never deferred: ``covered`` decides which deferred change is in LMDB
            raise InvalidInput(f"a deferred commit may not write journal metadata ({key!r})")
        else:
            self._record.setdefault(db, {})[key] = value

    # --- namespace ----------------------------------------------------------------------------
    def entry(self, path: str) -> dict | None:
        if path == "":
            return {"t": "d", "mtime": 0.0, "mode": 0o755}
        raw = self._get("tree", _tree_key(path))
        return _entry_of(raw) if raw is not None else None

    def put_entry(self, path: str, entry: dict) -> None:
        self._put("tree", _tree_key(path), _dump(entry))

    def del_entry(self, path: str) -> None:
        self._put("tree", _tree_key(path), None)

    def _scan(self, db: str, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """LMDB's entries under ``prefix`` in key order, with the overlay's changes merged in."""
        extra: dict[bytes, bytes | None] = {}
        for layer in (self._view, self._record):
            extra.update((k, v) for k, v in (layer or {}).get(db, {}).items() if k.startswith(prefix))
        if not extra:
            yield from self._scan_lmdb(db, prefix)
            return
        yield from _merged(self._scan_lmdb(db, prefix), extra)

    def rows(self, db: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Raw (key, value) rows of ``db`` under ``prefix`` in key order (the shared log's
        checkpoint, ``shared_log.py``)."""
        return self._scan(db, prefix)

    def _scan_lmdb(self, db: str, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        with self._txn.cursor(db=self._dbs[db]) as cur:
            if not cur.set_range(prefix):
                return
            for key, value in cur:
                if not key.startswith(prefix):
                    return
                yield bytes(key), bytes(value)

    def children(self, path: str) -> Iterator[tuple[str, dict]]:
        """Direct children of directory ``path`` in name order."""
        prefix = f"{path}\0".encode()
        for key, value in list(self._scan("tree", prefix)):
            yield key[len(prefix) :].decode(), json.loads(value)

    def descendants(self, path: str) -> list[tuple[str, dict]]:
        """Every entry below directory ``path`` (any depth), materialised for safe mutation."""
        out = [(_tree_path(k), json.loads(v)) for k, v in self._scan("tree", f"{path}\0".encode())]
        out += [(_tree_path(k), json.loads(v)) for k, v in self._scan("tree", f"{path}/".encode())]
        return out

    def tree_files(self) -> Iterator[tuple[str, int]]:
        """(path, file id) of every file in the namespace."""
        for key, value in self._scan("tree", b""):
            entry = json.loads(value)
            if entry["t"] == "f":
                yield _tree_path(key), entry["id"]

    # --- file records -------------------------------------------------------------------------
    def file(self, file_id: int) -> dict | None:
        raw = self._get("files", _ID.pack(file_id))
        return json.loads(raw) if raw is not None else None

    def put_file(self, file_id: int, record: dict) -> None:
        self._put("files", _ID.pack(file_id), _dump(record))

    def del_file(self, file_id: int) -> None:
        self._put("files", _ID.pack(file_id), None)

    def files(self) -> Iterator[tuple[int, dict]]:
        for key, value in self._scan("files", b""):
            yield _ID.unpack(key)[0], json.loads(value)

    def reserve_ids(self, count: int) -> range:
        """``count`` file ids nobody else will get, even after a crash (unused ones are skipped)."""
        raw = self._get("meta", b"next_id")
        first = int(raw) if raw is not None else 1
        self._put("meta", b"next_id", str(first + count).encode())
        return range(first, first + count)

    # --- origin state -------------------------------------------------------------------------
    def origin(self, path: str) -> dict | None:
        raw = self._get("origin", path.encode())
        return json.loads(raw) if raw is not None else None

    def put_origin(self, path: str, state: dict) -> None:
        self._put("origin", path.encode(), _dump(state))

    def del_origin(self, path: str) -> None:
        self._put("origin", path.encode(), None)

    def origins(self) -> Iterator[tuple[str, dict]]:
        for key, value in self._scan("origin", b""):
            yield key.decode(), json.loads(value)

    # --- resumable scans (flushmem19: the flusher plans a batch per read transaction) ----------
    def _after(self, db: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries of ``db`` whose key sorts after ``start`` (b"": all), in key order, with the
        overlay's changes merged in (deferred commits, a recording transaction's own writes),
        as ``_scan`` does for a prefix."""
        extra: dict[bytes, bytes | None] = {}
        for layer in (self._view, self._record):
            extra.update((k, v) for k, v in (layer or {}).get(db, {}).items() if k > start)
        yield from _merged(self._after_lmdb(db, start), extra)

    def _after_lmdb(self, db: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        with self._txn.cursor(db=self._dbs[db]) as cur:
            if not cur.set_range(start):
                return
            for key, value in cur:
                if start and key == start:
                    continue
                yield bytes(key), bytes(value)

    def tree_files_after(self, after: str | None) -> Iterator[tuple[str, int]]:
        """``tree_files`` from after file ``after``'s namespace key (None: from the start), in
        that key order, so a scan can stop and go on in a later transaction: the flusher holds
        no list of the workspace's files (``flusher.py``)."""
        for key, value in self._after("tree", b"" if after is None else _tree_key(after)):
            entry = json.loads(value)
            if entry["t"] == "f":
                yield _tree_path(key), entry["id"]

    def files_after(self, after: int | None) -> Iterator[tuple[int, dict]]:
        """``files`` from after file id ``after`` (None: from the start), in id order, so that
        recovery reads the records a batch at a time and holds none of the rest (recover19)."""
        for key, value in self._after("files", b"" if after is None else _ID.pack(after)):
            yield _ID.unpack(key)[0], json.loads(value)

    def origins_after(self, after: str | None) -> Iterator[tuple[str, dict]]:
        """``origins`` from after path ``after`` (None: from the start), in path order."""
        for key, value in self._after("origin", b"" if after is None else after.encode()):
            yield key.decode(), json.loads(value)

    # --- garbage ------------------------------------------------------------------------------
    def add_garbage(self, keys: list[str]) -> None:
        for key in keys:
            self._put("garbage", key.encode(), b"")

    def del_garbage(self, keys: list[str]) -> None:
        for key in keys:
            self._put("garbage", key.encode(), None)

    def garbage(self) -> list[str]:
        return [k.decode() for k, _ in self._scan("garbage", b"")]

    def garbage_after(self, after: str | None) -> Iterator[str]:
        """``garbage`` from after key ``after`` (None: from the start), in key order, so that the
        collector reads the list a batch at a time and holds none of the rest (recover20): an
        ``rm -rf`` of 10^6 files lists 10^6 chunks."""
        for key, _ in self._after("garbage", b"" if after is None else after.encode()):
            yield key.decode()

    # --- metadata -----------------------------------------------------------------------------
    def meta(self, name: str) -> str | None:
        raw = self._get("meta", name.encode())
        return raw.decode() if raw is not None else None

    def put_meta(self, name: str, value: str) -> None:
        self._put("meta", name.encode(), value.encode())

    def del_meta(self, name: str) -> None:
        self._put("meta", name.encode(), None)

    def metas(self, prefix: str, after: str = "") -> Iterator[tuple[str, str]]:
        """Meta entries named ``prefix`` + something, in name (byte) order, those named above
        ``prefix + after`` if ``after``: a workspace commit's merge base is one entry per file
        (``datahub.commit_base``), read a range at a time."""
        start, first = f"{prefix}{after}".encode(), prefix.encode()
        with self._txn.cursor(db=self._dbs["meta"]) as cur:
            if not cur.set_range(start):
                return
            for key, value in cur:
                if not key.startswith(first):
                    return
                if not after or key != start:
                    yield bytes(key).decode(), bytes(value).decode()


class _Request:
    """One caller's part of a group commit. ``wake`` is held until a leader hands the request
    back (done) or hands it the lead: a waiter is woken exactly once, by name, instead of
    every waiter re-checking a shared condition after every commit."""

    def __init__(self, doing: str, fn: Callable[[Txn], Any], detached: bool = False) -> None:
        self.doing, self.fn = doing, fn
        self.detached = detached  # submitted: no thread waits to lead it (the committer does)
        self.cover = 0  # > 0: a covered request (its record is in a pack too), in queue order
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result

    def wait(self) -> Any:
        """The result of a submitted request, once its group commit is durable (or its error).

        Any number of threads may wait: each passes the released ``wake`` on (a latch)."""
        self.wake.acquire()
        self.wake.release()
        return self.outcome()


class Journal:
    """An LMDB environment under ``path``; ``write()`` commits durably or raises and changes nothing."""

    def __init__(self, path: Path, what: str, map_size: int = 1 << 34, readonly: bool = False) -> None:
        self.what = what  # e.g. "workspace 'ckpt'", used in error messages
        self.path = path
        try:
            if not readonly:
                path.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._env = lmdb.open(  # owner-only: the journal names every file and chunk
                str(path),
                max_dbs=len(_DBS),
                map_size=map_size,
                subdir=True,
                sync=True,
                metasync=False,
                readonly=readonly,
                mode=0o600,
            )
            self._dbs = {name: self._env.open_db(name.encode(), create=not readonly) for name in _DBS}
        except (OSError, lmdb.Error) as exc:
            raise _translate(exc, f"cannot open the journal of {what} at {path}", path) from exc
        self._closed = False
        self._pid = os.getpid()  # the process whose handle this is (close)
        self._readonly = readonly
        self._group = threading.Lock()  # guards the fields below; never held during I/O
        self._queue: list[_Request] = []
        self._leading = False
        self._committer: threading.Thread | None = None  # leads for submitted requests
        self._committer_turn = False
        # wakes the committer, one item a wake-up: a counting semaphore in C. threading's
        # Semaphore is Python over a Condition (a lock made per wait), and every small file's
        # close through a mount hands its commit over here: its release was 3 % of the
        # daemon's Python samples (docs/benchmarks.md, "smallwrites18")
        self._committer_go: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._cover = 0  # the last cover number handed out (0: covering not started)
        # deferred covered commits (module docstring): (cover, changes, when) in cover order, and
        # every one's changes merged (newest wins), replaced as a pair, never changed in place,
        # so a reader takes both with one attribute read and no lock
        self._deferred: tuple[tuple[tuple[int, dict, float], ...], dict] = ((), {})
        self._recording = threading.Lock()  # one deferred commit is recorded at a time
        self.defer_seconds = DEFER_SECONDS  # how long a deferred commit may wait for others
        self.retry_seconds = 1.0  # the pause after a failed write of the deferred commits
        self.fallback = False  # True: no more deferral (tests: what covered commits did before)
        self._defer_failed = False  # the last write transaction failed: nothing is deferred
        # called with what is being done before every write transaction; raises (StorageError)
        # once this process may no longer write the workspace (``lease.WriterLease.check``)
        self.fence: Callable[[str], None] = _unfenced
        # the shared log every acknowledging transaction's changes are written to beside LMDB
        # (``shared_log.py``: what another node adopts when this one is lost); None: none
        self.shipper: Shipper | None = None

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInput(f"{self.what} is closed; open it again")

    @contextmanager
    def read(self) -> Iterator[Txn]:
        """A read transaction that sees every acknowledged change, deferred ones included."""
        self._check_open()
        deferred = self._deferred  # before the snapshot: see ``_view_for``
        with transaction(self._env, write=False) as txn:
            yield Txn(txn, self._dbs, self._view_for(txn, deferred))

    @contextmanager
    def quiet_read(self, then: Callable[[], None]) -> Iterator[Txn]:
        """A read transaction of LMDB alone (no deferred commits) begun while no write
        transaction runs, ``then()`` called in that moment: every transaction begun before it
        is committed or aborted, every later one begins after it (the shared log's checkpoint
        switches its base there, ``shared_log.py``)."""
        self._check_open()
        with using(self._env):
            try:
                writing = self._env.begin(write=True)
                try:
                    then()
                    txn = self._env.begin(write=False)
                finally:
                    writing.abort()
            except lmdb.Error as exc:
                raise _translate(exc, f"cannot read the journal of {self.what}", self.path) from exc
            with txn:
                yield Txn(txn, self._dbs)

    def _view_for(self, txn: Any, deferred: tuple[tuple[tuple[int, dict, float], ...], dict]) -> dict | None:
        """The deferred changes LMDB snapshot ``txn`` lacks. ``deferred`` was taken before the
        snapshot began, so a deferred commit missing from it was applied before: the snapshot
        has it. One in it is in the snapshot exactly when its cover number is at or below the
        snapshot's ``covered`` (they are applied in order, and each application stores the
        highest); such ones are left out, or they would hide later changes of their keys."""
        entries, merged = deferred
        if not entries:
            return None
        covered = int(txn.get(COVERED.encode(), db=self._dbs["meta"]) or 0)
        if covered < entries[0][0]:
            return merged
        if covered >= entries[-1][0]:
            return None
        return _merge({}, [changes for cover, changes, _ in entries if cover > covered])

    @contextmanager
    def write(self, doing: str) -> Iterator[Txn]:
        """A write transaction; ``doing`` (e.g. "fsync of 'a/b'") names the operation in errors.

        Deferred commits go into it first: it is durable only with them (it may depend on them)."""
        self._check_open()
        self.fence(doing)
        shipper, token = self.shipper, None
        changes: dict[tuple[str, bytes], bytes | None] | None = {} if shipper is not None else None
        try:
            with transaction(self._env, write=True) as txn:
                applied = self._apply_deferred(txn, changes)
                yield Txn(txn, self._dbs, shipped=changes)
                if shipper is not None and changes:  # in the shared tier first, or not committed
                    token = shipper.ship(changes)
                    shipper.landed(token, doing)
            token = None  # committed: its record stands, whatever the flush does (``Shipper``)
            with using(self._env):
                self._env.sync(True)  # the meta page too: durable when we return
        except lmdb.Error as exc:
            self._defer_failed = True
            _void(shipper, token)
            raise _translate(exc, f"journal commit failed for {doing} in {self.what}", self.path) from exc
        except BaseException:
            _void(shipper, token)
            raise
        self._forget_deferred(applied)

    def _apply_deferred(self, txn: Any, changes: dict | None = None, upto: int | None = None) -> int:
        """Write the deferred commits ``txn`` (a write transaction, so no other runs) lacks;
        returns the highest cover number applied (0: none). ``covered`` is stored with them.
        ``changes``: where the shared log's share of them is collected (``Txn``'s ``shipped``).
        ``upto``: none numbered above it (``settle_deferred``; they are in cover order)."""
        shipping = changes
        entries = self._deferred[0]
        if not entries:
            return 0
        meta = self._dbs["meta"]
        covered = int(txn.get(COVERED.encode(), db=meta) or 0)
        top = 0
        for cover, changes, _ in entries:
            if upto is not None and cover > upto:
                break
            if cover <= covered:
                continue  # applied by a commit whose ``_forget_deferred`` has not run yet
            for db, items in changes.items():
                for key, value in items.items():
                    if value is None:
                        txn.delete(key, db=self._dbs[db])
                    else:
                        txn.put(key, value, db=self._dbs[db])
                    if shipping is not None and shipped(db, key):
                        shipping[(db, key)] = value
            top = cover
        if top:
            txn.put(COVERED.encode(), str(top).encode(), db=meta)
            if shipping is not None:
                shipping[("meta", COVERED.encode())] = str(top).encode()
        return top

    def _forget_deferred(self, applied: int) -> None:
        """Deferred commits numbered up to ``applied`` are in LMDB now (committed): a write
        transaction succeeded, so covered commits may be deferred again."""
        self._defer_failed = False
        if not applied:
            return
        with self._group:
            entries = tuple(e for e in self._deferred[0] if e[0] > applied)
            self._deferred = (entries, _merge({}, [changes for _, changes, _ in entries]))

    def deferred(self) -> int:
        """How many acknowledged commits are not in LMDB yet (tests, diagnostics)."""
        return len(self._deferred[0])

    def settle_deferred(self, upto: int | None = None) -> None:
        """Write the deferred commits into LMDB now (one transaction; its meta page is not
        flushed: the packs hold their records). Raises on failure; they stay deferred.

        ``upto``: only those numbered up to it (the committer's: the ones it found due). Why:
        it decided on one list and wrote the list of a moment later, when a stalled committer
        (a loaded machine) resumed after a transaction had written the due ones and a new
        close had deferred its own: that close's commit, due ``defer_seconds`` later, was
        written at once, a transaction and a shared-log record it was covered to save (flake41)."""
        entries = self._deferred[0]
        if not entries or (upto is not None and entries[0][0] > upto):
            return
        doing = f"{len(self._deferred[0])} deferred commits"
        shipper, token = self.shipper, None
        changes: dict[tuple[str, bytes], bytes | None] | None = {} if shipper is not None else None
        try:
            self.fence(doing)
            with transaction(self._env, write=True) as txn:
                applied = self._apply_deferred(txn, changes, upto)
                if shipper is not None and changes:
                    # not waited for: their cover records hold them until it lands, and a later
                    # record is refused if this one failed (``shared_log.SharedLog``)
                    token = shipper.ship(changes)
        except lmdb.Error as exc:
            self._defer_failed = True
            _void(shipper, token)
            raise _translate(exc, f"journal commit failed for {doing} in {self.what}", self.path) from exc
        except BaseException:
            self._defer_failed = True
            _void(shipper, token)
            raise
        self._forget_deferred(applied)

    def drop_deferred(self) -> int:
        """Forget the deferred commits without writing them: what a kill -9 does (tests use it
        through ``Workspace.abandon``); recovery replays them from their packs. Returns how many."""
        with self._group:
            lost = len(self._deferred[0])
            self._deferred = ((), {})
        return lost

    def start_covers(self, first: int) -> None:
        """Cover numbers of this session start after ``first`` (recovery stores it as ``covered``
        in a durable commit, above every number an earlier session handed out)."""
        with self._group:
            self._cover = first

    def stop_covers(self) -> None:
        """Commits from now on are not covered (flushed whole): the session is closing."""
        self.start_covers(0)

    def apply(self, doing: str, fn: Callable[[Txn], T]) -> T:
        """Run ``fn`` in a durable write transaction shared with concurrent callers (group commit).

        Callers that arrive while a commit is in flight queue up; the next one to find no
        commit running becomes the leader and commits the whole queue in one transaction,
        each ``fn`` in its own nested transaction so one caller's error (NotFound …) aborts
        only its own changes. Every caller returns after the shared commit is durable; a
        failed commit fails every caller in the batch. One fsync then acknowledges many
        closes, which is what lets concurrent writers approach local-disk throughput.
        """
        self._check_open()
        request = _Request(doing, fn)
        with self._group:
            self._queue.append(request)
            lead = not self._leading
            self._leading = True
        if not lead:
            request.wake.acquire()  # released once: our batch is done, or the lead is ours
            if request.done:
                return request.outcome()
        self._lead()
        return request.outcome()

    def submit(self, doing: str, fn: Callable[[Txn], T], covered: bool = False) -> _Request:
        """Queue ``fn`` for the next group commit and return at once; ``wait()`` on the result
        returns what ``fn`` returned once the commit is durable.

        Lets a caller do its own I/O (a new file's chunk write) while its record commits,
        without a thread-pool hop: the request joins the batch after the one in flight, or,
        when no commit is running, wakes the journal's committer thread to lead.

        ``covered``: the caller makes the record durable elsewhere too (a pack's cover record,
        see the module docstring); the request's ``cover`` number, set here in queue order,
        goes into that record. Only when ``start_covers`` ran (else the request is synced).
        """
        self._check_open()
        if covered and self._cover and self._may_defer():
            recorded = self._record(doing, fn)
            if recorded is not None:
                return recorded
        request = _Request(doing, fn, detached=True)
        with self._group:
            self._queue.append(request)
            if self._leading:
                return request
            self._leading = True
        if not self._hand_to_committer():
            self._lead()  # no committer thread: this caller commits it, and reports its outcome
        return request

    def _may_defer(self) -> bool:
        """Whether a covered commit may be deferred: not when the journal could not take it
        later. Its device has ``DEFER_ROOM`` free (else the close commits the synced way and
        fails for space as before: docs/writeback.md, "Out of space at close"), the last
        write transaction did not fail, and fewer than ``DEFER_MAX`` wait."""
        if self.fallback or self._defer_failed or len(self._deferred[0]) >= DEFER_MAX:
            return False
        free = _free_bytes(self.path)
        return free is not None and free >= DEFER_ROOM

    def _record(self, doing: str, fn: Callable[[Txn], T]) -> _Request | None:
        """A covered request, done at once: ``fn`` runs against an LMDB snapshot with the
        deferred changes over it, and its writes become one more deferred commit, visible
        to every reader from now on, written into LMDB later (module docstring). Its cover
        number is handed out only if ``fn`` succeeds (a failed one's chunk carries no record).
        None (nothing recorded: the caller commits it the synced way) when covering stopped
        while ``fn`` ran: the session is closing (``stop_covers``), its clean close may be
        written already, and a number from 1 again would lie below the journal's ``covered``:
        never written into LMDB, hidden from readers, never replayed (review19c)."""
        request = _Request(doing, fn, detached=True)
        with self._recording:
            try:
                self.fence(doing)
                changes: dict[str, dict[bytes, bytes | None]] = {}
                deferred = self._deferred  # before the snapshot: see ``_view_for``
                with transaction(self._env, write=False) as txn:
                    view = self._view_for(txn, deferred)
                    request.result = fn(Txn(txn, self._dbs, view, changes))
            except lmdb.Error as exc:
                request.error = _translate(
                    exc, f"journal commit failed for {doing} in {self.what}", self.path
                )
            except BaseException as exc:
                request.error = exc
            else:
                with self._group:
                    if not self._cover:
                        return None
                    self._cover += 1
                    request.cover = self._cover
                    request_time = time.monotonic()
                    entries = (*self._deferred[0], (request.cover, changes, request_time))
                    self._deferred = (entries, _merge(self._deferred[1], [changes]))
                    # arm the committer's clock, or it is due: beside this close's pack flush
                    wake = (
                        len(entries) in (1, DEFER_BATCH) or request_time - entries[0][2] >= self.defer_seconds
                    )
                if wake:
                    self._wake_committer()
        request.done = True
        request.wake.release()
        return request

    def _wake_committer(self) -> None:
        with self._group:
            if self._closed:
                return
            started = self._start_committer()
        if started:
            self._committer_go.put(None)
            return
        try:  # no committer thread to write them later: now, or at the next commit or close
            self.settle_deferred()
        except Exception as exc:  # in memory and in their packs: the next commit writes them
            log.warning("%s: the deferred commits stay deferred: %s", self.what, exc)

    def _start_committer(self) -> bool:
        """The committer thread, started on first use (caller holds ``_group``); False when it
        cannot start (``Thread.start`` raises: no threads or memory left), and the next call
        tries again. Why not let that raise: ``submit`` had queued its request and taken the
        lead for the thread, so its caller saw an error for a change still queued, the thread
        was kept unstarted, and nothing led the queue again: every later commit waited forever
        (leftovers22). Now the caller leads (``_hand_to_committer``)."""
        if self._committer is None:
            thread = threading.Thread(
                target=self._commit_loop, name=f"journal-{self.path.parent.name}", daemon=True
            )
            try:
                thread.start()
            except Exception as exc:
                log.warning(
                    "%s: the journal's committer thread cannot start (%s); callers commit", self.what, exc
                )
                return False
            self._committer = thread
        return True

    def _hand_to_committer(self) -> bool:
        """Hand the lead to the committer thread (the caller set ``_leading`` for it); False:
        the caller must lead (``_lead``) itself.

        Once the journal is closed the committer is gone: the caller leads instead, and the
        queued requests fail with the closed journal's error rather than wait forever. So it
        does when the thread cannot start: the requests commit, late but whole.
        """
        with self._group:
            if self._closed or not self._start_committer():
                return False
            self._committer_turn = True
        self._committer_go.put(None)
        return True

    def _commit_loop(self) -> None:
        retry_at = 0.0  # after a failed write of the deferred commits: not before this
        # a lost lease refuses every try until unmount: one warning, then a reminder (review19c)
        failures = FailureLog(log, self.what)
        while True:
            due = self._deferred_due(retry_at)
            if due is None or due > 0:
                try:
                    self._committer_go.get(timeout=due)
                except queue.Empty:
                    pass
            with self._group:
                turn, self._committer_turn = self._committer_turn, False
            if turn:
                self._lead()
            entries = self._deferred[0]  # decided on these, and only these are written
            due = self._deferred_due(retry_at, entries)
            if due is not None and due <= 0:
                try:
                    self.settle_deferred(upto=entries[-1][0])
                except Exception as exc:  # kept in memory and in their packs; tried again
                    failures.failed(f"{exc} (tried again every {self.retry_seconds:g} s)")
                    retry_at = time.monotonic() + max(self.defer_seconds, self.retry_seconds)
                else:
                    failures.succeeded("the deferred commits are written into the journal now")
            with self._group:  # a lead handed to this thread as close() began is still served
                if self._closed and not self._committer_turn:
                    return

    def _deferred_due(self, retry_at: float, entries: tuple | None = None) -> float | None:
        """Seconds until the deferred commits should be written (<= 0: now), None: none.
        Due after ``defer_seconds`` when a covered close came since (it woke us: its pack
        flush runs beside ours), else after twice that (module docstring). ``entries``: those
        of this list (default: the deferred commits now)."""
        entries = self._deferred[0] if entries is None else entries
        if not entries:
            return None
        now = time.monotonic()
        if len(entries) >= DEFER_BATCH:
            return max(0.0, retry_at - now)
        first, last = entries[0][2], entries[-1][2]
        wait = self.defer_seconds if last - first >= self.defer_seconds else 2 * self.defer_seconds
        return max(first + wait, retry_at) - now

    def _lead(self) -> None:
        """Commit the whole queue as one batch, wake its callers, then pass the lead to the
        first caller that queued meanwhile (or give it up). Only the leader commits. A
        submitted successor's lead goes to the committer thread, or, when it cannot start,
        stays here for the next batch (a loop, not a call: the queue may refill many times)."""
        lead = True
        while lead:
            lead = False
            with self._group:
                batch, self._queue = self._queue, []
            try:
                self._commit_batch(batch)
            finally:
                with self._group:
                    successor = self._queue[0] if self._queue else None
                    self._leading = successor is not None
                for request in batch:
                    request.done = True
                    request.wake.release()
                if successor is not None:
                    if successor.detached:
                        lead = not self._hand_to_committer()
                    else:
                        successor.wake.release()

    def _commit_batch(self, batch: list[_Request]) -> None:
        """One durable transaction for the batch, the deferred commits written first."""
        if not batch:
            return
        what = batch[0].doing if len(batch) == 1 else f"{len(batch)} operations"
        applied = 0
        shipper, token = self.shipper, None
        changes: dict[tuple[str, bytes], bytes | None] | None = {} if shipper is not None else None
        try:
            self.fence(what)  # before anything of the batch is committed: every request fails
            with transaction(self._env, write=True) as txn:
                applied = self._apply_deferred(txn, changes)
                for request in batch:
                    child = self._env.begin(write=True, parent=txn)
                    own: dict[tuple[str, bytes], bytes | None] | None = {} if changes is not None else None
                    try:
                        request.result = request.fn(Txn(child, self._dbs, shipped=own))
                    except BaseException as exc:
                        child.abort()
                        request.error = exc
                    else:
                        child.commit()
                        if changes is not None and own:
                            changes.update(own)  # an aborted request's changes are not shipped
                if shipper is not None and changes:  # in the shared tier first, or not committed
                    token = shipper.ship(changes)
                    shipper.landed(token, what)
            token = None  # committed: its record stands, whatever the flush does (``Shipper``)
            with using(self._env):
                self._env.sync(True)
        except lmdb.Error as exc:
            self._defer_failed = True
            _void(shipper, token)
            error = _translate(exc, f"journal commit failed for {what} in {self.what}", self.path)
            for request in batch:
                request.error = error
        except BaseException as exc:
            _void(shipper, token)
            for request in batch:
                request.error = exc
        else:
            self._forget_deferred(applied)

    def close(self) -> None:
        """Close; a commit the committer thread is running finishes first, then the deferred
        commits are written.

        In a forked child it only lets the inherited handle go (``datahub.lmdb_fork``): the
        deferred commits, the committer and the shipper are the parent's."""
        if self._pid != os.getpid():
            self._closed = True
            close_inherited(self._env)
            return
        with self._group:
            self._closed = True
            committer = self._committer
        if committer is not None:
            self._committer_go.put(None)
            committer.join()
        if not self._readonly:
            try:
                self.settle_deferred()
                with using(self._env):
                    self._env.sync(True)  # the last deferred commits' meta page
            except Exception as exc:  # their records are in the packs: recovery replays them
                log.warning("%s: closing with commits not written into the journal: %s", self.what, exc)
        if self.shipper is not None:
            self.shipper.close()
        with using(self._env):
            self._env.close()


def _merge(base: dict, changes: list[dict]) -> dict:
    """``base`` (not changed) with ``changes`` applied over it, in order, one dict per db."""
    merged = {db: dict(items) for db, items in base.items()}
    for change in changes:
        for db, items in change.items():
            merged.setdefault(db, {}).update(items)
    return merged


def _free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _translate(exc: BaseException, context: str, path: Path) -> Exception:
    """lmdb errors -> NoSpace or StorageError. LMDB reports a short write on a full device as
    EIO, so an I/O error while the device has (almost) no free space counts as ENOSPC."""
    text = str(exc)
    full = (
        isinstance(exc, lmdb.MapFullError)
        or getattr(exc, "errno", None) == errno.ENOSPC
        or "No space left" in text
        or "MDB_MAP_FULL" in text
    )
    if not full and ("Input/output error" in text or getattr(exc, "errno", None) == errno.EIO):
        free = _free_bytes(path)
        full = free is not None and free < _NEARLY_FULL
    if full:
        return NoSpace(f"{context}: no space left on the journal device ({text}); free space and retry")
    return StorageError(f"{context}: {text}")


def _void(shipper: Shipper | None, token: Any) -> None:
    """The transaction whose changes ``token`` ships did not commit: say so in the shared log."""
    if shipper is not None and token is not None:
        shipper.void(token)


def _unfenced(doing: str) -> None:
    """The fence of a workspace no lease guards (embedded, single-machine use: the flock only)."""
