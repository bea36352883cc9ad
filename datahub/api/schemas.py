"""Wire schemas: separate Create / Update / Public models, so catalog types never reach the wire.

``to_public`` helpers convert catalog model objects into Public schemas; ``to_change``
converts a validated change into the catalog's Change. Field limits mirror
``datahub.validation``; the catalog re-validates names and keys, so one rule holds everywhere.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, WithJsonSchema

from datahub.catalog import model, public
from datahub.validation import (
    ACL_PRINCIPAL_PATTERN,
    KEY_PATTERN,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_KEY_BYTES,
    MAX_SEQ,
    MAX_SIZE,
    NAME_PATTERN,
    NEW_KEY_PATTERN,
    PREFIX_PATTERN,
    PRINCIPAL_PATTERN,
    REF_PATTERN,
    TAG_PATTERN,
)

Role = Literal["reader", "writer", "admin"]
# The schema says what the server accepts; the server checks it itself, so a refusal keeps
# its clear 400 naming the principal and the dataset (pydantic's would be a generic 422).
_PRINCIPAL = {"type": "string", "pattern": PRINCIPAL_PATTERN}
Acl = Annotated[
    dict[str, Role],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": ACL_PRINCIPAL_PATTERN},
            "additionalProperties": {"enum": ["reader", "writer", "admin"], "type": "string"},
        }
    ),
]
Principal = Annotated[str, WithJsonSchema(_PRINCIPAL)]
Json = dict[str, Any]


def whole_number(value: Any) -> Any:
    """A float with no fraction is the integer it equals (``7.0`` is 7); anything else is left
    for the strict check to refuse (``7.5``, ``"7"``, ``true``)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A request's integer: what JSON Schema's ``integer`` admits, so the schema and the server say
# the same thing (issue 37 item 8: ``"size": 201.0`` was schema-valid and refused); nothing
# lossy is ever taken: 7.5 stays a 422, as do ``"7"`` and ``true``.
Whole = Annotated[int, BeforeValidator(whole_number)]


