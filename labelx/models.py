"""The typed bodies of LabelX's JSON API, so its OpenAPI describes every request and answer.

Request models take exactly the fields the handlers read (unknown fields are ignored, as
before); response models mirror the JSON the service builds, field for field, so the wire
format does not change. A body that does not fit is a 400 ``invalid_input`` (see app.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

# a strict integer that fits a SQLite INTEGER (larger ones are bad input, not an overflow)
StrictInt = Annotated[int, Field(strict=True, ge=-(2**63), le=2**63 - 1)]

# --- requests ------------------------------------------------------------------------------------


class UserCreate(BaseModel):
    name: str = Field("", description="user name (same rules as dataset names)")
    role: str = Field("annotator", description="admin, reviewer or annotator")
    password: str = Field("", description="at least the minimum length the server enforces")


class TokenCreate(BaseModel):
    description: str = ""


class TokenRevoke(BaseModel):
    token: str = ""


class ProjectCreate(BaseModel):
    name: str = ""
    dataset: str = ""
    version: StrictInt | str | None = Field(None, description="version number or tag; default latest")
    prefix: str | None = None
    filter: str | None = Field(None, description="record filter, as in `datahub ls --where`")
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="the label schema")
    task_size: StrictInt = 50
    annotators: list[str] | None = None
    assign: Literal["round-robin", "claim"] | str = "round-robin"


class CommitLabels(BaseModel):
    to_dataset: str | None = Field(None, description="commit into this dataset instead of the source")
    message: str | None = None


class TaskAssign(BaseModel):
    assignee: str | None = Field(None, description="user name; null or empty unassigns")


class ItemSave(BaseModel):
    version: StrictInt = Field(description="the item version this edit is based on (409 if stale)")
    value: Any = None
    skip: bool = False


class ItemReview(BaseModel):
    version: StrictInt
    accept: bool = False
    comment: str | None = Field(None, description="required when rejecting")


# --- responses -----------------------------------------------------------------------------------


class UserOut(BaseModel):
    name: str
    role: str


class TokenOut(BaseModel):
    token: str


class Ok(BaseModel):
    ok: bool


class ProjectOut(BaseModel):
    id: int
    name: str
    dataset: str
    version: int
    prefix: str
    filter: str
    schema_: dict[str, Any] = Field(alias="schema")
    task_size: int
    created_by: str
    created_at: float
    item_count: int


class TaskSummary(BaseModel):
    id: int
    number: int
    assignee: str | None
    assignee_id: int | None
    counts: dict[str, int]
    total: int


class TaskTaken(BaseModel):
    task_id: int


class ItemOut(BaseModel):
    id: int
    task_id: int
    position: int
    key: str
    original: Any
    value: Any
    status: str
    version: int
    comment: str | None
    suggestion: dict[str, Any] | None


class TaskHead(BaseModel):
    id: int
    number: int
    assignee: str | None


class TaskView(BaseModel):
    task: TaskHead
    project: ProjectOut
    items: list[ItemOut]
    can_edit: bool


class Submitted(BaseModel):
    submitted: int


class HourCount(BaseModel):
    hour: int
    items: int


class ExportOut(BaseModel):
    dataset: str
    seq: int
    changed: int
    author: str
    created_at: float


class Stats(BaseModel):
    project: ProjectOut
    counts: dict[str, int]
    per_annotator: dict[str, dict[str, int]]
    per_class: dict[str, dict[str, int]]
    per_hour: list[HourCount]
    suggestions: dict[str, dict[str, int | float]] = Field(
        description="per class: accepted, corrected and the acceptance rate"
    )
    exports: list[ExportOut]


class Committed(BaseModel):
    dataset: str
    seq: int
    modified: int


class Matched(BaseModel):
    matched: int


class ErrorDetail(BaseModel):
    code: str = Field(description="stable machine-readable code, e.g. invalid_input, stale_version")
    message: str = Field(description="what went wrong and what to do")
    details: dict[str, Any] | None = None


class ErrorBody(BaseModel):
    """Every LabelX error: ``{"error": {code, message, details?}}``."""

    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in {
        400: "invalid input (a body or parameter that does not fit, a bad schema or value)",
        401: "not logged in and no API token",
        403: "the caller's role may not do this, or the CSRF token is missing",
        404: "unknown project, task, item, user or token (or one the caller may not see)",
        409: "conflict (a stale item version, a name taken, an item claimed by someone else)",
        412: "the image behind an item changed in storage since the project was made",
        413: "request body larger than api.max_body_bytes",
    }.items()
}
