"""MongoCatalogStore: the production catalog on a MongoDB replica set (pymongo lives here only).

Written for a real server: indexes are created at open, writes use ``w="majority"`` and
retryable writes, reads use majority read concern. Tests run it on mongomock, and on a real
server when ``DATAHUB_TEST_MONGO_URI`` is set.

Crash-safe commit protocol (details in docs/catalog.md). A version is visible exactly when
its document exists in ``versions``, and readers only ever ask for visible versions, so:

1. *claim*: insert ``commits/{dataset}@{new}`` (state ``pending``, owner token, lease). The
   unique ``_id`` makes one writer own sequence ``new``; others get StaleBase or Conflict.
2. *write*: per batch, renew the lease, close base revisions (``to_seq = new``) and insert
   the commit's revisions (``from_seq = new``). Neither is visible to readers of any existing
   version: ranges ``from_seq <= v < to_seq`` for ``v <= base`` are unchanged by them.
3. *publish*: flip the commit to ``publishing`` with the version document embedded (fenced
   on owner), insert the version document, mark the commit ``committed``.

A writer that fails with an exception cleans its writes up before raising. A writer that
dies leaves a ``pending`` commit: once its lease expires the next commit on that dataset
takes it over and undoes it (delete revisions from ``new``, reopen those closed at ``new``);
a commit found in ``publishing`` is finished instead (its writes are complete). A retry
with the same ``commit_id`` returns the version that id already created.
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pymongo
import pymongo.errors
from pymongo import ASCENDING, DESCENDING, ReturnDocument, WriteConcern
from pymongo.read_concern import ReadConcern

from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import EMPTY, Change, Dataset, DiffEntry, Record, TokenInfo, Version
from datahub.catalog.revisions import OPEN, BatchOps, CommitPlanner, LiveRevision, batched, merge_diff
from datahub.catalog.store import CatalogStore, narrowed, page_hint
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

_RECORD_FIELDS = {"_id": 0, "key": 1, "url": 1, "etag": 1, "size": 1, "checksum": 1, "meta": 1, "labels": 1}


def _record(doc: dict[str, Any]) -> Record:
    return Record(
        doc["key"],
        doc["url"],
        doc["etag"],
        doc["size"],
        doc.get("checksum", ""),
        doc.get("meta") or EMPTY,
        doc.get("labels") or EMPTY,
    )


def _record_doc(dataset: str, record: Record, seq: int, owner: str) -> dict[str, Any]:
    """Empty checksum/meta/labels are left out: most records have none."""
    doc: dict[str, Any] = {"dataset": dataset, "key": record.key, "from_seq": seq, "to_seq": OPEN,
                           "url": record.url, "etag": record.etag, "size": record.size, "commit": owner}  # fmt: skip
    if record.checksum:
        doc["checksum"] = record.checksum
    if record.meta:
        doc["meta"] = dict(record.meta)
    if record.labels:
        doc["labels"] = dict(record.labels)
    return doc


def _connect(url: str) -> tuple[Any, str]:
    """(client, database name) for ``mongodb://``, ``mongodb+srv://`` or ``mongomock://`` URLs."""
    parts = urlsplit(url)
    db_name = parts.path.lstrip("/") or "datahub"
    if parts.scheme == "mongomock":
        import mongomock  # the sanctioned test stand-in; never used with a mongodb:// URL

        return mongomock.MongoClient(), db_name
    return (
        pymongo.MongoClient(
            url,
            w="majority",
            retryWrites=True,
            retryReads=True,
            readConcernLevel="majority",
            serverSelectionTimeoutMS=10_000,
        ),
        db_name,
    )


