"""/v1/datasets/{name}/diff?from=&to=: changes between two versions, in key order."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from datahub.api.deps import ReadableDataset, ServicesDep, StreamGuard
from datahub.api.routes.pagination import (
    NDJSON,
    at_version,
    decode_cursor,
    json_page,
    listing_of,
    ndjson_lines,
    page,
    version_at,
)
from datahub.api.routes.records import Cursor, Prefix
from datahub.api.schemas import REF_SHAPE, DiffPage, diff_public

router = APIRouter(prefix="/v1/datasets/{name}", tags=["diff"])


def diff_listing(name: str, from_ref: str, to_ref: str, prefix: str) -> str:
    """What a diff's cursor is tied to: on another pair of versions or prefix its key would
    skip every entry before it there. ("diff@": its positions carry both versions,
    ``at_version``; a cursor from before is refused once.)"""
    return listing_of("diff@", name, from_ref, to_ref, prefix)


def _seq(catalog, dataset: str, ref: str) -> int:
    """The version ``ref`` names now; 0 (``0``, ``v0``) is the empty state before version 1."""
    if ref in ("0", "v0"):
        catalog.get_dataset(dataset)
        return 0
    return catalog.resolve(dataset, ref).seq


@router.get(
    "/diff",
    response_model=DiffPage,
    responses={
        200: {"content": {NDJSON: {}}, "description": "DiffPage, or DiffEntryPublic lines with format=ndjson"}
    },
)
def diff(
    dataset: ReadableDataset,
    services: ServicesDep,
    guard: StreamGuard,
    from_ref: Annotated[
        str,
        Query(alias="from", description="older version: number, tag or latest", json_schema_extra=REF_SHAPE),
    ],
    to_ref: Annotated[
        str, Query(alias="to", description="newer version", json_schema_extra=REF_SHAPE)
    ] = "latest",
    prefix: Prefix = "",
    format: Annotated[Literal["json", "ndjson"], Query(description="ndjson streams everything")] = "json",
    cursor: Cursor = "",
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
):
    catalog = services.catalog
    # the cursor decodes before streaming; a page starts at its cursor in the store (a deep page
    # of a large diff reads one page, not every entry before it)
    # (checked with ndjson too, which streams everything: the schema's cursor rule holds for both)
    listing = diff_listing(dataset.name, from_ref, to_ref, prefix)
    from_seq, rest = version_at(decode_cursor(cursor, listing))
    to_seq, after = version_at(rest) if from_seq is not None else (None, "")
    if format == "ndjson" or from_seq is None or to_seq is None:
        # refs resolve here (0 names the empty state), so an unknown one is a 404 before any
        # streaming; a next page goes on between the versions its first page resolved (a tag
        # moved or a commit between two pages gave entries of two diffs: review25)
        from_seq, to_seq = _seq(catalog, dataset.name, from_ref), _seq(catalog, dataset.name, to_ref)
        after = "" if format == "ndjson" else after
    entries = catalog.diff(dataset.name, from_seq, to_seq, prefix=prefix, start_after=after)
    if format == "ndjson":
        return StreamingResponse(ndjson_lines(entries, diff_public, still_allowed=guard), media_type=NDJSON)
    items, next_cursor = page(
        entries, limit, key=lambda e: at_version(from_seq, at_version(to_seq, e.key)), listing=listing
    )
    return json_page(DiffPage(items=[diff_public(e) for e in items], next_cursor=next_cursor))
