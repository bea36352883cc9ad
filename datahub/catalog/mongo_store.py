"""MongoCatalogStore: the production catalog on a MongoDB replica set (pymongo lives here only).

Written for a real server: indexes are created at open, writes use ``w="majority"`` and
retryable writes, reads use majority read concern. Tests run it on mongomock, and on a real
server when ``DATAHUB_TEST_MONGO_URI`` is set.

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

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pymongo
import pymongo.errors
from pymongo import ASCENDING, DESCENDING, ReturnDocument, WriteConcern
from pymongo.read_concern import ReadConcern

from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import EMPTY, Change, Dataset, DiffEntry, Record, TokenInfo, Version
from datahub.catalog.revisions import (
    OPEN,
    BatchOps,
    CommitPlanner,
    LiveRevision,
    batched,
    change_digest,
    merge_diff,
    replay,
)
from datahub.catalog.store import CatalogStore, narrowed, page_hint, revision_mismatch
from datahub.errors import (
    AlreadyExists,
    Conflict,
    DatasetNotFound,
    InvalidInput,
    NotFound,
    RecordNotFound,
    StaleBase,
    StorageError,
    TransientStorageError,
    VersionNotFound,
)
from datahub.mongo_client import connect
from datahub.validation import stored_json

_RECORD_FIELDS = {"_id": 0, "key": 1, "url": 1, "etag": 1, "size": 1, "checksum": 1, "meta": 1, "labels": 1}


def _record(doc: dict[str, Any]) -> Record:
    return Record(
        doc["key"],
        doc["url"],
        doc["etag"],
        doc["size"],
        doc.get("checksum", ""),
        stored_json(doc.get("meta") or EMPTY),  # never fails, even on over-deep legacy values
        stored_json(doc.get("labels") or EMPTY),
    )


def _record_doc(record: Record) -> dict[str, Any]:
    """A record's fields; empty checksum/meta/labels are left out: most records have none."""
    doc: dict[str, Any] = {"key": record.key, "url": record.url, "etag": record.etag, "size": record.size}
    if record.checksum:
        doc["checksum"] = record.checksum
    if record.meta:
        doc["meta"] = dict(record.meta)
    if record.labels:
        doc["labels"] = dict(record.labels)
    return doc


def _insert_new(collection: Any, docs: list[dict[str, Any]]) -> None:
    """Insert revisions, skipping those already there (a repeated roll-forward never overwrites)."""
    try:
        collection.insert_many(docs, ordered=False)
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