class RequestModel(BaseModel):
    """Base of every request body model: unknown fields are refused, and types are strict
    (issue 24 item 6): an integer (``Whole``) is a whole JSON number, never ``true``, ``"7"``
    or ``7.5``, which lax parsing would have stored as 1, 7 and 7; a string is never a number.
    The OpenAPI's ``integer`` / ``string`` types say exactly the same (JSON Schema counts
    ``7.0`` as an integer, and so does the server)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def shape(pattern: str, max_length: int) -> dict[str, Any]:
    """Schema-only ``pattern`` / ``maxLength`` of a name, tag, ref or key (OpenAPI says exactly
    what the server takes); the check itself stays in datahub.validation, so a bad value still
    answers 400 with the code and message every other path gives."""
    return {"pattern": pattern, "maxLength": max_length}


NAME_SHAPE = shape(NAME_PATTERN, 63)
TAG_SHAPE = shape(TAG_PATTERN, 63)
REF_SHAPE = shape(REF_PATTERN, 63)
KEY_SHAPE = shape(KEY_PATTERN, MAX_KEY_BYTES)  # keys a version may hold: reads, deletes, patches
NEW_KEY_SHAPE = shape(NEW_KEY_PATTERN, MAX_KEY_BYTES)  # keys a put may add
PREFIX_SHAPE = {"pattern": PREFIX_PATTERN}  # trailing slashes are free: no maxLength
# What datahub.storage.split_object_url accepts for a record's object URL, as one pattern:
# s3://<bucket>/<any non-empty key not ending in '/'>, memory://<space>/<record key> or
# file:///<record key> (also file://localhost/). Narrower than the server only where JSON Schema
# cannot follow it: percent-escapes in file:// and memory:// paths (decoded before the key
# check) and S3 keys' limit in bytes (the pattern counts characters).
_SAFE_KEY = KEY_PATTERN[1:-1].replace("\\x7f]", "\\x7f?#%]")
RECORD_URL_PATTERN = (
    "^(?:[sS]3://[^/?#%]+/(?![\\s\\S]*/$)[\\s\\S]{1,1024}"
    f"|[mM][eE][mM][oO][rR][yY]://[^/?#%]+/{_SAFE_KEY}"
    f"|[fF][iI][lL][eE]://(?:localhost)?/{_SAFE_KEY})$"
)
_JSON_FIELD = f"a JSON object, at most {MAX_JSON_DEPTH} levels deep and {MAX_JSON_BYTES} bytes as JSON"


# --- datasets ----------------------------------------------------------------------------------
class DatasetCreate(RequestModel):
    name: str = Field(description="[a-z0-9][a-z0-9._-]{0,62}", json_schema_extra=NAME_SHAPE)
    description: str = Field("", max_length=4096)
    source: str = Field("", max_length=4096, description="default source URL for imports")
    acl: Acl = Field(default_factory=dict, description="principal (or *) -> role")


class DatasetUpdate(RequestModel):
    description: str | None = Field(None, max_length=4096)
    source: str | None = Field(None, max_length=4096)
    owner: Principal | None = None
    acl: Acl | None = Field(None, description="replaces the whole access list")
    sources: list[str] | None = Field(
        None,
        max_length=64,
        description="global admins only: replaces the URL prefixes (s3://bucket/team/, ending in /) "
        "under which anyone else may commit record URLs over HTTP (docs/api.md, Record URLs)",
    )


class DatasetPublic(BaseModel):
    name: str
    description: str
    source: str
    owner: str
    acl: dict[str, str]
    sources: list[str] = Field(
        description="URL prefixes a global admin allowed this dataset's records under (docs/api.md, Record URLs)"
    )
    created_at: float
    head: int = Field(description="newest version number, 0 if none yet")
    revision: int = Field(
        description='+1 on every update of the dataset\'s fields; also the ETag ("r<revision>"). '
        "Send it back as If-Match on PATCH to update only if nobody changed it meanwhile (412)"
    )


# --- versions ----------------------------------------------------------------------------------
class VersionPublic(BaseModel):
    dataset: str
    seq: int
    parent: int | None
    message: str
    author: str
    created_at: float
    tags: list[str]
    record_count: int
    total_bytes: int
    added: int
    removed: int
    modified: int
    lineage: Json


class TagSet(RequestModel):
    ref: Whole | str = Field(description="version number, tag or 'latest'", json_schema_extra=REF_SHAPE)


class DeriveCreate(RequestModel):
    where: str = Field(description="record filter, e.g. labels.class=cat")
    to_dataset: str | None = Field(
        None, description="another dataset to commit to (default: this one)", json_schema_extra=NAME_SHAPE
    )
    message: str = Field("", max_length=4096)


# --- records -----------------------------------------------------------------------------------
class RecordIn(RequestModel):
    key: str = Field(json_schema_extra=NEW_KEY_SHAPE)
    url: str = Field(
        description="s3://bucket/key (any key S3 takes, at most 1024 bytes decoded), "
        "file:///path or memory://name/key (the path / key follows the record-key rules); "
        "the scheme is case-insensitive",
        json_schema_extra={"pattern": RECORD_URL_PATTERN},
    )
    etag: str = Field(json_schema_extra={"minLength": 1, "pattern": "\\S"})
    size: Whole = Field(ge=0, json_schema_extra={"maximum": MAX_SIZE})  # larger: 400 from the catalog
    checksum: str = ""
    meta: Json = Field(default_factory=dict, description=_JSON_FIELD)
    labels: Json = Field(default_factory=dict, description=_JSON_FIELD)


class RecordPublic(BaseModel):
    key: str
    url: str
    etag: str
    size: int
    checksum: str
    meta: Json
    labels: Json


class RecordPage(BaseModel):
    items: list[RecordPublic]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null at the end")


class DiffEntryPublic(BaseModel):
    kind: Literal["added", "removed", "modified"]
    key: str
    old: RecordPublic | None
    new: RecordPublic | None


class DiffPage(BaseModel):
    items: list[DiffEntryPublic]
    next_cursor: str | None


# --- commits -----------------------------------------------------------------------------------
class PutChange(RequestModel):
    op: Literal["put"]
    record: RecordIn


class DeleteChange(RequestModel):
    op: Literal["delete"]
    key: str = Field(json_schema_extra=KEY_SHAPE)


class PatchChange(RequestModel):
    op: Literal["patch"]
    key: str = Field(json_schema_extra=KEY_SHAPE)
    meta: Json | None = Field(None, description="merged into the record's meta; null values remove")
    labels: Json | None = Field(None, description="merged into the record's labels; null values remove")


ChangeIn = Annotated[PutChange | DeleteChange | PatchChange, Field(discriminator="op")]


@functools.cache
def change_adapter() -> TypeAdapter[PutChange | DeleteChange | PatchChange]:
    """The one validator of a single change, for bodies read a change at a time (the HTTP
    commit body, the remote catalog's NDJSON, ``datahub commit --changes``); built on first
    use, so a process that never commits does not pay for it."""
    return TypeAdapter(ChangeIn)


class CommitCreate(RequestModel):
    base: Whole | None = Field(
        None,
        ge=0,
        description="version the changes apply to (null: head)",
        json_schema_extra={"maximum": MAX_SEQ},
    )
    message: str = Field("", max_length=4096)
    changes: list[ChangeIn] = Field(
        description="at least one change (an empty set is 400 no_changes)", json_schema_extra={"minItems": 1}
    )
    commit_id: str | None = Field(
        None,
        max_length=128,
        description="idempotency key: retrying it with the same changes returns the same version; "
        "with other changes, 409 commit_id_reused",
    )


class TokenPublic(BaseModel):
    principal: str
    is_admin: bool


class DatasetAccess(BaseModel):
    """The caller's own standing on one dataset (``GET /v1/datasets/{name}/access``)."""

    dataset: str
    principal: str
    role: Role = Field(
        description="the caller's highest role on the dataset (its owner and global admins: admin)"
    )


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: Json = Field(default_factory=dict)


class ErrorBody(BaseModel):
    error: ErrorDetail


# --- conversions -------------------------------------------------------------------------------
# The fields come from datahub.catalog.public, which the CLI prints without these models.
def dataset_public(d: model.Dataset, head: int) -> DatasetPublic:
    return DatasetPublic(**public.dataset_row(d, head))


def version_public(v: model.Version) -> VersionPublic:
    return VersionPublic(**public.version_row(v))


def record_public(r: model.Record) -> RecordPublic:
    return RecordPublic(**public.record_row(r))


def diff_public(e: model.DiffEntry) -> DiffEntryPublic:
    return DiffEntryPublic(**public.diff_row(e))


def to_change(c: PutChange | DeleteChange | PatchChange) -> model.Change:
    if isinstance(c, PutChange):
        r = c.record
        return model.Put(model.Record(r.key, r.url, r.etag, r.size, r.checksum, r.meta, r.labels))
    if isinstance(c, DeleteChange):
        return model.Delete(c.key)
    return model.Patch(c.key, c.meta, c.labels)
