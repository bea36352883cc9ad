"""/v1/remote: the CatalogStore contract over HTTP, for ``datahub.catalog.http_store``.

Why a separate surface: the public routes speak refs (tags, ``latest``) and pages, while a
remote store needs the exact store calls (a head, a version by number, a listing after a
key, a batch lookup, a commit on an explicit base with a client-made commit id). Access is
checked like the neighbours (reader / writer / admin of the dataset); every write still
goes through the server's Catalog, so it validates exactly as a local write does.
Listings are NDJSON ending with ``{"end": n}``: a listing cut by a failure is never
mistaken for a complete one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Annotated, Any

from fastapi import APIRouter, Depends, Query, Response, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, TypeAdapter, ValidationError

from datahub.api.deps import PrincipalDep, ReadableDataset, ServicesDep, WritableDataset
from datahub.api.remote_models import (
    CommitHeader,
    DatasetFull,
    EndOfListing,
    HeadPublic,
    RecordsGet,
    TagTarget,
)
from datahub.api.routes.commits import _allowed, _body_file
from datahub.api.routes.pagination import NDJSON
from datahub.api.routes.tags import TagPath
from datahub.api.schemas import (
    ChangeIn,
    DatasetPublic,
    RecordPublic,
    VersionPublic,
    dataset_public,
    record_public,
    version_public,
)
from datahub.catalog.model import DiffEntry, Record
from datahub.errors import AccessDenied, InvalidInput

# Not in the public OpenAPI: the wire contract of datahub.catalog.http_store, held by the catalog
# conformance suite run over a real server (docs/api.md, "Remote store").
router = APIRouter(prefix="/v1/remote/datasets", tags=["remote store"], include_in_schema=False)
_CHANGE: TypeAdapter = TypeAdapter(ChangeIn)
_LISTING = {200: {"content": {NDJSON: {}}, "description": 'one object per line, then {"end": n}'}}
Seq = Annotated[int, Query(ge=0, le=2**63 - 1)]


def _ndjson(
    rows: Iterable[Any], line: Callable[[Any], str], chunk_bytes: int = 256 * 1024
) -> Iterator[bytes]:
    """Lines joined into chunks of about ``chunk_bytes``: one send per chunk, not per item."""
    buffer: list[str] = []
    size = count = 0
    for row in rows:
        text = line(row)
        buffer.append(text)
        size += len(text)
        count += 1
        if size >= chunk_bytes:
            yield ("\n".join(buffer) + "\n").encode()
            buffer, size = [], 0
    buffer.append(EndOfListing(end=count).model_dump_json())
    yield ("\n".join(buffer) + "\n").encode()


def stream_listing(rows: Iterator[Any], convert: Callable[[Any], BaseModel]) -> StreamingResponse:
    """An NDJSON listing of ``convert(row)`` models."""
    return stream_lines(rows, lambda row: convert(row).model_dump_json())


def stream_lines(rows: Iterator[Any], line: Callable[[Any], str]) -> StreamingResponse:
    """An NDJSON listing of ``line(row)`` (one JSON object, no newline) per row."""
    # pull the first row here, so that an unknown dataset/version is an error answer, not a cut stream
    first: list[Any] = []
    for row in rows:
        first.append(row)
        break

    def chained() -> Iterator[Any]:
        yield from first
        yield from rows

    return StreamingResponse(_ndjson(chained(), line), media_type=NDJSON)


# Record lines are the hot path of every remote listing (10^7 records for a large version):
# written with the stdlib's C encoder from a plain dict, the same JSON object RecordPublic
# describes, without building a pydantic model per record (half the route's CPU per row).
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _record_dict(r: Record) -> dict[str, Any]:
    meta, labels = r.meta, r.labels
    return {
        "key": r.key,
        "url": r.url,
        "etag": r.etag,
        "size": r.size,
        "checksum": r.checksum,
        "meta": meta if isinstance(meta, dict) else dict(meta),
        "labels": labels if isinstance(labels, dict) else dict(labels),
    }


def _refuse(o: Any) -> Any:
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# One C encoder for meta/labels, made once: JSONEncoder.encode builds a new one per call,
# which was a quarter of a listing's server CPU. Stored meta is decoded JSON (no cycles).
_c_encoder = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _refuse, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
)


def _encode_map(value: Any) -> str:
    value = value if isinstance(value, dict) else dict(value)
    return "".join(_c_encoder(value, 0)) if _c_encoder else _encode(value)


_RECORD_LINE = '{"key":%s,"url":%s,"etag":%s,"size":%d,"checksum":%s,"meta":%s,"labels":%s}'
_quote = json.encoder.encode_basestring_ascii  # a JSON string literal, as _encode writes it


def record_line(r: Record) -> str:
    """A RecordPublic object as one JSON line (no newline): the field names are fixed text,
    only the values are encoded (an empty meta/labels, the common case, is ``{}`` as is)."""
    meta, labels = r.meta, r.labels
    return _RECORD_LINE % (
        _quote(r.key),
        _quote(r.url),
        _quote(r.etag),
        r.size,
        _quote(r.checksum),
        _encode_map(meta) if meta else "{}",
        _encode_map(labels) if labels else "{}",
    )


def diff_line(e: DiffEntry) -> str:
    """A DiffEntryPublic object as one JSON line (no newline)."""
    old = _record_dict(e.old) if e.old is not None else None
    new = _record_dict(e.new) if e.new is not None else None
    return _encode({"kind": e.kind, "key": e.key, "old": old, "new": new})


@router.post("", status_code=status.HTTP_201_CREATED)
def create_dataset(body: DatasetFull, services: ServicesDep, principal: PrincipalDep) -> DatasetPublic:
    """Like ``POST /v1/datasets``, but an admin may name another owner (a store keeps the one it is given)."""
    owner = body.owner or principal.name
    if owner != principal.name and not principal.is_admin:
        raise AccessDenied(
            f"only admins may create dataset {body.name!r} for another owner ({owner!r})", dataset=body.name
        )
    dataset = services.catalog.create_dataset(
        body.name, description=body.description, source=body.source, owner=owner, acl=body.acl
    )
    return dataset_public(dataset, 0)


@router.get("/{name}/head")
def head(dataset: ReadableDataset, services: ServicesDep) -> HeadPublic:
    return HeadPublic(head=services.catalog.store.head(dataset.name))


@router.get("/{name}/versions", response_class=StreamingResponse, responses=_LISTING)
def list_versions(dataset: ReadableDataset, services: ServicesDep) -> StreamingResponse:
    """Every version, newest first (VersionPublic lines)."""
    return stream_listing(iter(services.catalog.log(dataset.name)), version_public)


@router.get("/{name}/versions/{seq}")
def get_version(dataset: ReadableDataset, seq: int, services: ServicesDep) -> VersionPublic:
    return version_public(services.catalog.store.get_version(dataset.name, seq))


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
    seq: Seq,
    prefix: str = "",
    start_after: str = "",
    limit: Annotated[int | None, Query(ge=0)] = None,
    filter: str | None = None,
) -> StreamingResponse:
    """RecordPublic lines in key order, streamed from the store (bounded memory on both sides)."""
    rows = services.catalog.list_records(
        dataset.name, seq, prefix=prefix, start_after=start_after, limit=limit, where=filter
    )
    return stream_lines(rows, record_line)


@router.post("/{name}/records/get")
def get_records(dataset: ReadableDataset, body: RecordsGet, services: ServicesDep) -> list[RecordPublic]:
    """The records among ``keys`` live in version ``seq`` (absent keys are left out)."""
    found = services.catalog.lookup_records(dataset.name, body.seq, body.keys)
    return [record_public(found[k]) for k in body.keys if k in found]


@router.get("/{name}/diff", response_class=StreamingResponse, responses=_LISTING)
def diff(
    dataset: ReadableDataset, services: ServicesDep, a: Seq, b: Seq, prefix: str = ""
) -> StreamingResponse:
    """DiffEntryPublic lines from version ``a`` to ``b`` (0 = empty), in key order."""
    return stream_lines(services.catalog.diff(dataset.name, a, b, prefix=prefix), diff_line)


@router.post("/{name}/commits", status_code=status.HTTP_201_CREATED)
def commit(
    raw: Annotated[IO[bytes], Depends(_body_file)],
    dataset: WritableDataset,
    services: ServicesDep,
    principal: PrincipalDep,
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
        _allowed(_changes(lines, dataset.name), principal, dataset.name),
        base=header.base,
        message=header.message,
        author=author,
        lineage=header.lineage,
        commit_id=header.commit_id,
    )
    return version_public(version)


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
            yield _CHANGE.validate_json(line)
        except ValidationError as exc:
            raise InvalidInput(
                f"remote commit to dataset {dataset!r}: line {number} is not a change: {exc.errors()[0]['msg']}",
                dataset=dataset,
                line=number,
            ) from None
