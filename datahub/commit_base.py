"""What a workspace commit streams instead of holding: the journal's merge base, one entry per
file, and the commit's own rows spilled to a temporary file (issue 38, commitmem18).

Why: ``datahub.workspaces.commit_workspace`` held the workspace's flushed objects, the head's
records, the merge base and the change set at once: 1.1 GB of heap at 10^6 files. Every one of
them is sortable by key, so the commit now walks them side by side in key order (``joined``),
a batch of keys at a time, and keeps what it needs again later (the change set for the
catalog, each file's identity for ``Base.expect``/``settle``) on disk (``Spill``).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import pickle
import tempfile
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from datahub.errors import StorageError

BATCH = 10_000  # keys merged, pinned, read or written at once: a commit's memory is O(BATCH)
BASE_META = "committed:"  # journal meta name prefix of ``Base``: ``committed:<dataset>``
UNSETTLED = ""  # ``Base``: first of a key's identities if a commit of it may not have landed
MAX_NAME = 511  # bytes of an LMDB key (the journal's default build)
_SHORT, _LONG = "\0", "\1"  # ``committed:<dataset>\0<key>``; ``\1<sha256(key)>`` when that is too long


def joined(*streams: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, list]]:
    """Streams of ``(key, value)`` in ascending key order, values never None, walked side by
    side: each key once, with the value each stream has for it (None where it has none).
    Raises StorageError if a stream is out of order or repeats a key (the merged keys then go
    back, or a stream fills its slot twice): the walk would take a key for missing from it,
    and a catalog store whose order is not Python's would have the commit put and delete the
    wrong files."""
    tagged = [_tagged(s, i) for i, s in enumerate(streams)]
    current: str | None = None
    values: list = []
    for key, i, value in heapq.merge(*tagged):
        if key != current:
            if current is not None:
                if key < current:
                    raise _out_of_order(i, current, key)
                yield current, values
            current, values = key, [None] * len(streams)
        elif values[i] is not None:
            raise _out_of_order(i, current, key)
        values[i] = value
    if current is not None:
        yield current, values


def _tagged(stream: Iterable[tuple[str, Any]], i: int) -> Iterator[tuple[str, int, Any]]:
    """``(key, i, value)``: tagged with its stream, so a merge never compares two values."""
    for key, value in stream:
        yield key, i, value


def _out_of_order(i: int, last: str, key: str) -> StorageError:
    return StorageError(
        f"keys out of order in stream {i} of a workspace commit ({last!r}, then {key!r}); "
        "nothing was committed: report this (the catalog store must list records in key order)"
    )


def batches(rows: Iterator[Any], size: int | None = None) -> Iterator[list]:
    """``rows`` a list of ``size`` (default ``BATCH``) at a time; at least one (empty) list, so
    a step that checks its preconditions per batch checks them for an empty commit too."""
    size = size or BATCH
    first = True
    while True:
        batch = list(islice(rows, size))
        if batch or first:
            yield batch
        if len(batch) < size:
            return
        first = False


class Spill:
    """Rows written once, in order, then read back in that order as often as needed, from a
    temporary file: what a commit would otherwise hold in memory for every file. Pickled a
    batch of rows at a time (one row a time cost 20 us a row to read back)."""

    def __init__(self) -> None:
        # closed by ``close``/the with block of its owner, not here: it outlives this call
        self._file = tempfile.TemporaryFile(prefix="datahub-commit-")  # noqa: SIM115
        self._pending: list[tuple] = []
        self._dumps = 0
        self.count = 0

    def add(self, row: tuple) -> None:
        self._pending.append(row)
        self.count += 1
        if len(self._pending) >= BATCH:
            self._dump()

    def _dump(self) -> None:
        pickle.dump(self._pending, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._pending = []
        self._dumps += 1

    def rows(self) -> Iterator[tuple]:
        if self._pending:
            self._dump()
        self._file.flush()
        self._file.seek(0)
        for _ in range(self._dumps):
            yield from pickle.load(self._file)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_idents(stored: list) -> list[str]:
    """A key's identities as an old journal holds them; merge17's (each identity's fields) as
    their digests behind UNSETTLED: its union after a lost commit looked like a settled
    commit's, so none of them is taken for one."""
    if all(isinstance(i, str) for i in stored):
        return stored
    return [UNSETTLED, *(i if isinstance(i, str) else digest(i) for i in stored)]


def digest(fields: list) -> str:
    """128 bits of the sha256 of an identity's fields, in hex. Why not the fields: the journal
    keeps one identity per committed file, and with URLs of a blob store the fields took 260
    bytes a file (review17c)."""
    return hashlib.sha256("\0".join(map(str, fields)).encode()).hexdigest()[:32]


class Base:
    """The records this journal's commits put into one dataset, by key: the merge base.

    Why in the journal: the base is what *this* workspace committed, not a version: a
    version also holds files others committed (its first commit into an imported dataset
    keeps them, and a later commit must keep them still), so it cannot say which of its files
    were the workspace's. A new journal (another node, a recreated workspace) has none and
    deletes nothing.

    Layout: one journal meta entry per key, ``committed:<dataset>\\0<key>``, its identities
    joined by commas (a key too long for an LMDB name: ``committed:<dataset>\\1<sha256>``,
    valued ``<key>\\0<identities>``). Read in key order a range at a time (``scan``) and
    written a batch at a time, so a commit of 10^6 files never holds the base. Before
    commitmem18 it was one JSON object under ``committed:<dataset>``, read and written whole
    (1.1 GB of heap with the rest at 10^6 files); such a journal is migrated on first use.

    Crash safety without asking the catalog: before the catalog commit, ``expect`` stores the
    union of the old records and the ones being committed (both are this workspace's); after
    it, ``settle`` stores the committed ones alone (a key the commit may delete is stored
    unsettled before it: ``Writes.note``). A crash or a failed commit between the two
    leaves the union, so the next commit deletes a file the workspace lacks if the head holds
    either record of it: the one committed before, or the one the lost commit put, if it
    landed. Only a record this journal put is ever deleted, whichever way the commit went.
    A key whose list is one record (no ``UNSETTLED``) was settled: a version holds it. Each is
    written in several transactions now, and a crash between two leaves some keys as they were
    and some as they were to be: each key's entry is one of the two states above, and the
    rules are per key, so either is safe (a key still unioned is put again, or deleted if the
    head holds either record)."""

    def __init__(self, workspace: Any, dataset: str) -> None:
        self._journal = workspace.journal
        self._name = f"{BASE_META}{dataset}"
        self._prefix = f"{self._name}{_SHORT}"
        self._migrate()

    def scan(self) -> Iterator[tuple[str, list[str]]]:
        """(key, identities) of every key of the base, in key order."""
        longs = []  # rare (keys near the journal's own limit): few enough to sort in memory
        with self._journal.read() as txn:
            for _, value in txn.metas(f"{self._name}{_LONG}"):
                key, _, idents = value.partition("\0")
                longs.append((key, idents.split(",")))
        yield from heapq.merge(self._short(), sorted(longs))

    def _short(self) -> Iterator[tuple[str, list[str]]]:
        after, cut = "", len(self._prefix)
        while True:
            with self._journal.read() as txn:  # a range per transaction: none held across writes
                chunk = list(islice(txn.metas(self._prefix, after), BATCH))
            for name, value in chunk:
                yield name[cut:], value.split(",")
            if len(chunk) < BATCH:
                return
            after = chunk[-1][0][cut:]

    def expect(self, entries: Iterable[tuple[str, list[str] | None]]) -> None:
        """Before the catalog commit: the records being committed may be the head's from now
        on (``entries``: ``Writes.expected``, each key's union)."""
        self._apply(entries)

    def settle(self, entries: Iterable[tuple[str, list[str] | None]]) -> None:
        """After the commit (or none needed): the workspace's files as its commits put them,
        each held by a version (the head, or for a file unchanged since whose head record
        someone changed, the version that put it); no other key (``Writes.settled``)."""
        self._apply(entries)

    def _apply(self, entries: Iterable[tuple[str, list[str] | None]]) -> None:
        for batch in batches(iter(entries)):
            self._write(batch)

    def _write(self, entries: list[tuple[str, list[str] | None]], drop_old: bool = False) -> None:
        """One durable transaction of ``entries`` (None: the key leaves the base). Values are
        encoded before it: it holds off the workspace's other writers (a close, an fsync)."""
        if not entries and not drop_old:
            return
        encoded = [(*self._entry_name(key), key, None if i is None else ",".join(i)) for key, i in entries]
        dataset = self._name[len(BASE_META) :]
        with self._journal.write(f"record of the files committed to {dataset!r}") as txn:
            for name, long, key, value in encoded:
                if value is None:
                    txn.del_meta(name)
                else:
                    txn.put_meta(name, f"{key}\0{value}" if long else value)
            if drop_old:
                txn.del_meta(self._name)

    def _entry_name(self, key: str) -> tuple[str, bool]:
        name = f"{self._prefix}{key}"
        if len(name.encode()) <= MAX_NAME:
            return name, False
        return f"{self._name}{_LONG}{hashlib.sha256(key.encode()).hexdigest()}", True

    def _migrate(self) -> None:
        """An old journal's base (one JSON object) as one entry per key; the old entry goes in
        the last transaction, so a crash midway migrates again from the start."""
        with self._journal.read() as txn:
            raw = txn.meta(self._name)
        if raw is None:
            return
        stored: dict[str, list] = json.loads(raw)
        del raw
        items = iter(sorted(stored.items()))
        for batch in batches(items):
            self._write([(key, read_idents(idents)) for key, idents in batch])
        self._write([], drop_old=True)


class Writes:
    """What ``Base.expect`` and ``Base.settle`` store, worked out key by key during the
    commit's walk (which reads the base anyway) and spilled: each store then writes only the
    keys it changes, without reading the base or the workspace's files again. Entries are
    ``(key, identities)``, None for a key that leaves the base."""

    def __init__(self) -> None:
        self.expected = Spill()
        self.settled = Spill()

    def note(self, key: str, ident: str | None, idents: list[str] | None) -> None:
        """The workspace's record at ``key`` has identity ``ident`` (None: it has no file
        there); the base holds ``idents`` (None: no entry)."""
        if ident is None:
            if idents is not None:  # no longer the workspace's: whatever the commit did
                if idents[0] != UNSETTLED:
                    # the commit may delete it: unsettled until it is known to have landed, or
                    # a file written again with the same bytes after a commit whose reply was
                    # lost looked unchanged since a settled commit, and the head's lack of it
                    # (this very delete) someone's change to keep: left out (review19a)
                    self.expected.add((key, [UNSETTLED, *idents]))
                self.settled.add((key, None))
            return
        if idents is not None and len(idents) == 1 and idents[0] == ident:
            return  # settled, and committed again as it is: nothing to write (most keys)
        # a key new to the base starts with UNSETTLED: its one record is not yet known to be
        # the head's (``_unchanged`` must not take it for a settled commit's)
        union = list(idents) if idents is not None else [UNSETTLED]
        if ident not in union:
            union.append(ident)
        if union != idents:
            self.expected.add((key, union))
        if idents != [ident]:
            self.settled.add((key, [ident]))

    def close(self) -> None:
        self.expected.close()
        self.settled.close()

    def __enter__(self) -> Writes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
