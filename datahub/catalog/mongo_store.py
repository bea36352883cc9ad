"""MongoCatalogStore: the production catalog on a MongoDB replica set.

pymongo lives here, in ``mongo_commit.py`` and in ``mongo_schema.py`` only.

Written for a real server: indexes are created at open, writes use ``w="majority"`` and
retryable writes, reads use majority read concern. Tests run it on mongomock, and on a real
server when ``DATAHUB_TEST_MONGO_URI`` is set.

Commits follow a claim/stage/publish protocol fenced by a claim epoch: ``mongo_commit.py``
(``MongoCommitProtocol``, mixed in here) and docs/catalog.md "Claims, fencing and leases".
"""

from __future__ import annotations

import calendar
import heapq
import operator
import re
import secrets
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pymongo
import pymongo.errors
from pymongo import ASCENDING, DESCENDING, ReturnDocument, WriteConcern
from pymongo.read_concern import ReadConcern

from datahub.catalog.filter import RecordFilter
from datahub.catalog.leases import (
    LIST_PAGE,
    PRUNE_LAPSED,
    Lease,
    LeaseChange,
    check_page,
    check_prune,
    prunable,
    taker_of,
    visible_page,
)
from datahub.catalog.model import (
    EMPTY,
    BrowserSession,
    Dataset,
    DiffEntry,
    DirFile,
    Record,
    TokenInfo,
    Version,
)
from datahub.catalog.mongo_commit import MongoCommitProtocol
from datahub.catalog.mongo_dirs import gap_query, subdirectories
from datahub.catalog.mongo_dirs_backfill import backfill_all
from datahub.catalog.mongo_schema import (
    DIR_FILE_FIELDS,
    RECORD_FIELDS,
    create_indexes,
    dir_file_of_doc,
    record_of_doc,
)
from datahub.catalog.revisions import merge_diff
from datahub.catalog.sqlite_dirs import gap_pages
from datahub.catalog.sqlite_dirs_backfill import Progress
from datahub.catalog.store import (
    CatalogStore,
    Gap,
    GapFiles,
    Subdirectories,
    diff_page,
    narrowed,
    page_hint,
    prefix_end,
    revision_mismatch,
)
from datahub.errors import (
    AlreadyExists,
    Busy,
    DatasetNotFound,
    InvalidInput,
    NotFound,
    RecordNotFound,
    StorageError,
    TransientStorageError,
    VersionNotFound,
)
from datahub.mongo_client import ProcessClient, database_name
from datahub.procs import PerProcess

_COLLECTIONS = ("datasets", "versions", "records", "tags", "tokens", "commits", "staged", "epochs", "leases",
                "dirs", "staged_dirs", "dirs_backfill", "browser_sessions", "catalog_meta")  # fmt: skip


class _Handles:
    """One process's database object and collections of a MongoCatalogStore."""

    __slots__ = ("collections", "db")

    def __init__(self, db: Any, collections: dict[str, Any]) -> None:
        self.db, self.collections = db, collections


