"""Wire models of the remote-store routes (``datahub.api.routes.remote``).

The remote store (``datahub.catalog.http_store``) speaks the CatalogStore contract over
HTTP: exact sequence numbers instead of refs, and NDJSON listings that end with an
``EndOfListing`` line, so a client can tell a complete listing from a cut one.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from datahub.api.schemas import KEY_SHAPE, NAME_SHAPE, RequestModel, Role, Whole
from datahub.validation import MAX_SEQ


class DatasetFull(RequestModel):
    """A dataset as a store creates it: the owner is the caller's own name unless an admin sends it."""

    name: str = Field(json_schema_extra=NAME_SHAPE)
    description: str = Field("", max_length=4096)
    source: str = Field("", max_length=4096)
    owner: str = ""
    acl: dict[str, Role] = Field(default_factory=dict)


class HeadPublic(BaseModel):
    head: int = Field(description="newest version number, 0 if none yet")


class TagTarget(RequestModel):
    seq: Whole = Field(ge=1, le=MAX_SEQ)


class RecordsGet(RequestModel):
    seq: Whole = Field(ge=1, le=MAX_SEQ)
    keys: list[str] = Field(max_length=10000, json_schema_extra={"items": KEY_SHAPE})


class CommitHeader(RequestModel):
    """The first NDJSON line of a remote commit; each further line is one change (ChangeIn)."""

    base: Whole = Field(ge=0, le=MAX_SEQ)
    message: str = Field("", max_length=4096)
    author: str = Field("", max_length=256, description="kept only from admins; others commit as themselves")
    lineage: dict[str, Any] | None = None
    commit_id: str = Field(min_length=1, max_length=128)


class EndOfListing(BaseModel):
    """The last line of every remote NDJSON listing: ``{"end": <items sent>}``."""

    end: int
