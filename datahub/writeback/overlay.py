"""The namespace's memory: open files, created files not yet journaled, and the counters
that order creators, namespace transactions and overlapped first commits, under one lock.

This module owns lock 3 of the write-back core (``Overlay.lock``, and ``cond``, the same
lock; the whole order is written in ``workspace``'s docstring). Every method takes it for
a few plain reads and writes, never during I/O, and takes no other lock while holding it:
it only reads or sets plain attributes of an ``OpenFile``. The namespace operations
(``workspace``) and the file commits (``commits``) both go through it, so the rules of
who may run alongside whom live here once.

Lookups see one namespace: the journal's entries plus the created files of the overlay
(``pending``: path -> file id of a file nothing of which is journaled yet). A namespace
transaction first writes every pending file into the journal (``materialise``); creators
and namespace transactions exclude each other (creators first: they wait only for a
running transaction), and ``epoch`` tells a creator that a file left the overlay for the
journal between its lookup and its insert. Namespace transactions and overlapped first
commits exclude each other too (a waiting namespace operation sends new closes the
sequential way). ``trusted``/``unsound`` remember which unverified generations this
process saw wholly durable, or saw fail and could not take back.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable

from datahub.errors import AlreadyExists, NotADirectory, NotFound
from datahub.writeback.files import OpenFile
from datahub.writeback.journal import Txn
from datahub.writeback.model import new_record, parent_of


class Overlay:
    def __init__(self, name: str, what: str) -> None:
        self.name = name
        self.what = what  # "workspace 'name'", for messages
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self._open: dict[int, OpenFile] = {}
        self._opening: Counter[int] = Counter()  # ids being opened (their record is being read)
        self._evicting: set[int] = set()
        self._pending: dict[str, int] = {}  # path -> id of a created file not yet in the journal
        self.ns_busy = 0  # namespace transactions running (no file is created meanwhile)
        self.creating = 0  # creators between lookup and overlay insert (no namespace txn starts)
        self.epoch = 0  # bumped whenever a file leaves the overlay for the journal
        self.ns_waiting = 0  # namespace transactions waiting for overlapped commits to end
        self.overlapping = 0  # first commits running alongside their uploads (no namespace txn)
        self._trusted: dict[int, int] = {}  # file id -> unverified generation seen fully durable
        self._unsound: dict[int, int] = {}  # file id -> unverified generation whose upload failed
        self._free_ids: list[int] = []  # reserved file ids, next one last

    # --- lookups over the journal and the overlay --------------------------------------------------
    def lookup(self, txn: Txn, path: str) -> dict | None:
        """The entry at ``path``: a created, not yet committed file, or the journal's entry."""
        with self.lock:
            file_id = self._pending.get(path)
        return {"t": "f", "id": file_id} if file_id is not None else txn.entry(path)

    def entry(self, txn: Txn, path: str) -> dict:
        entry = self.lookup(txn, path)
        if entry is None:
            self.check_parent(txn, path)
            raise NotFound(f"{path!r} not found in {self.what}", workspace=self.name, path=path)
        return entry

    def check_parent(self, txn: Txn, path: str) -> None:
        parent = parent_of(path)
        entry = self.lookup(txn, parent)
        if entry is None:
            raise NotFound(
                f"directory {parent!r} not found in {self.what} (needed for {path!r}); create it first",
                workspace=self.name,
                path=path,
            )
        if entry["t"] != "d":
            raise NotADirectory(f"{parent!r} in {self.what} is a file, not a directory", path=path)

    def created_in(self, directory: str) -> list[tuple[str, int]]:
        """(path, file id) of the created, uncommitted files directly in ``directory``."""
        with self.lock:
            return [(p, i) for p, i in self._pending.items() if parent_of(p) == directory]

    def materialise(self, txn: Txn, path: str, file_id: int, *, committing: bool = False) -> dict | None:
        """Write a created file (empty: nothing of it is acknowledged yet) into the journal;
        returns its record, or None if it is no longer pending or already there.

        ``committing``: the caller (a file commit) found no record and writes the returned
        one itself; each LMDB call saved releases and re-takes the GIL one time less.
        """
        with self.lock:
            of = self._open.get(file_id)
            pending = of is not None and of.pending and self._pending.get(path) == file_id
        if not pending or not committing and txn.file(file_id) is not None:
            return None
        if txn.entry(path) is not None:
            raise AlreadyExists(f"{path!r} in {self.what} was created twice; close one and retry", path=path)
        self.check_parent(txn, path)
        rec = new_record(of.created)
        if not committing:  # journaled by a namespace operation: nothing of it acknowledged yet
            rec["unacked"] = True
            of.unacked = True  # its next fsync or close commits it, even unchanged
            txn.put_file(file_id, rec)
        txn.put_entry(path, {"t": "f", "id": file_id})
        return rec

    def settle(self, ids: Iterable[int]) -> None:
        """Committed files leave the overlay."""
        with self.cond:
            for file_id in ids:
                of = self._open.get(file_id)
                if of is not None and of.pending:  # a pending file's path is its overlay key
                    of.pending = False
                    del self._pending[of.path]
                    self.epoch += 1

    # --- who runs alongside whom ------------------------------------------------------------------
    def begin_namespace(self) -> tuple[dict[str, int], dict[int, int]]:
        """Wait until no creator and no overlapped commit runs, then keep both out; returns
        (the pending files, the unsound generations) the transaction writes into the journal."""
        with self.cond:
            self.ns_waiting += 1
            try:
                while self.creating or self.overlapping:
                    self.cond.wait()
            finally:
                self.ns_waiting -= 1
            self.ns_busy += 1
            return dict(self._pending), dict(self._unsound)

    def end_namespace(self) -> None:
        with self.cond:
            self.ns_busy -= 1
            self.cond.notify_all()

    def begin_create(self) -> None:
        """A creator looks up its path; no namespace transaction starts until ``end_create``."""
        with self.cond:
            self.creating += 1
            while self.ns_busy:
                self.cond.wait()

    def end_create(self, unused_id: int | None) -> None:
        with self.cond:
            self.creating -= 1
            if unused_id is not None:
                self._free_ids.append(unused_id)
            if self.ns_waiting:  # only ``begin_namespace`` waits for creators (``end_overlap``)
                self.cond.notify_all()

    def insert_created(self, path: str, epoch: int, make: Callable[[], OpenFile]) -> OpenFile | None:
        """Put a new open file (``make()``) at ``path`` in the overlay, unless a file left the
        overlay since ``epoch`` or another creator got there first (None: look again)."""
        with self.lock:
            if self.epoch != epoch or path in self._pending:
                return None
            of = make()
            of.pending, of.refs = True, 1
            self._open[of.id] = of
            self._pending[path] = of.id
            return of

    def begin_overlap(self) -> bool:
        """Enter an overlapped first commit, unless a namespace transaction runs or waits."""
        with self.cond:
            if self.ns_busy or self.ns_waiting:
                return False
            self.overlapping += 1
            return True

    def end_overlap(self) -> None:
        """Why the notify only when a namespace transaction waits (small41c): ``creating`` and
        ``overlapping`` are what ``begin_namespace`` waits on, and nothing else waits on them
        (the other waiters wait for ``ns_busy`` or an eviction, which their own ends notify);
        ``ns_waiting`` is counted under the same lock before it waits. Every small file's
        close and create notified an empty condition, a Python-level call each."""
        with self.cond:
            self.overlapping -= 1
            if self.ns_waiting:
                self.cond.notify_all()

    def creates_now(self) -> bool:
        """Whether a creator would neither wait nor commit now: a reserved file id is in hand
        (no durable reservation to run) and no namespace transaction is running (creators
        wait for a running one, not for a waiting one). A hint: it may change at once."""
        with self.lock:
            return bool(self._free_ids) and not self.ns_busy

    # --- file ids -----------------------------------------------------------------------------
    def take_id(self) -> int | None:
        with self.lock:
            return self._free_ids.pop() if self._free_ids else None

    def add_ids(self, ids: list[int]) -> None:
        """Reserved ids for later creators; the first one is used next."""
        with self.lock:
            self._free_ids.extend(reversed(ids))

    # --- the open-file registry -------------------------------------------------------------------
    def open_file(self, file_id: int) -> OpenFile | None:
        with self.lock:
            return self._open.get(file_id)

    def open_files(self) -> list[OpenFile]:
        with self.lock:
            return list(self._open.values())

    def held_ids(self) -> set[int]:
        """Ids of the open files and of those being opened: a file being opened has read its
        record already (``Workspace._acquire``), so the chunks it names are read by the handle
        about to exist even if an unlink or a rewrite lists them as garbage meanwhile
        (review20d: the collector kept the open files' garbage only)."""
        with self.lock:
            return set(self._open) | set(self._opening)

    def begin_acquire(self, file_id: int) -> OpenFile | None:
        """The open file with one more reference, or None: then the caller reads its record
        (the evictor stays away) and calls ``finish_acquire``, then ``end_acquire``."""
        with self.cond:
            while file_id in self._evicting:
                self.cond.wait()
            of = self._open.get(file_id)
            if of is not None:
                of.refs += 1
                return of
            self._opening[file_id] += 1
            return None

    def finish_acquire(self, file_id: int, make: Callable[[], OpenFile]) -> OpenFile:
        with self.lock:
            of = self._open.get(file_id)
            if of is None:
                of = self._open[file_id] = make()
            of.refs += 1
            return of

    def end_acquire(self, file_id: int) -> None:
        with self.lock:
            self._opening[file_id] -= 1
            if not self._opening[file_id]:
                del self._opening[file_id]

    def release(self, of: OpenFile) -> bool:
        """Drop one reference; True if it was the last (the file left the registry)."""
        with self.lock:
            of.refs -= 1
            if of.refs > 0:
                return False
            del self._open[of.id]
            return True

    def begin_evict(self, file_id: int) -> bool:
        """Reserve a closed file for eviction (False if open or being opened)."""
        with self.cond:
            if file_id in self._open or file_id in self._opening:
                return False
            self._evicting.add(file_id)
            return True

    def end_evict(self, file_id: int) -> None:
        with self.cond:
            self._evicting.discard(file_id)
            self.cond.notify_all()

    def renamed(self, old: str, new: str) -> None:
        with self.lock:
            for of in self._open.values():
                if of.path == old or of.path.startswith(old + "/"):
                    of.path = new + of.path[len(old) :]

    # --- unverified generations ----------------------------------------------------------------
    def trust(self, file_id: int, gen: int) -> None:
        """Generation ``gen`` of the file, committed unverified, is known to be wholly durable."""
        with self.lock:
            self._trusted[file_id] = gen

    def trusted(self, file_id: int, rec: dict) -> bool:
        """Whether the flusher may upload this record: verified, or unverified but seen durable."""
        if not rec.get("unverified"):
            return True
        with self.lock:
            return self._trusted.get(file_id) == rec["gen"]

    def forget_trust(self, file_ids: Iterable[int]) -> None:
        """The records' unverified flags were cleared in the journal."""
        with self.lock:
            for file_id in file_ids:
                self._trusted.pop(file_id, None)

    def verified(self, file_id: int) -> None:
        """A verified record of the file was committed: nothing to remember about it."""
        with self.lock:
            self._trusted.pop(file_id, None)
            self._unsound.pop(file_id, None)

    def forget_unsound(self, unsound: dict[int, int]) -> None:
        """A namespace transaction wrote these unsound generations empty."""
        with self.lock:
            for file_id, gen in unsound.items():
                if self._unsound.get(file_id) == gen:
                    del self._unsound[file_id]

    def repend(self, of: OpenFile) -> None:
        """A failed first commit is being taken back: the file is pending again (first, so
        no creator finds its path free meanwhile)."""
        with self.cond:
            self._pending[of.path] = of.id
            of.pending = True

    def drop_pending(self, of: OpenFile) -> bool:
        """Take a created file out of the overlay without journaling it (``OpenFile.drop``);
        False if it is no longer pending. Waits for a running namespace transaction, which
        may be journaling it (``materialise``); none starts while the lock is held."""
        with self.cond:
            while self.ns_busy:
                self.cond.wait()
            if not of.pending or self._pending.get(of.path) != of.id:
                return False
            del self._pending[of.path]
            of.pending = False
            return True

    def keep_unsound(self, of: OpenFile, gen: int) -> None:
        """Taking a failed first commit back failed too: its record stays in the journal,
        unverified (the flusher skips it, recovery drops it, a namespace operation writes
        it empty)."""
        with self.cond:
            if self._pending.get(of.path) == of.id:
                del self._pending[of.path]
            of.pending = False
            self.epoch += 1
            self._unsound[of.id] = gen