class _Collection:
    """A collection attribute of MongoCatalogStore (``store.records``): this process's
    (fork28). Setting it replaces this process's (tests wrap a collection to count or fail)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, store: Any, owner: type | None = None) -> Any:
        if store is None:
            return self
        return store._handles.get().collections[self.name]

    def __set__(self, store: Any, value: Any) -> None:
        store._handles.get().collections[self.name] = value


_TIMEOUTS = re.compile(r" \(configured timeouts: [^)]*\)")


def _reason(exc: Exception) -> str:
    """Why pymongo found no server, in a line: each host's own error. Why: its message went on
    with the configured timeouts (each host's twice) and the whole topology description, a
    paragraph of pymongo internals in a one-line CLI error (newuser34)."""
    return _TIMEOUTS.sub("", str(exc).split(", Timeout: ", 1)[0]).strip() or type(exc).__name__


class MongoCatalogStore(MongoCommitProtocol, CatalogStore):
    """Catalog in MongoDB collections datasets/versions/records/tags/tokens/commits (and the
    directory table ``dirs``, ``mongo_dirs``)."""

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
        test hook called at protocol points ("renewed", "batch-written", "dirs-staged",
        "publishing", "records-rolled", "dirs-rolled") to simulate crashes and stalls. ``lease_seconds``: how long a silent writer keeps its claim
        (renewed every batch); ``claim_wait_seconds``: how long a commit waits for a running one;
        ``retry_seconds``: how long transient errors (elections) are retried. ``clock`` stamps
        ``created_at``, and stands in for the server's clock only on mongomock."""
        self._mongo = ProcessClient(url, client)  # this process's client (fork28); a given one is not closed
        self._db_name = database_name(url)
        self._handles: PerProcess[_Handles] = PerProcess(self._open_handles)
        self.url = url
        self.batch_size, self.page_size = batch_size, page_size
        self.lease_seconds = lease_seconds
        self._lease_ms = int(lease_seconds * 1000)
        self.claim_wait_seconds, self.retry_seconds = claim_wait_seconds, retry_seconds
        self._server_time = urlsplit(url).scheme != "mongomock"
        self.clock, self.sleep = clock, sleep
        self.fault = fault or (lambda point: None)
        self._instance: str | None = None
        with self._translate(f"open catalog {self._db_name}"):
            create_indexes(self.db)

    def _open_handles(self) -> _Handles:
        """This process's database and collections, on its own client."""
        db = self._mongo.get().get_database(
            self._db_name, write_concern=WriteConcern("majority"), read_concern=ReadConcern("majority")
        )
        return _Handles(db, {name: db[name] for name in _COLLECTIONS})

    @property
    def client(self) -> Any:
        """This process's MongoDB client (a forked child's own: ``ProcessClient``)."""
        return self._mongo.get()

    @property
    def db(self) -> Any:
        """The catalog's database, on this process's client."""
        return self._handles.get().db

    datasets, versions, records = _Collection(), _Collection(), _Collection()
    tags, tokens, commits = _Collection(), _Collection(), _Collection()
    staged, epochs, leases = _Collection(), _Collection(), _Collection()
    dirs, staged_dirs, dirs_backfill = _Collection(), _Collection(), _Collection()
    browser_sessions, catalog_meta = _Collection(), _Collection()

    def close(self) -> None:
        """Close this process's client if the store made it (never a parent's, in a child)."""
        self._handles.drop()
        self._mongo.close()

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
            raise TransientStorageError(
                f"{what}: MongoDB unreachable ({_reason(exc)}); check that the server the catalog URL "
                "names (--catalog, catalog_url) runs and is reachable from here, or retry later"
            ) from exc
        except pymongo.errors.PyMongoError as exc:
            raise StorageError(f"{what}: MongoDB error: {exc}") from exc

    # --- datasets -------------------------------------------------------------------------------
    def _dataset(self, doc: dict[str, Any]) -> Dataset:
        return Dataset(doc["_id"], doc.get("description", ""), doc.get("source", ""), doc.get("owner", ""),
                       doc.get("acl") or EMPTY, doc.get("created_at", 0.0), doc.get("revision", 0),
                       tuple(doc.get("sources") or ()))  # fmt: skip

    def create_dataset(self, dataset: Dataset) -> Dataset:
        # dirs: a new dataset's commits keep its directory table (mongo_dirs) from the first
        doc = {"_id": dataset.name, "description": dataset.description, "source": dataset.source,
               "owner": dataset.owner, "acl": dict(dataset.acl), "created_at": dataset.created_at or self.clock(),
               "dirs": True}  # fmt: skip
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
        values = {f: dict(v) if f == "acl" else list(v) if f == "sources" else v for f, v in fields.items()}
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
            return {d["key"]: record_of_doc(d) for d in self.records.find(query, RECORD_FIELDS)}

    def diff(
        self, dataset: str, a: int, b: int, *, prefix: str = "", start_after: str = ""
    ) -> Iterator[DiffEntry]:
        for seq in (a, b):
            if seq:
                self.get_version(dataset, seq)
        if a >= b:
            raise InvalidInput("store diff needs a < b; the Catalog facade handles other orders")
        if a == 0:  # from the empty state every record live at b is added: b's listing
            return (
                DiffEntry("added", r.key, None, r)
                for r in self._list(dataset, b, prefix, start_after, None, None)
            )
        seqs = range(a + 1, b + 1)
        page = diff_page(a, b)
        old = [
            self._revisions(
                dataset, {"to_seq": s, "from_seq": {"$lte": a}}, "ended", prefix, page, start_after
            )
            for s in seqs
        ]
        new = [
            self._revisions(
                dataset, {"from_seq": s, "to_seq": {"$gt": b}}, "began", prefix, page, start_after
            )
            for s in seqs
        ]
        by_key: Callable[[Record], str] = lambda r: r.key  # noqa: E731
        return merge_diff(heapq.merge(*old, key=by_key), heapq.merge(*new, key=by_key))

    def _revisions(
        self, dataset: str, cond: dict[str, Any], index: str, prefix: str, page: int, after: str = ""
    ) -> Iterator[Record]:
        """Revisions matching ``cond`` after key ``after``, in key order, by keyset pages."""
        for docs in self._doc_pages(dataset, cond, index, prefix, page, after, RECORD_FIELDS):
            yield from map(record_of_doc, docs)

    def _doc_pages(
        self,
        dataset: str,
        cond: dict[str, Any],
        index: str,
        prefix: str,
        page: int,
        after: str,
        fields: dict[str, int],
    ) -> Iterator[list[dict[str, Any]]]:
        """The documents (``fields`` of them) of ``_revisions``, a list per page.

        ``index`` is hinted so the server walks an index already in key order for ``cond``
        instead of sorting a large result in memory."""
        while True:
            query = {"dataset": dataset, **cond, "key": {"$gt": after} | _prefix_range(prefix)}
            with self._translate(f"read records of {dataset!r}"):
                docs = list(self.records.find(query, fields).sort("key", ASCENDING).hint(index).limit(page))
            yield docs
            if len(docs) < page:
                return
            after = docs[-1]["key"]

    def _directory_pages(
        self, dataset: str, seq: int
    ) -> Callable[[str, str, int | None], Iterator[list[DirFile]]]:
        """DirFile's fields alone (``DIR_FILE_FIELDS``: meta's mtime, not all of meta or labels)."""
        self.get_version(dataset, seq)
        live = {"from_seq": {"$lte": seq}, "to_seq": {"$gt": seq}}

        def pages(prefix: str, after: str, limit: int | None) -> Iterator[list[DirFile]]:
            page = page_hint(self.page_size, limit, None)
            for docs in self._doc_pages(dataset, live, "by_key", prefix, page, after, DIR_FILE_FIELDS):
                yield list(map(dir_file_of_doc, docs))

        return pages

    def _directory_index(self, dataset: str, seq: int) -> tuple[Subdirectories, GapFiles] | None:
        """The directory table's two reads (``mongo_dirs``), when the dataset's is complete."""
        self.get_version(dataset, seq)
        with self._translate(f"read dataset {dataset!r}"):
            doc = self.datasets.find_one({"_id": dataset}, {"dirs": 1})
        if not (doc or {}).get("dirs"):
            return None

        def subdirs(prefix: str, after: str, limit: int) -> list[tuple[str, bool]]:
            with self._translate(f"list directory {prefix!r} of {dataset}@{seq}"):
                return subdirectories(self.dirs, dataset, seq, prefix, after, limit)

        def files(prefix: str, gaps: list[Gap], limit: int | None) -> Iterator[list[DirFile]]:
            def find(gaps: list[Gap], n: int) -> list[dict[str, Any]]:
                query = gap_query(dataset, seq, prefix, gaps)
                cursor = self.records.find(query, DIR_FILE_FIELDS).sort("key", ASCENDING).hint("by_key")
                with self._translate(f"list directory {prefix!r} of {dataset}@{seq}"):
                    return list(cursor.limit(n))

            page = page_hint(self.page_size, limit, None)
            for docs in gap_pages(find, _key, gaps, limit, page):
                yield list(map(dir_file_of_doc, docs))

        return subdirs, files

    def fill_directory_tables(self, progress: Progress | None = None) -> list[str]:
        """Fill the directory table of every dataset committed before the catalog had one
        (``mongo_dirs_backfill``: one pass per dataset, resumable, used once complete)."""
        with self._translate("fill the directory tables"):
            return backfill_all(self, progress=progress)

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
            self.browser_sessions.delete_many({"token": token_hash})

    def list_tokens(self) -> list[TokenInfo]:
        with self._translate("list tokens"):
            docs = list(self.tokens.find({}).sort([("principal", 1), ("created_at", 1), ("_id", 1)]))
        return [
            TokenInfo(d["_id"], d["principal"], d["is_admin"], d["created_at"], d["description"],
                      d.get("extra") or {})
            for d in docs
        ]  # fmt: skip

    # --- dataset browser sessions -----------------------------------------------------------------
    def instance_id(self) -> str:
        if self._instance is None:  # made by the first server that asks; every later one reads it
            with self._translate("read the catalog's instance id"):
                made = {"$setOnInsert": {"value": secrets.token_hex(8)}}
                self.catalog_meta.update_one({"_id": "instance"}, made, upsert=True)
                self._instance = self.catalog_meta.find_one({"_id": "instance"})["value"]
        return self._instance

    def put_browser_session(self, session: BrowserSession, now: float) -> None:
        with self._translate("store a browser session"):
            self.browser_sessions.delete_many({"expires": {"$lt": now}})
            doc = {"token": session.token_hash, "expires": session.expires_at}
            self.browser_sessions.replace_one({"_id": session.id_hash}, doc, upsert=True)

    def get_browser_session(self, id_hash: str) -> BrowserSession | None:
        with self._translate("read a browser session"):
            doc = self.browser_sessions.find_one({"_id": id_hash})
        return None if doc is None else BrowserSession(doc["_id"], doc["token"], doc["expires"])

    def delete_browser_session(self, id_hash: str) -> None:
        with self._translate("delete a browser session"):
            self.browser_sessions.delete_one({"_id": id_hash})

    # --- writer leases: one document per lease, changed by compare-and-swap ----------------------
    def list_leases(
        self,
        after: str = "",
        limit: int = LIST_PAGE,
        *,
        targets: Collection[str] | None = None,
        taker: str = "",
    ) -> list[Lease]:
        check_page(limit)
        with self._translate("list the writer leases"):
            if targets is None:  # a range of the _id index: O(limit)
                found = self.leases.find({"_id": {"$gt": after}}).sort("_id", 1).limit(limit)
                return [_lease_of(doc) for doc in found]

            def read(target: str | None, below: str | None) -> list[Lease]:
                names = {"$gt": after} if below is None else {"$gt": after, "$lt": below}
                if target is not None:  # a range of by_target (dataset, _id)
                    found = self.leases.find({"dataset": target, "_id": names}).sort("_id", 1).limit(limit)
                    return [_lease_of(doc) for doc in found]
                return self._taken(taker, names, limit)

            return visible_page(read, targets, taker, limit)

    def _taken(self, taker: str, names: dict[str, str], limit: int) -> list[Lease]:
        """Up to ``limit`` leases in ``names`` that ``taker`` took for a dataset that does not
        exist, by name: a range of by_taker (taker, _id), its own leases bound to an existing
        dataset skipped (one lookup of each target)."""
        found: list[Lease] = []
        query = {"taker": taker, "_id": names, "dataset": {"$ne": ""}}
        for doc in self.leases.find(query).sort("_id", 1):
            lease = _lease_of(doc)
            if (
                taker_of(lease.holder) == taker
                and self.datasets.find_one({"_id": lease.dataset}, {"_id": 1}) is None
            ):
                found.append(lease)
                if len(found) == limit:
                    break
        return found

    def prune_leases(
        self, after: str = "", limit: int = LIST_PAGE, lapsed_for: float = PRUNE_LAPSED
    ) -> tuple[list[str], str | None]:
        check_prune(limit, lapsed_for)
        gone: list[str] = []
        with self._translate("prune the writer leases"):
            page = list(self.leases.find({"_id": {"$gt": after}}).sort("_id", 1).limit(limit))
            now = self._lease_now()
            for doc in page:
                if not prunable(_lease_of(doc), now, lapsed_for):
                    continue
                # only the document as read: a take that changed it since keeps it
                seen = {f: doc.get(f) for f in (*_LEASE_FIELDS, "dataset")}
                if self.leases.delete_one({"_id": doc["_id"], **seen}).deleted_count:
                    gone.append(doc["_id"])
        return gone, page[-1]["_id"] if len(page) == limit else None

    def _lease_now(self) -> float:
        """The server's clock (every node compares expiries on one clock); mongomock: ``clock``."""
        if not self._server_time:
            return self.clock()
        local = self.db.command("hello")["localTime"]  # a naive UTC datetime
        return calendar.timegm(local.utctimetuple()) + local.microsecond / 1e6

    def _lease_turn(self, what: str, name: str, change: LeaseChange) -> Lease | None:
        """Read the lease, apply ``change`` (which may raise Conflict), and write it back only if the
        document is still the one read (owner, epoch, expiry, target): a racing node's write makes the
        update match nothing, and the turn is read again."""
        for _attempt in range(8):
            with self._translate(what):
                doc = self.leases.find_one({"_id": name})
                now = self._lease_now()
            lease = change(_lease_of(doc) if doc else None, now)
            if lease is None:
                return None
            new = {f: getattr(lease, f) for f in (*_LEASE_FIELDS, "dataset")}
            new["taker"] = taker_of(lease.holder)  # by_taker: the leases a caller took (list_leases)
            try:
                with self._translate(what):
                    if doc is None:
                        self.leases.insert_one({"_id": name, **new})
                        return lease
                    seen = {
                        "_id": name,
                        "owner": doc["owner"],
                        "epoch": doc["epoch"],
                        "expires": doc["expires"],
                        "dataset": doc.get("dataset"),  # None matches a document from before it
                    }
                    if self.leases.replace_one(seen, new).matched_count:
                        return lease
            except StorageError as exc:
                if not isinstance(exc.__cause__, pymongo.errors.DuplicateKeyError):
                    raise
        raise Busy(f"{what}: other nodes kept changing the lease; retry", retry_after=1)


_LEASE_FIELDS = ("owner", "holder", "epoch", "expires")


def _lease_of(doc: dict[str, Any]) -> Lease:
    """A lease document as a Lease (one without ``dataset``, from before schema 7: no target)."""
    return Lease(doc["_id"], *(doc[f] for f in _LEASE_FIELDS), doc.get("dataset", ""))


_key = operator.itemgetter("key")


def _prefix_range(prefix: str) -> dict[str, str]:
    if not prefix:
        return {}
    return {"$gte": prefix, "$lt": prefix_end(prefix)}
