"""Revision arithmetic shared by every catalog store: commit planning and diff merging.

A record revision is live in the half-open range ``from_seq <= v < to_seq``; the head's
live revisions have ``to_seq == OPEN``. A commit of version ``new`` on ``base`` may only:

- *close* a base revision (``to_seq = new``) when the commit replaces or deletes its key,
- *reopen* it (``to_seq = OPEN``) when a later change in the same commit restores it,
- *upsert* or *drop* the commit's own revision (``from_seq = new``) of a key.

Stores feed change batches in, look up the current state of the batch's keys, and execute
the operations the planner returns; the planner keeps the version's counts as deltas, so a
commit costs O(changes) whatever the dataset size. Keeping this logic in one pure module
is what makes the SQLite and Mongo stores agree (the conformance suite checks they do).
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Any

from datahub.catalog.model import EMPTY, Change, Delete, DiffEntry, Patch, Put, Record, record_from_row
from datahub.catalog.put_lines import PutLines
from datahub.errors import CommitIdReused, InvalidInput, RecordNotFound
from datahub.validation import MAX_JSON_DEPTH, Unreadable

MAX_VERSION_BYTES = 2**63 - 1  # a version's byte count: a signed 64-bit integer in SQLite and BSON

OPEN = 2**62  # to_seq of a revision that is still live at the head


def patched(record: Record, change: Patch) -> Record:
    """``record`` with ``change`` merged into meta/labels; a ``None`` value removes the field.

    Built by ``record_from_row`` (the same frozen Record as ``dataclasses.replace``, which
    goes through the generated ``__init__`` and cost a sixth of a relabel's planning)."""
    return record_from_row(
        record.key,
        record.url,
        record.etag,
        record.size,
        record.checksum,
        _merge(record.meta, change.meta),
        _merge(record.labels, change.labels),
    )


def _merge(current: Mapping[str, Any], update: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if not update:
        return current
    merged = dict(current)
    for name, value in update.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged or EMPTY


@dataclass(frozen=True, slots=True)
class LiveRevision:
    """A revision open at the head while a commit runs (``from_seq`` tells whose it is)."""

    record: Record
    from_seq: int


@dataclass(slots=True)
class BatchOps:
    """What a store must write for one batch; every list is keyed so writes are idempotent."""

    close: list[tuple[str, int]] = field(default_factory=list)  # (key, from_seq): to_seq = new
    reopen: list[tuple[str, int]] = field(default_factory=list)  # (key, from_seq): to_seq = OPEN
    upsert: list[Record] = field(default_factory=list)  # revision (key, from_seq = new)
    drop: list[str] = field(default_factory=list)  # delete revision (key, from_seq = new)
    # keys live at the head after this batch and not before it, and the reverse: what a store's
    # directory table counts (the live entries of each directory at the head)
    appeared: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    appeared_ascending: bool = False  # ``appeared`` checked to be in ascending key order

    def __bool__(self) -> bool:
        return bool(self.close or self.reopen or self.upsert or self.drop)


@dataclass(slots=True)
class _KeyState:
    base: LiveRevision | None  # the revision live at the base version
    before: Record | None  # state persisted before this batch
    now: Record | None  # state after the changes applied so far


class CommitPlanner:
    """Turns batches of changes into revision writes and keeps the new version's counts.

    ``lookup_live(keys)`` returns the revisions open at the head for those keys (base ones,
    or the commit's own from an earlier batch); ``lookup_closed(keys)`` returns base
    revisions this commit already closed (``to_seq == new``). Both return dicts by key.
    """

    def __init__(
        self,
        dataset: str,
        base: int,
        lookup_live: Callable[[list[str]], dict[str, LiveRevision]],
        lookup_closed: Callable[[list[str]], dict[str, LiveRevision]],
    ) -> None:
        self.dataset, self.base, self.new = dataset, base, base + 1
        self._lookup_live, self._lookup_closed = lookup_live, lookup_closed
        self.added = self.removed = self.modified = 0
        self.count_delta = self.bytes_delta = 0
        self.changes_seen = 0
        self._highest = ""  # the largest key of the batches planned so far

    def total_bytes(self, parent_bytes: int) -> int:
        """The new version's byte count, which both stores keep as a signed 64-bit integer.

        Each record is bounded (``MAX_SIZE``) but a version's sum is not: past 2**63 - 1 the
        version row could not be written, and SQLite and BSON said so with a bare OverflowError.
        """
        total = parent_bytes + self.bytes_delta
        if total > MAX_VERSION_BYTES:
            raise InvalidInput(
                f"dataset {self.dataset!r}: the new version would hold {total} bytes, more than one "
                f"version can count ({MAX_VERSION_BYTES}); nothing was committed: split the records "
                "across datasets or check the records' sizes",
                dataset=self.dataset,
            )
        return total

    def plan(self, batch: list[Change]) -> BatchOps:
        """Apply ``batch`` in order (later changes to a key win) and return the writes."""
        if set(map(type, batch)) == {Put}:  # the common batch: keys by one C-level pass
            keys = list(dict.fromkeys(map(_PUT_KEY, batch)))
            if len(keys) == len(batch):
                upsert = list(map(_RECORD, batch))
                if self.plan_fresh_puts(keys, sum(map(_SIZE, upsert))):
                    return BatchOps(upsert=upsert, appeared=keys, appeared_ascending=True)
        else:
            keys = list(dict.fromkeys(map(_key_of, batch)))
        if not keys:
            return BatchOps()
        if self.base == 0 and min(keys) > self._highest:
            # A first version whose batches arrive in key order (an import, an S3 listing, a
            # sorted change set): no base revisions exist and no earlier batch touched these
            # keys, so there is nothing to look up and every key's state starts empty.
            self._highest = max(keys)
            return self._plan_fresh(batch)
        self._highest = max(self._highest, max(keys))
        states = self._load(keys)
        for change in batch:
            self.changes_seen += 1
            if isinstance(change, Put):
                states[change.record.key].now = change.record
                continue
            state = states[change.key]  # type: ignore[union-attr]
            if state.now is None:
                raise self._missing(change.key, "delete" if isinstance(change, Delete) else "patch")  # type: ignore[union-attr]
            if isinstance(change, Delete):
                state.now = None
            else:
                self._check_mergeable(state.now, change)  # type: ignore[arg-type]
                state.now = patched(state.now, change)  # type: ignore[arg-type]
        ops = BatchOps()
        for key, st in states.items():
            self._settle(key, st, ops)
        return ops

    def plan_fresh_puts(self, keys: list[str], total_size: int) -> bool:
        """Account for a batch of puts of distinct ``keys`` (``total_size`` bytes in all) if
        they can only add records: a first version, keys ascending and above every key planned
        so far. True when accounted (the batch's records are then the version's revisions,
        written as they are); False, with nothing changed, when the batch needs ``plan``."""
        if not (self.base == 0 and keys and keys[0] > self._highest and _ascending(keys)):
            return False
        self._highest = keys[-1]
        self.changes_seen += len(keys)
        self.added += len(keys)
        self.count_delta += len(keys)
        self.bytes_delta += total_size
        return True

    def _plan_fresh(self, batch: list[Change]) -> BatchOps:
        """``plan`` for keys that have no revision yet, neither in the base nor in this commit:
        the same outcome as the general path (a put adds, a delete or patch of a key not put
        earlier in the batch is refused), without a lookup or a state object per key."""
        now: dict[str, Record | None] = {}
        for change in batch:
            self.changes_seen += 1
            if isinstance(change, Put):
                now[change.record.key] = change.record
                continue
            current = now.get(change.key)  # type: ignore[union-attr]
            if current is None:
                raise self._missing(change.key, "delete" if isinstance(change, Delete) else "patch")  # type: ignore[union-attr]
            if isinstance(change, Delete):
                now[change.key] = None
            else:
                self._check_mergeable(current, change)  # type: ignore[arg-type]
                now[change.key] = patched(current, change)  # type: ignore[arg-type]
        upsert = [r for r in now.values() if r is not None]
        self.added += len(upsert)
        self.count_delta += len(upsert)
        self.bytes_delta += sum(r.size for r in upsert)
        return BatchOps(upsert=upsert, appeared=[r.key for r in upsert])

    def _load(self, keys: list[str]) -> dict[str, _KeyState]:
        live = self._lookup_live(keys)
        # Keys with no open base revision may have one this commit closed in an earlier batch.
        unsure = [k for k in keys if k not in live or live[k].from_seq == self.new]
        closed = self._lookup_closed(unsure) if unsure and self.base > 0 else {}
        states: dict[str, _KeyState] = {}
        for key in keys:
            rev = live.get(key)
            if rev is not None and rev.from_seq != self.new:
                states[key] = _KeyState(rev, rev.record, rev.record)
            else:
                before = rev.record if rev is not None else None
                states[key] = _KeyState(closed.get(key), before, before)
        return states

    def _settle(self, key: str, st: _KeyState, ops: BatchOps) -> None:
        """Count one key's planned state into the version's deltas and emit its writes.

        Each of ``before`` and ``now`` is compared with the base record once (an identity
        first: an untouched key's ``before`` is the base's own Record); a relabel of 10^5
        records compared each pair two or three times (docs/catalog.md, "Large commits")."""
        base = st.base.record if st.base else None
        before, now = st.before, st.now
        was_changed = before is not base and before != base
        is_changed = now is not base and now != base
        # the version's counts move by this key's change from ``before`` to ``now``; each
        # state that differs from the base counts as added, removed or modified against it
        self.count_delta += (now is not None) - (before is not None)
        self.bytes_delta += (now.size if now else 0) - (before.size if before else 0)
        if was_changed:
            self._tally(base, before, -1)
        if is_changed:
            self._tally(base, now, 1)
        if st.base is not None and was_changed != is_changed:
            (ops.close if is_changed else ops.reopen).append((key, st.base.from_seq))
        own_before = before if was_changed else None
        own_now = now if is_changed else None
        if own_now is not None and own_now is not own_before and own_now != own_before:
            ops.upsert.append(own_now)
        elif own_now is None and own_before is not None:
            ops.drop.append(key)
        if (before is None) != (now is None):
            (ops.vanished if now is None else ops.appeared).append(key)

    def _tally(self, base: Record | None, state: Record | None, sign: int) -> None:
        if base is None:
            self.added += sign
        elif state is None:
            self.removed += sign
        else:
            self.modified += sign

    def _check_mergeable(self, record: Record, change: Patch) -> None:
        """A patch merges into the stored field; one stored too deep to read (``Unreadable``)
        cannot be merged into without replacing it, so such a patch is refused. Patching the
        other field carries this one over as stored."""
        if not isinstance(record.meta, Unreadable) and not isinstance(record.labels, Unreadable):
            return  # the common case, decided without building the two fields' tuples
        for what, current, update in (
            ("meta", record.meta, change.meta),
            ("labels", record.labels, change.labels),
        ):
            if update and isinstance(current, Unreadable):
                raise InvalidInput(
                    f"cannot patch the {what} of record {record.key!r} in dataset {self.dataset!r}: "
                    f"its stored {what} is nested deeper than {MAX_JSON_DEPTH} levels (written before "
                    f"datahub refused such values) and cannot be merged into; put the record again "
                    f"with the {what} it should have, or patch only its "
                    f"{'labels' if what == 'meta' else 'meta'}",
                    dataset=self.dataset,
                    key=record.key,
                )

    def _missing(self, key: str, verb: str) -> RecordNotFound:
        return RecordNotFound(
            f"cannot {verb} record {key!r}: dataset {self.dataset!r} has no such key at version "
            f"{self.base} (or earlier in this change set); put it first or fix the key",
            dataset=self.dataset,
            version=self.base,
            key=key,
        )


def _key_of(change: Change) -> str:
    if isinstance(change, Put):
        return change.record.key
    if isinstance(change, Delete | Patch):
        return change.key
    raise InvalidInput(f"a change set holds Put, Delete or Patch items, not {type(change).__name__}")


def batched(changes: Iterable[Change], size: int) -> Iterator[list[Change]]:
    """Chunks of ``size`` changes; the source generator is consumed lazily (bounded memory)."""
    source = iter(changes)
    while batch := list(islice(source, size)):
        yield batch


_PUT_KEY, _RECORD, _SIZE = attrgetter("record.key"), attrgetter("record"), attrgetter("size")


def _ascending(keys: list[str]) -> bool:
    """``keys`` strictly ascending (a C-level pass: pairs compared by ``map``)."""
    return all(map(str.__lt__, keys, keys[1:]))


def merge_diff(old_side: Iterator[Record], new_side: Iterator[Record]) -> Iterator[DiffEntry]:
    """Merge, in key order, the revisions that ended and the ones that began between two versions.

    ``old_side``: records live at ``a`` but not at ``b`` (their revision closed in (a, b]);
    ``new_side``: records live at ``b`` but not at ``a`` (their revision began in (a, b]).
    Both must be sorted by key with at most one record per key.
    """
    tagged = heapq.merge(
        ((r.key, 0, r) for r in old_side),
        ((r.key, 1, r) for r in new_side),
        key=lambda item: (item[0], item[1]),
    )
    pending: Record | None = None  # an old-side record waiting for its possible new side
    for key, side, record in tagged:
        if side == 0:
            if pending is not None:
                yield DiffEntry("removed", pending.key, pending, None)
            pending = record
            continue
        if pending is not None and pending.key == key:
            if pending != record:  # deleted and re-put unchanged in between is no change
                yield DiffEntry("modified", key, pending, record)
            pending = None
            continue
        if pending is not None:
            yield DiffEntry("removed", pending.key, pending, None)
            pending = None
        yield DiffEntry("added", key, None, record)
    if pending is not None:
        yield DiffEntry("removed", pending.key, pending, None)


class ChangeDigest:
    """An iterator over a change set that hashes each change as the store consumes it.

    Why: a ``commit_id`` makes a commit idempotent, but only a retry of the *same* change set
    may return the earlier version; stores keep this digest next to the commit id so a reused
    id with other changes is refused (``replay``) instead of silently answered.
    """

    def __init__(self, changes: Iterable[Change]) -> None:
        self._changes = iter(changes)
        self._hash = hashlib.sha256()

    def __iter__(self) -> ChangeDigest:
        return self

    def __next__(self) -> Change:
        change = next(self._changes)
        if isinstance(change, PutLines):  # the digest of the same puts as objects
            self._hash.update(b"".join(map(_canonical, change.puts())))
        else:
            self._hash.update(_canonical(change))
        return change

    def hexdigest(self) -> str:
        """The digest of the whole change set (consuming what the store did not)."""
        for _ in self:
            pass
        return self._hash.hexdigest()


def _canonical(change: Change) -> bytes:
    if isinstance(change, Put):
        r = change.record
        row: list[Any] = ["put", r.key, r.url, r.etag, r.size, r.checksum, r.meta, r.labels]
    elif isinstance(change, Delete):
        row = ["delete", change.key]
    else:
        row = ["patch", change.key, change.meta, change.labels]
    return json.dumps(row, sort_keys=True, separators=(",", ":"), default=str).encode() + b"\n"


def change_digest(changes: Iterable[Change]) -> str | None:
    """What a store records with a commit id (None when the caller sent no digesting set)."""
    return changes.hexdigest() if isinstance(changes, ChangeDigest) else None


def replay(dataset: str, commit_id: str, seq: int, stored: str | None, changes: Iterable[Change]) -> int:
    """A commit id seen before: ``seq`` if ``changes`` are the ones it committed, else 409."""
    digest = change_digest(changes)
    if stored is not None and digest is not None and digest != stored:
        raise CommitIdReused(
            f"commit id {commit_id!r} already created {dataset}@v{seq} with a different change set; "
            "use a new commit id for new changes (retry only with the same changes)",
            dataset=dataset,
            commit_id=commit_id,
            version=seq,
        )
    return seq
