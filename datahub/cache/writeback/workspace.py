"""A writable, durable, path-based namespace: the write-back profile's user API.

Durability rule: an operation is acknowledged when its journal transaction has committed.
``fsync``/``close`` first upload the file's dirty chunks to the shared tier as new immutable
objects, then commit the new chunk map in one LMDB transaction; a crash at any point leaves
either the old or the new state, never a mix. (A new file's first fsync does both at once;
see below.) Namespace operations (mkdir, rename, unlink …)
are single journal transactions. The flusher (``flusher.py``) copies dirty files to the
origin; ``Workspace`` only keeps the namespace and the open files.

Creating a file costs no journal commit of its own: a new file lives in an in-memory
overlay (``_pending``) until its first fsync/close, whose transaction writes its namespace
entry together with its data (one durable commit per small file instead of two; POSIX
lets a created file nobody fsynced vanish in a crash, and nothing half-written can reach
the journal). Namespace operations first write every pending file into their own
transaction, so they always see one namespace; creators and namespace transactions
exclude each other (``_creating``/``_ns_busy``, creators first: they wait only for a
running transaction, never hold I/O), and ``_ns_epoch`` tells a creator that a file left
the overlay for the journal between its lookup and its insert.

A new file's first fsync/close overlaps its chunk uploads with that transaction
(``OpenFile._commit_overlapped``): the record is committed *unverified* (it names chunks
that may not be durable yet) and the close returns once both are durable. Until the flag
is cleared lazily, the workspace remembers in memory which generations it saw complete
(``trust``); the flusher uploads only those, and recovery checks every flagged record's
chunks (``open_workspace``). Namespace transactions and overlapped commits exclude each
other (``_overlapping``; a waiting namespace operation sends new closes the sequential
way), so no namespace change is ever built on a record whose chunks may be missing.

Thread-safe: the FUSE daemon calls it from several worker threads. The namespace owns the
locks of the write-back core; the arrows between modules point one way (``workspace``
imports ``files``, ``flusher``, ``uploads``, ``journal``, ``chunks`` and ``ports``; none of
them imports it back: ``OpenFile`` and ``Flusher`` see it only through the protocols in
``ports.py``).

Lock order (take a lock only while holding locks listed above it, never the other way):

1. ``OpenFile._commit_lock`` (one file's fsync: upload, then journal commit) or
   ``Flusher._mutex`` (one flush or eviction at a time: origin I/O, then journal writes).
   Both are held across I/O; neither is ever taken while the other is held.
2. The journal's single writer (``Journal.write``/``apply``/``submit``; LMDB has one write
   transaction at a time). ``Journal._group`` guards the group-commit queue only and is
   never held while a change runs or while the disk syncs.
3. ``Workspace._lock`` (and ``_cond``, the same lock): the open-file registry, the overlay
   of created files, the namespace/creator/overlap counters and the trust maps. Taken inside
   journal transactions (``_materialise``), never held during I/O, and no other lock is
   taken while it is held (it only reads or sets plain attributes of an ``OpenFile``).
4. Leaves, each taken last and never nested with one another: ``OpenFile._lock`` (and
   ``_idle``; one file's buffers and upload bookkeeping; it calls nothing of the workspace
   that locks), ``Packs._lock``, ``Flusher._state`` (counters).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from datahub.cache.writeback import records
from datahub.cache.writeback.chunks import ChunkStore
from datahub.cache.writeback.files import FileHandle, OpenFile
from datahub.cache.writeback.flusher import FlushedObject, Flusher, FlushReport, Progress
from datahub.cache.writeback.journal import Journal, Txn
from datahub.cache.writeback.model import (
    DIR_MODE,
    FILE_MODE,
    ID_BLOCK,
    FileAttr,
    new_record,
    normalize,
    parent_of,
)
from datahub.cache.writeback.ports import NotFresh, OpenFileView
from datahub.cache.writeback.uploads import UploadPool
from datahub.errors import (
    AlreadyExists,
    InvalidInput,
    IsADirectory,
    NotADirectory,
    NotEmpty,
    NotFound,
)


class PendingCommit:
    """A file commit queued with ``Journal.submit``; ``result()`` waits for it and does the
    bookkeeping ``commit_file`` does after its transaction, in the waiting thread."""

    def __init__(self, ws: Workspace, file_id: int, request) -> None:
        self._ws, self._file_id, self._request = ws, file_id, request

    def result(self) -> int:
        delta, gen = self._request.wait()
        self._ws._settle({self._file_id})
        self._ws.on_commit(delta)
        return gen


class Workspace:
    """Use ``datahub.cache.writeback.open_workspace``; the constructor wires parts together."""

    def __init__(
        self,
        name: str,
        journal: Journal,
        chunks: ChunkStore,
        *,
        chunk_size: int,
        buffer_bytes: int,
        upload_concurrency: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.what = f"workspace {name!r}"
        self.journal = journal
        self.chunks = chunks
        self.chunk_size = chunk_size
        self.buffer_bytes = buffer_bytes
        self.max_inflight = max(2, buffer_bytes // chunk_size // 2)  # write-behind uploads per file
        self.clock = clock
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._open: dict[int, OpenFile] = {}
        self._opening: Counter[int] = Counter()
        self._evicting: set[int] = set()
        self._pending: dict[str, int] = {}  # path -> id of a created file not yet in the journal
        self._ns_busy = 0  # namespace transactions running (no file is created meanwhile)
        self._creating = 0  # creators between lookup and overlay insert (no namespace txn starts)
        self._ns_epoch = 0  # bumped whenever a file leaves the overlay for the journal
        self._ns_waiting = 0  # namespace transactions waiting for overlapped commits to end
        self._overlapping = 0  # first commits running alongside their uploads (no namespace txn)
        self._trusted: dict[int, int] = {}  # file id -> unverified generation seen fully durable
        self._unsound: dict[int, int] = {}  # file id -> unverified generation whose upload failed
        self._dropped: list[int] = []  # files deleted by the running namespace transaction
        self._free_ids: list[int] = []  # reserved file ids, next one last
        self.uploads = UploadPool(chunks, upload_concurrency, name)
        self.on_commit: Callable[[int], None] = lambda delta: None  # flusher hook: shared bytes delta
        self.flusher: Flusher  # set by open_workspace
        self.closers: list[Callable[[], None]] = []  # journal, stores, owner lock, flush server
        self._closed = False

    # --- lookups ---------------------------------------------------------------------------------
    def _lookup(self, txn: Txn, path: str) -> dict | None:
        """The entry at ``path``: a created, not yet committed file, or the journal's entry."""
        with self._lock:
            file_id = self._pending.get(path)
        return {"t": "f", "id": file_id} if file_id is not None else txn.entry(path)

    def _entry(self, txn: Txn, path: str) -> dict:
        entry = self._lookup(txn, path)
        if entry is None:
            self._check_parent(txn, path)
            raise NotFound(f"{path!r} not found in {self.what}", workspace=self.name, path=path)
        return entry

    def _check_parent(self, txn: Txn, path: str) -> None:
        parent = parent_of(path)
        entry = self._lookup(txn, parent)
        if entry is None:
            raise NotFound(
                f"directory {parent!r} not found in {self.what} (needed for {path!r}); create it first",
                workspace=self.name,
                path=path,
            )
        if entry["t"] != "d":
            raise NotADirectory(f"{parent!r} in {self.what} is a file, not a directory", path=path)

    def _attr(self, txn: Txn, entry: dict) -> FileAttr:
        if entry["t"] == "d":
            return FileAttr(0, entry["mtime"], True, entry["mode"])
        with self._lock:
            of = self._open.get(entry["id"])
        if of is not None:
            return FileAttr(of.size, of.mtime, False, of.mode)
        rec = txn.file(entry["id"]) or {"size": 0, "mtime": 0.0, "mode": FILE_MODE}
        return FileAttr(rec["size"], rec["mtime"], False, rec["mode"])

    def stat(self, path: str) -> FileAttr:
        path = normalize(path)
        with self.journal.read() as txn:
            return self._attr(txn, self._entry(txn, path))

    def listdir(self, path: str = "") -> list[tuple[str, FileAttr]]:
        path = normalize(path)
        with self.journal.read() as txn:
            if self._entry(txn, path)["t"] != "d":
                raise NotADirectory(f"{path!r} in {self.what} is a file, not a directory", path=path)
            entries = dict(txn.children(path))
            with self._lock:
                created = [(p, i) for p, i in self._pending.items() if parent_of(p) == path]
            for child, file_id in created:
                entries.setdefault(child.rpartition("/")[2], {"t": "f", "id": file_id})
            return [(name, self._attr(txn, entries[name])) for name in sorted(entries)]

    @contextmanager
    def _namespace_change(self, doing: str) -> Iterator[Txn]:
        """A namespace transaction that first writes every created, uncommitted file into the
        journal (so the operation sees one namespace: rmdir finds the directory not empty, a
        rename moves the file). No file is created while it runs; if it fails, the files
        stay pending, as its transaction is rolled back."""
        with self._cond:
            self._ns_waiting += 1
            try:
                while self._creating or self._overlapping:
                    self._cond.wait()
            finally:
                self._ns_waiting -= 1
            self._ns_busy += 1
            pending = dict(self._pending)
            unsound = dict(self._unsound)
        try:
            with self.journal.write(doing) as txn:
                self._dropped = []
                delta = sum(records.empty_unsound(txn, file_id, gen) for file_id, gen in unsound.items())
                for path, file_id in pending.items():
                    self._materialise(txn, path, file_id)
                yield txn
            self._settle(set(pending.values()))
            self.forget_trust(self._dropped)
            with self._lock:
                for file_id, gen in unsound.items():
                    if self._unsound.get(file_id) == gen:
                        del self._unsound[file_id]
            self.on_commit(delta)
        finally:
            with self._cond:
                self._ns_busy -= 1
                self._cond.notify_all()

    def _materialise(self, txn: Txn, path: str, file_id: int, *, committing: bool = False) -> dict | None:
        """Write a created file (empty: nothing of it is acknowledged yet) into the journal;
        returns its record, or None if it is no longer pending or already there.

        ``committing``: the caller (a file commit) found no record and writes the returned
        one itself; each LMDB call saved releases and re-takes the GIL one time less.
        """
        with self._lock:
            of = self._open.get(file_id)
            pending = of is not None and of.pending and self._pending.get(path) == file_id
        if not pending or not committing and txn.file(file_id) is not None:
            return None
        if txn.entry(path) is not None:
            raise AlreadyExists(f"{path!r} in {self.what} was created twice; close one and retry", path=path)
        self._check_parent(txn, path)
        rec = new_record(of.created)
        if not committing:
            txn.put_file(file_id, rec)
        txn.put_entry(path, {"t": "f", "id": file_id})
        return rec

    def _settle(self, ids: set[int]) -> None:
        """Committed files leave the overlay."""
        with self._cond:
            for file_id in ids:
                of = self._open.get(file_id)
                if of is not None and of.pending:  # a pending file's path is its overlay key
                    of.pending = False
                    del self._pending[of.path]
                    self._ns_epoch += 1

    # --- namespace changes -----------------------------------------------------------------------
    def mkdir(self, path: str) -> None:
        path = normalize(path)
        with self._namespace_change(f"mkdir {path!r}") as txn:
            if path == "" or txn.entry(path) is not None:
                raise AlreadyExists(f"{path or '/'!r} already exists in {self.what}", path=path)
            self._check_parent(txn, path)
            txn.put_entry(path, {"t": "d", "mtime": self.clock(), "mode": DIR_MODE})

    def rmdir(self, path: str) -> None:
        path = normalize(path)
        if path == "":
            raise InvalidInput(f"cannot remove the root directory of {self.what}")
        with self._namespace_change(f"rmdir {path!r}") as txn:
            if self._entry(txn, path)["t"] != "d":
                raise NotADirectory(f"{path!r} in {self.what} is a file; use unlink", path=path)
            if next(txn.children(path), None) is not None:
                raise NotEmpty(f"directory {path!r} in {self.what} is not empty", path=path)
            txn.del_entry(path)

    def _drop_file(self, txn: Txn, file_id: int) -> None:
        """The file left the namespace: delete it now, or at last close if it is still open."""
        with self._lock:
            of = self._open.get(file_id)
        rec = txn.file(file_id)
        if rec is None:
            return
        if of is not None:
            rec["unlinked"] = True
            txn.put_file(file_id, rec)
            of.unlinked = True  # a hint for _release (the journal decides)
        else:
            records.delete_file(txn, file_id, rec)
            self._dropped.append(file_id)

    def unlink(self, path: str) -> None:
        path = normalize(path)
        if path == "":
            raise IsADirectory(f"cannot unlink the root directory of {self.what}")
        with self._namespace_change(f"unlink {path!r}") as txn:
            entry = self._entry(txn, path)
            if entry["t"] == "d":
                raise IsADirectory(f"{path!r} in {self.what} is a directory; use rmdir", path=path)
            txn.del_entry(path)
            self._drop_file(txn, entry["id"])

    def rename(self, old: str, new: str) -> None:
        old, new = normalize(old), normalize(new)
        if old == "" or new == "":
            raise InvalidInput(f"cannot rename the root directory of {self.what}")
        if new.startswith(old + "/"):
            raise InvalidInput(f"cannot move {old!r} into itself ({new!r}) in {self.what}")
        with self._namespace_change(f"rename {old!r} -> {new!r}") as txn:
            entry = self._entry(txn, old)
            if old == new:
                return
            self._check_parent(txn, new)
            target = txn.entry(new)
            if target is not None:
                if entry["t"] == "d" and target["t"] != "d":
                    raise NotADirectory(f"cannot replace file {new!r} with directory {old!r}", path=new)
                if entry["t"] != "d" and target["t"] == "d":
                    raise IsADirectory(f"cannot replace directory {new!r} with file {old!r}", path=new)
                if target["t"] == "d" and next(txn.children(new), None) is not None:
                    raise NotEmpty(f"directory {new!r} in {self.what} is not empty", path=new)
                txn.del_entry(new)
                if target["t"] == "f":
                    self._drop_file(txn, target["id"])
            records.move_tree(txn, old, new, entry)
        self._renamed(old, new)

    def _renamed(self, old: str, new: str) -> None:
        with self._lock:
            for of in self._open.values():
                if of.path == old or of.path.startswith(old + "/"):
                    of.path = new + of.path[len(old) :]

    # --- files -----------------------------------------------------------------------------------
    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> FileHandle:
        path = normalize(path)
        if path == "":
            raise IsADirectory(f"cannot open the root directory of {self.what} as a file")
        entry, of = self._create(path) if create else (self._find(path), None)
        if of is None:
            if entry["t"] == "d":
                raise IsADirectory(f"{path!r} in {self.what} is a directory", path=path)
            of = self._acquire(entry["id"], path)
        handle = FileHandle(self, of, self._release)
        if truncate and of.size:
            handle.truncate(0)
        return handle

    def _find(self, path: str) -> dict:
        with self.journal.read() as txn:
            return self._entry(txn, path)

    def _create(self, path: str) -> tuple[dict, OpenFile | None]:
        """(entry, None) if ``path`` exists, else (entry, a new open file in the overlay,
        journaled by its first fsync/close). Creators keep namespace transactions from
        starting between their lookup and their insert (``_creating``); a file committed
        meanwhile leaves the overlay for the journal (``_ns_epoch``), so look again then."""
        file_id: int | None = self._new_id()
        with self._cond:
            self._creating += 1
            while self._ns_busy:
                self._cond.wait()
        try:
            while True:
                with self._lock:
                    epoch = self._ns_epoch
                with self.journal.read() as txn:
                    entry = self._lookup(txn, path)
                    if entry is None:
                        self._check_parent(txn, path)
                if entry is not None:
                    return entry, None
                with self._lock:
                    if self._ns_epoch != epoch or path in self._pending:
                        continue
                    of = OpenFile(self, file_id, path, new_record(self.clock()))
                    of.pending, of.refs = True, 1
                    self._open[file_id] = of
                    self._pending[path] = file_id
                    file_id = None
                    return {"t": "f", "id": of.id}, of
        finally:
            with self._cond:
                self._creating -= 1
                if file_id is not None:
                    self._free_ids.append(file_id)
                self._cond.notify_all()

    def _new_id(self) -> int:
        """A file id; ids are reserved in durable blocks, so none is reused after a crash."""
        with self._lock:
            if self._free_ids:
                return self._free_ids.pop()
        ids = self.journal.apply("reservation of file ids", lambda txn: txn.reserve_ids(ID_BLOCK))
        with self._lock:
            self._free_ids.extend(reversed(ids[1:]))
        return ids[0]

    def _acquire(self, file_id: int, path: str) -> OpenFile:
        with self._cond:
            while file_id in self._evicting:
                self._cond.wait()
            of = self._open.get(file_id)
            if of is not None:
                of.refs += 1
                return of
            self._opening[file_id] += 1  # keeps the evictor away while we read the record
        try:
            with self.journal.read() as txn:
                rec = txn.file(file_id)
            if rec is None:
                raise NotFound(f"{path!r} was removed from {self.what} while being opened", path=path)
            if rec.get("src"):
                rec = self.rehydrate(file_id, path, rec)
            with self._cond:
                of = self._open.setdefault(file_id, OpenFile(self, file_id, path, rec))
                of.refs += 1
                return of
        finally:
            with self._cond:
                self._opening[file_id] -= 1
                if not self._opening[file_id]:
                    del self._opening[file_id]

    def begin_evict(self, file_id: int) -> bool:
        """Reserve a closed file for eviction (False if open or being opened)."""
        with self._cond:
            if file_id in self._open or file_id in self._opening:
                return False
            self._evicting.add(file_id)
            return True

    def end_evict(self, file_id: int) -> None:
        with self._cond:
            self._evicting.discard(file_id)
            self._cond.notify_all()

    def rehydrate(self, file_id: int, path: str, rec: dict) -> dict:
        return self.flusher.rehydrate(file_id, path, rec)

    def _release(self, of: OpenFile) -> None:
        with self._lock:
            of.refs -= 1
            if of.refs > 0:
                return
            del self._open[of.id]
        if not of.unlinked:  # no namespace operation removed it while open: nothing to do
            return
        with self.journal.read() as txn:
            rec = txn.file(of.id)
        if rec is None or not rec.get("unlinked"):
            return
        with self.journal.write(f"close of unlinked {of.path!r}") as txn:
            rec = txn.file(of.id)
            if rec is not None and rec.get("unlinked"):
                records.delete_file(txn, of.id, rec)
        self.forget_trust([of.id])

    def journal_record(self, path: str) -> dict:
        """The committed journal record of a file (diagnostics and tests)."""
        path = normalize(path)
        with self.journal.read() as txn:
            entry = self._entry(txn, path)
            if entry["t"] != "f":
                raise IsADirectory(f"{path!r} in {self.what} is a directory", path=path)
            return txn.file(entry["id"]) or {}

    def truncate(self, path: str, size: int) -> None:
        with self.open(path) as handle:
            handle.truncate(size)

    def open_files(self) -> list[OpenFile]:
        with self._lock:
            return list(self._open.values())

    # --- used by OpenFile (files.FileHost) --------------------------------------------------------
    def upload_many(self, file_id: int, path: str, todo: list[tuple[int, bytes, int]]) -> list[str]:
        """Upload chunks in parallel (bounded pool); all succeed or the first error is raised."""
        return self.uploads.upload_many(file_id, path, todo)

    def submit_upload(self, file_id: int, index: int, data: bytes, path: str) -> Future:
        return self.uploads.submit_upload(file_id, index, data, path)

    def submit_write(self, key: str, data: bytes, path: str) -> Future:
        """Upload one chunk under a key chosen beforehand (a commit names it meanwhile)."""
        return self.uploads.submit_write(key, data, path)

    def submit_commit(
        self, file_id: int, path: str, size: int, mtime: float, chunks: dict, written: list[tuple[str, bytes]]
    ) -> PendingCommit:
        """``commit_file`` of an overlapped first commit, queued for the journal's next group
        commit while the caller writes the chunks ``written`` (key, bytes); their fingerprints
        are computed by the committing thread."""

        def change(txn: Txn) -> tuple[int, int]:
            proofs = {key: [len(data), self.chunks.fingerprint(data)] for key, data in written}
            return self._commit_in(txn, file_id, path, size, mtime, chunks, proofs)

        return PendingCommit(self, file_id, self.journal.submit(f"fsync of {path!r}", change))

    def begin_overlap(self) -> bool:
        """Enter an overlapped first commit, unless a namespace transaction runs or waits."""
        with self._cond:
            if self._ns_busy or self._ns_waiting:
                return False
            self._overlapping += 1
            return True

    def end_overlap(self) -> None:
        with self._cond:
            self._overlapping -= 1
            self._cond.notify_all()

    def trust(self, file_id: int, gen: int) -> None:
        """Generation ``gen`` of the file, committed unverified, is known to be wholly durable."""
        with self._lock:
            self._trusted[file_id] = gen

    def trusted(self, file_id: int, rec: dict) -> bool:
        """Whether the flusher may upload this record: verified, or unverified but seen durable."""
        if not rec.get("unverified"):
            return True
        with self._lock:
            return self._trusted.get(file_id) == rec["gen"]

    def forget_trust(self, file_ids: Iterable[int]) -> None:
        """The records' unverified flags were cleared in the journal."""
        with self._lock:
            for file_id in file_ids:
                self._trusted.pop(file_id, None)

    def undo_fresh(self, of: OpenFileView, gen: int) -> None:
        """An upload of a new file's overlapped first commit failed: take its record out of the
        journal again, so the file is back to created-but-unacknowledged (what the sequential
        way leaves after a failed upload). If even that fails, the record stays unverified:
        the flusher skips it, recovery drops it, a namespace operation writes it empty."""
        with self._cond:  # back into the overlay first, so no creator finds the path free
            self._pending[of.path] = of.id
            of.pending = True
        try:
            delta = self.journal.apply(
                f"undo of the failed first fsync of {of.path!r}",
                lambda txn: records.undo_first_commit(txn, of.id, of.path, gen, self.what),
            )
        except Exception:
            with self._cond:
                if self._pending.get(of.path) == of.id:
                    del self._pending[of.path]
                of.pending = False
                self._ns_epoch += 1
                self._unsound[of.id] = gen
            return
        self.on_commit(delta)

    def commit_file(
        self,
        file_id: int,
        path: str,
        size: int,
        mtime: float,
        chunks: dict,
        *,
        unverified: dict | None = None,
    ) -> int:
        """Point the file at its new chunks in one durable transaction; returns the new generation.

        ``unverified`` (key -> [length, fingerprint]) marks a first commit whose chunk uploads
        run alongside it; it raises ``NotFresh`` if the file is in the journal already.
        """
        delta, gen = self.journal.apply(
            f"fsync of {path!r}",
            lambda txn: self._commit_in(txn, file_id, path, size, mtime, chunks, unverified),
        )
        self._settle({file_id})
        if not unverified:
            with self._lock:
                self._trusted.pop(file_id, None)
                self._unsound.pop(file_id, None)
        self.on_commit(delta)
        return gen

    def _commit_in(
        self,
        txn: Txn,
        file_id: int,
        path: str,
        size: int,
        mtime: float,
        chunks: dict,
        unverified: dict | None,
    ) -> tuple[int, int]:
        existing = txn.file(file_id)
        if unverified:  # only a file nothing of which is durable yet may name chunks in flight
            rec = None if existing is not None else self._materialise(txn, path, file_id, committing=True)
            if rec is None:
                raise NotFresh(path)
        else:
            rec = existing or self._materialise(txn, path, file_id, committing=True)
        if rec is None:
            raise NotFound(f"{path!r} vanished from the journal of {self.what}", path=path)
        return records.point_at_chunks(txn, file_id, rec, size, mtime, chunks, unverified)

    def delete_unreferenced(self, keys: Iterable[str]) -> None:
        """Best effort: objects no journal entry references (a crash leaves them to the next GC)."""
        self.uploads.delete_unreferenced(keys)

    # --- flushing and shutdown ---------------------------------------------------------------------
    def flush(self, *, progress: Progress | None = None) -> FlushReport:
        """Upload every acknowledged change to the origin now (deletes and renames included)."""
        return self.flusher.flush(progress=progress)

    def dirty(self) -> list[str]:
        """Paths whose acknowledged content the origin does not hold yet."""
        return self.flusher.dirty_paths()

    def flushed_objects(self) -> list[FlushedObject]:
        """Clean files with the origin object that holds them (for commit_workspace)."""
        return self.flusher.flushed_objects()

    def stats(self) -> dict:
        return self.flusher.stats()

    def close(self) -> None:
        """Commit open files, flush everything to the origin, stop threads, release the lock.

        If the final flush fails the error is raised after everything is released: nothing
        acknowledged is lost (the journal keeps it dirty for the next opener).
        """
        if self._closed:
            return
        self._closed = True
        error: BaseException | None = None
        try:
            for of in self.open_files():
                of.fsync()
            self.flusher.stop()
            self.flusher.flush()
        except BaseException as exc:
            error = exc
        finally:
            self._shutdown()
        if error is not None:
            raise error

    def abandon(self) -> None:
        """Drop everything without committing or flushing: what a crash leaves (tests use it)."""
        self._closed = True
        self.flusher.stop()
        self._shutdown()

    def _shutdown(self) -> None:
        self.uploads.shutdown()
        for closer in self.closers:
            try:
                closer()
            except Exception:
                pass

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
