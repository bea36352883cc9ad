"""The write-back journal: one LMDB environment per workspace, the only module importing lmdb.

It holds everything a restart needs, so a committed transaction *is* the acknowledgement:

- ``tree``: the namespace. Key ``parent\\0name`` (so a directory listing is one prefix scan),
  value ``{"t": "d", "mtime", "mode"}`` or ``{"t": "f", "id": file_id}``.
- ``files``: file records by id: size, mtime, mode, generation, and the chunk map
  ``{index: [shared_key, length]}`` naming immutable chunk objects in the shared tier.
  ``src`` is set when the chunks were evicted and the bytes live only in the origin.
  ``unverified`` (``{key: [length, crc32 or null]}``) marks a new file's first commit whose
  chunk uploads ran alongside it; recovery checks those chunks (see ``Workspace``).
  ``unacked`` marks a created file a namespace operation wrote in as empty before any
  fsync or close of it succeeded: a revert removes it (``Workspace.revert``), and so does
  recovery after a crash (``open_workspace``); the file's next commit clears it.
- ``origin``: what the origin holds at each path (file id, generation, etag, size, sha256).
  A path is dirty exactly when ``origin`` does not match the tree's file id and generation,
  and an ``origin`` path missing from the tree is a pending delete: no separate dirty flag
  can disagree with the data.
- ``garbage``: chunk objects unreferenced by a committed transaction, deleted afterwards
  (crash-safe order: unreference, commit, then delete).

Durability: LMDB runs with ``metasync=False``. A commit writes the transaction's pages and
``fdatasync``s them, then writes the meta page that makes them current *without* a flush of
its own (the next commit's ``fdatasync`` covers it). LMDB keeps its integrity that way (the
pages a meta page points at are on disk before it is written); what a power loss can undo
is the last transaction. So every transaction is followed by ``env.sync()`` (the meta page
flushed: durable when it returns, as with ``sync=True``), except a group commit all of whose
requests are *covered*: a new small file's first commit whose record is also appended to
its pack beside the chunk and made durable by the pack's own ``fdatasync`` (``packs.py``,
"cover records"). Such a commit costs one journal flush instead of two; if a power loss
undoes it, recovery replays the record from the pack. Each covered request gets a number
(``cover``) in queue order, and every group commit stores the highest number handed out
before it began (``meta covered``): a record numbered above the recovered value was in the
undone transaction (or never committed); one at or below it was committed in a transaction
that is still there, so its absence means it was removed since (unlink) and it is not
replayed. A process kill loses nothing either way (the meta page was written before the
commit returned; only the kernel's page cache holds it until the next flush).
"""

from __future__ import annotations

import errno
import json
import os
import queue
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from datahub.errors import InvalidInput, NoSpace, StorageError

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


def _tree_key(path: str) -> bytes:
    parent, _, name = path.rpartition("/")
    return f"{parent}\0{name}".encode()


def _tree_path(key: bytes) -> str:
    parent, _, name = key.decode().partition("\0")
    return f"{parent}/{name}" if parent else name


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


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