class MongoCatalogStore(CatalogStore):
    """Catalog in MongoDB collections datasets/versions/records/tags/tokens/commits."""

    def __init__(
        self,
        url: str,
        *,
        client: Any = None,
        batch_size: int = 2000,
        page_size: int = 2000,
        lease_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        """``client`` lets tests share one (mock) server between stores; ``fault(point)`` is a
        test hook called at protocol points ("batch-written", "publishing") to simulate crashes."""
        own_client, db_name = _connect(url)
        if client is not None:
            own_client.close()
        self.client = client or own_client
        self._owns_client = client is None
        self.url = url
        self.batch_size, self.page_size = batch_size, page_size
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.fault = fault or (lambda point: None)
        db = self.client.get_database(
            db_name, write_concern=WriteConcern("majority"), read_concern=ReadConcern("majority")
        )
        self.db = db
        self.datasets, self.versions, self.records = db["datasets"], db["versions"], db["records"]
        self.tags, self.tokens, self.commits = db["tags"], db["tokens"], db["commits"]
        with self._translate(f"open catalog {db_name}"):
            self._create_indexes()

    def _create_indexes(self) -> None:
        self.versions.create_index([("dataset", ASCENDING), ("seq", DESCENDING)], unique=True, name="by_seq")
        self.versions.create_index([("dataset", ASCENDING), ("commit_id", ASCENDING)], name="by_commit_id")
        self.commits.create_index([("dataset", ASCENDING), ("commit_id", ASCENDING)], name="by_commit_id")
        self.tags.create_index([("dataset", ASCENDING), ("tag", ASCENDING)], unique=True, name="by_tag")
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
                       doc.get("acl") or EMPTY, doc.get("created_at", 0.0))  # fmt: skip

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

    def update_dataset(self, dataset: Dataset) -> Dataset:
        with self._translate(f"update dataset {dataset.name!r}"):
            result = self.datasets.update_one(
                {"_id": dataset.name},
                {"$set": {"description": dataset.description, "source": dataset.source,
                          "owner": dataset.owner, "acl": dict(dataset.acl)}},
            )  # fmt: skip
        if result.matched_count == 0:
            raise DatasetNotFound(f"dataset {dataset.name!r} not found", dataset=dataset.name)
        return self.get_dataset(dataset.name)

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
                done = self._finished(dataset, commit_id)
                if done is not None:
                    return self.get_version(dataset, done)
            new = base + 1
            self._recover(dataset, self._head(dataset) + 1)
            head = self._head(dataset)
            if base != head:
                raise StaleBase(
                    f"cannot commit to dataset {dataset!r} on version {base}: the head is now version "
                    f"{head}; rebase your changes on the head and retry",
                    dataset=dataset,
                    base=base,
                    head=head,
                )
            owner = uuid.uuid4().hex
            self._claim(dataset, new, base, owner, commit_id)
        try:
            with self._translate(what):
                version = self._write(dataset, base, owner, changes, message, author, lineage, commit_id)
                self._publish(dataset, new, owner, version)
        except Exception:
            self._abandon(dataset, new, owner)
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

    def _claim(self, dataset: str, new: int, base: int, owner: str, commit_id: str | None) -> None:
        """Become the one writer of ``dataset@new``, taking over a dead writer's expired claim."""
        now = self.clock()
        doc = {"_id": f"{dataset}@{new}", "dataset": dataset, "seq": new, "base": base, "owner": owner,
               "lease_until": now + self.lease_seconds, "state": "pending", "commit_id": commit_id,
               "started_at": now}  # fmt: skip
        try:
            self.commits.insert_one(doc)
            return
        except pymongo.errors.DuplicateKeyError:
            pass
        other = self.commits.find_one({"_id": doc["_id"]})
        if other is None or other["state"] != "pending":  # finished or vanished meanwhile: head moved
            raise StaleBase(
                f"cannot commit to dataset {dataset!r} on version {base}: another commit just created "
                f"version {new}; rebase on the head and retry",
                dataset=dataset,
                base=base,
            )
        if other["lease_until"] > now:
            raise Conflict(
                f"another commit to dataset {dataset!r} (version {new}) is in progress; retry after "
                f"{other['lease_until'] - now:.0f} s (when its lease expires if it died)",
                dataset=dataset,
                version=new,
            )
        taken = self.commits.find_one_and_update(
            {"_id": doc["_id"], "owner": other["owner"], "state": "pending"},
            {"$set": {k: v for k, v in doc.items() if k != "_id"}},
        )
        if taken is None:
            raise Conflict(f"another writer took over the commit of {dataset!r} version {new}; retry")
        self._undo(dataset, new)

    def _undo(self, dataset: str, seq: int) -> None:
        """Remove every trace of an unpublished commit of ``seq`` (idempotent)."""
        self.records.delete_many({"dataset": dataset, "from_seq": seq})
        self.records.update_many(
            {"dataset": dataset, "to_seq": seq}, {"$set": {"to_seq": OPEN}, "$unset": {"closed_by": ""}}
        )

    def _recover(self, dataset: str, seq: int) -> None:
        """Finish a commit of ``seq`` that died while publishing (all its writes are in place)."""
        doc = self.commits.find_one({"_id": f"{dataset}@{seq}", "state": "publishing"})
        if doc is None:
            return
        try:
            self.versions.insert_one(doc["version"])
        except pymongo.errors.DuplicateKeyError:
            pass
        self.commits.update_one(
            {"_id": doc["_id"]}, {"$set": {"state": "committed"}, "$unset": {"version": ""}}
        )

    def _renew(self, dataset: str, new: int, owner: str) -> None:
        renewed = self.commits.find_one_and_update(
            {"_id": f"{dataset}@{new}", "owner": owner, "state": "pending"},
            {"$set": {"lease_until": self.clock() + self.lease_seconds}},
        )
        if renewed is None:
            raise Conflict(
                f"lost the commit of dataset {dataset!r} version {new}: its lease expired and another "
                "writer took over; retry",
                dataset=dataset,
                version=new,
            )

    def _write(
        self,
        dataset: str,
        base: int,
        owner: str,
        changes: Iterable[Change],
        message: str,
        author: str,
        lineage: dict | None,
        commit_id: str | None,
    ) -> dict[str, Any]:
        new = base + 1
        parent = self.versions.find_one({"dataset": dataset, "seq": base}) if base else None
        planner = CommitPlanner(
            dataset,
            base,
            lambda keys: self._lookup(dataset, keys, OPEN),
            lambda keys: self._lookup(dataset, keys, new),
        )
        for batch in batched(changes, self.batch_size):
            ops = planner.plan(batch)
            self._renew(dataset, new, owner)
            if ops:
                self._apply(dataset, new, owner, ops)
            self.fault("batch-written")
        return {"_id": f"{dataset}@{new}", "dataset": dataset, "seq": new, "parent": base or None,
                "message": message, "author": author, "created_at": self.clock(),
                "record_count": (parent["record_count"] if parent else 0) + planner.count_delta,
                "total_bytes": (parent["total_bytes"] if parent else 0) + planner.bytes_delta,
                "added": planner.added, "removed": planner.removed, "modified": planner.modified,
                "lineage": lineage or {}, "commit_id": commit_id}  # fmt: skip

    def _lookup(self, dataset: str, keys: list[str], to_seq: int) -> dict[str, LiveRevision]:
        docs = self.records.find(
            {"dataset": dataset, "key": {"$in": keys}, "to_seq": to_seq}, _RECORD_FIELDS | {"from_seq": 1}
        )
        return {d["key"]: LiveRevision(_record(d), d["from_seq"]) for d in docs}

    def _apply(self, dataset: str, new: int, owner: str, ops: BatchOps) -> None:
        """Set-based writes, each idempotent, so a retried batch converges to the same state."""
        if ops.close:
            self.records.update_many(
                {"dataset": dataset, "key": {"$in": [k for k, _ in ops.close]}, "to_seq": OPEN,
                 "from_seq": {"$lt": new}},
                {"$set": {"to_seq": new, "closed_by": owner}},
            )  # fmt: skip
        if ops.reopen:
            self.records.update_many(
                {"dataset": dataset, "key": {"$in": [k for k, _ in ops.reopen]}, "to_seq": new},
                {"$set": {"to_seq": OPEN}, "$unset": {"closed_by": ""}},
            )
        replaced = ops.drop + [r.key for r in ops.upsert]
        if replaced:
            self.records.delete_many({"dataset": dataset, "from_seq": new, "key": {"$in": replaced}})
        if ops.upsert:
            self.records.insert_many([_record_doc(dataset, r, new, owner) for r in ops.upsert], ordered=False)

    def _publish(self, dataset: str, new: int, owner: str, version: dict[str, Any]) -> None:
        strays = self.records.count_documents(
            {"dataset": dataset, "from_seq": new, "commit": {"$ne": owner}}, limit=1
        ) + self.records.count_documents(
            {"dataset": dataset, "to_seq": new, "closed_by": {"$ne": owner}}, limit=1
        )
        if strays:
            raise Conflict(f"a stalled writer interfered with the commit of {dataset!r} version {new}; retry")
        flipped = self.commits.find_one_and_update(
            {"_id": f"{dataset}@{new}", "owner": owner, "state": "pending"},
            {"$set": {"state": "publishing", "version": version}},
            return_document=ReturnDocument.AFTER,
        )
        if flipped is None:
            raise Conflict(f"lost the commit of dataset {dataset!r} version {new} to another writer; retry")
        self.fault("publishing")
        self._recover(dataset, new)

    def _abandon(self, dataset: str, new: int, owner: str) -> None:
        """Undo a failed commit we still own; if that fails too, the lease lets the next writer do it."""
        try:
            with self._translate(f"abandon commit of {dataset!r} version {new}"):
                mine = self.commits.find_one({"_id": f"{dataset}@{new}", "owner": owner, "state": "pending"})
                if mine is not None:
                    self._undo(dataset, new)
                    self.commits.delete_one({"_id": mine["_id"], "owner": owner, "state": "pending"})
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
