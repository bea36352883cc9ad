"""/v1/remote: the CatalogStore contract over HTTP, for ``datahub.catalog.http_store``.

Why a separate surface: the public routes speak refs (tags, ``latest``) and pages, while a
remote store needs the exact store calls (a head, a version by number, a listing after a
key, a batch lookup, a commit on an explicit base with a client-made commit id). Access is
checked like the neighbours (reader / writer / admin of the dataset); every write still
goes through the server's Catalog, so it validates exactly as a local write does.
Listings are NDJSON ending with ``{"end": n}``: a listing cut by a failure is never
mistaken for a complete one. Record and diff listings start with a header line naming their
format and columns (``datahub.catalog.http_store.RECORDS_HEADER`` / ``DIFF_HEADER``), then
one JSON array per item: a client that reads another format fails clearly instead of
misreading the columns.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Annotated, Any

from fastapi import APIRouter, Depends, Query, Response, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ValidationError

from datahub.api.access import can, creating, require_creatable
from datahub.api.deps import (
    LineageDep,
    PrincipalDep,
    ReadableDataset,
    ServicesDep,
    StillAllowed,
    StreamGuard,
    WritableDataset,
)
from datahub.api.record_urls import commit_rule
from datahub.api.remote_models import (
    CommitHeader,
    DatasetFull,
    EndOfListing,
    HeadPublic,
    RecordsGet,
    TagTarget,
)
from datahub.api.routes.commits import _body_file
from datahub.api.routes.datasets import check_acl
from datahub.api.routes.pagination import NDJSON
from datahub.api.routes.tags import TagPath
from datahub.api.schemas import (
    DatasetPublic,
    RecordPublic,
    VersionPublic,
    change_adapter,
    dataset_public,
    record_public,
    version_public,
)
from datahub.catalog.http_store import DIFF_HEADER, DIRECTORY_HEADER, RECORDS_HEADER
from datahub.catalog.model import Dataset, DiffEntry
from datahub.catalog.record_json import record_json
from datahub.catalog.snapshots import names_snapshot_of, snapshot_name
from datahub.errors import AccessDenied, AlreadyExists, InvalidInput
from datahub.validation import check_prefix, check_principal

# Not in the public OpenAPI: the wire contract of datahub.catalog.http_store, held by the catalog
# conformance suite run over a real server (docs/api.md, "Remote store").
router = APIRouter(prefix="/v1/remote/datasets", tags=["remote store"], include_in_schema=False)
_LISTING = {200: {"content": {NDJSON: {}}, "description": 'one object per line, then {"end": n}'}}
Seq = Annotated[int, Query(ge=0, le=2**63 - 1)]


def _ndjson(
    rows: Iterable[Any],
    line: Callable[[Any], str] | None,
    header: str = "",
    chunk_bytes: int = 256 * 1024,
    still_allowed: StillAllowed | None = None,
) -> Iterator[bytes]:
    """Lines joined into chunks of about ``chunk_bytes``: one send per chunk, not per item.
    ``header`` (a JSON object naming the format, not counted) comes before the items;
    ``line`` None: the rows are the lines already. ``still_allowed`` (``deps.still_allowed``)
    is asked before each chunk: once the caller may no longer read, the listing stops there,
    with no ``{"end": n}`` line, so the client takes it for a cut stream and asks again from
    its last key, which the server answers with the error itself (401, or 404 as missing)."""
    buffer: list[str] = [header] if header else []
    size = count = 0
    for text in rows if line is None else map(line, rows):
        buffer.append(text)
        size += len(text)
        count += 1
        if size >= chunk_bytes:
            if still_allowed is not None and still_allowed() is not None:
                return
            yield ("\n".join(buffer) + "\n").encode()
            buffer, size = [], 0
    if still_allowed is not None and still_allowed() is not None:
        return
    buffer.append(EndOfListing(end=count).model_dump_json())
    yield ("\n".join(buffer) + "\n").encode()


def stream_listing(
    rows: Iterator[Any], convert: Callable[[Any], BaseModel], still_allowed: StillAllowed | None = None
) -> StreamingResponse:
    """An NDJSON listing of ``convert(row)`` models."""
    return stream_lines(rows, lambda row: convert(row).model_dump_json(), still_allowed=still_allowed)


def stream_lines(
    rows: Iterator[Any],
    line: Callable[[Any], str] | None,
    header: str = "",
    still_allowed: StillAllowed | None = None,
) -> StreamingResponse:
    """An NDJSON listing of ``line(row)`` (one JSON value, no newline; the row itself if
    ``line`` is None) per row, after ``header``."""
    # pull the first row here, so that an unknown dataset/version is an error answer, not a cut stream
    first: list[Any] = []
    for row in rows:
        first.append(row)
        break

    def chained() -> Iterator[Any]:
        yield from first
        yield from rows

    return StreamingResponse(_ndjson(chained(), line, header, still_allowed=still_allowed), media_type=NDJSON)


# Record rows are the hot path of every remote listing (10^7 records for a large version):
# one JSON array per record in RECORD_COLUMNS order (record_json), which the client parses
# in ~60 % of the time objects with key names take; the SQLite store has SQLite write them
# from the stored rows (no Python object per column).
_encode = json.JSONEncoder(separators=(",", ":")).encode
RECORDS_LINE = _encode(RECORDS_HEADER)
DIFF_LINE = _encode(DIFF_HEADER)
DIRECTORY_LINE = _encode(DIRECTORY_HEADER)
_quote = json.encoder.encode_basestring_ascii


def diff_row(e: DiffEntry) -> str:
    """A diff entry as one JSON array (no newline) in DIFF_HEADER's column order: kind, key,
    and the old and new records as record rows (``null`` where there is none)."""
    old = record_json(e.old) if e.old is not None else "null"
    new = record_json(e.new) if e.new is not None else "null"
    return f"[{_quote(e.kind)},{_quote(e.key)},{old},{new}]"


@router.post("", status_code=status.HTTP_201_CREATED)
def create_dataset(body: DatasetFull, services: ServicesDep, principal: PrincipalDep) -> DatasetPublic:
    """Like ``POST /v1/datasets``, but an admin may name another owner (a store keeps the one it
    is given), and anyone may make a bucket snapshot's dataset as a mount makes it
    (``mount_made``): a node's bucket mount creates its snapshot through here."""
    if mount_made(body):  # whoever asks: the shape decides
        try:
            dataset = services.catalog.create_dataset(
                body.name, description=body.description, source=body.source
            )
        except AlreadyExists:
            if can(principal, services.catalog.get_dataset(body.name), "reader"):
                raise
            return as_made(body)
        return dataset_public(dataset, 0)
    owner = check_principal(body.owner) if body.owner else principal.name
    if owner != principal.name and not principal.is_admin:
        raise AccessDenied(
            f"only admins may create dataset {body.name!r} for another owner ({owner!r})", dataset=body.name
        )
    require_creatable(principal, body.name)
    with creating(principal, body.name, services.catalog.get_dataset):
        dataset = services.catalog.create_dataset(
            body.name, description=body.description, source=body.source, owner=owner, acl=check_acl(body.acl)
        )
    return dataset_public(dataset, 0)