class Txn:
    """A read or write transaction with typed helpers (values are plain dicts)."""

    def __init__(self, txn: Any, dbs: dict[str, Any]) -> None:
        self._txn = txn
        self._dbs = dbs

    # --- namespace ----------------------------------------------------------------------------
    def entry(self, path: str) -> dict | None:
        if path == "":
            return {"t": "d", "mtime": 0.0, "mode": 0o755}
        raw = self._txn.get(_tree_key(path), db=self._dbs["tree"])
        return _entry_of(raw) if raw is not None else None

    def put_entry(self, path: str, entry: dict) -> None:
        self._txn.put(_tree_key(path), _dump(entry), db=self._dbs["tree"])

    def del_entry(self, path: str) -> None:
        self._txn.delete(_tree_key(path), db=self._dbs["tree"])

    def _scan(self, db: str, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
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
        raw = self._txn.get(_ID.pack(file_id), db=self._dbs["files"])
        return json.loads(raw) if raw is not None else None

    def put_file(self, file_id: int, record: dict) -> None:
        self._txn.put(_ID.pack(file_id), _dump(record), db=self._dbs["files"])

    def del_file(self, file_id: int) -> None:
        self._txn.delete(_ID.pack(file_id), db=self._dbs["files"])

    def files(self) -> Iterator[tuple[int, dict]]:
        for key, value in self._scan("files", b""):
            yield _ID.unpack(key)[0], json.loads(value)

    def reserve_ids(self, count: int) -> range:
        """``count`` file ids nobody else will get, even after a crash (unused ones are skipped)."""
        raw = self._txn.get(b"next_id", db=self._dbs["meta"])
        first = int(raw) if raw is not None else 1
        self._txn.put(b"next_id", str(first + count).encode(), db=self._dbs["meta"])
        return range(first, first + count)

    # --- origin state -------------------------------------------------------------------------
    def origin(self, path: str) -> dict | None:
        raw = self._txn.get(path.encode(), db=self._dbs["origin"])
        return json.loads(raw) if raw is not None else None

    def put_origin(self, path: str, state: dict) -> None:
        self._txn.put(path.encode(), _dump(state), db=self._dbs["origin"])

    def del_origin(self, path: str) -> None:
        self._txn.delete(path.encode(), db=self._dbs["origin"])

    def origins(self) -> Iterator[tuple[str, dict]]:
        for key, value in self._scan("origin", b""):
            yield key.decode(), json.loads(value)

    # --- resumable scans (flushmem19: the flusher plans a batch per read transaction) ----------
    def _after(self, db: str, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries of ``db`` whose key sorts after ``start`` (b"": all), in key order."""
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

    def origins_after(self, after: str | None) -> Iterator[tuple[str, dict]]:
        """``origins`` from after path ``after`` (None: from the start), in path order."""
        for key, value in self._after("origin", b"" if after is None else after.encode()):
            yield key.decode(), json.loads(value)

    # --- garbage ------------------------------------------------------------------------------
    def add_garbage(self, keys: list[str]) -> None:
        for key in keys:
            self._txn.put(key.encode(), b"", db=self._dbs["garbage"])

    def del_garbage(self, keys: list[str]) -> None:
        for key in keys:
            self._txn.delete(key.encode(), db=self._dbs["garbage"])

    def garbage(self) -> list[str]:
        return [k.decode() for k, _ in self._scan("garbage", b"")]

    # --- metadata -----------------------------------------------------------------------------
    def meta(self, name: str) -> str | None:
        raw = self._txn.get(name.encode(), db=self._dbs["meta"])
        return raw.decode() if raw is not None else None

    def put_meta(self, name: str, value: str) -> None:
        self._txn.put(name.encode(), value.encode(), db=self._dbs["meta"])

    def del_meta(self, name: str) -> None:
        self._txn.delete(name.encode(), db=self._dbs["meta"])

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
        # called with what is being done before every write transaction; raises (StorageError)
        # once this process may no longer write the workspace (``lease.WriterLease.check``)
        self.fence: Callable[[str], None] = _unfenced

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInput(f"{self.what} is closed; open it again")

    @contextmanager
    def read(self) -> Iterator[Txn]:
        self._check_open()
        with self._env.begin(write=False) as txn:
            yield Txn(txn, self._dbs)

    @contextmanager
    def write(self, doing: str) -> Iterator[Txn]:
        """A write transaction; ``doing`` (e.g. "fsync of 'a/b'") names the operation in errors."""
        self._check_open()
        self.fence(doing)
        try:
            with self._env.begin(write=True) as txn:
                yield Txn(txn, self._dbs)
            self._env.sync(True)  # the meta page too: durable when we return
        except lmdb.Error as exc:
            raise _translate(exc, f"journal commit failed for {doing} in {self.what}", self.path) from exc

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
        request = _Request(doing, fn, detached=True)
        with self._group:
            if covered and self._cover:
                self._cover += 1
                request.cover = self._cover
            self._queue.append(request)
            if self._leading:
                return request
            self._leading = True
        self._hand_to_committer()
        return request

    def _hand_to_committer(self) -> None:
        """The lead goes to the committer thread (the caller set ``_leading`` for it).

        Once the journal is closed the committer is gone: the caller leads instead, and the
        queued requests fail with the closed journal's error rather than wait forever.
        """
        with self._group:
            closed = self._closed
            if not closed:
                self._committer_turn = True
                if self._committer is None:
                    self._committer = threading.Thread(
                        target=self._commit_loop, name=f"journal-{self.path.parent.name}", daemon=True
                    )
                    self._committer.start()
        if closed:
            self._lead()
        else:
            self._committer_go.put(None)

    def _commit_loop(self) -> None:
        while True:
            self._committer_go.get()
            with self._group:
                turn, self._committer_turn = self._committer_turn, False
            if turn:
                self._lead()
            with self._group:  # a lead handed to this thread as close() began is still served
                if self._closed and not self._committer_turn:
                    return

    def _lead(self) -> None:
        """Commit the whole queue as one batch, wake its callers, then pass the lead to the
        first caller that queued meanwhile (or give it up). Only the leader commits."""
        with self._group:
            batch, self._queue = self._queue, []
            covered = self._cover  # every number handed out so far is in this batch or before
        try:
            self._commit_batch(batch, covered)
        finally:
            with self._group:
                successor = self._queue[0] if self._queue else None
                self._leading = successor is not None
            for request in batch:
                request.done = True
                request.wake.release()
            if successor is not None:
                if successor.detached:
                    self._hand_to_committer()
                else:
                    successor.wake.release()

    def _commit_batch(self, batch: list[_Request], covered: int) -> None:
        """One transaction for the batch; its meta page is flushed (``env.sync``) unless every
        request in it is covered by a record in a pack."""
        if not batch:
            return
        what = batch[0].doing if len(batch) == 1 else f"{len(batch)} operations"
        try:
            self.fence(what)  # before anything of the batch is committed: every request fails
            with self._env.begin(write=True) as txn:
                if covered:
                    txn.put(COVERED.encode(), str(covered).encode(), db=self._dbs["meta"])
                for request in batch:
                    child = self._env.begin(write=True, parent=txn)
                    try:
                        request.result = request.fn(Txn(child, self._dbs))
                    except BaseException as exc:
                        child.abort()
                        request.error = exc
                    else:
                        child.commit()
            if not all(request.cover for request in batch):
                self._env.sync(True)
        except lmdb.Error as exc:
            error = _translate(exc, f"journal commit failed for {what} in {self.what}", self.path)
            for request in batch:
                request.error = error
        except BaseException as exc:
            for request in batch:
                request.error = exc

    def close(self) -> None:
        """Close; a commit the committer thread is running finishes first."""
        with self._group:
            self._closed = True
            committer = self._committer
        if committer is not None:
            self._committer_go.put(None)
            committer.join()
        if not self._readonly:
            try:
                self._env.sync(True)  # the last covered commit's meta page
            except lmdb.Error:
                pass  # its records are in the packs: recovery replays them if it is lost
        self._env.close()


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


def _unfenced(doing: str) -> None:
    """The fence of a workspace no lease guards (embedded, single-machine use: the flock only)."""
