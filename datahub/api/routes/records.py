"""Records of a version: paginated listing, one record, and an NDJSON export of the whole version."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import StreamingResponse

from datahub.api.deps import ReadableDataset, ServicesDep, StreamGuard
from datahub.api.routes.pagination import (
    CURSOR_SHAPE,
    NDJSON,
    at_version,
    decode_cursor,
    json_page,
    listing_of,
    ndjson_lines,
    page,
    version_at,
)
from datahub.api.schemas import KEY_SHAPE, PREFIX_SHAPE, REF_SHAPE, RecordPage, RecordPublic, record_public

router = APIRouter(prefix="/v1/datasets/{name}/versions/{ref}", tags=["records"])
RefPath = Annotated[str, Path(description="version number, tag or 'latest'", json_schema_extra=REF_SHAPE)]
KeyPath = Annotated[str, Path(description="record key", json_schema_extra=KEY_SHAPE)]
Prefix = Annotated[str, Query(description="only keys starting with this", json_schema_extra=PREFIX_SHAPE)]
Cursor = Annotated[str, Query(description="next_cursor of the previous page", json_schema_extra=CURSOR_SHAPE)]
Filter = Annotated[str | None, Query(description="e.g. labels.class=cat,meta.split!=test (see docs/api.md)")]


def records_listing(name: str, ref: str, prefix: str, filter: str | None) -> str:
    """What a records cursor is bound to: another dataset's, version's, prefix's or filter's
    cursor would silently skip records here, so it is a 400 instead. ("records@": its
    positions carry their version, ``at_version``; a cursor from before is refused once.)"""
    return listing_of("records@", name, ref, prefix, filter or "")


@router.get("/records", response_model=RecordPage)
def list_records(
    dataset: ReadableDataset,
    ref: RefPath,
    services: ServicesDep,
    prefix: Prefix = "",
    filter: Filter = None,
    cursor: Cursor = "",
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> Response:
    listing = records_listing(dataset.name, ref, prefix, filter)
    seq, after = version_at(decode_cursor(cursor, listing))
    if seq is None:  # a first page resolves the ref; the next ones go on in that version
        seq = services.catalog.resolve(dataset.name, ref).seq
    rows = services.catalog.list_records(
        dataset.name,
        seq,
        prefix=prefix,
        start_after=after,
        limit=limit + 1,
        where=filter,
    )
    items, next_cursor = page(rows, limit, key=lambda r: at_version(seq, r.key), listing=listing)
    return json_page(RecordPage(items=[record_public(r) for r in items], next_cursor=next_cursor))


@router.get("/records/{key:path}")
def get_record(dataset: ReadableDataset, ref: RefPath, key: KeyPath, services: ServicesDep) -> RecordPublic:
    catalog = services.catalog
    version = catalog.resolve(dataset.name, ref)
    return record_public(catalog.get_record(dataset.name, version.seq, key))


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"content": {NDJSON: {}}, "description": "one RecordPublic JSON object per line"}},
)
def export(
    dataset: ReadableDataset,
    ref: RefPath,
    services: ServicesDep,
    guard: StreamGuard,
    prefix: Prefix = "",
    filter: Filter = None,
) -> StreamingResponse:
    """Stream every record of the version in key order, one JSON object per line; a caller who
    loses access meanwhile gets an error line instead of the rest (``ndjson_lines``)."""
    catalog = services.catalog
    version = catalog.resolve(dataset.name, ref)  # errors before the stream starts
    rows = catalog.list_records(dataset.name, version.seq, prefix=prefix, where=filter)
    return StreamingResponse(
        ndjson_lines(rows, record_public, still_allowed=guard),
        media_type=NDJSON,
        headers={"X-Datahub-Version": str(version.seq)},
    )
