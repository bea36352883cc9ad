"""The catalog's vocabulary: datasets, versions (snapshots), records, change sets, diffs.

Plain frozen dataclasses so storage documents never leak to the wire or to callers:
stores convert rows/documents to these, the API converts these to its own schemas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from datahub.catalog.snapshots import is_bucket_snapshot
from datahub.errors import AccessDenied
from datahub.storage.base import ObjectRef

ROLES = ("reader", "writer", "admin")  # each role includes the ones before it


class _FrozenEmptyDict(dict):
    """The shared empty default for meta/labels/acl/lineage.

    A dataclass refuses unhashable defaults (``MappingProxyType`` included), and a plain
    ``{}`` default would be shared and mutable; this one is hashable, refuses mutation, and
    still serialises with ``json.dumps`` like the dict it is.
    """

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        return 0

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("EMPTY is immutable; build a new dict instead")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]
    __ior__ = _refuse  # type: ignore[assignment]


EMPTY: Mapping[str, Any] = _FrozenEmptyDict()


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    description: str = ""
    source: str = ""  # default source location (URL) for imports
    owner: str = ""
    acl: Mapping[str, str] = EMPTY  # principal -> role ("reader" | "writer" | "admin"); "*" = everyone
    created_at: float = 0.0
    revision: int = 0  # +1 on every update: optimistic concurrency (If-Match / ETag)
    # URL prefixes a global admin allowed this dataset's records under: over HTTP, a commit by
    # anyone else may put only such URLs, or ones it can already read (docs/api.md, "Record URLs")
    sources: tuple[str, ...] = ()


def readers_of(dataset: Dataset, target: str) -> dict[str, str]:
    """An access list giving every principal of ``dataset``'s access list, and its owner, the
    reader role: what a dataset made from it with no owner of its own starts with.

    Why: a dataset with no owner and no access list is open to every pod of the CSI plugin
    (docs/csi.md), so a copy of a restricted dataset made so (``datahub pack``, a CLI derive on
    the deployment's catalog) let any pod read what only the source's readers may (review32).
    Readers only: nobody gets to change or write the copy through it. An open source (neither)
    gives an open copy.

    A bucket snapshot made so (``snapshots.is_bucket_snapshot``) is the exception: it is open
    to no pod, and no access list says "nobody", so its copy with no owner would be open to
    every pod, the bucket's objects read with the plugin's credentials (caller33). That copy
    is refused (AccessDenied, nothing made): its target is made first with the access list
    wanted, or the copy is given an owner (the API's derive)."""
    if not dataset.owner and not dataset.acl and is_bucket_snapshot(dataset.name, dataset.source):
        raise AccessDenied(
            f"dataset {dataset.name!r} is a snapshot of bucket {dataset.source}, which no pod may mount; "
            f"a copy of it made with no owner ({target!r}) would have no access list, which every pod "
            f"may mount, so nothing was made: create {target!r} first with the readers it is for "
            f"(`datahub dataset create {target} --acl PRINCIPAL=reader`), then run this again",
            dataset=dataset.name,
            target=target,
        )
    readers = dict.fromkeys(dataset.acl, "reader")
    if dataset.owner:
        readers[dataset.owner] = "reader"
    return readers


@dataclass(frozen=True, slots=True)
class Record:
    """One file of a dataset version: a key and the immutable bytes it points at."""

    key: str  # relative path, validated by datahub.validation.check_key
    url: str  # absolute object location
    etag: str  # etag (or version id) the object had when recorded
    size: int
    checksum: str = ""  # optional "algo:hex", e.g. "sha256:..."
    meta: Mapping[str, Any] = EMPTY
    labels: Mapping[str, Any] = EMPTY

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.url, self.etag, self.size)


#: One file of a directory listing (``CatalogStore.list_directory``), in DIR_FILE_COLUMNS
#: order: only what a mount's namespace shows of a record. ``mtime`` is the record's
#: ``meta["mtime"]`` (seconds) when that is a number, else None. Why a plain tuple and not a
#: Record: a cold 10^4-entry directory spent most of its CPU building Records and decoding
#: their meta/labels (issue 38 item 1); stores select these columns only.
DirFile = tuple[str, str, str, int, "float | None"]
DIR_FILE_COLUMNS = ("key", "url", "etag", "size", "mtime")


def dir_file(record: Record) -> DirFile:
    """The DirFile of ``record`` (for stores that list Records)."""
    mtime = record.meta.get("mtime") if record.meta else None
    return (record.key, record.url, record.etag, record.size, mtime if type(mtime) in (int, float) else None)


_new = object.__new__
_SETTERS = tuple(getattr(Record, name).__set__ for name in Record.__slots__)


def record_from_row(
    key: str,
    url: str,
    etag: str,
    size: int,
    checksum: str,
    meta: Mapping[str, Any],
    labels: Mapping[str, Any],
) -> Record:
    """``Record(...)`` for bulk decoding (listings of 10^7 records): the same frozen object,
    built by setting its slots directly instead of through the generated ``__init__`` and its
    seven ``object.__setattr__`` calls, which made up a third of a listing's cost per record."""
    record = _new(Record)
    set_key, set_url, set_etag, set_size, set_checksum, set_meta, set_labels = _SETTERS
    set_key(record, key)
    set_url(record, url)
    set_etag(record, etag)
    set_size(record, size)
    set_checksum(record, checksum)
    set_meta(record, meta)
    set_labels(record, labels)
    return record


@dataclass(frozen=True, slots=True)
class Version:
    """An immutable snapshot. ``seq`` counts 1, 2, 3 … within its dataset."""

    dataset: str
    seq: int
    parent: int | None
    message: str = ""
    author: str = ""
    created_at: float = 0.0
    tags: tuple[str, ...] = ()
    record_count: int = 0
    total_bytes: int = 0
    added: int = 0  # records added / removed / modified relative to the parent
    removed: int = 0
    modified: int = 0
    lineage: Mapping[str, Any] = EMPTY


# --- change sets -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Put:
    """Add a record or replace the record at ``record.key``."""

    record: Record


@dataclass(frozen=True, slots=True)
class Delete:
    key: str


@dataclass(frozen=True, slots=True)
class Patch:
    """Merge metadata/labels into an existing record; a value of ``None`` removes that field."""

    key: str
    meta: Mapping[str, Any] | None = None
    labels: Mapping[str, Any] | None = None


Change = Put | Delete | Patch


@dataclass(frozen=True, slots=True)
class DiffEntry:
    kind: Literal["added", "removed", "modified"]
    key: str
    old: Record | None
    new: Record | None


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """An API token, stored only as its SHA-256 hash."""

    token_hash: str
    principal: str
    is_admin: bool = False
    created_at: float = 0.0
    description: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BrowserSession:
    """A dataset browser sign-in (``datahub.browser.session``): the SHA-256 of the random id its
    cookie holds, the API token's hash it stands for, and when it ends (epoch seconds). Why not
    the token in the cookie: sign-out could not end a copy of it, short of revoking the token."""

    id_hash: str
    token_hash: str
    expires_at: float