def as_made(body: DatasetFull) -> DatasetPublic:
    """The answer a mount-shaped create gives when it makes the dataset, for a name already
    taken by a dataset the caller may not read.

    Why (caller72): that create answered 201 for a new name and 409 for a taken one, so any
    token learned which bucket prefixes had been mounted, or squatted, by asking for their
    snapshot names, though every other route answers such a dataset as a missing one (docs/api.md,
    "403 or 404"). What a made one's answer holds is only what the caller sent (the name, the
    description, the source), no owner, no access list, no versions, so it says nothing of the
    dataset that is there. The caller is told nothing false it could act on: a dataset it may
    not read is one it cannot use either way (its mount records no snapshot into it, reading
    it is the 404 of a missing one), exactly as for the ownerless one a create makes."""
    made = Dataset(body.name, body.description, body.source, created_at=time.time())
    return dataset_public(made, 0)


def mount_made(body: DatasetFull) -> bool:
    """Whether the caller asks for a bucket snapshot's dataset exactly as a bucket mount makes
    it (``fuse_adapter.layout.bucket_view``): no owner, no access list, and a source of the
    scheme its name starts with (so ``csi/access.py`` keeps it from every pod). It is made so,
    owned by nobody: the caller gets no role on the listing a mount commits into it. An
    admin's token too: a mount commits only into a snapshot shaped so (docs/fuse.md, "Bucket
    snapshots"), and one owned by the node's admin principal made its mounts commit nothing.

    The source must be the very bucket URL the name is the snapshot of: with only its scheme
    checked, any token made ``s3.platform.team-b`` with another bucket as its source, and every
    mount of ``s3://platform/team-b`` then found a foreign snapshot and recorded nothing,
    until a global admin deleted it (review13b)."""
    scheme = body.name.partition(".")[0]
    return (
        snapshot_name(body.name)
        and not body.owner
        and not body.acl
        # as written, not in lower case: csi/access.py compares the source's scheme so
        and body.source.partition("://")[0] == scheme
        and names_snapshot_of(body.name, body.source)
    )


