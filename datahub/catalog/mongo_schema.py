"""The MongoDB catalog's documents: the indexes of its collections and how a record is stored.

Why a module of its own: the store's reads (``mongo_store.py``) and the commit protocol
(``mongo_commit.py``) both read and write these documents; a reader of the data layout finds it
here whole. A record revision is its record's fields plus ``dataset``, ``from_seq``, ``to_seq``
(and ``commit``, the epoch that wrote it); ``staged`` holds a commit's outcome per key, and
``commits``/``epochs`` its claims (see ``mongo_commit.py``); ``dirs`` is the directory table
and ``staged_dirs`` a commit's staged directory states (``mongo_dirs.py``).
"""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING

from datahub.catalog.model import EMPTY, DirFile, Record
from datahub.catalog.revisions import OPEN
from datahub.validation import Unreadable, stored_json

RECORD_FIELDS = {"_id": 0, "key": 1, "url": 1, "etag": 1, "size": 1, "checksum": 1, "meta": 1, "labels": 1}


DIR_FILE_FIELDS = {"_id": 0, "key": 1, "url": 1, "etag": 1, "size": 1, "meta.mtime": 1}


def dir_file_of_doc(doc: dict[str, Any]) -> DirFile:
    """The DirFile of a record document selected with DIR_FILE_FIELDS."""
    meta = doc.get("meta")
    mtime = meta.get("mtime") if type(meta) is dict else None
    return (doc["key"], doc["url"], doc["etag"], doc["size"], mtime if type(mtime) in (int, float) else None)


def record_of_doc(doc: dict[str, Any]) -> Record:
    """The Record of a record document (a revision, or a staged record)."""
    return Record(
        doc["key"],
        doc["url"],
        doc["etag"],
        doc["size"],
        doc.get("checksum", ""),
        stored_json(doc.get("meta") or EMPTY),  # never fails, even on over-deep legacy values
        stored_json(doc.get("labels") or EMPTY),
    )


def record_doc(record: Record) -> dict[str, Any]:
    """A record's fields; empty checksum/meta/labels are left out: most records have none."""
    doc: dict[str, Any] = {"key": record.key, "url": record.url, "etag": record.etag, "size": record.size}
    if record.checksum:
        doc["checksum"] = record.checksum
    if record.meta:
        doc["meta"] = _stored(record.meta)
    if record.labels:
        doc["labels"] = _stored(record.labels)
    return doc


def _stored(value: Any) -> Any:
    """An over-deep legacy value read back as ``Unreadable`` is written as it was stored."""
    return value.stored_value() if isinstance(value, Unreadable) else dict(value)


def create_indexes(db: Any) -> None:
    """Create the indexes every query and protocol step relies on (a no-op when they exist).

    ``by_key``, ``began`` and ``ended`` walk revisions in key order for listings and the two
    sides of a diff (the store hints them); ``by_claim`` keys a commit's staged changes by
    epoch; the unique ones make a repeated protocol step a duplicate-key no-op."""
    db["versions"].create_index([("dataset", ASCENDING), ("seq", DESCENDING)], unique=True, name="by_seq")
    db["browser_sessions"].create_index([("token", ASCENDING)], name="by_token")  # a revoke ends them
    db["versions"].create_index([("dataset", ASCENDING), ("commit_id", ASCENDING)], name="by_commit_id")
    db["commits"].create_index([("dataset", ASCENDING), ("commit_id", ASCENDING)], name="by_commit_id")
    db["tags"].create_index([("dataset", ASCENDING), ("tag", ASCENDING)], unique=True, name="by_tag")
    # the lease list of a caller who is not a global admin: the leases bound to each dataset it
    # may write, and those it took (``taker``, ``leases.taker_of``), never the others (leasefilter18)
    db["leases"].create_index([("dataset", ASCENDING), ("_id", ASCENDING)], name="by_target")
    db["leases"].create_index([("taker", ASCENDING), ("_id", ASCENDING)], name="by_taker")
    db["staged"].create_index(
        [("dataset", ASCENDING), ("seq", ASCENDING), ("epoch", ASCENDING), ("key", ASCENDING)],
        unique=True,
        name="by_claim",
    )
    db["records"].create_index(
        [("dataset", ASCENDING), ("key", ASCENDING), ("from_seq", ASCENDING)], unique=True, name="by_key"
    )
    # the directory table (``mongo_dirs``): ``by_parent`` lists a level's subdirectories, the
    # unique ``by_path`` finds a directory's intervals and makes a repeated insert a no-op
    db["dirs"].create_index(
        [("dataset", ASCENDING), ("parent", ASCENDING), ("path", ASCENDING), ("from_seq", ASCENDING)],
        name="by_parent",
    )
    db["dirs"].create_index(
        [("dataset", ASCENDING), ("path", ASCENDING), ("from_seq", ASCENDING)], unique=True, name="by_path"
    )
    db["staged_dirs"].create_index(
        [("dataset", ASCENDING), ("seq", ASCENDING), ("epoch", ASCENDING), ("path", ASCENDING)],
        unique=True,
        name="by_claim",
    )
    # Both diff indexes are partial, as SQLite's (docs/catalog.md "MongoDB at 10^8 records"):
    # ``began`` leaves out version 1 (a diff from the empty state is a listing, so nothing asks
    # for from_seq = 1 there) and ``ended`` the revisions still open at the head (every live
    # record). A first import of 10^8 records then writes one index entry per revision beside
    # ``_id``, not three. A database made before keeps its full indexes of the same names: they
    # serve the same hinted queries (and an index of a name that exists is never rebuilt).
    existing = db["records"].index_information()
    if "began" not in existing:
        db["records"].create_index(
            [("dataset", ASCENDING), ("from_seq", ASCENDING), ("key", ASCENDING)],
            name="began",
            partialFilterExpression={"from_seq": {"$gt": 1}},
        )
    if "ended" not in existing:
        db["records"].create_index(
            [("dataset", ASCENDING), ("to_seq", ASCENDING), ("key", ASCENDING)],
            name="ended",
            partialFilterExpression={"to_seq": {"$lt": OPEN}},
        )
