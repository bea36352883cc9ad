"""The MongoDB catalog's commit protocol: claim, stage, publish, recover.

Why a module of its own: ``MongoCatalogStore`` (``mongo_store.py``) reads datasets, versions,
tags, records and tokens; a commit is a protocol of its own over extra collections
(``commits``, ``staged``, ``epochs``) with leases, fencing and retries, and it is mixed into the
store as ``MongoCommitProtocol`` so both share one set of collections (tests swap a store's
collections for faulty ones).

Commit protocol, fenced by a claim epoch (details in docs/catalog.md). A version is visible
exactly when its document exists in ``versions``, and readers only ever ask for visible versions:

1. *claim*: take ``commits/{dataset}@{new}`` (state ``pending``) under a fresh epoch from a
   per-dataset counter, with a lease computed by the server (``$$NOW``). A live claim makes us
   wait; an expired one (compared on the server) is taken over by raising its epoch.
2. *stage*: per batch, renew the lease (fenced: the claim must still carry our epoch), then
   upsert the batch's outcome per key into ``staged`` under our epoch. Nothing else is written,
   so a writer that was fenced out leaves only inert staged documents behind.
3. *publish*: flip the claim to ``publishing`` with the version document embedded, fenced on our
   epoch and ``pending``: the one atomic decision. Then roll the winning epoch's staged changes
   forward into the revisions (close base revisions at ``new``, insert ``from_seq = new`` ones;
   invisible to every existing version, idempotent), insert the version document, mark the
   claim ``committed``. Anyone who finds a ``publishing`` claim finishes it the same way.

Every step is idempotent, so transient errors (elections, NotPrimary) are retried with the same
claim. A writer that fails cleans up its claim; one that dies leaves a ``pending`` claim that
the next commit takes over once the lease expires on the server's clock. A retry with the same
``commit_id`` returns the version that id already created.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import pymongo
import pymongo.errors
from pymongo import ASCENDING, InsertOne, ReturnDocument, UpdateMany

from datahub.catalog.model import Change, Dataset, Version
from datahub.catalog.mongo_dirs import Inconsistent, StagedDirectories, give_up, state_writes
from datahub.catalog.mongo_schema import RECORD_FIELDS, record_doc, record_of_doc
from datahub.catalog.revisions import (
    OPEN,
    BatchOps,
    CommitPlanner,
    LiveRevision,
    batched,
    change_digest,
    replay,
)
from datahub.catalog.store import stale_base
from datahub.errors import Conflict, StaleBase, StorageError, TransientStorageError


def _insert_new(collection: Any, docs: list[dict[str, Any]]) -> None:
    """Insert revisions, skipping those already there (a repeated roll-forward never overwrites)."""
    _new_only(lambda: collection.insert_many(docs, ordered=False))


def _new_only(write: Callable[[], Any]) -> None:
    """Run an unordered bulk ``write``; its inserts of documents already there are skipped."""
    try:
        write()
    except pymongo.errors.BulkWriteError as exc:
        if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
            raise


# Server error codes of elections and shutdowns: the operation did not happen, or retrying it is safe
# because every protocol step is idempotent.
_TRANSIENT_CODES = frozenset({6, 7, 89, 91, 189, 9001, 10107, 11600, 11602, 13435, 13436})


def _transient(exc: BaseException | None) -> bool:
    """Worth retrying with the same claim: lost connections, NotPrimary, labelled errors."""
    if isinstance(exc, pymongo.errors.ServerSelectionTimeoutError):
        return False  # the driver already waited serverSelectionTimeoutMS for a primary
    if isinstance(exc, pymongo.errors.AutoReconnect):  # includes NotPrimaryError, NetworkTimeout
        return True
    if isinstance(exc, pymongo.errors.PyMongoError) and (
        exc.has_error_label("RetryableWriteError") or exc.has_error_label("TransientTransactionError")
    ):
        return True
    return isinstance(exc, pymongo.errors.OperationFailure) and exc.code in _TRANSIENT_CODES


@dataclass(frozen=True, slots=True)
class _Claim:
    """The right to write ``dataset@seq``, held while ``commits/{id}.epoch == epoch``."""

    dataset: str
    seq: int
    base: int
    epoch: int

    @property
    def id(self) -> str:
        return f"{self.dataset}@{self.seq}"


class MongoCommitProtocol:
    """``commit`` and the steps of its protocol, mixed into ``MongoCatalogStore``.

    The store provides the collections, the settings and the few reads declared below."""

    datasets: Any
    versions: Any
    records: Any
    commits: Any
    staged: Any
    epochs: Any
    dirs: Any
    staged_dirs: Any
    batch_size: int
    retry_seconds: float
    claim_wait_seconds: float
    _lease_ms: int
    _server_time: bool
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    fault: Callable[[str], None]
    _translate: Callable[[str], AbstractContextManager[None]]
    get_dataset: Callable[[str], Dataset]
    get_version: Callable[[str, int], Version]
    _head: Callable[[str], int]

    def commit(
        self,
        dataset: str,
        base: int,
        changes: Iterable[Change],
        *,
        message: str = "",
        author: str = "",
        lineage: dict | None = None,
        commit_id: str | None = None,
    ) -> Version:
        self.get_dataset(dataset)
        what = f"commit to dataset {dataset!r}"
        with self._translate(what):
            if commit_id is not None and (done := self._replayed(dataset, commit_id, changes)) is not None:
                return done
            new = base + 1
            try:
                self._recover(dataset, self._retrying(lambda: self._head(dataset)) + 1)
                head = self._retrying(lambda: self._head(dataset))
                if base != head:
                    raise stale_base(dataset, base, head)
                claim = self._claim(dataset, new, base, commit_id)
            except StaleBase:
                # the head moved, maybe by this very commit id's first attempt, which was still
                # running when we looked (a client's retry after a timeout): answer its version
                if (
                    commit_id is not None
                    and (done := self._replayed(dataset, commit_id, changes)) is not None
                ):
                    return done
                raise
        try:
            with self._translate(what):
                version = self._write(claim, changes, message, author, lineage, commit_id)
                self._publish(claim, version)
        except Exception:
            self._abandon(claim)
            raise
        return self.get_version(dataset, new)

    def _replayed(self, dataset: str, commit_id: str, changes: Iterable[Change]) -> Version | None:
        """The version an earlier commit with this id made, if the retry sends the same changes
        (else 409); None if that id made none (yet)."""
        done = self._retrying(lambda: self._finished(dataset, commit_id))
        if done is None:
            return None
        doc = self._retrying(
            lambda: self.versions.find_one({"dataset": dataset, "seq": done}, {"commit_digest": 1})
        )
        stored = (doc or {}).get("commit_digest")
        return self.get_version(dataset, replay(dataset, commit_id, done, stored, changes))

    def _finished(self, dataset: str, commit_id: str) -> int | None:
        """The seq an earlier commit with this id produced (finishing it if it was publishing)."""
        doc = self.versions.find_one({"dataset": dataset, "commit_id": commit_id}, {"seq": 1})
        if doc:
            return doc["seq"]
        pending = self.commits.find_one({"dataset": dataset, "commit_id": commit_id, "state": "publishing"})
        if pending:
            self._recover(dataset, pending["seq"])
            return pending["seq"]
        return None

    # The protocol below is fenced by the claim's epoch; see the module docstring and
    # docs/catalog.md "Claims, fencing and leases". Every step is idempotent, so a transient
    # error (election, lost connection) is retried with the same claim instead of failing.

    def _retrying(self, step: Callable[[], Any]) -> Any:
        """Run an idempotent protocol step, retrying transient errors for ``retry_seconds``.

        Why: a primary election makes writes fail for a few seconds with NotPrimary /
        AutoReconnect (labelled ``RetryableWriteError``); the driver retries a write once, and
        this keeps the commit (same claim, same epoch, same commit id) alive across the election
        instead of abandoning it."""
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            try:
                return step()
            except (pymongo.errors.PyMongoError, TransientStorageError) as exc:
                cause = exc.__cause__ if isinstance(exc, TransientStorageError) else exc
                if not _transient(cause) or time.monotonic() + delay > deadline:
                    raise
            self.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _now_ms(self) -> Any:
        """The lease time source as an aggregation expression: the server's clock (``$$NOW``).

        Lease comparisons happen in the server's update filters, so API servers never compare
        their own clocks. mongomock has no ``$$NOW``: there ``clock`` stands in for the one
        server's clock (the only place a local clock decides a lease)."""
        if self._server_time:
            return {"$toLong": "$$NOW"}
        return int(self.clock() * 1000)

    def _next_epoch(self, dataset: str) -> int:
        """A fencing token: strictly larger than every earlier claim's on this dataset."""
        doc = self._retrying(
            lambda: self.epochs.find_one_and_update(
                {"_id": dataset}, {"$inc": {"epoch": 1}}, upsert=True, return_document=ReturnDocument.AFTER
            )
        )
        return int(doc["epoch"])

    def _claim(self, dataset: str, new: int, base: int, commit_id: str | None) -> _Claim:
        """Become the one writer of ``dataset@new`` under a fresh epoch.

        A claim whose lease is live makes us wait (polling, up to ``claim_wait_seconds``) like
        SQLite waits on its write lock: the holder either publishes (StaleBase: the facade
        re-reads the head and retries) or its lease expires on the server's clock and we take
        the claim over (raising its epoch, which fences the old holder out)."""
        deadline = time.monotonic() + self.claim_wait_seconds
        delay = 0.05
        claim_id = f"{dataset}@{new}"
        while True:
            epoch = self._next_epoch(dataset)
            claim = _Claim(dataset, new, base, epoch)
            now = self._now_ms()
            fields = {"dataset": {"$literal": dataset}, "seq": new, "base": base, "epoch": epoch, "state": "pending",
                      "commit_id": {"$literal": commit_id}, "lease_until": {"$add": [now, self._lease_ms]},
                      "started_at": now}  # fmt: skip
            try:  # insert-if-absent whose lease is computed by the server
                self._retrying(
                    lambda fields=fields: self.commits.update_one(
                        {"_id": claim_id, "state": {"$exists": False}}, [{"$set": fields}], upsert=True
                    )
                )
                self._discard_staged(dataset, new, below=epoch)
                return claim
            except pymongo.errors.DuplicateKeyError:
                pass
            other = self._retrying(lambda: self.commits.find_one({"_id": claim_id}))
            if other is not None and other.get("epoch") == epoch:  # our own write, retried
                return claim
            if other is None:  # abandoned meanwhile (its writer failed): the head did not move
                if time.monotonic() > deadline:
                    raise self._busy(dataset, new)
                continue  # claim again
            if other["state"] != "pending":  # finished meanwhile: the head moved
                raise StaleBase(
                    f"cannot commit to dataset {dataset!r} on version {base}: another commit just created "
                    f"version {new}; rebase on the head and retry",
                    dataset=dataset,
                    base=base,
                )
            expired = {"_id": claim_id, "epoch": other.get("epoch"), "state": "pending",
                       "$expr": {"$lt": ["$lease_until", now]}}  # fmt: skip
            taken = self._retrying(
                lambda expired=expired, fields=fields: self.commits.find_one_and_update(
                    expired, [{"$set": fields}], return_document=ReturnDocument.AFTER
                )
            )
            if taken is None:  # not expired, or our takeover went through but its reply was lost
                taken = self._retrying(lambda: self.commits.find_one({"_id": claim_id}))
            if taken is not None and taken.get("epoch") == epoch:
                if other.get("epoch") is None:
                    self._undo_legacy(dataset, new)
                self._discard_staged(dataset, new, below=epoch)  # the dead writer's staged changes
                return claim
            # a live claim of this very commit id is its first attempt, still running (a
            # client's retry after a cut connection): wait for it, however long; its lease,
            # renewed each batch, bounds the wait if it dies
            mine = commit_id is not None and other.get("commit_id") == commit_id
            if time.monotonic() + delay > deadline and not mine:
                raise self._busy(dataset, new)
            self.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _busy(self, dataset: str, new: int) -> Conflict:
        """Another commit of ``dataset@new`` held the claim for all of ``claim_wait_seconds``."""
        left = self._lease_left(f"{dataset}@{new}")
        return Conflict(
            f"another commit to dataset {dataset!r} (version {new}) is in progress; retry after "
            f"{left:.0f} s (when its lease expires if it died)",
            dataset=dataset,
            version=new,
        )

    def _undo_legacy(self, dataset: str, seq: int) -> None:
        """Remove the direct revision writes of a dead writer of the unfenced protocol (claims
        without an epoch, from datahub before fencing; stop such servers before upgrading)."""
        self._retrying(lambda: self.records.delete_many({"dataset": dataset, "from_seq": seq}))
        self._retrying(
            lambda: self.records.update_many(
                {"dataset": dataset, "to_seq": seq}, {"$set": {"to_seq": OPEN}, "$unset": {"closed_by": ""}}
            )
        )

    def _lease_left(self, claim_id: str) -> float:
        """Seconds left on a claim's lease, measured by the server's clock."""
        docs = list(
            self.commits.aggregate(
                [{"$match": {"_id": claim_id}},
                 {"$project": {"left": {"$subtract": ["$lease_until", self._now_ms()]}}}]
            )
        )  # fmt: skip
        return max(0.0, docs[0]["left"] / 1000) if docs else 0.0

    def _renew(self, claim: _Claim) -> None:
        """Extend the lease on the server's clock; fenced: fails once another epoch took over."""
        renewed = self._retrying(
            lambda: self.commits.update_one(
                {"_id": claim.id, "epoch": claim.epoch, "state": "pending"},
                [{"$set": {"lease_until": {"$add": [self._now_ms(), self._lease_ms]}}}],
            )
        )
        if renewed.matched_count == 0:
            raise self._lost(claim)

    @staticmethod
    def _lost(claim: _Claim) -> Conflict:
        return Conflict(
            f"lost the commit of dataset {claim.dataset!r} version {claim.seq}: its lease expired and "
            "another writer took over; nothing of it was published; retry",
            dataset=claim.dataset,
            version=claim.seq,
        )

    def _discard_staged(self, dataset: str, seq: int, *, below: int | None = None) -> None:
        """Delete the staged changes of ``dataset@seq``, or with ``below`` those of every earlier
        claim on the dataset (dead or fenced-out writers', and leftovers of finished commits:
        a finished commit was rolled forward in full before its version became visible)."""
        query: dict[str, Any] = {"dataset": dataset, "seq": seq} if below is None else {
            "dataset": dataset, "epoch": {"$lt": below}}  # fmt: skip
        self._retrying(lambda: self.staged.delete_many(query))
        self._retrying(lambda: self.staged_dirs.delete_many(query))

    def _recover(self, dataset: str, seq: int) -> None:
        """Finish a commit of ``seq`` that was decided (``publishing``): roll its staged changes
        forward into the revisions, then make the version visible. Idempotent: any number of
        servers may run it at once and converge."""
        doc = self._retrying(
            lambda: self.commits.find_one({"_id": f"{dataset}@{seq}", "state": "publishing"})
        )
        if doc is None:
            return
        self._roll_forward(dataset, seq, doc.get("epoch"))  # none: unfenced protocol, writes in place
        try:
            self._retrying(lambda: self.versions.insert_one(doc["version"]))
        except pymongo.errors.DuplicateKeyError:
            pass
        self._retrying(
            lambda: self.commits.update_one(
                {"_id": doc["_id"], "state": "publishing"},
                {"$set": {"state": "committed"}, "$unset": {"version": ""}},
            )
        )
        self._discard_staged(dataset, seq)

    def _roll_forward(self, dataset: str, seq: int, epoch: int | None) -> None:
        """Apply the winning epoch's staged changes to the revisions, page by page.

        Before the version document exists none of this is visible (ranges of versions
        ``<= seq - 1`` do not change). Closes only match revisions still open at the head and
        inserts never overwrite, so a late or concurrent repeat changes nothing. Then the
        directory table's staged states (``mongo_dirs``), written the same way."""
        self._roll_records_forward(dataset, seq, epoch)
        mine = {"dataset": dataset, "seq": seq, "epoch": epoch}
        after = ""
        while page := self._retrying(
            lambda after=after: list(
                self.staged_dirs.find(mine | {"path": {"$gt": after}}, {"_id": 0})
                .sort("path", ASCENDING)
                .limit(self.batch_size)
            )
        ):
            after = page[-1]["path"]
            updates, inserts = state_writes(dataset, seq, page)
            # one round trip per page of states. UpdateMany names one document (the filter holds
            # by_path's unique fields): UpdateOne's bulk form passes a `sort` that mongomock's
            # builder refuses, and each update sets a final state, so a repeat changes nothing
            writes = [UpdateMany(where, update) for where, update in updates] + list(map(InsertOne, inserts))
            if writes:  # none when every directory of the page was made and emptied again
                self._retrying(
                    lambda writes=writes: _new_only(lambda: self.dirs.bulk_write(writes, ordered=False))
                )
            self.fault("dirs-rolled")

    def _roll_records_forward(self, dataset: str, seq: int, epoch: int | None) -> None:
        """The revisions' part of :meth:`_roll_forward`, a page of staged changes at a time."""
        after = ""
        while True:
            page = self._retrying(
                lambda after=after: list(
                    self.staged.find({"dataset": dataset, "seq": seq, "epoch": epoch, "key": {"$gt": after}})
                    .sort("key", ASCENDING)
                    .limit(self.batch_size)
                )
            )
            if not page:
                return
            closes = [d["key"] for d in page if d.get("close") is not None]
            if closes:
                self._retrying(
                    lambda closes=closes: self.records.update_many(
                        {
                            "dataset": dataset,
                            "key": {"$in": closes},
                            "to_seq": OPEN,
                            "from_seq": {"$lt": seq},
                        },
                        {"$set": {"to_seq": seq}},
                    )
                )
            inserts = [d["record"] | {"dataset": dataset, "from_seq": seq, "to_seq": OPEN, "commit": epoch}
                       for d in page if d.get("record")]  # fmt: skip
            if inserts:
                self._retrying(lambda inserts=inserts: _insert_new(self.records, inserts))
            self.fault("records-rolled")
            after = page[-1]["key"]

    def _write(
        self,
        claim: _Claim,
        changes: Iterable[Change],
        message: str,
        author: str,
        lineage: dict | None,
        commit_id: str | None,
    ) -> dict[str, Any]:
        """Stage the change set under the claim's epoch; nothing outside ``staged`` is written."""
        dataset, base, new = claim.dataset, claim.base, claim.seq
        parent = (
            self._retrying(lambda: self.versions.find_one({"dataset": dataset, "seq": base}))
            if base
            else None
        )
        planner = CommitPlanner(
            dataset,
            base,
            lambda keys: self._staged_view(claim, keys)[0],
            lambda keys: self._staged_view(claim, keys)[1],
        )
        dirs = self._directory_states(claim)
        for batch in batched(changes, self.batch_size):
            ops = planner.plan(batch)
            self._renew(claim)
            self.fault("renewed")
            if ops:
                self._stage(claim, ops)
            if dirs is not None:
                dirs.add(ops.appeared, ops.vanished, ascending=ops.appeared_ascending)
                if dirs.pending():
                    dirs = self._flush_directories(claim, dirs)
            self.fault("batch-written")
        if dirs is not None:
            self._flush_directories(claim, dirs)
        return {"_id": f"{dataset}@{new}", "dataset": dataset, "seq": new, "parent": base or None,
                "message": message, "author": author, "created_at": self.clock(),
                "record_count": (parent["record_count"] if parent else 0) + planner.count_delta,
                "total_bytes": planner.total_bytes(parent["total_bytes"] if parent else 0),
                "added": planner.added, "removed": planner.removed, "modified": planner.modified,
                "lineage": lineage or {}, "commit_id": commit_id,
                "commit_digest": change_digest(changes) if commit_id is not None else None}  # fmt: skip

    def _directory_states(self, claim: _Claim) -> StagedDirectories | None:
        """The commit's directory table states, if the dataset's table is complete (read after
        the claim: ``datahub migrate`` sets the flag while it holds a claim itself).

        The read also raises the dataset's ``dirs_read`` to this claim's epoch, in the same
        atomic write: ``datahub migrate`` sets the flag only while ``dirs_read`` is not above
        its own claim's epoch (``mongo_dirs_backfill._complete``). Why: a migrate that stalled
        past its lease, whose claim this commit took over after reading the flag unset, set the
        flag afterwards, and until it found its claim lost and took the flag back, readers
        listed this commit's version from a table without its changes."""
        doc = self._retrying(
            lambda: self.datasets.find_one_and_update(
                {"_id": claim.dataset}, {"$max": {"dirs_read": claim.epoch}}, {"dirs": 1}
            )
        )
        if not (doc or {}).get("dirs"):
            return None
        return StagedDirectories(
            self.dirs, self.staged_dirs, claim.dataset, claim.seq, claim.epoch, self._retrying
        )

    def _flush_directories(self, claim: _Claim, dirs: StagedDirectories) -> StagedDirectories | None:
        """Resolve the pending directory deltas into staged states; None once the table is given
        up (its counts do not fit the records): this commit stages no states, the dataset
        lists without the table until ``datahub migrate`` fills it again."""
        try:
            dirs.flush()
        except Inconsistent as exc:
            give_up(self.datasets, claim.dataset, str(exc), self._retrying)
            mine = {"dataset": claim.dataset, "seq": claim.seq, "epoch": claim.epoch}
            self._retrying(lambda: self.staged_dirs.delete_many(mine))
            return None
        self.fault("dirs-staged")
        return dirs

    def _lookup(self, dataset: str, keys: list[str], to_seq: int) -> dict[str, LiveRevision]:
        docs = self.records.find(
            {"dataset": dataset, "key": {"$in": keys}, "to_seq": to_seq}, RECORD_FIELDS | {"from_seq": 1}
        )
        return {d["key"]: LiveRevision(record_of_doc(d), d["from_seq"]) for d in docs}

    def _staged_view(
        self, claim: _Claim, keys: list[str]
    ) -> tuple[dict[str, LiveRevision], dict[str, LiveRevision]]:
        """(open at the head as this commit sees it, base revisions this commit closed) for ``keys``:
        the published head overlaid with this epoch's staged changes."""
        head = self._retrying(lambda: self._lookup(claim.dataset, keys, OPEN))
        mine = {"dataset": claim.dataset, "seq": claim.seq, "epoch": claim.epoch, "key": {"$in": keys}}
        staged = {d["key"]: d for d in self._retrying(lambda: list(self.staged.find(mine)))}
        live: dict[str, LiveRevision] = {}
        closed: dict[str, LiveRevision] = {}
        for key in keys:
            doc = staged.get(key, {})
            if key in head and doc.get("close") is not None:
                closed[key] = head[key]
            elif key in head:
                live[key] = head[key]
            if doc.get("record"):
                live[key] = LiveRevision(record_of_doc(doc["record"]), claim.seq)
        return live, closed

    def _stage(self, claim: _Claim, ops: BatchOps) -> None:
        """Record one batch's outcome per key in ``staged`` (keyed by epoch: inert for others)."""
        sets: dict[str, dict[str, Any]] = {}
        for key, from_seq in ops.close:
            sets.setdefault(key, {})["close"] = from_seq
        for key, _ in ops.reopen:
            sets.setdefault(key, {})["close"] = None
        for record in ops.upsert:
            sets.setdefault(record.key, {})["record"] = record_doc(record)
        for key in ops.drop:
            sets.setdefault(key, {})["record"] = None
        mine = {"dataset": claim.dataset, "seq": claim.seq, "epoch": claim.epoch, "key": {"$in": list(sets)}}
        before = {d["key"]: d for d in self._retrying(lambda: list(self.staged.find(mine, {"_id": 0})))}
        merged = [before.get(key, mine | {"key": key}) | fields for key, fields in sets.items()]

        def write() -> None:  # replace the keys' staged documents by their merged state: idempotent
            self.staged.delete_many(mine)
            self.staged.insert_many(merged)

        self._retrying(write)

    def _publish(self, claim: _Claim, version: dict[str, Any]) -> None:
        """The one atomic decision: flip the claim to ``publishing`` if our epoch still holds it."""

        def flip() -> bool:
            result = self.commits.update_one(
                {"_id": claim.id, "epoch": claim.epoch, "state": "pending"},
                {"$set": {"state": "publishing", "version": version}},
            )
            if result.matched_count:
                return True
            mine = self.commits.find_one({"_id": claim.id, "epoch": claim.epoch})  # a retried flip
            return mine is not None and mine["state"] in ("publishing", "committed")

        if not self._retrying(flip):
            raise self._lost(claim)
        self.fault("publishing")
        self._recover(claim.dataset, claim.seq)

    def _abandon(self, claim: _Claim) -> None:
        """Drop a failed commit's staged changes and claim; if that fails too, the lease lets the
        next writer do it."""
        try:
            with self._translate(f"abandon commit of {claim.dataset!r} version {claim.seq}"):
                gone = self.commits.delete_one({"_id": claim.id, "epoch": claim.epoch, "state": "pending"})
                if gone.deleted_count:
                    mine = {"dataset": claim.dataset, "seq": claim.seq, "epoch": claim.epoch}
                    self.staged.delete_many(mine)
                    self.staged_dirs.delete_many(mine)
        except StorageError:
            pass