@router.get("/{name}/head")
def head(dataset: ReadableDataset, services: ServicesDep) -> HeadPublic:
    return HeadPublic(head=services.catalog.store.head(dataset.name))


@router.get("/{name}/versions", response_class=StreamingResponse, responses=_LISTING)
def list_versions(
    dataset: ReadableDataset, services: ServicesDep, view: LineageDep, guard: StreamGuard
) -> StreamingResponse:
    """Every version, newest first (VersionPublic lines)."""
    return stream_listing(
        iter(services.catalog.log(dataset.name)), lambda v: version_public(view.version(v)), guard
    )


@router.get("/{name}/versions/{seq}")
def get_version(dataset: ReadableDataset, seq: int, services: ServicesDep, view: LineageDep) -> VersionPublic:
    # resolve, not the store: a number beyond the stores' 64-bit integers is no such version
    return version_public(view.version(services.catalog.resolve(dataset.name, seq)))


@router.get("/{name}/tags/{tag}")
def tag_target(dataset: ReadableDataset, tag: TagPath, services: ServicesDep) -> TagTarget:
    return TagTarget(seq=services.catalog.store.tag_target(dataset.name, tag))


@router.put("/{name}/tags/{tag}", status_code=status.HTTP_204_NO_CONTENT)
def set_tag(dataset: WritableDataset, tag: TagPath, body: TagTarget, services: ServicesDep) -> Response:
    services.catalog.tag(dataset.name, tag, body.seq)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{name}/records", response_class=StreamingResponse, responses=_LISTING)
def list_records(
    dataset: ReadableDataset,
    services: ServicesDep,
    guard: StreamGuard,
    seq: Seq,
    prefix: str = "",
    start_after: str = "",
    limit: Annotated[int | None, Query(ge=0)] = None,
    filter: str | None = None,
) -> StreamingResponse:
    """RECORDS_HEADER, then one record row per line in key order, streamed from the store
    (bounded memory on both sides), then ``{"end": n}``."""
    if filter:  # the filter needs decoded records
        records = services.catalog.list_records(
            dataset.name, seq, prefix=prefix, start_after=start_after, limit=limit, where=filter
        )
        return stream_lines(records, record_json, RECORDS_LINE, guard)
    check_prefix(prefix)
    version = services.catalog.resolve(dataset.name, seq)
    lines = services.catalog.store.list_record_json(
        dataset.name, version.seq, prefix=prefix, start_after=start_after, limit=limit
    )
    return stream_lines(lines, None, RECORDS_LINE, guard)