class MongoCatalogStore(CatalogStore):
    """Catalog in MongoDB collections datasets/versions/records/tags/tokens/commits."""

    def __init__(
        self,
        url: str,
        *,
        client: Any = None,
        batch_size: int = 2000,
        page_size: int = 2000,
        lease_seconds: float = 15.0,
        claim_wait_seconds: float = 30.0,
        retry_seconds: float = 20.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        """``client`` lets tests share one (mock) server between stores; ``fault(point)`` is a
        test hook called at protocol points ("renewed", "batch-written", "publishing") to
        simulate crashes and stalls. ``lease_seconds``: how long a silent writer keeps its claim
        (renewed every batch); ``claim_wait_seconds``: how long a commit waits for a running one;
        ``retry_seconds``: how long transient errors (elections) are retried. ``clock`` stamps
        ``created_at``, and stands in for the server's clock only on mongomock."""
        own_client, db_name = connect(url)
        if client is not None:
            own_client.close()
        self.client = client or own_client
        self._owns_client = client is None
        self.url = url
        self.batch_size, self.page_size = batch_size, page_size
        self.lease_seconds = lease_seconds
        self._lease_ms = int(lease_seconds * 1000)
        self.claim_wait_seconds, self.retry_seconds = claim_wait_seconds, retry_seconds
        self._server_time = urlsplit(url).scheme != "mongomock"
        self.clock, self.sleep = clock, sleep
        self.fault = fault or (lambda point: None)
        db = self.client.get_database(
            db_name, write_concern=WriteConcern("majority"), read_concern=ReadConcern("majority")
        )
        self.db = db
        self.datasets, self.versions, self.records = db["datasets"], db["versions"], db["records"]
        self.tags, self.tokens, self.commits = db["tags"], db["tokens"], db["commits"]
        self.staged, self.epochs = db["staged"], db["epochs"]
        with self._translate(f"open catalog {db_name}"):
            self._create_indexes()

    def _create_indexes(self) -> None:
        self.versions.create_index([("dataset", ASCENDING), ("seq", DESCENDING)], unique=True, name="by_seq")
        self.versions.create_index([("dataset", ASCENDING), ("commit_id", ASCENDING)], name="by_commit_id")
        self.commits.create_index([("dataset", ASCENDING), ("commit_id", ASCENDING)], name="by_commit_id")
        self.tags.create_index([("dataset", ASCENDING), ("tag", ASCENDING)], unique=True, name="by_tag")
        self.staged.create_index(
            [("dataset", ASCENDING), ("seq", ASCENDING), ("epoch", ASCENDING), ("key", ASCENDING)],
            unique=True,
            name="by_claim",
        )
        self.records.create_index(
            [("dataset", ASCENDING), ("key", ASCENDING), ("from_seq", ASCENDING)], unique=True, name="by_key"
        )
        self.records.create_index(
            [("dataset", ASCENDING), ("from_seq", ASCENDING), ("key", ASCENDING)], name="began"
        )
        self.records.create_index(
            [("dataset", ASCENDING), ("to_seq", ASCENDING), ("key", ASCENDING)], name="ended"
        )

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def drop(self) -> None:
        """Delete the whole catalog database (tests use it to clean up a real server)."""
        with self._translate("drop catalog"):
            self.client.drop_database(self.db.name)

    @staticmethod
    @contextmanager
    def _translate(what: str) -> Iterator[None]:
        """Translate pymongo errors into datahub errors once, at this boundary."""
        try:
            yield
        except (pymongo.errors.AutoReconnect, pymongo.errors.ServerSelectionTimeoutError) as exc:
            raise TransientStorageError(f"{what}: MongoDB unreachable ({exc}); retry later") from exc
        except pymongo.errors.PyMongoError as exc:
            raise StorageError(f"{what}: MongoDB error: {exc}") from exc

    # --- datasets -------------------------------------------------------------------------------
    def _dataset(self, doc: dict[str, Any]) -> Dataset:
        return Dataset(doc["_id"], doc.get("description", ""), doc.get("source", ""), doc.get("owner", ""),
                       doc.get("acl") or EMPTY, doc.get("created_at", 0.0), doc.get("revision", 0))  # fmt: skip

    def create_dataset(self, dataset: Dataset) -> Dataset:
        doc = {"_id": dataset.name, "description": dataset.description, "source": dataset.source,
               "owner": dataset.owner, "acl": dict(dataset.acl), "created_at": dataset.created_at or self.clock()}  # fmt: skip
        try:
            with self._translate(f"create dataset {dataset.name!r}"):
                self.datasets.insert_one(doc)
        except StorageError as exc:
            if isinstance(exc.__cause__, pymongo.errors.DuplicateKeyError):
                raise AlreadyExists(
                    f"dataset {dataset.name!r} already exists; pick another name", dataset=dataset.name
                ) from exc
            raise
        return self._dataset(doc)

    def get_dataset(self, name: str) -> Dataset:
        with self._translate(f"get dataset {name!r}"):
            doc = self.datasets.find_one({"_id": name})
        if doc is None:
            raise DatasetNotFound(
                f"dataset {name!r} not found; create it first or check `datahub dataset list`", dataset=name
            )
        return self._dataset(doc)

    def list_datasets(self) -> Iterator[Dataset]:
        with self._translate("list datasets"):
            docs = list(self.datasets.find().sort("_id", ASCENDING))
        return iter([self._dataset(d) for d in docs])

    def update_dataset(
        self, name: str, fields: Mapping[str, Any], *, expected_revision: int | None = None
    ) -> Dataset:
        """One ``find_one_and_update``: ``$set`` of just ``fields`` and ``$inc`` of the revision,
        so a racing update of other fields is never overwritten with what this caller read."""
        query: dict[str, Any] = {"_id": name}
        if expected_revision is not None:  # a dataset never updated has no revision field: 0
            query["revision"] = expected_revision if expected_revision else {"$in": [0, None]}
        values = {f: dict(v) if f == "acl" else v for f, v in fields.items()}
        update: dict[str, Any] = {"$inc": {"revision": 1}} | ({"$set": values} if values else {})
        with self._translate(f"update dataset {name!r}"):
            doc = self.datasets.find_one_and_update(query, update, return_document=ReturnDocument.AFTER)
        if doc is None:
            # DatasetNotFound if it is not there at all
            raise revision_mismatch(self.get_dataset(name), expected_revision)
        return self._dataset(doc)

    # --- versions -------------------------------------------------------------------------------
    def head(self, dataset: str) -> int:
        """The newest visible version, first finishing a commit that died while publishing."""
        self.get_dataset(dataset)
        head = self._head(dataset)
        with self._translate(f"read head of {dataset!r}"):
            self._recover(dataset, head + 1)
        return self._head(dataset)

    def _head(self, dataset: str) -> int:
        with self._translate(f"read head of {dataset!r}"):
            doc = self.versions.find_one({"dataset": dataset}, {"seq": 1}, sort=[("seq", DESCENDING)])
        return doc["seq"] if doc else 0

    def _version(self, doc: dict[str, Any], tags: tuple[str, ...]) -> Version:
        return Version(
            doc["dataset"], doc["seq"], doc.get("parent"), doc.get("message", ""), doc.get("author", ""),
            doc.get("created_at", 0.0), tags, doc.get("record_count", 0), doc.get("total_bytes", 0),
            doc.get("added", 0), doc.get("removed", 0), doc.get("modified", 0), doc.get("lineage") or EMPTY,
        )  # fmt: skip

    def _tags_of(self, dataset: str, seq: int | None = None) -> dict[int, tuple[str, ...]]:
        query: dict[str, Any] = {"dataset": dataset} | ({"seq": seq} if seq is not None else {})
        out: dict[int, list[str]] = {}
        with self._translate(f"read tags of {dataset!r}"):
            for doc in self.tags.find(query).sort("tag", ASCENDING):
                out.setdefault(doc["seq"], []).append(doc["tag"])
        return {s: tuple(t) for s, t in out.items()}

    def get_version(self, dataset: str, seq: int) -> Version:
        self.get_dataset(dataset)
        with self._translate(f"get version {dataset}@{seq}"):
            doc = self.versions.find_one({"dataset": dataset, "seq": seq})
        if doc is None:
            raise VersionNotFound(
                f"dataset {dataset!r} has no version {seq}; see `datahub log {dataset}`",
                dataset=dataset,
                version=seq,
            )
        return self._version(doc, self._tags_of(dataset, seq).get(seq, ()))

    def list_versions(self, dataset: str) -> Iterator[Version]:
        self.get_dataset(dataset)
        tags = self._tags_of(dataset)
        with self._translate(f"list versions of {dataset!r}"):
            docs = list(self.versions.find({"dataset": dataset}).sort("seq", DESCENDING))
        return iter([self._version(d, tags.get(d["seq"], ())) for d in docs])

    # --- commit ---------------------------------------------------------------------------------
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
            if commit_id is not None:
                done = self._retrying(lambda: self._finished(dataset, commit_id))
                if done is not None:  # a retry, if it sends the same changes (else 409)
                    doc = self._retrying(
                        lambda: self.versions.find_one(
                            {"dataset": dataset, "seq": done}, {"commit_digest": 1}
                        )
                    )
                    stored = (doc or {}).get("commit_digest")
                    return self.get_version(dataset, replay(dataset, commit_id, done, stored, changes))
            new = base + 1
            self._recover(dataset, self._retrying(lambda: self._head(dataset)) + 1)
            head = self._retrying(lambda: self._head(dataset))
            if base != head:
                raise StaleBase(
                    f"cannot commit to dataset {dataset!r} on version {base}: the head is now version "
                    f"{head}; rebase your changes on the head and retry",
                    dataset=dataset,
                    base=base,
                    head=head,
                )
            claim = self._claim(dataset, new, base, commit_id)
        try:
            with self._translate(what):
                version = self._write(claim, changes, message, author, lineage, commit_id)
                self._publish(claim, version)
        except Exception:
            self._abandon(claim)
            raise
        return self.get_version(dataset, new)

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
            if other is None or other["state"] != "pending":  # finished or vanished meanwhile: head moved
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
            if time.monotonic() + delay > deadline:
                left = self._lease_left(claim_id)
                raise Conflict(
                    f"another commit to dataset {dataset!r} (version {new}) is in progress; retry after "
                    f"{left:.0f} s (when its lease expires if it died)",
                    dataset=dataset,
                    version=new,
                )
            self.sleep(delay)
            delay = min(delay * 2, 1.0)

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
        inserts never overwrite, so a late or concurrent repeat changes nothing."""
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
        for batch in batched(changes, self.batch_size):
            ops = planner.plan(batch)
            self._renew(claim)
            self.fault("renewed")
            if ops:
                self._stage(claim, ops)
            self.fault("batch-written")
        return {"_id": f"{dataset}@{new}", "dataset": dataset, "seq": new, "parent": base or None,
                "message": message, "author": author, "created_at": self.clock(),
                "record_count": (parent["record_count"] if parent else 0) + planner.count_delta,
                "total_bytes": (parent["total_bytes"] if parent else 0) + planner.bytes_delta,
                "added": planner.added, "removed": planner.removed, "modified": planner.modified,
                "lineage": lineage or {}, "commit_id": commit_id,
                "commit_digest": change_digest(changes) if commit_id is not None else None}  # fmt: skip

    def _lookup(self, dataset: str, keys: list[str], to_seq: int) -> dict[str, LiveRevision]:
        docs = self.records.find(
            {"dataset": dataset, "key": {"$in": keys}, "to_seq": to_seq}, _RECORD_FIELDS | {"from_seq": 1}
        )
        return {d["key"]: LiveRevision(_record(d), d["from_seq"]) for d in docs}

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
                live[key] = LiveRevision(_record(doc["record"]), claim.seq)
        return live, closed

    def _stage(self, claim: _Claim, ops: BatchOps) -> None:
        """Record one batch's outcome per key in ``staged`` (keyed by epoch: inert for others)."""
        sets: dict[str, dict[str, Any]] = {}
        for key, from_seq in ops.close:
            sets.setdefault(key, {})["close"] = from_seq
        for key, _ in ops.reopen:
            sets.setdefault(key, {})["close"] = None
        for record in ops.upsert:
            sets.setdefault(record.key, {})["record"] = _record_doc(record)
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
                    self.staged.delete_many(
                        {"dataset": claim.dataset, "seq": claim.seq, "epoch": claim.epoch}
                    )
        except StorageError:
            pass

    # --- tags -------------------------------------------------------------------------------------
    def set_tag(self, dataset: str, tag: str, seq: int) -> None:
        self.get_version(dataset, seq)
        with self._translate(f"tag {dataset}@{seq} as {tag!r}"):
            self.tags.update_one({"dataset": dataset, "tag": tag}, {"$set": {"seq": seq}}, upsert=True)

    def delete_tag(self, dataset: str, tag: str) -> None:
        self.get_dataset(dataset)
        with self._translate(f"untag {tag!r} in {dataset!r}"):
            result = self.tags.delete_one({"dataset": dataset, "tag": tag})
        if result.deleted_count == 0:
            raise NotFound(f"dataset {dataset!r} has no tag {tag!r}", dataset=dataset, tag=tag)

    def tag_target(self, dataset: str, tag: str) -> int:
        self.get_dataset(dataset)
        with self._translate(f"resolve tag {tag!r}"):
            doc = self.tags.find_one({"dataset": dataset, "tag": tag})
        if doc is None:
            raise VersionNotFound(
                f"dataset {dataset!r} has no tag {tag!r}; see `datahub log {dataset}`",
                dataset=dataset,
                tag=tag,
            )
        return doc["seq"]

    # --- records ----------------------------------------------------------------------------------
    def list_records(
        self,
        dataset: str,
        seq: int,
        *,
        prefix: str = "",
        start_after: str = "",
        limit: int | None = None,
        where: RecordFilter | None = None,
    ) -> Iterator[Record]:
        self.get_version(dataset, seq)
        return self._list(dataset, seq, prefix, start_after, limit, where)

    def _list(
        self, dataset: str, seq: int, prefix: str, after: str, limit: int | None, where: RecordFilter | None
    ) -> Iterator[Record]:
        page = page_hint(self.page_size, limit, where)
        live = {"from_seq": {"$lte": seq}, "to_seq": {"$gt": seq}}
        return narrowed(self._revisions(dataset, live, "by_key", prefix, page, after), where, limit)

    def get_record(self, dataset: str, seq: int, key: str) -> Record:
        found = self.get_records(dataset, seq, [key])
        if key not in found:
            raise RecordNotFound(
                f"dataset {dataset!r} version {seq} has no record {key!r}",
                dataset=dataset,
                version=seq,
                key=key,
            )
        return found[key]

    def get_records(self, dataset: str, seq: int, keys: list[str]) -> dict[str, Record]:
        self.get_version(dataset, seq)
        query = {"dataset": dataset, "key": {"$in": keys}, "from_seq": {"$lte": seq}, "to_seq": {"$gt": seq}}
        with self._translate(f"get records of {dataset}@{seq}"):
            return {d["key"]: _record(d) for d in self.records.find(query, _RECORD_FIELDS)}

    def diff(self, dataset: str, a: int, b: int, *, prefix: str = "") -> Iterator[DiffEntry]:
        for seq in (a, b):
            if seq:
                self.get_version(dataset, seq)
        if a >= b:
            raise InvalidInput("store diff needs a < b; the Catalog facade handles other orders")
        seqs = range(a + 1, b + 1)
        page = max(64, 8192 // (2 * len(seqs)))
        old = [
            self._revisions(dataset, {"to_seq": s, "from_seq": {"$lte": a}}, "ended", prefix, page)
            for s in seqs
        ]
        new = [
            self._revisions(dataset, {"from_seq": s, "to_seq": {"$gt": b}}, "began", prefix, page)
            for s in seqs
        ]
        by_key: Callable[[Record], str] = lambda r: r.key  # noqa: E731
        return merge_diff(heapq.merge(*old, key=by_key), heapq.merge(*new, key=by_key))

    def _revisions(
        self, dataset: str, cond: dict[str, Any], index: str, prefix: str, page: int, after: str = ""
    ) -> Iterator[Record]:
        """Revisions matching ``cond`` after key ``after``, in key order, by keyset pages.

        ``index`` is hinted so the server walks an index already in key order for ``cond``
        instead of sorting a large result in memory."""
        while True:
            query = {"dataset": dataset, **cond, "key": {"$gt": after} | _prefix_range(prefix)}
            with self._translate(f"read records of {dataset!r}"):
                docs = list(
                    self.records.find(query, _RECORD_FIELDS).sort("key", ASCENDING).hint(index).limit(page)
                )
            yield from map(_record, docs)
            if len(docs) < page:
                return
            after = docs[-1]["key"]

    # --- tokens -----------------------------------------------------------------------------------
    def put_token(self, token: TokenInfo) -> None:
        doc = {"principal": token.principal, "is_admin": token.is_admin,
               "created_at": token.created_at or self.clock(), "description": token.description,
               "extra": dict(token.extra)}  # fmt: skip
        with self._translate("store token"):
            self.tokens.replace_one({"_id": token.token_hash}, doc, upsert=True)

    def get_token(self, token_hash: str) -> TokenInfo | None:
        with self._translate("read token"):
            doc = self.tokens.find_one({"_id": token_hash})
        if doc is None:
            return None
        return TokenInfo(doc["_id"], doc["principal"], doc["is_admin"], doc["created_at"], doc["description"],
                         doc.get("extra") or {})  # fmt: skip

    def delete_token(self, token_hash: str) -> None:
        with self._translate("delete token"):
            self.tokens.delete_one({"_id": token_hash})


def _prefix_range(prefix: str) -> dict[str, str]:
    if not prefix:
        return {}
    return {"$gte": prefix, "$lt": prefix[:-1] + chr(ord(prefix[-1]) + 1)}
