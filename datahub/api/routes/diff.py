"""/v1/datasets/{name}/diff?from=&to=: changes between two versions, in key order."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from datahub.api.deps import ReadableDataset, ServicesDep
from datahub.api.routes.pagination import NDJSON, decode_cursor, json_page, listing_of, ndjson_lines, page
from datahub.api.routes.records import Cursor, Prefix
from datahub.api.schemas import REF_SHAPE, DiffPage, diff_public

router = APIRouter(prefix="/v1/datasets/{name}", tags=["diff"])


def diff_listing(name: str, from_ref: str, to_ref: str, prefix: str) -> str:
    """What a diff's cursor is tied to: on another pair of versions or prefix its key would
    skip every entry before it there."""
    return listing_of("diff", name, from_ref, to_ref, prefix)


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
    after = decode_cursor(cursor, listing)
    after = "" if format == "ndjson" else after
    # refs resolve here (0 names the empty state), so an unknown one is a 404 before any streaming
    entries = catalog.diff(dataset.name, from_ref, to_ref, prefix=prefix, start_after=after)
    if format == "ndjson":
        return StreamingResponse(ndjson_lines(entries, diff_public), media_type=NDJSON)
    items, next_cursor = page(entries, limit, key=lambda e: e.key, listing=listing)
    return json_page(DiffPage(items=[diff_public(e) for e in items], next_cursor=next_cursor))