@router.get("/{name}/directory", response_class=StreamingResponse, responses=_LISTING)
def list_directory(
    dataset: ReadableDataset,
    services: ServicesDep,
    guard: StreamGuard,
    seq: Seq,
    prefix: str = "",
    start_after: str = "",
    limit: Annotated[int | None, Query(ge=0)] = None,
) -> StreamingResponse:
    """DIRECTORY_HEADER, then one directory level of version ``seq`` in key order (the
    store's ``list_directory``): a DirFile row per file, a JSON string per subdirectory,
    then ``{"end": n}``. A mount pages its namespace with it (docs/fuse.md)."""
    entries = services.catalog.list_directory(
        dataset.name, seq, prefix=prefix, start_after=start_after, limit=limit
    )
    return stream_lines(entries, _directory_line, DIRECTORY_LINE, guard)


def _directory_line(entry: Any) -> str:
    """A subdirectory's JSON string, or a DirFile row as one JSON array (an mtime is a JSON
    number or null; ``repr`` of a float is the shortest form that reads back the same)."""
    if type(entry) is str:
        return _quote(entry)
    key, url, etag, size, mtime = entry
    return f"[{_quote(key)},{_quote(url)},{_quote(etag)},{size:d},{_number(mtime)}]"


def _number(value: float | None) -> str:
    return "null" if value is None else _encode(value)


@router.post("/{name}/records/get")
def get_records(dataset: ReadableDataset, body: RecordsGet, services: ServicesDep) -> list[RecordPublic]:
    """The records among ``keys`` live in version ``seq`` (absent keys are left out)."""
    found = services.catalog.lookup_records(dataset.name, body.seq, body.keys)
    return [record_public(found[k]) for k in body.keys if k in found]


@router.get("/{name}/diff", response_class=StreamingResponse, responses=_LISTING)
def diff(
    dataset: ReadableDataset,
    services: ServicesDep,
    guard: StreamGuard,
    a: Seq,
    b: Seq,
    prefix: str = "",
    start_after: str = "",
) -> StreamingResponse:
    """DIFF_HEADER, then one diff row per line from version ``a`` to ``b`` (0 = empty), in key
    order, from the first key above ``start_after``."""
    entries = services.catalog.diff(dataset.name, a, b, prefix=prefix, start_after=start_after)
    return stream_lines(entries, diff_row, DIFF_LINE, guard)


@router.post("/{name}/commits", status_code=status.HTTP_201_CREATED)
def commit(
    raw: Annotated[IO[bytes], Depends(_body_file)],
    dataset: WritableDataset,
    services: ServicesDep,
    principal: PrincipalDep,
    view: LineageDep,
) -> VersionPublic:
    """NDJSON body: a CommitHeader line, then one change per line, read from the spooled body
    one line at a time. The base is explicit and the commit id required, so a client retrying
    a lost answer gets the version its first attempt made, never a second one."""
    raw.seek(0)  # the spool is handed on where its writer left it
    lines = iter(raw)
    header = _header(next(lines, b""), dataset.name)
    author = header.author if principal.is_admin and header.author else principal.name
    version = services.catalog.commit(
        dataset.name,
        commit_rule(services, principal, dataset, view, header.lineage).changes(
            _changes(lines, dataset.name)
        ),
        base=header.base,
        message=header.message,
        author=author,
        lineage=header.lineage,
        commit_id=header.commit_id,
    )
    return version_public(view.version(version))


def _header(line: bytes, dataset: str) -> CommitHeader:
    try:
        return CommitHeader.model_validate_json(line)
    except ValidationError as exc:
        raise InvalidInput(
            f"remote commit to dataset {dataset!r}: the first line must be a commit header: "
            f"{exc.errors()[0]['msg']}",
            dataset=dataset,
        ) from None


def _changes(lines: Iterator[bytes], dataset: str) -> Iterator[Any]:
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        try:
            yield change_adapter().validate_json(line)
        except ValidationError as exc:
            raise InvalidInput(
                f"remote commit to dataset {dataset!r}: line {number} is not a change: {exc.errors()[0]['msg']}",
                dataset=dataset,
                line=number,
            ) from None
